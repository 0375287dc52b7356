"""XLA's compiled programs as XLA describes them: an HloProto (the optimized HLO
module and its buffer assignment), read without XLA's generated code."""

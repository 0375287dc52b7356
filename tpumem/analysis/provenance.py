"""How a figure was obtained; every figure in a report carries one."""

MEASURED = "measured"  # the allocator or framework reported it
EXACT = "exact"  # XLA's own compile of the program, or of the changed program
DERIVED = "derived"  # computed exactly from measured events (e.g. the address map)
MODELED = "modeled"  # from a model of the allocator replaying measured lifetimes
NOT_AVAILABLE = "not available"
ESTIMATED = "estimated"  # from shapes and a rule of thumb, not from any allocator
COMPILE_TIME = "XLA's compile-time analysis"  # compiled programs' own memory figures
DATASHEET = "datasheet"  # the vendor's memory per chip, not what its compiler allows
INCLUDED = "included in the recorded sizes"  # TPU padding of a run recorded on a TPU

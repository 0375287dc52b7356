"""Compiled programs: XLA's memory analysis and buffer assignment of each, the
training step's program, what runs at the peak, and XLA:TPU's compiles for a
slice."""

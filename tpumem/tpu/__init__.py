"""Compiling a run's programs ahead of time for a TPU (`--tpu`), with libtpu."""

"""The parent side of `tpumem profile`: starting the profiled process and
recording how it ended (launcher.py), finding a `-m` module (module_path.py), and
passing its stderr through (stderr_filter.py). What runs inside the profiled
process, including which framework it records, is the capture side, adapters/
(tpumem.adapters)."""

"""The parent side of `tpumem profile`: starting the profiled process (launcher.py),
taking the signals sent meanwhile and passing them on (signals.py), recording how
it ended where it could not (endings.py), keeping to its own trace if another file
takes its name (own_trace.py), ending what a followed run leaves running (tree.py),
finding a `-m` module (module_path.py), and passing its stderr through
(stderr_filter.py). What runs inside the profiled process, including which
framework it records, is the capture side, adapters/ (tpumem.adapters)."""

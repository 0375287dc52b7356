"""The parent side of `tpumem profile`: finding the framework a script uses
(detect.py), starting the profiled process and recording how it ended
(launcher.py), and passing its stderr through (stderr_filter.py). What runs inside
the profiled process is the capture side, adapters/ (tpumem.adapters)."""

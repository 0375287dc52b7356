"""`tpumem watch TRACE`: a run's memory while another process writes its trace
(another terminal, a remote host's shared disk): the live line and a small chart,
until the run ends; then its peak as the analysis of the whole trace gives it."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from tpumem.errors import TpumemError

NOT_A_TERMINAL_EVERY_S = 5.0  # a line this often when the output is not a terminal


def run_watch(path: Path, interval_s: float) -> None:
    from tpumem.outputs import refuse_remote
    from tpumem.reading.following import RunFollower
    from tpumem.report.escapes import visible
    from tpumem.report.live_line import chart_line, live_line

    # (a trace goes to object storage whole, once its run ends: tpumem report reads it)
    refuse_remote(path, "a trace being watched (report reads one kept there)")
    if path.is_dir():
        raise TpumemError(f"{path}: is a directory: watch one process's trace")
    follower = RunFollower(path).start()

    def line() -> str:
        figures = follower.update()
        return live_line(figures, follower.elapsed_s())

    try:
        if sys.stdout.isatty():
            from rich.console import Console, Group
            from rich.live import Live
            from rich.text import Text

            console = Console()

            def shown() -> Group:
                if not follower.started:
                    waiting = f"tpumem: waiting for {visible(path)} to be written"
                    return Group(Text(waiting, style="dim"))
                text = line()
                chart = chart_line(follower.figures, max(10, console.width - 2))
                return Group(Text(text), Text(chart, style="cyan"))

            with Live(shown(), console=console, auto_refresh=False) as live:
                while not follower.ended.wait(interval_s):
                    live.update(shown(), refresh=True)
                live.update(shown(), refresh=True)
        else:
            last = 0.0
            if not path.exists():
                print(f"tpumem: waiting for {visible(path)} to be written", flush=True)
            while not follower.ended.wait(interval_s):
                if follower.started and time.monotonic() - last >= NOT_A_TERMINAL_EVERY_S:
                    print(f"tpumem: {line()}", flush=True)
                    last = time.monotonic()
    finally:
        follower.close()
    if follower.error is not None:
        raise TpumemError(follower.error)
    lost = follower.name_lost()
    if lost == "deleted":
        raise TpumemError(
            f"{visible(path)}: deleted while it was watched; the run's figures went with it"
        )
    if lost == "replaced":
        raise TpumemError(
            f"{visible(path)}: another file took its name while it was watched: tpumem "
            "report it for that run's figures"
        )
    if not sys.stdout.isatty():  # (a terminal still shows the last one)
        print(f"tpumem: {line()}")
    _ended(path)


def _ended(path: Path) -> None:
    """The run's peak, from the analysis of its whole trace."""
    from tpumem.analysis import analyze
    from tpumem.analysis.peak import highest
    from tpumem.report.escapes import visible
    from tpumem.trace.reader import load
    from tpumem.units import format_bytes, format_seconds

    trace = load(path)
    how = "closed by its writer" if trace.complete else "its writer ended without closing it"
    if trace.damaged:
        how += (
            f"; {visible(path)} is damaged after its first {trace.table.num_rows:,} rows, "
            "read up to there"
        )
    analysis = analyze(trace)
    if not analysis.devices:
        print(f"tpumem: the run ended ({how}); it allocated nothing")
        return
    device = highest(analysis.devices)
    step = f", step {device.peak.step:,}" if device.peak.step is not None else ""
    print(
        f"tpumem: the run ended ({how}): peak {format_bytes(device.peak.bytes)} on "
        f"{visible(device.device)} at {format_seconds(device.peak.time_ns)}{step}; "
        f"tpumem report {visible(path)} for the whole report"
    )

"""The pytest plugin (entry point `pytest11`): device memory as a test's limit.

- `@pytest.mark.limit_device_memory("64 MiB")`: the test fails when its device
  peak goes over, with the buffers live at the peak in the message.
- `@pytest.mark.limit_device_fragmentation(0.3)`: likewise for fragmentation at
  the peak. The limits are `tpumem check`'s (tpumem/commands/limits.py), on every device.
- `--tpumem`: every test recorded; the largest peaks are listed at the end.
- `--tpumem-dir DIR`: keeps each recorded test's trace there.

A test is recorded with `tpumem.track` around its call (not its fixtures), for
the framework its process uses. Tests without the markers, in a run without
`--tpumem`, pass through untouched: no framework is imported and nothing starts.
A run with recorded tests sets first what `tpumem profile` sets before a
framework starts (TensorFlow's CPU allocator then reports its allocations).
"""

from __future__ import annotations

import contextlib
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from tpumem.analysis.trace_figures import DeviceAnalysis

MEMORY_MARK = "limit_device_memory"
FRAGMENTATION_MARK = "limit_device_fragmentation"
SUMMARY_ROWS = 10  # the largest peaks listed after a --tpumem run
GROUPS_SHOWN = 8  # live buffers at the peak named in a failure


@dataclass(frozen=True, slots=True)
class _Recorded:
    nodeid: str
    peak_bytes: int
    device: str | None
    trace: Path | None  # kept with --tpumem-dir


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tpumem", "device memory (tpumem)")
    group.addoption(
        "--tpumem", action="store_true", help="record every test's device memory; list the peaks"
    )
    group.addoption("--tpumem-dir", metavar="DIR", help="keep each recorded test's trace in DIR")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f'{MEMORY_MARK}(limit): fail when the device peak goes over ("64 MiB", bytes)'
    )
    config.addinivalue_line(
        "markers", f"{FRAGMENTATION_MARK}(ratio): fail when device fragmentation goes over"
    )
    config.stash[_RECORDED] = []


_RECORDED = pytest.StashKey[list[_Recorded]]()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A limit that is not one stops the run before any test, as a usage error.
    A run that records sets, before the tests start the framework, what `tpumem
    profile` would have set (tracking.prepare_frameworks)."""
    recorded = config.getoption("tpumem")
    for item in items:
        for mark in item.iter_markers(MEMORY_MARK):
            _limit_bytes(mark)
            recorded = True
        for mark in item.iter_markers(FRAGMENTATION_MARK):
            _limit_ratio(mark)
            recorded = True
    if recorded:
        from tpumem.tracking import prepare_frameworks

        prepare_frameworks()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    memory = item.get_closest_marker(MEMORY_MARK)
    fragmentation = item.get_closest_marker(FRAGMENTATION_MARK)
    config = item.config
    if memory is None and fragmentation is None and not config.getoption("tpumem"):
        return (yield)
    from tpumem.adapters.source_lines import OWN_DIRECTORIES
    from tpumem.analysis.comparison import busiest
    from tpumem.analysis.processes import SERIES_POINTS
    from tpumem.commands.limits import Limits, breaches
    from tpumem.errors import TpumemError
    from tpumem.reading.summary_files import summarise_beside
    from tpumem.tracking import Tracker

    OWN_DIRECTORIES.update((str(config.rootpath), str(item.path.parent)))
    kept = config.getoption("tpumem_dir")
    directory = Path(kept) if kept else Path(tempfile.mkdtemp(prefix="tpumem-test-"))
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{_file_name(item.nodeid)}.tpumem"
    run = Tracker(path, force=True, summary=False)  # (made below, where the trace is kept)
    try:
        run.start()
    except TpumemError as error:
        pytest.fail(f"tpumem: {error}", pytrace=False)
    try:
        outcome = yield
    except BaseException:  # the test failed, was skipped or interrupted: no limit to hold
        run.stop()
        if not kept:
            _discard(path, directory)
        raise
    run.stop()
    if run.recorded_nothing:  # the test imported no framework: no device memory of its
        if not kept:
            _discard(path, directory)
        if memory is not None or fragmentation is not None:
            pytest.fail(
                "tpumem: the test imported none of the frameworks (jax, tensorflow, "
                "torch_xla): nothing was recorded to hold to its limit",
                pytrace=False,
            )
        return outcome
    try:
        analysis = run.analysis(series_points=SERIES_POINTS if kept else 0)
    finally:
        if not kept:
            _discard(path, directory)
    if kept:
        unwritten = summarise_beside(path, analysis)
        if unwritten is not None:
            print(f"tpumem: {unwritten}", file=sys.stderr)
    device = busiest(analysis)
    config.stash[_RECORDED].append(
        _Recorded(
            item.nodeid,
            device.peak.bytes if device else 0,
            device.device if device else None,
            path if kept else None,
        )
    )
    limits = Limits(
        max_peak_bytes=_limit_bytes(memory) if memory else None,
        max_fragmentation=_limit_ratio(fragmentation) if fragmentation else None,
    )
    broken = breaches(analysis, limits)
    if broken:
        pytest.fail("\n".join(broken + _live_at_peak(device)), pytrace=False)
    return outcome


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Under pytest-xdist each worker records its own tests: they go to the
    controller with the worker's output."""
    config = session.config
    if hasattr(config, "workeroutput"):
        config.workeroutput["tpumem"] = [
            [r.nodeid, r.peak_bytes, r.device, str(r.trace) if r.trace else None]
            for r in config.stash.get(_RECORDED, [])
        ]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    rows = getattr(node, "workeroutput", {}).get("tpumem", [])
    recorded = node.config.stash.setdefault(_RECORDED, [])
    for nodeid, peak, device, trace in rows:
        recorded.append(_Recorded(nodeid, peak, device, Path(trace) if trace else None))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    recorded = config.stash.get(_RECORDED, [])
    if not config.getoption("tpumem") or not recorded:
        return
    from tpumem.units import format_bytes

    terminalreporter.section("tpumem: largest device peaks")
    for row in sorted(recorded, key=lambda r: -r.peak_bytes)[:SUMMARY_ROWS]:
        where = f" ({row.device})" if row.device else ""
        trace = f"  {row.trace}" if row.trace else ""
        terminalreporter.write_line(
            f"{format_bytes(row.peak_bytes):>10}{where}  {row.nodeid}{trace}"
        )


def _live_at_peak(device: DeviceAnalysis | None) -> list[str]:
    """What to change: the buffers live at the busiest device's peak."""
    from tpumem.units import format_bytes

    if device is None:
        return []
    groups = device.peak.groups
    lines = [f"live at the peak on {device.device}, largest first:"]
    for group in groups[:GROUPS_SHOWN]:
        what = " ".join(filter(None, (group.op, group.dtype, group.shape)))
        lines.append(
            f"  {format_bytes(group.bytes):>10}  {group.count} x {what or '-'}"
            f"  {group.source or '-'}"
        )
    if len(groups) > GROUPS_SHOWN:
        lines.append(f"  ... and {len(groups) - GROUPS_SHOWN} more")
    return lines


def _discard(path: Path, directory: Path) -> None:
    """A test's trace in a directory of its own that nobody asked to keep."""
    path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        directory.rmdir()


def _limit_bytes(mark: pytest.Mark) -> int:
    from tpumem.units import parse_bytes

    value = _only_argument(mark)
    if not isinstance(value, int | str) or isinstance(value, bool):
        raise pytest.UsageError(f"@pytest.mark.{MEMORY_MARK}({value!r}): give a size")
    try:
        return parse_bytes(str(value))  # an int by the string's rule: bytes, 0 .. 2^63 - 1
    except ValueError as error:
        raise pytest.UsageError(f"@pytest.mark.{MEMORY_MARK}({value!r}): {error}") from None


def _limit_ratio(mark: pytest.Mark) -> float:
    value = _only_argument(mark)
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value <= 1:
        raise pytest.UsageError(
            f"@pytest.mark.{FRAGMENTATION_MARK}({value!r}): give a ratio from 0 to 1"
        )
    return float(value)


def _only_argument(mark: pytest.Mark) -> Any:
    if len(mark.args) != 1 or mark.kwargs:
        raise pytest.UsageError(f"@pytest.mark.{mark.name} takes one limit")
    return mark.args[0]


def _file_name(nodeid: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid).strip("_")[:150]

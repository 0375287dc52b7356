"""The pytest plugin (entry point `pytest11`): device memory as a test's limit.

- `@pytest.mark.limit_device_memory("64 MiB")`: the test fails when its device
  peak goes over, with the buffers live at the peak in the message.
- `@pytest.mark.limit_device_fragmentation(0.3)`: likewise for the largest
  fragmentation any device reached.
- `--tpumem`: every test recorded; the largest peaks are listed at the end.
- `--tpumem-dir DIR`: keeps each recorded test's trace there.

A test is recorded with `tpumem.track` around its call (not its fixtures), for
the framework its process uses. Tests without the markers, in a run without
`--tpumem`, pass through untouched: no framework is imported and nothing starts.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from tpumem.analysis.summary import RunAnalysis

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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A limit that is not one stops the run before any test, as a usage error."""
    for item in items:
        for mark in item.iter_markers(MEMORY_MARK):
            _limit_bytes(mark)
        for mark in item.iter_markers(FRAGMENTATION_MARK):
            _limit_ratio(mark)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    memory = item.get_closest_marker(MEMORY_MARK)
    fragmentation = item.get_closest_marker(FRAGMENTATION_MARK)
    config = item.config
    if memory is None and fragmentation is None and not config.getoption("tpumem"):
        return (yield)
    from tpumem.errors import TpumemError
    from tpumem.tracking import Tracker

    kept = config.getoption("tpumem_dir")
    directory = Path(kept) if kept else Path(tempfile.mkdtemp(prefix="tpumem-test-"))
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{_file_name(item.nodeid)}.tpumem"
    run = Tracker(path, force=True)
    try:
        run.start()
    except TpumemError as error:
        pytest.fail(f"tpumem: {error}", pytrace=False)
    try:
        outcome = yield
    finally:
        run.stop()
    analysis = run.report()
    assert not isinstance(analysis, str)
    peak, device = _peak(analysis)
    config.stash[_RECORDED].append(_Recorded(item.nodeid, peak, device, path if kept else None))
    if not kept:
        path.unlink(missing_ok=True)
        directory.rmdir()
    if memory is not None:
        limit = _limit_bytes(memory)
        if peak > limit:
            pytest.fail(_over_memory(analysis, limit), pytrace=False)
    if fragmentation is not None:
        _check_fragmentation(analysis, _limit_ratio(fragmentation))
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


def _peak(analysis: RunAnalysis) -> tuple[int, str | None]:
    devices = sorted(analysis.devices, key=lambda d: -d.peak.bytes)
    return (devices[0].peak.bytes, devices[0].device) if devices else (0, None)


def _over_memory(analysis: RunAnalysis, limit: int) -> str:
    from tpumem.units import format_bytes

    device = max(analysis.devices, key=lambda d: d.peak.bytes)
    lines = [
        f"device memory peak {format_bytes(device.peak.bytes)} on {device.device} is over "
        f"the limit of {format_bytes(limit)}; live at the peak, largest first:"
    ]
    for group in device.peak.groups[:GROUPS_SHOWN]:
        what = " ".join(filter(None, (group.op, group.dtype, group.shape)))
        lines.append(
            f"  {format_bytes(group.bytes):>10}  {group.count} x {what or '-'}"
            f"  {group.source or '-'}"
        )
    hidden = len(device.peak.groups) - GROUPS_SHOWN
    if hidden > 0:
        lines.append(f"  ... and {hidden} more")
    return "\n".join(lines)


def _check_fragmentation(analysis: RunAnalysis, ratio: float) -> None:
    for device in analysis.devices:
        figure = device.fragmentation
        if figure.maximum is None:
            pytest.fail(
                f"device fragmentation on {device.device} cannot be checked: {figure.source}",
                pytrace=False,
            )
        if figure.maximum > ratio:
            pytest.fail(
                f"device fragmentation on {device.device} reached {figure.maximum:.3f} "
                f"({figure.label}: {figure.source}), over the limit of {ratio:g}",
                pytrace=False,
            )


def _limit_bytes(mark: pytest.Mark) -> int:
    from tpumem.units import parse_bytes

    value = _only_argument(mark)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    try:
        return parse_bytes(str(value))
    except ValueError as error:
        raise pytest.UsageError(f"@pytest.mark.{MEMORY_MARK}({value!r}): {error}") from None


def _limit_ratio(mark: pytest.Mark) -> float:
    value = _only_argument(mark)
    if not isinstance(value, int | float) or not 0 <= value <= 1:
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

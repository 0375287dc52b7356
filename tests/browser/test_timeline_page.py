"""The page's explorable timeline, driven in headless Chromium (Debian's `chromium`,
through playwright) as a user drives it: the wheel zooms, shift+wheel pans, a drag
zooms into a stretch, a double click shows the whole run, and a click on a moment
shows what was live there; zoomed in at any level, the chart is the same kind,
stacked by the same regions under the same legend. What the page shows at a
clicked moment must equal the analysis' own live set after that event
(peak.live_at and peak.live_groups, as the peak table has it), for real traces of
the three frameworks and a hostile one."""

from __future__ import annotations

import gzip
import shutil
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest

from conftest import run_tpumem
from hostile_traces import cases
from tpumem.analysis import analyze
from tpumem.analysis.device_events import split_by_device
from tpumem.analysis.drawing.moments import MOMENT_GROUPS
from tpumem.analysis.peak import live_at, live_groups
from tpumem.report import HTML_SERIES_POINTS
from tpumem.trace.reader import load

DEMO = Path(__file__).parent.parent / "data" / "demo"
GPU = Path(__file__).parent.parent / "data" / "gpu"
UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]


def _bytes(count: int) -> str:
    """The page's own wording of a size (report.js's bytes())."""
    value = float(abs(count))
    sign = "-" if count < 0 else ""
    for unit in UNITS:
        if value < 1024 or unit == "PiB":
            if unit == "B":
                return f"{sign}{int(value)} B"
            # (JavaScript's toFixed rounds a tie up, Python's format to even.)
            return f"{sign}{Decimal(value).quantize(Decimal('0.1'), ROUND_HALF_UP)} {unit}"
        value /= 1024
    raise AssertionError


def _trace(name: str, tmp_path: Path) -> Path:
    if name == "hostile":
        return cases()["html in names"](tmp_path / "hostile.tpumem")
    if name == "gpu":
        return GPU / "mlp.tpumem"
    path = tmp_path / f"{name}.tpumem"
    path.write_bytes(gzip.decompress((DEMO / f"{name}.tpumem.gz").read_bytes()))
    return path


def _expected_rows(trace, events, index: int) -> list[list[str]]:
    """The analysis' live set after event `index`: the rows the page must show."""
    live = live_at(events, index)
    groups = live_groups(trace, events, live)
    rows = [
        [
            _bytes(g.bytes),
            f"{g.count:,}",
            g.op or "-",
            g.region or "-",
            ((g.dtype or "") + (g.shape or "")) or "-",
            g.source or "-",
        ]
        for g in groups[:MOMENT_GROUPS]
    ]
    rest = groups[MOMENT_GROUPS:]
    if rest:
        rest_bytes, rest_count = sum(g.bytes for g in rest), sum(g.count for g in rest)
        rows.append([_bytes(rest_bytes), f"{rest_count:,}", "(the smaller groups)", "-", "-", "-"])
    return rows


def _shown_rows(panel) -> list[list[str]]:
    return [
        [cell.inner_text().strip() for cell in row.locator("td").all()]
        for row in panel.locator("tbody tr").all()
    ]


@pytest.fixture(scope="module")
def browser():
    assert shutil.which("chromium"), "Debian's chromium is not installed (make test installs it)"
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        chromium = driver.chromium.launch(
            executable_path=shutil.which("chromium"),
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        yield chromium
        chromium.close()


@pytest.mark.parametrize(
    "name",
    [
        "jax_transformer",
        "tf_transformer",
        "torch_xla_transformer",
        "torch_transformer",
        "gpu",
        "hostile",
    ],
)
def test_a_clicked_moment_shows_the_analysis_live_set(tmp_path, browser, name):
    trace_path = _trace(name, tmp_path)
    page_path = tmp_path / f"{name}.html"
    result = run_tpumem("report", str(trace_path), "-o", str(page_path))
    assert result.returncode == 0, result.stderr
    trace = load(trace_path)
    analysis = analyze(trace, series_points=1500)
    device = max(analysis.devices, key=lambda d: d.peak.bytes)
    events = next(e for e in split_by_device(trace) if e.device == device.device)
    moments = device.series.moments

    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    problems: list[str] = []
    page.on("console", lambda message: problems.append(f"console: {message.text}"))
    page.on("pageerror", lambda error: problems.append(f"error: {error}"))
    page.goto(page_path.as_uri())
    part = page.locator(f'[data-device="{device.device}"]')
    chart, panel = part.locator(".timeline svg"), part.locator(".moment")

    # It opens on the peak.
    assert int(panel.get_attribute("data-event-index")) == device.peak.event_index
    assert _shown_rows(panel) == _expected_rows(trace, events, device.peak.event_index)

    def view() -> tuple[int, int]:
        start, end = chart.get_attribute("data-view-start"), chart.get_attribute("data-view-end")
        return int(start), int(end)

    chart.scroll_into_view_if_needed()
    box = chart.bounding_box()
    left, width = box["x"] + 72, box["width"] - 72 - 12  # the plot inside the axes
    middle = box["y"] + box["height"] / 2
    whole = view()
    page.mouse.move(left + width * 0.5, middle)
    page.mouse.wheel(0, -400)  # zoom in around the cursor
    page.wait_for_timeout(100)
    zoomed = view()
    assert zoomed[1] - zoomed[0] < (whole[1] - whole[0]) * 0.6
    assert zoomed[0] > whole[0] and zoomed[1] < whole[1]
    page.keyboard.down("Shift")
    page.mouse.wheel(0, 200)  # pan right
    page.keyboard.up("Shift")
    page.wait_for_timeout(100)
    panned = view()
    assert panned[0] > zoomed[0]
    assert panned[1] - panned[0] == pytest.approx(zoomed[1] - zoomed[0], rel=1e-6)
    # A drag across a stretch zooms into it.
    page.mouse.move(left + width * 0.25, middle)
    page.mouse.down()
    page.mouse.move(left + width * 0.5, middle, steps=5)
    page.mouse.up()
    page.wait_for_timeout(100)
    brushed = view()
    expected = (panned[1] - panned[0]) * 0.25
    assert brushed[1] - brushed[0] == pytest.approx(expected, rel=0.02)
    page.mouse.dblclick(left + width * 0.5, middle)
    page.wait_for_timeout(100)
    assert view() == whole
    # A sideways wheel pans too (where shift+wheel arrives as one); the buttons
    # zoom and pan and pick no moment.
    page.mouse.move(left + width * 0.5, middle)
    page.mouse.wheel(0, -400)
    page.wait_for_timeout(100)
    before = view()
    page.mouse.wheel(200, 0)
    page.wait_for_timeout(100)
    assert view()[0] > before[0]
    picked = panel.get_attribute("data-event-index")
    for action in ("pan_left", "pan_right", "zoom_out", "whole_run"):
        part.locator(f'button[data-action="{action}"]').click()
        page.wait_for_timeout(100)
        assert panel.get_attribute("data-event-index") == picked, action
    assert view() == whole

    # A click: the moment nearest the clicked time, and what was live after it.
    for share in (0.2, 0.55, 0.9):
        page.mouse.click(left + width * share, middle)
        page.wait_for_timeout(100)
        start, end = view()
        clicked = start + share * (end - start)
        # The time the page read back from the pixel clicked.
        read = int(panel.get_attribute("data-clicked-ns"))
        assert abs(read - clicked) <= (end - start) / width + 1
        # The moment whose live set still holds then, else the nearest.
        times, until = moments.time_ns, moments.until_ns
        holding = [j for j, t in enumerate(times) if t <= read < (until[j] or 2**63)]
        nearest = min(range(len(times)), key=lambda j: abs(times[j] - read))
        chosen = holding[-1] if holding else nearest
        index = int(panel.get_attribute("data-event-index"))
        assert index == moments.event_index[chosen], (read, times, until, moments.event_index)
        assert index in moments.event_index
        assert _shown_rows(panel) == _expected_rows(trace, events, index)
    page.screenshot(path=str(tmp_path / f"{name}.png"), full_page=True)  # to look at
    blocks = part.locator(".buffers svg")
    if device.series.largest.buffers:
        assert int(blocks.get_attribute("data-blocks")) > 0
    assert problems == []
    page.close()


@pytest.mark.parametrize("name", ["tf_transformer", "jax_transformer"])
def test_a_zoom_keeps_the_charts_kind_and_legend(tmp_path, browser, name):
    trace_path = _trace(name, tmp_path)
    page_path = tmp_path / f"{name}.html"
    result = run_tpumem("report", str(trace_path), "-o", str(page_path))
    assert result.returncode == 0, result.stderr
    (device,) = analyze(load(trace_path), series_points=HTML_SERIES_POINTS).devices
    regions = [name for name, _ in device.series.regions]
    assert device.series.detail, "the run is too short for a finer level"

    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(f"error: {error}"))
    page.goto(page_path.as_uri())
    part = page.locator(f'[data-device="{device.device}"]')
    chart = part.locator(".timeline svg")

    def drawn() -> tuple[int, list[str], int, str]:
        legend = [span.inner_text().strip() for span in part.locator(".legend span").all()]
        caption = part.locator(".timeline-caption").first.inner_text()
        polygons = chart.locator(".region").count()
        return int(chart.get_attribute("data-level")), legend, polygons, caption

    level, legend, polygons, _ = drawn()
    assert level == 0 and legend[: len(regions)] == regions and polygons == len(regions)
    levels = {0}
    for _ in range(14):  # each halves the view: down to the finest level
        part.locator('button[data-action="zoom_in"]').click()
        page.wait_for_timeout(50)
        level, shown, polygons, caption = drawn()
        levels.add(level)
        assert shown == legend and polygons == len(regions), (level, shown)
        if level:
            assert "by region" in caption and "stretches" in caption
    # The finest level reached (a coarser one only where it has points enough).
    assert max(levels) == len(device.series.detail), levels
    assert problems == []
    page.close()

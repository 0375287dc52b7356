"""The HTML page of a run at 100k, 1M and 10M events: its size, the time to write it,
and in headless Chromium (Debian's `chromium`, driven by playwright) the time to
its first paint, to the script's last drawing, to a zoom and to a click on a moment.

    .venv/bin/python benchmarks/page_scale.py [--events 100000 1000000 10000000]

Each command is timed `--repeats` times in turns (median), the trace read once
before, so that neither reads it cold. Budget (issue 51), at 10M events: the page
under 8 MB; drawn (the script done) within 2 s of the navigation; a zoom redrawn
within 100 ms, a click's live set within 100 ms.
Anchors, measured in the same run: `tpumem report --format json` of the same trace
for writing the page (the analysis every report needs: the ratio is what the page
adds); Chromium's first paint of a blank page for the page's first paint.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
from pathlib import Path

from common import WORK, tpumem_seconds
from synthetic_trace import write_synthetic

BUDGET_BYTES = 8 << 20
BUDGET_DRAWN_S = 2.0
BUDGET_ACTION_MS = 100.0


def _trace(events: int) -> Path:
    # The same files as analysis_scale.py's and compare_html.py's.
    path = WORK / f"synthetic_allocator_{events}.tpumem"
    if not path.exists():
        print(f"writing {path.name} ...", flush=True)
        write_synthetic(path, events, "allocator", marks=True)
    return path


# In the page: the time from navigation to the first paint and to the script's
# last drawing (it marks <body data-rendered="ok">), then a zoom and a click timed
# from the event to the next frame drawn.
_TIMINGS = """async () => {
  const frame = () => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  const paint = performance.getEntriesByType("paint").find((e) => e.name === "first-paint");
  const drawn = performance.getEntriesByName("tpumem-drawn")[0];
  const box = document.querySelector(".timeline");
  const svg = box.querySelector("svg"), r = svg.getBoundingClientRect();
  const at = { clientX: r.left + r.width * 0.6, clientY: r.top + r.height / 2, bubbles: true };
  let t0 = performance.now();
  box.dispatchEvent(new WheelEvent("wheel", { ...at, deltaY: -2000, cancelable: true }));
  await frame();
  const zoom = performance.now() - t0;
  const level = box.querySelector("svg").getAttribute("data-level");
  t0 = performance.now();
  box.dispatchEvent(new MouseEvent("mousedown", at));
  window.dispatchEvent(new MouseEvent("mouseup", at));
  await frame();
  const click = performance.now() - t0;
  return { paint: paint ? paint.startTime : null, drawn: drawn ? drawn.startTime : null,
           zoom, click, level };
}"""


def _browse(browser, page_path: Path | None) -> dict:
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    if page_path is None:
        page.set_content("<p>blank</p>")
        page.wait_for_timeout(100)
        paint = page.evaluate(
            "performance.getEntriesByType('paint').map((e) => e.startTime)[0] || null"
        )
        page.close()
        return {"paint": paint}
    page.goto(page_path.as_uri(), wait_until="load")
    page.wait_for_selector('body[data-rendered="ok"]')
    result = page.evaluate(_TIMINGS)
    page.close()
    assert not errors, errors
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    WORK.mkdir(exist_ok=True)
    rows = []
    with sync_playwright() as driver:
        browser = driver.chromium.launch(
            executable_path=shutil.which("chromium"), args=["--no-sandbox", "--disable-gpu"]
        )
        for events in args.events:
            trace = _trace(events)
            page = WORK / f"page_{events}.html"
            trace.read_bytes()  # in the page cache for both commands: neither reads it cold
            writes, anchors = [], []
            for _ in range(args.repeats):
                writes.append(tpumem_seconds("report", str(trace), "-o", str(page), "--force"))
                anchors.append(tpumem_seconds("report", str(trace), "--format", "json"))
            write, anchor = statistics.median(writes), statistics.median(anchors)
            runs = [_browse(browser, page) for _ in range(args.repeats)]
            blank = statistics.median(_browse(browser, None)["paint"] for _ in range(args.repeats))
            median = {k: statistics.median(r[k] for r in runs) for k in ("paint", "drawn", "zoom")}
            median["click"] = statistics.median(r["click"] for r in runs)
            size = page.stat().st_size
            rows.append((events, size, write, anchor, median, blank, runs[0]["level"]))
            print(
                f"{events:>11,} events: page {size / 2**20:.2f} MB; written in {write:.1f} s "
                f"(anchor report --format json {anchor:.1f} s, ratio {write / anchor:.2f}); "
                f"first paint {median['paint']:.0f} ms (blank page {blank:.0f} ms, ratio "
                f"{median['paint'] / blank:.1f}); drawn {median['drawn']:.0f} ms; zoom "
                f"{median['zoom']:.0f} ms (level {runs[0]['level']}); click "
                f"{median['click']:.0f} ms",
                flush=True,
            )
        browser.close()
    events, size, _, _, median, _, _ = rows[-1]
    within = (
        size <= BUDGET_BYTES
        and median["drawn"] <= BUDGET_DRAWN_S * 1000
        and max(median["zoom"], median["click"]) <= BUDGET_ACTION_MS
    )
    print(
        f"budget at {events:,} events (page <= {BUDGET_BYTES >> 20} MB, drawn <= "
        f"{BUDGET_DRAWN_S} s, zoom and click <= {BUDGET_ACTION_MS:.0f} ms): "
        f"{'within' if within else 'NOT within'}"
    )
    print(time.strftime("measured %Y-%m-%d"))


if __name__ == "__main__":
    main()

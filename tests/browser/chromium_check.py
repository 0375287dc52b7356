"""Opens tpumem's HTML pages in headless Chromium (Debian's `chromium`) and fails
on anything but a clean render: any console message (the page logs none), a page whose
script did not finish (it marks <body data-rendered="ok"> last), or a request
for anything outside the file. Writes a screenshot beside each page to look at.

    python tests/browser/chromium_check.py PAGE.html [PAGE.html ...]

tests/browser/test_browser.py runs it in the suite (`make test` installs Chromium where it
is missing); `make html-check` runs it on the demo's pages.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Flags for a root sandbox with a closed network (.library/env: Chromium fails
# to look up Google's hosts without the background-networking ones).
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-logging=stderr",
    "--v=0",
    "--log-level=0",  # console messages are logged at INFO
]
CONSOLE = re.compile(r'CONSOLE[(:]\d+\)?\] "(.*)", source: (.*)')
# Chromium logs its own bookkeeping at ERROR level too; only the page's own
# console messages and failed loads count.
FAILED_LOAD = re.compile(r"net::ERR_[A-Z_]+")


def check(page: Path) -> list[str]:
    """The problems of a page (none when it rendered clean); prints what it found."""
    return rendered(page)[0]


def rendered(page: Path) -> tuple[list[str], str]:
    """(the page's problems, its DOM as Chromium left it after its scripts ran)."""
    page = page.resolve()
    problems = []
    with tempfile.TemporaryDirectory() as profile:
        common = [*FLAGS, f"--user-data-dir={profile}"]
        start = time.perf_counter()
        dom = subprocess.run(
            ["chromium", *common, "--dump-dom", page.as_uri()],
            capture_output=True,
            text=True,
            timeout=120,
        )
        seconds = time.perf_counter() - start
        shot = page.with_suffix(".png")
        subprocess.run(
            ["chromium", *common, "--window-size=1280,2600", f"--screenshot={shot}", page.as_uri()],
            capture_output=True,
            text=True,
            timeout=120,
        )
    if 'data-rendered="ok"' not in dom.stdout:
        problems.append("the page's script did not finish (no data-rendered=ok)")
    for line in dom.stderr.splitlines():
        message = CONSOLE.search(line)
        if message:
            problems.append(f"console: {message.group(1)} ({message.group(2)})")
        elif FAILED_LOAD.search(line):
            problems.append(f"a load failed: {line.strip()}")
    print(
        f"{page.name}: {'clean' if not problems else 'PROBLEMS'}; rendered in "
        f"{seconds:.1f} s (with Chromium's start); screenshot {shot}"
    )
    for problem in problems:
        print(f"  {problem}")
    return problems, dom.stdout


# Run once the page has drawn: what it measures lands in <body data-probe-NAME>.
_PROBE = """<script>window.addEventListener("load", () => setTimeout(() => {{
  const measured = ({measure})();
  for (const [name, value] of Object.entries(measured))
    document.body.setAttribute("data-probe-" + name, String(value));
}}, 300));</script>"""


def probed(page: Path, measure: str, width: int = 1024, height: int = 800) -> dict[str, str]:
    """What `measure` (a JavaScript function returning an object of names and
    values) finds in the page, drawn in a window `width` px wide: the page is
    copied beside itself with the probe added, so the page itself is not changed."""
    copy = page.with_name(page.stem + ".probed.html")
    copy.write_text(page.read_text().replace("</body>", _PROBE.format(measure=measure) + "</body>"))
    with tempfile.TemporaryDirectory() as profile:
        dom = subprocess.run(
            [
                "chromium",
                *FLAGS,
                f"--user-data-dir={profile}",
                f"--window-size={width},{height}",
                "--virtual-time-budget=5000",
                "--dump-dom",
                copy.resolve().as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    return dict(re.findall(r'data-probe-([a-z-]+)="([^"]*)"', dom.stdout))


def main() -> None:
    pages = [Path(p) for p in sys.argv[1:]]
    if not pages:
        sys.exit(__doc__)
    failed = [page for page in pages if check(page)]
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

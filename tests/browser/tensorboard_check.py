"""The documented check that TensorBoard draws an exported run: starts a real
TensorBoard on the logdir, opens XProf's Memory Profile tool for RUN in headless
Chromium (Debian's `chromium`, driven by playwright-core from npm, installed
beside this file on first use), writes a screenshot and checks that the page
shows tpumem's peak for that run.

    python tests/browser/tensorboard_check.py LOGDIR RUN TRACE OUT.png

Not part of the pytest suite (CI machines have no Chromium); `make
tensorboard-check` runs it on the demo's three runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from tensorboard_server import tensorboard_server  # noqa: E402
from tpumem.analysis import analyze  # noqa: E402
from tpumem.trace.reader import load  # noqa: E402

# XProf draws its charts with Google Charts, fetched from www.gstatic.com: on a
# machine without network those fail (and some resources it asks for answer 404,
# none of them from TensorBoard, whose own requests all succeed), and the summary
# is all it shows. Only the page's other script errors fail the check.
NETWORK = ("Failed to load resource", "gstatic", "google is not defined")


def main() -> None:
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    logdir, run, trace, out = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), sys.argv[4]
    if not (HERE / "node_modules" / "playwright-core").exists():
        subprocess.run(
            ["npm", "install", "--prefix", str(HERE), "--no-save", "playwright-core@1"], check=True
        )
    peak = analyze(load(trace)).devices[0].peak.bytes
    with tensorboard_server(logdir) as base:
        shot = subprocess.run(
            ["node", str(HERE / "memory_profile_shot.mjs"), base, run, out],
            capture_output=True,
            text=True,
            timeout=180,
        )
    if shot.returncode:
        sys.exit(f"{run}: the page could not be driven: {shot.stderr[-2000:]}")
    result = json.loads(shot.stdout.strip().splitlines()[-1])
    shown = f"{peak / 2**20:.2f} MiB"
    network = [e for e in result["errors"] if any(n in e for n in NETWORK)]
    others = [e for e in result["errors"] if e not in network]
    print(
        f"{run}: screenshot {out}; the page shows tpumem's peak {shown}: "
        f"{'yes' if shown in result['text'] else 'NO'}"
    )
    if network:
        print(
            f"  {len(network)} console errors from resources outside TensorBoard not loading "
            "(no network: XProf's Google Charts)"
        )
    for error in others:
        print(f"  console: {error.splitlines()[0]}")
    sys.exit(0 if shown in result["text"] and not others else 1)


if __name__ == "__main__":
    main()

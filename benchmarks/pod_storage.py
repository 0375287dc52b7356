"""A pod's run read from object storage: the hosts of `pod_summaries.py` (traces
and summaries) uploaded to an S3 server on 127.0.0.1 (moto's server mode, in
memory, behind s3fs), then `tpumem report s3://bucket/run/` whole process,
against the same report of the run on local disk in the same run.

    .venv/bin/python benchmarks/pod_storage.py [--hosts 256] [--events 100000]

Goal (issue 53): at most 2x the local report. The hosts are pod_summaries.py's
(made here where missing). The upload is not timed: only the report. The server holds
the objects in memory (3.5 GiB at 256 hosts): 1,024 hosts' 14 GiB do not fit
this machine beside it. gcp-storage-emulator, the GCS server the tests use,
answers a request in about 77 ms (it reads its files whole): too slow to say
anything of tpumem here.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import tpumem_seconds_and_memory

GIB = 1 << 30


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hosts", type=int, default=256)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--port", type=int, default=9123)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    from pod_summaries import _pod

    run, _ = _pod(args.hosts, args.events)  # (made once, as pod_summaries.py makes them)
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(args.port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.environ.update(
        AWS_ENDPOINT_URL=f"http://127.0.0.1:{args.port}",
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_DEFAULT_REGION="us-east-1",
    )
    try:
        time.sleep(3)
        import fsspec

        fs = fsspec.filesystem("s3")
        bucket = f"pod-{args.hosts}"
        fs.mkdir(bucket)
        files = sorted(run.iterdir())
        print(f"uploading {len(files):,} files to s3://{bucket}/run ...", flush=True)
        for path in files:
            fs.put_file(str(path), f"{bucket}/run/{path.name}")
        url = f"s3://{bucket}/run"
        local, remote = [], []
        for _ in range(args.repeats):  # (in turns)
            local.append(tpumem_seconds_and_memory("report", str(run)))
            remote.append(tpumem_seconds_and_memory("report", url))
    finally:
        server.terminate()
        server.wait()
    local_s = statistics.median(s for s, _ in local)
    remote_s = statistics.median(s for s, _ in remote)
    print(f"tpumem report of the run on local disk: {local_s:.2f} s (median of {args.repeats})")
    print(
        f"tpumem report {url} (moto's server on 127.0.0.1): {remote_s:.2f} s, peak "
        f"{max(r for _, r in remote) / GIB:.2f} GiB; {remote_s / local_s:.2f} of local "
        "(goal <= 2)"
    )


if __name__ == "__main__":
    main()

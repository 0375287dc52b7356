"""A pod's run read from object storage: the hosts of `pod_summaries.py` (traces
and summaries) put on an S3 server on 127.0.0.1 (moto's server mode, which keeps
objects over 5 MB in temporary files, behind s3fs) as each host's `profile -o
s3://...` puts them (tpumem's own upload: each summary tagged with the ETag of its
trace), then `tpumem report s3://bucket/run/` whole process, in turns with the
same report of the run on local disk.

    .venv/bin/python benchmarks/pod_storage.py [--hosts 1024] [--events 100000]

Goal (issue 53): at most 2x the local report. The hosts are pod_summaries.py's
(made here where missing). The upload is not timed: only the report. The server
is Python on the same two cores as the client, about 4 ms a request.
gcp-storage-emulator, the GCS server the tests use, answers a request in about
77 ms (it reads its files whole): too slow to say anything of tpumem here.
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
    parser.add_argument("--hosts", type=int, default=1024)
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

        from tpumem.commands.uploading import upload_trace

        fs = fsspec.filesystem("s3")
        bucket = f"pod-{args.hosts}"
        fs.mkdir(bucket)
        url = f"s3://{bucket}/run"
        traces = sorted(run.glob("*.tpumem"))
        print(f"uploading {len(traces):,} traces and summaries to {url} ...", flush=True)
        for trace in traces:  # (as each host's `profile -o s3://...` puts them)
            upload_trace(trace, f"{url}/{trace.name}", force=True)
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

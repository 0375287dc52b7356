"""Runs kept in object storage, read where they are: a run's directory and a
trace at gs:// (gcp-storage-emulator behind gcsfs) and s3:// (moto's server behind
s3fs), both real servers on 127.0.0.1. The figures equal the same run's on local
disk; only the summaries, the traces' ends and the busiest trace travel; what
cannot be read is one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from run_summaries import figures
from storage_servers import filesystem, storage_servers, upload
from test_summaries import _trace

from conftest import assert_one_line_error, run_tpumem
from tpumem.reading.summary_files import summarise_beside

KiB = 1024


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    with storage_servers(tmp_path_factory.mktemp("servers")) as environment:
        yield environment


@pytest.fixture
def stored(servers, tmp_path, monkeypatch):
    """A three-rank run with its summaries, on local disk and in both stores."""
    for name, value in servers.items():
        monkeypatch.setenv(name, value)
    run = tmp_path / "run"
    run.mkdir()
    for rank, peak in ((0, 6400), (1, 9600), (2, 8000)):
        trace = _trace(run / f"h-{rank}.tpumem", peak, rank, steps=6)
        assert summarise_beside(trace) is None
    bucket = f"b{tmp_path.name.replace('_', '-').lower()[-40:]}"
    for scheme in ("gs", "s3"):
        upload(run, f"{scheme}://{bucket}/run")
    return run, bucket


@pytest.mark.parametrize("scheme", ["gs", "s3"])
def test_a_run_in_object_storage_reads_as_on_local_disk(stored, scheme):
    run, bucket = stored
    url = f"{scheme}://{bucket}/run"
    local = run_tpumem("report", str(run), "-f", "json")
    remote = run_tpumem("report", url, "-f", "json")
    assert remote.returncode == 0, remote.stderr
    a, b = json.loads(remote.stdout), json.loads(local.stdout)
    assert a["path"] == url and b["notes"] == [] and a["notes"] == []
    assert [p["made_from"] for p in a["processes"]] == ["summary"] * 3
    # each process goes by where it is kept, not by the scratch copy read here
    assert [p["path"] for p in a["processes"]] == [f"{url}/h-{r}.tpumem" for r in range(3)]
    assert a["busiest"] == a["busiest_report"]["path"] == f"{url}/h-1.tpumem"
    assert figures(a) == figures(b)
    # check reads the same figures there
    checked = run_tpumem("check", url, "--max-peak", "9000KiB")
    assert checked.returncode == 1
    assert f"rank 1 ({url}/h-1.tpumem): CPU:0: peak 9.4 MiB" in checked.stderr

    # one trace there is read whole, as on disk
    one = run_tpumem("report", f"{url}/h-2.tpumem", "-f", "json")
    assert one.returncode == 0, one.stderr
    assert json.loads(one.stdout)["devices"][0]["peak"]["bytes"] == 8000 * KiB


@pytest.mark.parametrize("scheme", ["gs", "s3"])
def test_only_the_summaries_and_the_busiest_trace_travel(stored, scheme):
    """A trace whose start is garbage there (its end, that its summary knows it
    by, as it was) reads from its summary: it was never brought."""
    run, bucket = stored
    fs = filesystem(scheme)
    quiet = f"{bucket}/run/h-0.tpumem"
    data = (run / "h-0.tpumem").read_bytes()
    fs.pipe(quiet, b"\0" * 64 + data[64:])
    report = json.loads(run_tpumem("report", f"{scheme}://{bucket}/run", "-f", "json").stdout)
    assert [p["peak_bytes"] for p in report["processes"]] == [6400 * KiB, 9600 * KiB, 8000 * KiB]
    assert report["notes"] == []


def test_what_cannot_be_read_there_is_one_line(stored, monkeypatch):
    _, bucket = stored
    result = run_tpumem("report", "gs://no-such-bucket-here/run")
    assert_one_line_error(result, "gs://no-such-bucket-here/run", "no such bucket or object")
    result = run_tpumem("report", f"s3://{bucket}/nothing-here")
    assert_one_line_error(result, "no such bucket or object")
    empty = f"s3://{bucket}/run/h-0.tpumem.summary.json"
    result = run_tpumem("report", empty)
    assert_one_line_error(result, "no traces (.tpumem files) there")
    # No credentials in the environment (and none to find elsewhere on the machine).
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    result = run_tpumem("report", f"s3://{bucket}/run")
    assert_one_line_error(result, f"s3://{bucket}/run", "no credentials")


def test_diff_and_compare_take_runs_kept_in_either_store(stored):
    run, bucket = stored
    gs, s3 = f"gs://{bucket}/run", f"s3://{bucket}/run"
    diffed = run_tpumem("diff", gs, s3, "-f", "json")
    assert diffed.returncode == 0, diffed.stderr
    diff = json.loads(diffed.stdout)
    assert [(p["process"], p["after"] - p["before"]) for p in diff["processes"]] == [
        (f"rank {rank}", 0) for rank in range(3)
    ]
    compared = run_tpumem("compare", gs, str(run), "-f", "json")
    assert compared.returncode == 0, compared.stderr
    rows = {row["figure"]: row["values"] for row in json.loads(compared.stdout)["rows"]}
    assert rows["Peak in use"][0] == rows["Peak in use"][1] == 9600 * KiB


def test_storage_that_will_not_give_a_trace_ends_the_command_in_one_line(stored):
    """The busiest trace deleted after the listing (as a run's cleanup might): the
    command says what storage said, and does not leave the trace out of the run."""
    import tpumem.reading.object_storage as storage
    from tpumem.reading.paths import opened_run

    _, bucket = stored
    url = f"s3://{bucket}/run"
    with opened_run([Path(url)]) as given:
        filesystem("s3").rm(f"{bucket}/run/h-1.tpumem")
        with pytest.raises(storage.StorageError, match=r"h-1\.tpumem: no such bucket or object"):
            given.fetch(given.traces[1])
        # (not brought: a later look asks again, it is not taken for whole)
        with pytest.raises(storage.StorageError):
            given.fetch(given.traces[1])


def test_what_is_only_on_this_machine_refuses_object_storage_in_one_line(stored, tmp_path):
    run, bucket = stored
    url = f"gs://{bucket}/run"
    for args in (
        ["export", "tensorboard", url, "--logdir", str(tmp_path / "tb")],
        ["export", "tensorboard", str(run), "--logdir", f"{url}/tb"],
        ["report", str(run), "-o", f"{url}/run.html"],
        ["import", f"{url}/x.xplane.pb"],
        ["watch", f"{url}/h-0.tpumem"],
    ):
        result = run_tpumem(*args)
        assert_one_line_error(result, "is on this machine's disk only")
    assert not (tmp_path / "gs:").exists() and not Path("gs:").exists()

"""Runs kept in object storage, read where they are: a run's directory and a
trace at gs:// (gcp-storage-emulator behind gcsfs) and s3:// (moto's server behind
s3fs), both real servers on 127.0.0.1. The figures equal the same run's on local
disk; only the summaries, the traces' ends and the busiest trace travel; what
cannot be read is one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from run_summaries import figures, ranked_trace
from storage_servers import filesystem, storage_servers, upload

from conftest import assert_one_line_error, run_tpumem
from profiling import profile
from tpumem.outputs import summary_of
from tpumem.reading.summary_files import summarise_beside

KiB = 1024
PROFILE = Path(__file__).resolve().parent.parent / "data" / "xplane" / "jax_cpu.xplane.pb"


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
        trace = ranked_trace(run / f"h-{rank}.tpumem", peak, rank, steps=6)
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
    assert_one_line_error(result, "no traces (.tpumem files) or XSpace profiles there")
    # No credentials in the environment (and none to find elsewhere on the machine).
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    result = run_tpumem("report", f"s3://{bucket}/run")
    assert_one_line_error(result, f"s3://{bucket}/run", "no credentials")


@pytest.mark.parametrize("scheme", ["gs", "s3"])
def test_what_import_refuses_there_is_named_by_its_url(stored, tmp_path, scheme):
    """A bad profile, and a trace, brought from a bucket to a scratch directory:
    the line names the URL given, not the scratch file."""
    _, bucket = stored
    here = tmp_path / "here"
    here.mkdir()
    fs = filesystem(scheme)
    fs.pipe(f"{bucket}/bad/vm-0.xplane.pb", b"\xff" * 64)
    for command in ("import", "report"):
        bad = f"{scheme}://{bucket}/bad/vm-0.xplane.pb"
        result = run_tpumem(command, bad, cwd=here)
        line = assert_one_line_error(result, f"{bad}: not a readable XSpace profile")
        assert "tpumem-" not in line  # (the scratch directory's prefix)
    trace = f"{scheme}://{bucket}/run/h-0.tpumem"
    result = run_tpumem("import", trace, cwd=here)
    assert_one_line_error(result, f"{trace}: a tpumem trace already", f"tpumem report {trace}")
    assert not list(here.iterdir())


@pytest.mark.parametrize("scheme", ["gs", "s3"])
def test_a_name_no_file_here_may_have_leaves_that_process_out(stored, tmp_path, scheme):
    """One trace's name in the bucket longer than a file's here may be (255 bytes):
    the run is read without it, which the report names, shortened; it refused the
    whole run. Alone there, it is one line."""
    run, bucket = stored
    fs = filesystem(scheme)
    long_name = "h-" + "x" * 300 + ".tpumem"
    for path in sorted(run.iterdir()):
        fs.pipe(f"{bucket}/long/{path.name}", path.read_bytes())
    fs.pipe(f"{bucket}/long/{long_name}", (run / "h-0.tpumem").read_bytes())
    url = f"{scheme}://{bucket}/long"
    result = run_tpumem("report", url, "-f", "json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert [p["path"] for p in report["processes"]] == [f"{url}/h-{r}.tpumem" for r in range(3)]
    (note,) = [n for n in report["notes"] if n.startswith("left out ")]
    assert note.startswith(f"left out {url}/h-xxx") and "xxx...xxx" in note
    assert "xxx.tpumem: its name is 309 bytes" in note
    assert len(note) < 300 and "longer than a file's on this machine may be (255)" in note
    text = run_tpumem("report", url, "--width", "300")
    assert text.returncode == 0 and "its name is 309 bytes" in text.stdout
    alone = run_tpumem("report", f"{url}/{long_name}")
    assert_one_line_error(alone, "its name is 309 bytes", "no other trace there")


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
            given.stored.fetch(given.traces[1])
        # (not brought: a later look asks again, it is not taken for whole)
        with pytest.raises(storage.StorageError):
            given.stored.fetch(given.traces[1])


def test_what_is_only_on_this_machine_refuses_object_storage_in_one_line(stored, tmp_path):
    run, bucket = stored
    url = f"gs://{bucket}/run"
    for args in (
        ["report", str(run), "-o", f"{url}/run.html"],
        ["watch", f"{url}/h-0.tpumem"],
    ):
        result = run_tpumem(*args)
        assert_one_line_error(result, "is on this machine's disk only")
    assert not (tmp_path / "gs:").exists() and not Path("gs:").exists()


JAX_SCRIPT = """
import jax.numpy as jnp
x = jnp.ones((512, 1024))
print(float((x @ x.T).block_until_ready()[0, 0]))
"""


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """Where what is bound for object storage is written first (the user's cache)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "tpumem" / "uploads"


@pytest.mark.parametrize("scheme", ["gs", "s3"])
def test_profile_puts_its_trace_and_summary_where_o_says(stored, cache, tmp_path, scheme):
    """Written here as the run goes, put there when it ends, its summary after it
    tagged with storage's checksum of the trace: the run there then reads from its
    summary without reading the trace's end, with the figures of the copy here."""
    _, bucket = stored
    script = tmp_path / "train.py"
    script.write_text(JAX_SCRIPT)
    result = profile(
        tmp_path,
        *("-o", f"{scheme}://{bucket}/profiled/{{host}}.tpumem"),
        *("--tensorboard", f"{scheme}://{bucket}/tb"),
        str(script),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    # (and the TensorBoard logdir there too, as --tensorboard asked)
    fs = filesystem(scheme)
    exported = [n for n in fs.find(f"{bucket}/tb") if n.endswith(".xplane.pb")]
    assert len(exported) == 1 and f"{scheme}://{exported[0]}" in result.stderr
    (name,) = [n.rsplit("/", 1)[1] for n in fs.ls(f"{bucket}/profiled") if n.endswith(".tpumem")]
    url = f"{scheme}://{bucket}/profiled/{name}"
    # Where it was written first was said before the run; once put, the copy is gone.
    said = [line for line in result.stderr.splitlines() if "writing here first" in line]
    assert said and f"put at {scheme}://{bucket}/profiled/{{host}}.tpumem when" in said[0]
    assert f"tpumem: trace put at {url}" in result.stderr
    assert not any(cache.rglob("*"))  # (nor the run's directories)
    kept = json.loads(fs.cat_file(f"{bucket}/profiled/{name}.summary.json"))
    assert kept["trace_tag"].split(":")[0] in ("ETag", "md5Hash")
    copy = tmp_path / "copy"
    copy.mkdir()
    for suffix in ("", ".summary.json"):
        (copy / f"{name}{suffix}").write_bytes(fs.cat_file(f"{bucket}/profiled/{name}{suffix}"))

    from tpumem.reading.paths import opened_run

    size = (copy / name).stat().st_size
    with opened_run([Path(f"{scheme}://{bucket}/profiled")]) as given:
        assert given.stored is not None
        assert given.stored.identity(given.traces[0]) == (size, kept["trace_end"])
    remote = run_tpumem("report", f"{scheme}://{bucket}/profiled", "-f", "json")
    here = run_tpumem("report", str(copy), "-f", "json")
    assert remote.returncode == 0, remote.stderr
    a, b = json.loads(remote.stdout), json.loads(here.stdout)
    assert [p["made_from"] for p in a["processes"]] == ["summary"] and a["notes"] == []
    assert figures(a) == figures(b)

    # Another trace put in its place (same size): not vouched for, its end read.
    data = bytearray((copy / name).read_bytes())
    data[-1] ^= 1
    fs.pipe_file(f"{bucket}/profiled/{name}", bytes(data))
    with opened_run([Path(f"{scheme}://{bucket}/profiled")]) as given:
        assert given.stored is not None and given.stored.identity(given.traces[0]) is None

    # The same name again: refused before the script runs, nothing replaced.
    again = profile(tmp_path, "-o", url, str(script))
    assert_one_line_error(again, url, "exists", "--force")
    assert fs.cat_file(f"{bucket}/profiled/{name}") == bytes(data)
    # With placeholders, found when it is put: the new trace stays here, said.
    later = profile(
        tmp_path, "-q", "-o", f"{scheme}://{bucket}/profiled/{{host}}.tpumem", str(script)
    )
    assert later.returncode == 2, later.stderr
    (stays,) = cache.rglob("*.tpumem")
    errors = [line for line in later.stderr.splitlines() if line.startswith("tpumem: error")]
    assert errors == [
        f"tpumem: error: {url}: exists; not replaced (put the copy by hand, or --force); "
        f"its copy stays at {stays}"
    ]
    assert summary_of(stays).exists()
    assert fs.cat_file(f"{bucket}/profiled/{name}") == bytes(data)


def test_a_bucket_that_is_not_there_is_found_before_the_run(cache, servers, tmp_path, monkeypatch):
    for name, value in servers.items():
        monkeypatch.setenv(name, value)
    script = tmp_path / "train.py"
    script.write_text("open('ran', 'w').close()\n")
    for args in (
        ["-o", "s3://no-such-bucket-for-tpumem/run/{host}.tpumem"],
        ["--follow", "-o", "gs://no-such-bucket-for-tpumem/run"],
        ["--tensorboard", "s3://no-such-bucket-for-tpumem/tb"],
    ):
        result = profile(tmp_path, *args, str(script))
        assert_one_line_error(result, "no-such-bucket-for-tpumem", "no such bucket")
    assert not (tmp_path / "ran").exists()
    assert not any(cache.rglob("*.tpumem"))


def test_a_url_with_no_object_or_with_dots_is_one_line(tmp_path, cache):
    for url in ("gs://bucket-only", "s3://b/../../etc/x.tpumem"):
        result = profile(tmp_path, "-o", url, str(tmp_path / "train.py"))
        assert_one_line_error(result, url, "give a bucket and an object's name")
    # (a trace there is read back by its suffix: a prefix is not a trace's name)
    result = profile(tmp_path, "-o", "gs://b/run/", str(tmp_path / "train.py"))
    assert_one_line_error(result, "gs://b/run", "ends in .tpumem", "--follow")
    assert not cache.exists()


@pytest.mark.parametrize("scheme", ["gs", "s3"])
def test_a_profile_kept_there_imports_and_reports_as_here(stored, cache, tmp_path, scheme):
    """An XProf logdir in a bucket (where TPU users keep them): `import` brings its
    newest run's files alone and imports them as the logdir here, to a bucket too;
    `report` reads it as the logdir here."""
    _, bucket = stored
    logdir = tmp_path / "logdir"
    for run_name in ("2026_11_27_10_00_00", "2026_11_28_10_00_00"):
        profile_dir = logdir / "plugins" / "profile" / run_name
        profile_dir.mkdir(parents=True)
        (profile_dir / "vm-0.xplane.pb").write_bytes(PROFILE.read_bytes())
    (logdir / "train").mkdir()
    (logdir / "train" / "events.out.tfevents.1").write_bytes(b"not a profile")
    fs = filesystem(scheme)
    for path in sorted(p for p in logdir.rglob("*") if p.is_file()):
        fs.pipe_file(f"{bucket}/logdir/{path.relative_to(logdir).as_posix()}", path.read_bytes())
    url = f"{scheme}://{bucket}/logdir"

    here = run_tpumem("import", str(logdir), "-o", str(tmp_path / "here.tpumem"))
    assert here.returncode == 0, here.stderr
    target = f"{scheme}://{bucket}/imported/there.tpumem"
    there = run_tpumem("import", url, "-o", target)
    assert there.returncode == 0, there.stderr
    newest = f"{url}/plugins/profile/2026_11_28_10_00_00/vm-0.xplane.pb"
    assert f"from {newest}" in there.stdout
    assert f"tpumem: trace put at {target}" in there.stderr
    assert not any(cache.rglob("*.tpumem*"))  # (once put, the copy here is gone)
    a = run_tpumem("report", target, "-f", "json")
    b = run_tpumem("report", str(tmp_path / "here.tpumem"), "-f", "json")
    assert a.returncode == 0, a.stderr
    assert json.loads(a.stdout)["devices"] == json.loads(b.stdout)["devices"]
    older = run_tpumem(
        "import", url, "--run", "2026_11_27_10_00_00", "-o", str(tmp_path / "o.tpumem")
    )
    assert older.returncode == 0 and "2026_11_27_10_00_00/vm-0.xplane.pb" in older.stdout
    missing = run_tpumem("import", url, "--run", "nope")
    assert_one_line_error(missing, "no run named 'nope'", "2026_11_27_10_00_00")

    reported = run_tpumem("report", url, "-f", "json")
    direct = run_tpumem("report", str(logdir), "-f", "json")
    assert reported.returncode == 0, reported.stderr
    assert json.loads(reported.stdout)["devices"] == json.loads(direct.stdout)["devices"]
    # A profile run's own directory there goes by its name, as here.
    one = run_tpumem("import", f"{url}/plugins/profile/2026_11_28_10_00_00", cwd=tmp_path)
    assert one.returncode == 0, one.stderr
    assert (tmp_path / "2026_11_28_10_00_00.tpumem").exists()
    nothing = run_tpumem("import", f"{scheme}://{bucket}/logdir/train")
    assert_one_line_error(nothing, "no traces (.tpumem files) or XSpace profiles there")


def test_export_reads_a_run_there_and_writes_a_logdir_there(stored, tmp_path):
    """TensorBoard reads logdirs in buckets: the files export puts there are the
    ones it writes here, for the same run from either place."""
    run, bucket = stored
    here = tmp_path / "tb"
    local = run_tpumem("export", "tensorboard", str(run), "--logdir", str(here))
    assert local.returncode == 0, local.stderr
    logdir = f"gs://{bucket}/tb"
    exported = run_tpumem("export", "tensorboard", f"s3://{bucket}/run", "--logdir", logdir)
    assert exported.returncode == 0, exported.stderr
    assert f"{logdir}/plugins/profile/run/h-1.xplane.pb" in exported.stderr
    assert f"tensorboard --logdir {logdir};" in exported.stderr
    fs = filesystem("gs")
    written = sorted(p for p in here.rglob("*") if p.is_file() and "profile" in p.parts)
    assert written
    for path in written:
        kept = fs.cat_file(f"{bucket}/tb/{path.relative_to(here).as_posix()}")
        assert kept == path.read_bytes(), path
    again = run_tpumem("export", "tensorboard", f"s3://{bucket}/run", "--logdir", logdir)
    assert_one_line_error(again, "exists", "--force")
    forced = run_tpumem(
        "export", "tensorboard", f"s3://{bucket}/run", "--logdir", logdir, "--force"
    )
    assert forced.returncode == 0, forced.stderr


WORKERS = """
import multiprocessing as mp

def work(index):
    import jax.numpy as jnp
    jnp.ones((index + 1) * 256 * 1024, jnp.float32).block_until_ready()

if __name__ == "__main__":
    workers = [mp.get_context("spawn").Process(target=work, args=(i,)) for i in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
"""


def test_a_followed_run_is_put_there_process_by_process(stored, cache, tmp_path):
    _, bucket = stored
    (tmp_path / "workers.py").write_text(WORKERS)
    url = f"s3://{bucket}/followed-{{x}}"  # (a run's directory is named as written)
    result = profile(tmp_path, "--follow", "-o", url, "workers.py")
    assert result.returncode == 0, result.stderr[-3000:]
    fs = filesystem("s3")
    names = sorted(n.rsplit("/", 1)[1] for n in fs.ls(f"{bucket}/followed-{{x}}"))
    traces = [n for n in names if n.endswith(".tpumem")]
    assert len(traces) == 2 and names == sorted([*traces, *(f"{t}.summary.json" for t in traces)])
    for trace in traces:
        assert f"tpumem: trace put at {url}/{trace}" in result.stderr
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in names:
        (copy / name).write_bytes(fs.cat_file(f"{bucket}/followed-{{x}}/{name}"))
    remote = run_tpumem("report", url, "-f", "json")
    here = run_tpumem("report", str(copy), "-f", "json")
    assert remote.returncode == 0, remote.stderr
    a, b = json.loads(remote.stdout), json.loads(here.stdout)
    assert [p["made_from"] for p in a["processes"]] == ["summary"] * 2 and a["notes"] == []
    assert figures(a) == figures(b)
    assert not any(cache.rglob("*"))
    again = profile(tmp_path, "--follow", "-o", url, "workers.py")
    assert_one_line_error(again, url, "holds traces already", "--force")

    # A trace's name with a doubled brace and no placeholders: one brace there.
    (tmp_path / "train.py").write_text(JAX_SCRIPT)
    literal = profile(tmp_path, "-q", "-o", f"s3://{bucket}/lit-{{{{x}}}}/y.tpumem", "train.py")
    assert literal.returncode == 0, literal.stderr[-3000:]
    assert fs.exists(f"{bucket}/lit-{{x}}/y.tpumem")
    assert fs.exists(f"{bucket}/lit-{{x}}/y.tpumem.summary.json")
    assert not any(cache.rglob("*"))


def test_only_the_checksum_and_size_the_summary_was_put_with_vouch_for_it():
    """The listing's checksum stands in for reading the trace's end only where it
    is the one the summary records, for a trace of the size it records."""
    from tpumem.reading.object_storage import _vouched_by

    kept = {"trace_tag": "ETag:abc", "trace_bytes": 100, "trace_end": "e" * 32}
    summary = json.dumps(kept).encode()
    assert _vouched_by(summary, 100, {"ETag": '"abc"'}) == (100, "e" * 32)
    assert _vouched_by(summary, 100, {"ETag": '"abd"'}) is None  # another trace there
    assert _vouched_by(summary, 101, {"ETag": '"abc"'}) is None  # (size and tag both)
    assert _vouched_by(summary, 100, {"crc32c": "abc"}) is None  # another store's
    assert _vouched_by(summary, 100, {}) is None  # a store that gives no checksum
    untagged = json.dumps({**kept, "trace_tag": None}).encode()
    assert _vouched_by(untagged, 100, {"ETag": '"abc"'}) is None
    for hostile in (b"\xff\xfe", b"[1, 2]", b"{", b"1e400"):
        assert _vouched_by(hostile, 100, {"ETag": '"abc"'}) is None
    assert _vouched_by(None, 100, {"ETag": '"abc"'}) is None  # no summary there


def test_a_listing_s_names_are_held_to_the_layouts_a_directory_here_is():
    """A key with `..` or an empty part is no profile of a logdir's (brought, it
    would land outside the scratch directory)."""
    from tpumem.xplane.logdir import in_layout

    assert in_layout("plugins/profile/r/h.xplane.pb")
    assert in_layout("train/plugins/profile/r/h.xplane.pb") and in_layout("h.xplane.pb")
    for name in (
        "../x.xplane.pb",
        "../../plugins/profile/r/h.xplane.pb",
        "plugins/profile/../h.xplane.pb",
        "plugins//r/h.xplane.pb",
        "./h.xplane.pb",
        "a/b/c/d/plugins/profile/r/h.xplane.pb",
        "plugins/profile/r/h.pb",
    ):
        assert not in_layout(name), name


@pytest.mark.parametrize("scheme", ["gs", "s3"])
@pytest.mark.parametrize("server", ["stalled", "black hole"])
def test_a_server_that_never_answers_ends_in_one_line_within_the_bound(
    tmp_path, monkeypatch, scheme, server
):
    """A server that takes the connection and never answers (report s3:// said
    nothing for 34.6 minutes), and one that nothing reaches (nothing after 300 s):
    one line naming the endpoint and the bound, made 3 s here, within the bound and
    the clients' start. report, import, and profile's check of its bucket alike."""
    import time

    from storage_servers import black_hole, stalled_server

    monkeypatch.setenv("TPUMEM_STORAGE_WAIT_S", "3")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for name, value in {
        "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        monkeypatch.setenv(name, value)
    script = tmp_path / "train.py"
    script.write_text("open('ran', 'w').close()\n")
    with stalled_server() if server == "stalled" else black_hole() as endpoint:
        variable = "STORAGE_EMULATOR_HOST" if scheme == "gs" else "AWS_ENDPOINT_URL"
        monkeypatch.setenv(variable, endpoint)
        url = f"{scheme}://bucket/run"
        for args, named in (
            (["report", url], url),
            (
                ["import", f"{url}/p.xplane.pb", "-o", str(tmp_path / "x.tpumem")],
                f"{url}/p.xplane.pb",
            ),
            (["profile", "-o", f"{url}/vm.tpumem", str(script)], f"{url}/vm.tpumem"),
        ):
            started = time.monotonic()
            result = run_tpumem(*args, cwd=tmp_path)
            took_s = time.monotonic() - started
            said = f"{named}: no answer from {endpoint} in "
            assert_one_line_error(result, said, "TPUMEM_STORAGE_WAIT_S")
            assert took_s < 60, took_s  # (the 3 s bound, and the clients' start)
    assert not (tmp_path / "ran").exists() and not (tmp_path / "x.tpumem").exists()
    assert not (tmp_path / "cache").exists()


def test_the_bounds_on_storage_are_the_documented_ones(monkeypatch):
    """Read, not waited for: a connection 10 s, a silence in an answer 60 s, two
    tries, 150 s in all; TPUMEM_STORAGE_WAIT_S sets the whole and the rest follow."""
    from tpumem.errors import TpumemError
    from tpumem.storage.client import Bounds

    monkeypatch.delenv("TPUMEM_STORAGE_WAIT_S", raising=False)
    assert Bounds.from_environment() == Bounds(150.0, 60.0, 10.0, 2)
    monkeypatch.setenv("TPUMEM_STORAGE_WAIT_S", "600")
    assert Bounds.from_environment() == Bounds(600.0, 240.0, 10.0, 2)  # a slow answer, longer
    monkeypatch.setenv("TPUMEM_STORAGE_WAIT_S", "5")
    assert Bounds.from_environment() == Bounds(5.0, 2.0, 2.0, 2)
    for bad in ("nan", "0", "-1", "1e9", "soon"):
        monkeypatch.setenv("TPUMEM_STORAGE_WAIT_S", bad)
        with pytest.raises(TpumemError, match=r"TPUMEM_STORAGE_WAIT_S=.*give seconds"):
            Bounds.from_environment()

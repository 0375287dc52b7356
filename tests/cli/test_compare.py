"""`tpumem compare`: each run's own figures side by side, on hand-built traces and
on real runs of the three frameworks, each profiled in its own process."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_tpumem
from profiling import EXAMPLES, run_compare
from sample_traces import buffer_rows
from tpumem.analysis import analyze
from tpumem.analysis.comparison import compare
from tpumem.trace.reader import load


def _scaled(rows: list[dict], factor: int) -> list[dict]:
    return [{**r, "bytes": r["bytes"] * factor} if "bytes" in r else r for r in rows]


def test_rows_best_ratios_and_kind_differences(make_trace):
    small = analyze(load(make_trace(buffer_rows(), {"framework": "jax"}, name="a.tpumem")))
    rows = _scaled(buffer_rows(), 2)
    for row in rows:
        row.pop("requested_bytes", None)
    big = analyze(load(make_trace(rows, {"framework": "jax"}, name="b.tpumem")))
    comparison = compare([big, small])
    assert comparison.names == ("jax (b)", "jax (a)")  # same framework: the files tell
    peak = next(r for r in comparison.rows if r.key == "peak")
    assert peak.values == (800, 400)
    assert peak.best == 1
    assert peak.ratios == (1.0, 0.5)
    waste = next(r for r in comparison.rows if r.key == "waste")
    assert waste.values == (None, 30)  # b recorded no requested sizes
    assert waste.best is None  # one known value is nothing to compare
    kinds = {k.kind: k for k in comparison.kinds}
    # As each run's own report gives them: b's are its allocator's bytes (no
    # requested sizes), a's the bytes asked for and the rounding beside.
    for kind, device in zip(kinds.values(), (0, 1), strict=False):
        assert kind.bytes[device] == next(
            k.bytes for k in comparison.runs[device].devices[0].kinds.kinds if k.kind == kind.kind
        )
    assert kinds["activations"].bytes == (600, 280)
    assert kinds["activations"].change == (0, -320)
    assert comparison.kinds[0].kind == "activations"  # the largest change first
    assert comparison.alignment == "step"


def test_text_table_marks_the_best(make_trace):
    a = make_trace(buffer_rows(), {"framework": "jax"}, name="a.tpumem")
    b = make_trace(_scaled(buffer_rows(), 3), {"framework": "tensorflow"}, name="b.tpumem")
    result = run_tpumem("compare", str(a), str(b), "--width", "140")
    assert result.returncode == 0, result.stderr
    assert "400 B *" in result.stdout  # jax's peak, the lower
    assert "1.2 KiB" in result.stdout and "x3.00" in result.stdout
    assert "Where the peaks differ" in result.stdout
    assert "Would it fit?" in result.stdout


def test_bad_arguments_are_one_line(make_trace, tmp_path):
    a = make_trace(buffer_rows())
    for args in (
        [str(a)],  # one run
        [str(a), str(tmp_path / "missing.tpumem")],
        [str(a), str(tmp_path / "missing.py")],
        [str(a), str(a), "--format", "yaml"],
    ):
        result = run_tpumem("compare", *args)
        assert result.returncode == 2, args
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    corrupt = tmp_path / "corrupt.tpumem"
    corrupt.write_bytes(b"not a trace at all")
    result = run_tpumem("compare", str(a), str(corrupt))
    assert result.returncode != 0 and "Traceback" not in result.stderr


def test_a_script_that_fails_stops_the_comparison_and_keeps_its_trace(make_trace, tmp_path):
    script = tmp_path / "fails.py"
    script.write_text("import jax.numpy as jnp\nx = jnp.ones((256, 256))\nraise SystemExit(3)\n")
    result = run_tpumem(
        "compare", str(make_trace(buffer_rows())), str(script), "--output-dir", str(tmp_path)
    )
    assert result.returncode == 1
    assert "ended with exit status 3" in result.stderr.strip().splitlines()[-1]
    kept = analyze(load(tmp_path / "fails.tpumem"))
    assert kept.devices[0].peak.bytes >= 256 * 256 * 4


def test_the_three_frameworks_compared_from_their_scripts(tmp_path):
    """The same MLP in TensorFlow, JAX and PyTorch/XLA, each profiled in its own
    process by compare itself: its table holds each run's own report figures."""
    scripts = [
        f"{EXAMPLES / name} --steps 3" for name in ("tf_mlp.py", "jax_mlp.py", "torch_xla_mlp.py")
    ]
    page = tmp_path / "compare.html"
    result = run_compare(
        tmp_path, *scripts, "--format", "json", "--output-dir", str(tmp_path), "--html", str(page)
    )
    assert result.returncode == 0, result.stderr[-3000:]
    comparison = json.loads(result.stdout)
    assert comparison["names"] == ["tensorflow", "jax", "torch_xla"]
    rows = {row["key"]: row for row in comparison["rows"]}
    traces = [tmp_path / f"{name}.tpumem" for name in ("tf_mlp", "jax_mlp", "torch_xla_mlp")]
    for index, trace in enumerate(traces):
        report = json.loads(run_tpumem("report", str(trace), "--format", "json").stdout)
        (device,) = report["devices"]
        assert rows["peak"]["values"][index] == device["peak"]["bytes"] > 4 * 1_055_754
        assert rows["pool"]["values"][index] == (device["preallocation"]["pool_peak_bytes"])
        assert rows["frag_peak"]["values"][index] == (device["fragmentation"]["at_peak"])
        assert rows["allocations"]["values"][index] == device["allocations"]
        assert rows["fidelity"]["values"][index] == device["fidelity"]
        assert comparison["runs"][index]["devices"] == report["devices"]
    assert rows["fidelity"]["values"] == ["allocator", "buffer", "buffer"]
    assert comparison["alignment"] == "step"
    assert page.stat().st_size > 10_000
    assert Path(tmp_path / "tf_mlp.tpumem").exists()


def test_names_from_a_trace_are_shown_escaped_in_compare_and_diff(tmp_path):
    """compare's Framework row printed a trace's framework name raw: its escapes
    set the terminal's title and cleared the screen, and its rich markup was taken
    as markup. Every row of compare and diff shows them escaped, as a report does."""
    from hostile_traces import cases

    hostile = cases()["escapes everywhere"](tmp_path / "escapes.tpumem")
    other = Path(__file__).parent.parent / "data" / "gpu" / "mlp.tpumem"
    for command in (
        ["compare", str(hostile), str(other)],
        ["compare", str(other), str(hostile)],
        ["diff", str(other), str(hostile)],
        ["diff", str(hostile), str(other), "-f", "md"],
    ):
        result = run_tpumem(*command)
        assert result.returncode == 0, result.stderr
        for raw in "\x1b\x07\x9b":
            assert raw not in result.stdout, (command, raw)
        if command[0] == "compare":
            rows = [line for line in result.stdout.splitlines() if "Framework" in line]
            assert any("\\x1b]0;pwned" in row for row in rows), result.stdout
            assert "[bold red]markup" in result.stdout  # as written, not taken as markup


def test_runs_of_one_name_are_told_apart_by_their_paths(make_trace, tmp_path):
    """compare v1/train.tpumem v3/train.tpumem titled both columns `jax (train)`:
    each run is named by the shortest end of its path that no other run's has."""
    from tpumem.distinct_names import distinct_names

    for version in ("v1", "v3"):
        (tmp_path / version).mkdir()
        make_trace(buffer_rows(), {"framework": "jax"}, name=f"{version}/train.tpumem")
    result = run_tpumem("compare", "v1/train.tpumem", "v3/train.tpumem", "-f", "json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["names"] == ["jax (v1/train)", "jax (v3/train)"]
    text = run_tpumem("compare", "v1/train.tpumem", "./v3/train.tpumem", cwd=tmp_path).stdout
    assert "jax (v1/train)" in text and "jax (v3/train)" in text
    assert distinct_names(["a/x/t.tpumem", "b/x/t.tpumem", "c/y.tpumem", "t.tpumem"]) == (
        "a/x/t",
        "b/x/t",
        "y",
        "t",
    )
    assert distinct_names(["t.tpumem", "./t.tpumem"]) == ("t", "t-2")


def test_a_diff_of_two_frameworks_says_so_in_a_line(make_trace, tmp_path):
    """diff of a JAX run and a TensorFlow run read as one program's change and said
    nothing of the frameworks, whose allocators place and pool buffers each its
    own way. A framework's name comes from the trace: shown escaped."""
    jax = make_trace(buffer_rows(), {"framework": "jax"}, name="jax.tpumem")
    tf = make_trace(buffer_rows(), {"framework": "tensorflow\x1b]0;pwned\x07"}, name="tf.tpumem")
    text = run_tpumem("diff", str(jax), str(tf))
    assert text.returncode == 0, text.stderr
    (line,) = [line for line in text.stdout.splitlines() if "two frameworks" in line]
    assert "BEFORE jax, AFTER tensorflow\\x1b]0;pwned\\x07." in line
    assert "\x1b" not in text.stdout
    markdown = run_tpumem("diff", str(jax), str(tf), "-f", "md").stdout
    assert "BEFORE jax, AFTER tensorflow\\\\x1b]0;pwned\\\\x07." in markdown  # (\\ in markdown)
    document = json.loads(run_tpumem("diff", str(jax), str(tf), "-f", "json").stdout)
    assert document["frameworks"] == {"before": "jax", "after": "tensorflow\x1b]0;pwned\x07"}
    page = tmp_path / "diff.html"
    assert run_tpumem("diff", str(jax), str(tf), "-o", str(page)).returncode == 0
    assert "two frameworks: BEFORE jax" in page.read_text()
    same = run_tpumem("diff", str(jax), str(jax))
    assert same.returncode == 0 and "two frameworks" not in same.stdout

"""Call stacks, for real, in each framework: a script whose buffers come from known
lines through a helper called from two places gives exact bytes per stack in the
JSON report and in the flame graph's data; a stack is written once however many
buffers it makes."""

from __future__ import annotations

import json
import re
import textwrap

import pytest

from conftest import run_tpumem
from profiling import EXAMPLES, profile
from tpumem.trace.reader import load
from tpumem.trace.schema import STACK

MIB = 1 << 20

# The helper `make(mib)` makes one buffer of that many MiB; `sync()` runs what
# is pending (PyTorch/XLA is lazy).
FRAMEWORKS = {
    "jax": (
        "import jax\nimport numpy as np\n",
        "jax.device_put(np.ones((mib, 256, 1024), np.float32))",
        "pass",
    ),
    "tensorflow": ("import tensorflow as tf\n", "tf.ones([mib * 262144])", "pass"),
    "torch_xla": (
        "import torch\nimport torch_xla\n",
        "torch.ones(mib * 262144, device=torch_xla.device())",
        "torch_xla.sync()",
    ),
}
BODY = """
def make(mib):
    return {make}


def first():
    return [make(1), make(1)]


def second():
    return [make(3)]


def spike():
    return make(8)


def sync():
    {sync}


kept = first() + second()
sync()
big = spike()
sync()
del big
sync()
"""


def _script(framework: str) -> str:
    imports, make, sync = FRAMEWORKS[framework]
    return imports + BODY.format(make=make, sync=sync)


def _line(script: str, text: str) -> int:
    return script.splitlines().index(text) + 1


def _frames(stack: dict) -> list[tuple[str, int, str]]:
    return [(f["file"], f["line"], f["function"]) for f in stack["frames"]]


def _made_by(path, frames: tuple, peak_ns: int) -> list[dict]:
    """The allocation rows of the trace made by the stack `frames` and live at
    `peak_ns`, read straight from the file."""
    rows = load(path).table.to_pylist()
    ids = [r["stack"] for r in rows if r["kind"] == STACK and _row_frames(r) == frames]
    assert len(ids) == 1, f"{frames}: {len(ids)} stack rows"
    freed = {r["buffer_id"]: r["time_ns"] for r in rows if r["kind"] == "free"}
    return [
        r
        for r in rows
        if r["kind"] == "alloc"
        and r["stack"] == ids[0]
        and r["time_ns"] <= peak_ns < freed.get(r["buffer_id"], 1 << 62)
    ]


def _row_frames(row: dict) -> tuple:
    return tuple(tuple(frame[:3]) for frame in json.loads(row["text"]))


@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_bytes_per_call_stack_are_exact(tmp_path, framework):
    script = _script(framework)
    (tmp_path / "stacks.py").write_text(script)
    result = profile(tmp_path, "-q", "-o", "stacks.tpumem", "stacks.py")
    assert result.returncode == 0, result.stderr[-3000:]
    report = run_tpumem("report", "stacks.tpumem", "--format", "json", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    device = json.loads(report.stdout)["devices"][0]
    stacks = {tuple(_frames(s)): s for s in device["peak"]["stacks"]}
    make = ("stacks.py", _line(script, "    return " + FRAMEWORKS[framework][1]), "make")
    expected = {
        "first": (_line(script, "kept = first() + second()"), "    return [make(1), make(1)]", 2),
        "second": (_line(script, "kept = first() + second()"), "    return [make(3)]", 3),
        "spike": (_line(script, "big = spike()"), "    return make(8)", 8),
    }
    for function, (outer, inner, mib) in expected.items():
        frames = (
            ("stacks.py", outer, "<module>"),
            ("stacks.py", _line(script, inner), function),
            make,
        )
        assert frames in stacks, f"{frames} not among {list(stacks)}"
        # Each buffer the script asked for, and nothing else; the bytes are what
        # the allocator handed out for them (TensorFlow's BFC may hand out a whole
        # free chunk of up to twice the size asked for).
        made = _made_by(tmp_path / "stacks.tpumem", frames, device["peak"]["time_ns"])
        assert sum(r["requested_bytes"] for r in made) == mib * MIB
        assert stacks[frames]["bytes"] == sum(r["bytes"] for r in made)
        assert stacks[frames]["buffers"] == len(made) == (2 if function == "first" else 1)
    # The source line of each of those buffers is the helper's.
    live = [g for g in device["peak"]["groups"] if g["bytes"] >= MIB]
    assert live and all(g["source"] == f"stacks.py:{make[1]}" for g in live)
    # The flame graph draws the same bytes per stack.
    page = run_tpumem("report", "stacks.tpumem", "-o", "stacks.html", cwd=tmp_path)
    assert page.returncode == 0, page.stderr
    html = (tmp_path / "stacks.html").read_text()
    embedded = re.search(r'id="tpumem-data">(.*?)</script>', html, re.S)[1]
    drawn = json.loads(embedded)["runs"][0]["devices"][0]["peak"]["stacks"]
    assert drawn == device["peak"]["stacks"]


def test_a_stack_is_written_once_however_many_buffers_it_makes(tmp_path):
    (tmp_path / "loop.py").write_text(
        textwrap.dedent(
            """
            import jax
            import numpy as np

            kept = [jax.device_put(np.ones(256, np.float32)) for _ in range(2000)]
            """
        )
    )
    result = profile(tmp_path, "-q", "-o", "loop.tpumem", "loop.py")
    assert result.returncode == 0, result.stderr[-3000:]
    trace = load(tmp_path / "loop.tpumem")
    rows = trace.table.to_pylist()
    made = [r for r in rows if r["kind"] == "alloc" and r["bytes"] == 1024]
    assert len(made) == 2000
    assert len({r["stack"] for r in made}) == 1
    assert sum(r["kind"] == STACK for r in rows) <= 3  # the loop's, and the few around it


def test_tensorflow_function_buffers_get_the_line_in_the_function_body(tmp_path):
    """A tf.function's op gets the stack that called the function, then the
    frames that built the op inside its body (TensorFlow's own op tracebacks)."""
    script = textwrap.dedent(
        """
        import tensorflow as tf


        @tf.function
        def doubled(x):
            return x * 2.0


        def run(x):
            return doubled(x)


        x = tf.ones([262144])
        kept = [run(x), run(x)]
        """
    )
    (tmp_path / "body.py").write_text(script)
    result = profile(tmp_path, "-q", "-o", "body.tpumem", "body.py")
    assert result.returncode == 0, result.stderr[-3000:]
    report = run_tpumem("report", "body.tpumem", "--format", "json", cwd=tmp_path)
    peak = json.loads(report.stdout)["devices"][0]["peak"]
    frames = (
        ("body.py", _line(script, "kept = [run(x), run(x)]"), "<module>"),
        ("body.py", _line(script, "    return doubled(x)"), "run"),
        ("body.py", _line(script, "    return x * 2.0"), "doubled"),
    )
    found = {tuple(_frames(s)): s["bytes"] for s in peak["stacks"]}
    assert frames in found, found
    made = _made_by(tmp_path / "body.tpumem", frames, peak["time_ns"])
    # The two results, and the constant 2.0 that the function's kernel keeps.
    assert sorted((r["op"], r["requested_bytes"]) for r in made) == [
        ("mul", MIB),
        ("mul", MIB),
        ("mul/y", 4),
    ]
    assert found[frames] == sum(r["bytes"] for r in made)


# A training loop per framework: each step makes a 1 MiB batch and a result from
# it, with `step_mark(i)` the framework's own step annotation. `keep(out)` is
# where a leak keeps every step's result.
LOOPS = {
    "jax": (
        "import jax\nimport numpy as np\n",
        "jax.profiler.StepTraceAnnotation('train', step_num=i)",
        "jax.device_put(np.ones((256, 1024), np.float32))",
        "batch * 2.0",
    ),
    "tensorflow": (
        "import tensorflow as tf\n",
        "tf.profiler.experimental.Trace('train', step_num=i, _r=1)",
        "tf.ones([256, 1024])",
        "batch * 2.0",
    ),
    # Plain PyTorch marks no steps of its own: an optimizer's steps are its steps.
    "torch": (
        "import contextlib\nimport torch\n"
        "optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)\n",
        "contextlib.nullcontext(optimizer.step())",
        "torch.ones(256, 1024)",
        "batch * 2.0",
    ),
    "torch_xla": (
        "import torch\nimport torch_xla\nimport torch_xla.debug.profiler as xp\n",
        "xp.StepTrace('train', step_num=i)",
        "torch.ones(256, 1024, device=torch_xla.device())",
        "batch * 2.0",
    ),
}
LOOP = """
{imports}
history = []


def keep(out):
    {keep}


for i in range(14):
    with {step_mark}:
        batch = {batch}
        out = {result}
        keep(out)
"""


def _loop(framework: str, leaks: bool) -> str:
    imports, step_mark, batch, result = LOOPS[framework]
    keep = "history.append(out)" if leaks else "history[:] = [out]"
    return LOOP.format(imports=imports, step_mark=step_mark, batch=batch, result=result, keep=keep)


@pytest.mark.parametrize("framework", sorted(LOOPS))
def test_a_leak_grows_by_its_size_a_step_at_its_line_and_a_flat_loop_does_not(tmp_path, framework):
    growth = {}
    for name, leaks in (("leak", True), ("flat", False)):
        script = _loop(framework, leaks)
        (tmp_path / f"{name}.py").write_text(script)
        result = profile(tmp_path, "-q", "-o", f"{name}.tpumem", f"{name}.py")
        assert result.returncode == 0, result.stderr[-3000:]
        report = run_tpumem("report", f"{name}.tpumem", "--format", "json", cwd=tmp_path)
        growth[name] = json.loads(report.stdout)["devices"][0]["growth"]
        growth[name]["script"] = script
    leak, flat = growth["leak"], growth["flat"]
    assert leak["growing"], leak
    # 1 MiB a step: TensorFlow's BFC may round a step's chunk up, never down.
    assert MIB <= leak["per_step_bytes"] < MIB + 64 * 1024, leak
    # The growing bytes are named by the line that made them (as memray's leaks
    # are), not the one that keeps them.
    line = _line(leak["script"], "        out = " + LOOPS[framework][3])
    innermost = leak["stacks"][0]["frames"][-1]
    assert (innermost["file"], innermost["line"], innermost["function"]) == (
        "leak.py",
        line,
        "<module>",
    )
    assert leak["stacks"][0]["per_step_bytes"] == leak["per_step_bytes"]
    assert not flat["growing"] and flat["stacks"] == [], flat
    assert abs(flat["per_step_bytes"]) < 64 * 1024
    # check fails the leak and passes the flat loop.
    failed = run_tpumem("check", "leak.tpumem", "--max-growth", "512KiB", cwd=tmp_path)
    assert failed.returncode == 1 and f"leak.py:{line} in <module>" in failed.stderr
    passed = run_tpumem("check", "flat.tpumem", "--max-growth", "512KiB", cwd=tmp_path)
    assert passed.returncode == 0, passed.stderr


VERSION = """{comment}{imports}

def make(mib):
    return {make}


weights = make(4)
cache = [make(2)]
{more}{sync}
"""


def _version(framework: str, second: bool) -> str:
    imports, make, sync = FRAMEWORKS[framework]
    return VERSION.format(
        comment="# version 2: one more line above everything, and 8 MiB more kept\n"
        if second
        else "",
        imports=imports,
        make=make,
        more=f"mib = 8\ncache.append({make})\n" if second else "",
        sync=sync,
    )


@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_diff_finds_the_line_that_keeps_more_and_nothing_else(tmp_path, framework):
    # The second version under another name, as people keep them (after.py): its
    # lines are still the script's lines.
    for name, second in (("one", False), ("again", False), ("two", True)):
        script = "after.py" if second else "train.py"
        (tmp_path / name).mkdir()
        (tmp_path / name / script).write_text(_version(framework, second))
        result = profile(tmp_path / name, "-q", "-o", "run.tpumem", script)
        assert result.returncode == 0, result.stderr[-3000:]

    def diff(a: str, b: str) -> dict:
        result = run_tpumem(
            "diff", f"{a}/run.tpumem", f"{b}/run.tpumem", "-f", "json", cwd=tmp_path
        )
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)["devices"][0]

    same = diff("one", "again")  # one program twice: nothing beyond the noise
    assert [same[k] for k in ("by_line", "by_stack", "by_op", "by_region")] == [[]] * 4
    assert abs(same["figures"]["peak"]["after"] - same["figures"]["peak"]["before"]) <= 64 * 1024

    changed = diff("one", "two")
    (line,) = changed["by_line"]  # every other line matched by its code, though moved
    new_line = _line(_version(framework, True), f"cache.append({FRAMEWORKS[framework][1]})")
    assert (line["frames"][0]["line"], line["before"]) == (new_line, 0)
    # 8 MiB asked for; TensorFlow's BFC may hand out a larger free chunk.
    assert 8 * MIB <= line["change"] < 16 * MIB
    (stack,) = changed["by_stack"]
    assert stack["change"] == line["change"]
    grew = changed["figures"]["peak"]["after"] - changed["figures"]["peak"]["before"]
    assert abs(grew - line["change"]) <= 64 * 1024
    # The page: both runs' timelines and the flame graph of the difference.
    page = run_tpumem("diff", "one/run.tpumem", "two/run.tpumem", "-o", "d.html", cwd=tmp_path)
    assert page.returncode == 0, page.stderr
    assert '"kind":"diff"' in (tmp_path / "d.html").read_text()


def test_diff_of_two_scripts_matches_a_programs_line_by_its_code(tmp_path):
    """examples/jax_train_v1.py and _v2.py (a line more above the loop, and the
    batches kept): the batch drawn inside jax.random's own jitted program sits at
    a line that moved; matched by its code, the one change is the kept batches."""
    examples = EXAMPLES
    for version in ("v1", "v2"):
        script = f"jax_train_{version}.py"
        (tmp_path / script).write_text((examples / script).read_text())
        result = profile(tmp_path, "-q", "-o", f"{version}.tpumem", script)
        assert result.returncode == 0, result.stderr[-3000:]
    result = run_tpumem("diff", "v1.tpumem", "v2.tpumem", "-f", "json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (line,) = json.loads(result.stdout)["devices"][0]["by_line"]
    code = (examples / "jax_train_v2.py").read_text().splitlines()
    drawn = next(n for n, text in enumerate(code, 1) if "x = jax.random.normal" in text)
    assert line["frames"][0]["line"] == drawn
    batch = 2048 * 1024 * 4
    assert 2 * batch <= line["before"] < 2 * batch + 1024  # this batch, the next (and a key)
    assert abs(line["change"] - 14 * batch) < 1024  # the kept batches at the peak

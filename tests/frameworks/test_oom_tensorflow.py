"""An out-of-memory run of real TensorFlow under a BFC limit, profiled: the report
opens with the failure, its figures are the allocator's own, and the fit advice
names nothing at or below the limit the run failed under."""

from __future__ import annotations

import json
import math
import re

import pytest

from conftest import run_tpumem
from profiling import profile

# Tensors of 1, 2, 3, ... MiB, kept, until the limit stops the script.
KEEPS_TENSORS = """
import tensorflow as tf
kept = []
for i in range(1000):
    kept.append(tf.ones((1024, 256 * (i + 1)), tf.float32))
"""
MiB = 1 << 20


def _stats(stderr: str) -> dict[str, int]:
    """What the BFC allocator itself printed of the failure, read here on its own."""
    head = re.search(r"ran out of memory trying to allocate \S+ \(rounded to (\d+)\)", stderr)
    assert head, stderr[-3000:]
    stats = {"rounded": int(head.group(1))}
    for name in ("Limit", "InUse"):
        value = re.search(rf"^{name}:\s+([\d.]+)MiB$", stderr, re.M)
        assert value, stderr[-3000:]
        stats[name] = round(float(value.group(1)) * MiB)
    shape = re.search(r"OOM when allocating tensor with shape(\[[\d,]+\]) and type (\w+)", stderr)
    assert shape, stderr[-3000:]
    stats["shape"], stats["dtype"] = shape.group(1), shape.group(2)
    return stats


@pytest.mark.parametrize("limit_mib", [48, 40])
def test_the_report_opens_with_the_failure_the_allocator_saw(tmp_path, limit_mib):
    (tmp_path / "keeps.py").write_text(KEEPS_TENSORS)
    env = {"TF_CPU_BFC_MEM_LIMIT_IN_MB": str(limit_mib), "TF_CPP_MIN_LOG_LEVEL": "0"}
    theirs = limit_mib == 48  # the BFC allocator the script's own environment asks for
    if theirs:
        env["TF_CPU_ALLOCATOR_USE_BFC"] = "true"
    result = profile(tmp_path, "-o", "run.tpumem", "keeps.py", env=env)
    assert result.returncode == 1, result.stderr[-3000:]
    allocator = _stats(result.stderr)
    report = run_tpumem("report", str(tmp_path / "run.tpumem"), "--format", "json")
    # A limit the script's own run would ignore is said to hold because of tpumem.
    warnings = json.loads(report.stdout)["metadata"]["warnings"]
    told = [w for w in warnings if "caps the CPU's memory only because tpumem set" in w]
    assert len(told) == (0 if theirs else 1), warnings
    (oom,) = json.loads(report.stdout)["out_of_memory"]
    assert (oom["shape"], oom["dtype"], oom["op"]) == (allocator["shape"], "float", "Fill")
    assert oom["requested_bytes"] == allocator["rounded"]
    assert (oom["in_use_bytes"], oom["limit_bytes"]) == (allocator["InUse"], allocator["Limit"])
    assert oom["limit_bytes"] == limit_mib * MiB
    # The limit was simply reached here: nothing in pieces could have held it.
    assert oom["verdict"] == "not enough memory"
    free = oom["limit_bytes"] - oom["in_use_bytes"]
    assert oom["short_by_bytes"] == oom["requested_bytes"] - free > 0
    assert oom["live_bytes"] <= oom["in_use_bytes"] and oom["live"][0]["dtype"] == "float32"
    fit = json.loads(report.stdout)["fit"]
    for row in fit["rows"]:
        assert row["needed_bytes"] > limit_mib * MiB
        if row["setting"]:
            assert int(re.search(r"memory_limit=(\d+)", row["setting"]).group(1)) > limit_mib
    text = run_tpumem("report", str(tmp_path / "run.tpumem")).stdout
    assert text.splitlines()[1].startswith("Out of memory")
    why = next(line for line in text.splitlines() if line.startswith("Why"))
    assert "not enough memory: short by" in why


def test_without_the_allocators_log_the_events_give_the_same_figures(tmp_path):
    """TF_CPP_MIN_LOG_LEVEL=2 (as many set it) hides the allocator's log: the bytes
    in use and the limit come from the captured events, and are the same."""
    (tmp_path / "keeps.py").write_text(KEEPS_TENSORS)
    limit = {"TF_CPU_BFC_MEM_LIMIT_IN_MB": "48"}
    logged = profile(
        tmp_path, "-o", "a.tpumem", "keeps.py", env={**limit, "TF_CPP_MIN_LOG_LEVEL": "0"}
    )
    quiet = profile(
        tmp_path, "-o", "b.tpumem", "keeps.py", env={**limit, "TF_CPP_MIN_LOG_LEVEL": "2"}
    )
    assert "ran out of memory trying to allocate" not in quiet.stderr
    allocator = _stats(logged.stderr)
    (oom,) = json.loads(
        run_tpumem("report", str(tmp_path / "b.tpumem"), "--format", "json").stdout
    )["out_of_memory"]
    assert oom["source"] == "the exception that ended the run"
    assert (oom["in_use_bytes"], oom["limit_bytes"]) == (allocator["InUse"], allocator["Limit"])
    dims = [int(d) for d in allocator["shape"].strip("[]").split(",")]
    assert oom["requested_bytes"] == math.prod(dims) * 4  # float32, from the shape
    assert oom["verdict"] == "not enough memory"


# Tensors of 1 to 24 MiB, some kept and some dropped at random (seeded), so that
# the allocator's free memory ends up in pieces; 266 MiB live at the end.
CHURNS = """
import random
import tensorflow as tf
rng = random.Random(7)
kept = []
for i in range(40):
    kept.append(tf.ones((1024, 256 * rng.randint(1, 24)), tf.float32))
    if len(kept) > 3 and rng.random() < 0.6:
        kept.pop(rng.randrange(len(kept)))
"""
# One profiler session for the whole run: the model needs every allocation and
# free in order, and a capture gap can hide a few (docs/figures.md, "Capacity").
ONE_SESSION = ("--chunk", "600")
FIGURES = ("shape", "requested_bytes", "in_use_bytes", "free_bytes", "largest_free_block_bytes")


@pytest.fixture(scope="module")
def churns(tmp_path_factory):
    """The script's directory, with its run under no limit profiled."""
    where = tmp_path_factory.mktemp("churns")
    (where / "churns.py").write_text(CHURNS)
    result = profile(where, *ONE_SESSION, "-o", "unlimited.tpumem", "churns.py")
    assert result.returncode == 0, result.stderr[-3000:]
    return where


def _modeled(where, limit_mib: int) -> dict:
    report = run_tpumem(
        "report", str(where / "unlimited.tpumem"), "-f", "json", "--capacity", f"{limit_mib}MiB"
    )
    assert report.returncode == 0, report.stderr
    (check,) = json.loads(report.stdout)["capacity"]
    return check


@pytest.mark.parametrize("limit_mib", [40, 56, 64, 80])
def test_capacity_predicts_the_real_failure_from_an_unlimited_run(churns, limit_mib):
    """Under each limit, the real run fails at one allocation; the model, replaying
    the run that had no limit, fails at the same one with the same figures."""
    env = {"TF_CPU_BFC_MEM_LIMIT_IN_MB": str(limit_mib), "TF_CPP_MIN_LOG_LEVEL": "0"}
    name = f"limit{limit_mib}.tpumem"
    result = profile(churns, *ONE_SESSION, "-o", name, "churns.py", env=env)
    assert result.returncode == 1, result.stderr[-3000:]
    allocator = _stats(result.stderr)
    report = run_tpumem("report", str(churns / name), "-f", "json")
    (real,) = json.loads(report.stdout)["out_of_memory"]
    # The real figures are the allocator's own (its chunks, summed exactly).
    assert (real["shape"], real["requested_bytes"]) == (allocator["shape"], allocator["rounded"])
    assert abs(real["in_use_bytes"] - allocator["InUse"]) < 0.01 * MiB
    modeled = _modeled(churns, limit_mib)["failure"]
    assert modeled is not None and modeled["source"] == "the BFC allocator model"
    assert {k: modeled[k] for k in FIGURES} == {k: real[k] for k in FIGURES}
    assert (modeled["verdict"], modeled["short_by_bytes"]) == (
        real["verdict"],
        real["short_by_bytes"],
    )
    # The same buffers live at the failure (equal sizes may list in either order).
    assert sorted(_live(modeled)) == sorted(_live(real))


def _live(failure: dict) -> list[tuple]:
    return [(g["shape"] or "", g["bytes"], g["count"]) for g in failure["live"]]


def test_a_capacity_the_real_run_fits_predicts_no_failure(churns):
    check = _modeled(churns, 300)
    assert check["failure"] is None and check["headroom_bytes"] > 0
    assert check["smallest_bytes"] <= 300 * MiB
    result = profile(
        churns, *ONE_SESSION, "-o", "limit300.tpumem", "churns.py",
        env={"TF_CPU_BFC_MEM_LIMIT_IN_MB": "300"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]


# Eight 16 MiB tensors freed between 1 MiB ones that stay, then 9 MiB tensors
# kept until the limit: BFC gives each a freed 16 MiB chunk whole (it splits a
# chunk only at twice the request). The script says how many it kept.
HOLES = """
import tensorflow as tf
big, pins = [], []
for _ in range(8):
    big.append(tf.ones((FIRST, 1024), tf.float32))
    pins.append(tf.ones((256, 1024), tf.float32))  # 1 MiB between them
del big
kept = []
try:
    for i in range(100):
        kept.append(tf.ones((2304, 1024), tf.float32))  # 9 MiB
except tf.errors.ResourceExhaustedError:
    print("kept", len(kept))
    raise
"""


def test_allocator_rounding_is_the_cause_on_the_first_screen_and_the_rerun_confirms(tmp_path):
    env = {"TF_CPU_BFC_MEM_LIMIT_IN_MB": "200"}
    (tmp_path / "holes.py").write_text(HOLES.replace("FIRST", "4096"))  # 16 MiB
    result = profile(tmp_path, "-o", "holes.tpumem", "holes.py", env=env)
    assert result.returncode == 1, result.stderr[-3000:]
    kept_before = int(result.stdout.split()[-1])
    report = run_tpumem("report", str(tmp_path / "holes.tpumem"), "--format", "json")
    (oom,) = json.loads(report.stdout)["out_of_memory"]
    rounding = oom["causes"][0]
    assert rounding["cause"] == "allocator rounding" and rounding["how"] == "measured"
    assert (rounding["asked_bytes"], rounding["given_bytes"]) == (9 * MiB, 16 * MiB)
    assert rounding["share"] > 0.2
    text = run_tpumem("report", str(tmp_path / "holes.tpumem"), "--width", "200").stdout
    lines = text.splitlines()
    assert lines[1].startswith("Out of memory") and lines[2].startswith("Why")
    assert lines[3].startswith("Where it went") and "allocator rounding" in lines[3]

    # The change: the tensors freed first of the size the later ones ask for.
    (tmp_path / "sized.py").write_text(HOLES.replace("FIRST", "2304"))  # 9 MiB
    rerun = profile(tmp_path, "-o", "sized.tpumem", "sized.py", env=env)
    assert rerun.returncode == 1, rerun.stderr[-3000:]
    kept_after = int(rerun.stdout.split()[-1])
    # Less rounding (BFC's regions still end in chunks the 9 MiB tensors take
    # whole), and what it no longer wastes holds more tensors: one for every
    # 9 MiB the rounding went down by.
    report = run_tpumem("report", str(tmp_path / "sized.tpumem"), "--format", "json")
    (oom,) = json.loads(report.stdout)["out_of_memory"]
    after = sum(c["bytes"] for c in oom["causes"] if c["cause"] == "allocator rounding")
    assert after < rounding["bytes"]
    assert abs((kept_after - kept_before) - (rounding["bytes"] - after) / (9 * MiB)) <= 1


# A custom loop whose step is a tf.function (its calls are the steps) that keeps
# each step's 4 MiB activations in a list, as a history, until the limit; KEEP
# unset: it keeps the step's loss as a Python number instead.
KEEPS = """
import os
import tensorflow as tf
w = tf.Variable(tf.ones((1024, 1024)))
opt = tf.keras.optimizers.SGD(0.01)

@tf.function
def step(x):
    with tf.GradientTape() as tape:
        h = tf.tanh(x @ w)
        loss = tf.reduce_mean(h)
    opt.apply_gradients([(tape.gradient(loss, w), w)])
    return h, loss

history = []
x = tf.ones((1024, 1024))
for i in range(60):
    h, loss = step(x)
    history.append(h if os.environ.get("KEEP") else float(loss))
print("steps", len(history))
"""


def test_arrays_kept_from_earlier_steps_are_the_cause_and_the_rerun_without_them_fits(tmp_path):
    env = {"TF_CPU_BFC_MEM_LIMIT_IN_MB": "160"}
    (tmp_path / "keeps.py").write_text(KEEPS)
    result = profile(tmp_path, "-o", "keeps.tpumem", "keeps.py", env={**env, "KEEP": "1"})
    assert result.returncode == 1, result.stderr[-3000:]
    report = run_tpumem("report", str(tmp_path / "keeps.tpumem"), "--format", "json")
    (oom,) = json.loads(report.stdout)["out_of_memory"]
    (kept,) = [c for c in oom["causes"] if c["cause"] == "arrays kept from earlier steps"]
    # Most of the limit: a 4 MiB array from each step but the last two.
    assert kept["how"] == "measured" and kept["share"] > 0.5
    assert kept["bytes"] % (4 * MiB) == 0 and kept["steps"][0] <= 2 < kept["steps"][1]
    text = run_tpumem("report", str(tmp_path / "keeps.tpumem"), "--width", "200").stdout
    assert "arrays kept from earlier steps" in text and "float(x)" in text
    # The change: the loss kept as a number; the same loop runs to its end.
    rerun = profile(tmp_path, "-o", "numbers.tpumem", "keeps.py", env=env)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "steps 60" in rerun.stdout

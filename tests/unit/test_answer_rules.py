"""The rules behind the answer a report opens with, on hand-made traces and
names: how a program's temporaries are opened at lines (and scaled, and placed
by TensorFlow's op stacks), the words that tell an argument's kind, an op's pass,
and how names are cut to fit a terminal."""

from __future__ import annotations

import json
import os

import pytest
from rich.console import Console

from hlo_builder import hlo_proto
from tpumem.analysis import analyze
from tpumem.analysis.compiled.op_passes import BACKWARD, FORWARD, op_pass
from tpumem.analysis.kinds import (
    ACTIVATIONS,
    OPTIMIZER,
    PARAMETERS,
    STATE,
    keras_state_kind,
)
from tpumem.commands.options import FALLBACK_WIDTH, text_width
from tpumem.hlo.schema import ALLOC, FREE
from tpumem.report import REPORT, reporter
from tpumem.report.shorten import from_left, last_parts, op_tail
from tpumem.report.text import _fitted_table
from tpumem.trace.hlo_rows import hlo_row_text
from tpumem.trace.reader import load

KiB = 1024
FUNCTION = "__inference_step_12"
MODULE = "a_inference_step_12__XlaMustCompile_true_config_proto_1"


def _rows(temp_bytes: int, op_stacks: list[str]) -> list[dict]:
    """A run that called a TensorFlow function compiled by XLA once: its temp
    buffer at the call's line, the program's plan (a 400-byte argument, two
    temporaries of 800 and 200 bytes live together at its peak), the call's stack
    and the body's, and `op stacks` rows (their text as given)."""
    proto = hlo_proto(
        {1: 400, 2: 800, 3: 200},
        [(ALLOC, 2), (ALLOC, 3), (FREE, 2), (FREE, 3)],
        {1: "parameter"},
        op=lambda i: f"op{i}",
        module_name=MODULE,
    )
    call = [["train.py", 9, "<module>"]]
    body = [["train.py", 3, "step"]]
    return [
        {"kind": "stack", "time_ns": 0, "stack": 0, "text": json.dumps(call)},
        {"kind": "stack", "time_ns": 0, "stack": 1, "text": json.dumps(body)},
        *({"kind": "op stacks", "time_ns": 0, "op": FUNCTION, "text": t} for t in op_stacks),
        {"kind": "hlo", "time_ns": 1, "text": hlo_row_text("dump", proto, 3)},
        {
            "kind": "alloc",
            "time_ns": 2,
            "device": "CPU:0",
            "buffer_id": 1,
            "bytes": temp_bytes,
            "op": FUNCTION,
            "source": "train.py:9",
            "stack": 0,
        },
        {"kind": "free", "time_ns": 3, "device": "CPU:0", "buffer_id": 1, "bytes": temp_bytes},
    ]


GOOD = json.dumps({"function": FUNCTION, "stacks": {"op2": 1}})


def test_a_programs_temporaries_are_opened_at_the_lines_its_ops_were_built(make_trace):
    """TensorFlow: op2 at the body's line the adapter recorded (its op stacks),
    op3 at the line XLA's metadata gives; under the call, after the program."""
    (device,) = analyze(load(make_trace(_rows(1000, [GOOD])))).devices
    lines = [(x.line, x.bytes, x.program) for x in device.lines.lines]
    assert lines == [
        ("train.py:3", 800, "a_inference_step_12"),
        ("/work/model.py:3", 200, "a_inference_step_12"),
    ]
    top = device.peak.stacks[0]
    assert [f.location for f in top.frames] == ["train.py:9", "train.py:9", "train.py:3"]
    assert top.frames[1].function == "a_inference_step_12" and top.bytes == 800
    assert {k.kind: k.bytes for k in device.kinds.kinds} == {ACTIVATIONS: 1000}


def test_a_temp_size_given_short_scales_the_plan_and_a_larger_one_keeps_the_rest(make_trace):
    (short,) = analyze(load(make_trace(_rows(900, [GOOD]), name="a.tpumem"))).devices
    assert sum(x.bytes for x in short.lines.lines) == 900
    (opened,) = short.lines.programs
    assert opened.scale == pytest.approx(0.9) and opened.rest_bytes == 0
    (large,) = analyze(load(make_trace(_rows(1100, [GOOD]), name="b.tpumem"))).devices
    (rest,) = [x for x in large.lines.lines if x.unplaced]
    assert rest.bytes == 100 and rest.line is None


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        json.dumps({"function": FUNCTION, "stacks": ["op2", 1]}),
        json.dumps({"function": FUNCTION, "stacks": {"op2": -1}}),
        json.dumps({"function": FUNCTION, "stacks": {"op2": True}}),
        json.dumps({"function": 12, "stacks": {"op2": 1}}),
        json.dumps({"function": FUNCTION, "stacks": {"op2": 99}}),  # no such stack
    ],
)
def test_op_stacks_not_of_their_form_leave_xlas_lines(make_trace, text):
    (device,) = analyze(load(make_trace(_rows(1000, [text])))).devices
    assert device.lines.lines[0].line == "/work/model.py:2"


def test_a_launch_that_allocates_its_outputs_with_its_temporaries_has_them_as_state(make_trace):
    """TensorFlow allocates a jit_compile launch's outputs (the variables' new
    values) with its temporaries: beyond the plan's temporaries, the outputs'
    bytes are state, not working memory."""
    proto = hlo_proto(
        {1: 400, 2: 800, 3: 200, 4: 600},
        [(ALLOC, 2), (ALLOC, 3), (FREE, 2), (FREE, 3)],
        {1: "parameter", 4: "output"},
        module_name=MODULE,
    )
    rows = [
        {"kind": "hlo", "time_ns": 1, "text": hlo_row_text("dump", proto, 3)},
        {
            "kind": "alloc",
            "time_ns": 2,
            "device": "CPU:0",
            "buffer_id": 1,
            "bytes": 1600,
            "op": FUNCTION,
            "source": "train.py:9",
        },
    ]
    (device,) = analyze(load(make_trace(rows))).devices
    assert {k.kind: k.bytes for k in device.kinds.kinds} == {ACTIVATIONS: 1000, STATE: 600}


@pytest.mark.parametrize(
    ("name", "tape", "expected"),
    [
        ("jit(step)/jvp()/tanh", False, FORWARD),
        ("jit(step)/transpose(jvp())/mul", False, BACKWARD),
        ("transpose(jvp(jit(log_softmax)))/add_any", False, BACKWARD),
        ("gradient_tape/MatMul_4/MatMul", True, BACKWARD),
        ("Gelu/mul_3", True, FORWARD),
        ("Gelu/mul_3", False, None),
        ("jit(step)/add", False, None),
        ("", True, None),
    ],
)
def test_an_ops_name_tells_its_pass(name, tape, expected):
    assert op_pass(name, tape) == expected


def test_names_are_cut_where_they_stay_told_apart():
    path = "/very/long/checkout/of/the/project/examples/jax_common.py:107"
    cut = from_left(path, 24)
    assert len(cut) <= 24 and cut.endswith("jax_common.py:107") and cut.startswith("…")
    assert from_left("short.py:1", 24) == "short.py:1"
    assert last_parts("StatefulPartitionedCall/adam/Adam/update/mul_1", 20) == "…/Adam/update/mul_1"
    assert len(last_parts("a" * 40, 10)) == 10
    assert op_tail("transpose(jvp(jit(log_softmax)))") == "log_softmax"
    assert op_tail("jvp(jit(log_softmax))/exp") == "exp"


@pytest.mark.parametrize("width", [40, 60, 80, 100, 120])
def test_a_table_fits_the_terminal_and_keeps_each_lines_end(width):
    rows = [
        (
            "42.7 MiB",
            f"/a/deep/checkout/{'x' * 40}/examples/model_{n}.py:{n}",
            "jit_step temporaries: " * 3,
        )
        for n in range(5)
    ]
    console = Console(width=width, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(_fitted_table("t", ("bytes", "line", "what"), rows, width))
    text = console.export_text()
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width
    for n in range(5):
        assert f"model_{n}.py:{n}" in text
    assert all("42.7 MiB" in line for line in lines if "model_" in line)


@pytest.mark.parametrize("width", [60, 80])
def test_six_columns_fit_with_their_numbers_whole(width):
    headers = ("bytes", "buffers", "op", "region", "shape", "source")
    row = (
        "123.4 MiB",
        "1,234",
        "scope/inner/op_name",
        "output",
        "float32[512,128]",
        "/deep/path/to/the/project/model_here.py:1234",
    )
    console = Console(width=width, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(_fitted_table("t", headers, [row], width))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= width
    assert "123.4 MiB" in text and "1,234" in text


def _programs(op: str) -> bytes:
    """A JAX program's plan: two forward values (ids 2, 3) and a third (4, of
    `op`), live together at its peak."""
    ops = {2: "jit(step)/jvp()/tanh", 3: "jit(step)/jvp()/mul", 4: op}
    return hlo_proto(
        {1: 400 * KiB, 2: 800 * KiB, 3: 600 * KiB, 4: 300 * KiB},
        [(ALLOC, 2), (ALLOC, 3), (ALLOC, 4), (FREE, 2), (FREE, 3), (FREE, 4)],
        {1: "parameter"},
        op=lambda i: ops.get(i, f"op{i}"),
        module_name="jit_step",
    )


def _jax_rows(proto: bytes, temp_bytes: int) -> list[dict]:
    return [
        {"kind": "hlo", "time_ns": 1, "text": hlo_row_text("dump", proto, 5)},
        {
            "kind": "alloc",
            "time_ns": 2,
            "device": "CPU:0",
            "buffer_id": 1,
            "bytes": temp_bytes,
            "op": "jit_step",
            "region": "temp",
            "source": "train.py:9",
        },
        {"kind": "free", "time_ns": 3, "device": "CPU:0", "buffer_id": 1, "bytes": temp_bytes},
    ]


def test_rematerialization_is_told_only_for_a_program_with_a_backward_pass(make_trace):
    """A training step's forward values live at its peak are kept for the
    gradient; an inference program's are nobody's to recompute."""
    step = _programs("jit(step)/transpose(jvp())/mul")
    analysis = analyze(load(make_trace(_jax_rows(step, 1700 * KiB), {"framework": "jax"})))
    remat = [(c.line, c.bytes) for c in analysis.changes if c.key == "remat"]
    # The forward values, largest line first, at the lines the plan gives them.
    assert remat == [("/work/model.py:2", 800 * KiB), ("/work/model.py:3", 600 * KiB)]
    inference = _programs("jit(step)/exp")
    rows = _jax_rows(inference, 1700 * KiB)
    analysis = analyze(load(make_trace(rows, {"framework": "jax"}, "f.tpumem")))
    assert not [c for c in analysis.changes if c.key == "remat"]


def test_a_remat_figure_is_the_lines_tables_where_the_plan_is_scaled(make_trace):
    backward = _programs("jit(step)/transpose(jvp())/mul")
    analysis = analyze(load(make_trace(_jax_rows(backward, 1530 * KiB), {"framework": "jax"})))
    (device,) = analysis.devices
    by_line = {x.line: x.bytes for x in device.lines.lines}
    remat = {c.line: c.bytes for c in analysis.changes if c.key == "remat"}
    assert remat and all(by_line[line] == size for line, size in remat.items())


def test_a_program_compiled_twice_is_opened_by_the_plan_its_temp_size_matches(make_trace):
    small = hlo_proto(
        {1: 100, 2: 200},
        [(ALLOC, 2), (FREE, 2)],
        {1: "parameter"},
        module_name="jit_step",
        source="/work/small.py",
    )
    large = hlo_proto(
        {1: 100, 2: 900},
        [(ALLOC, 2), (FREE, 2)],
        {1: "parameter"},
        module_name="jit_step",
        source="/work/large.py",
    )
    rows = [
        {"kind": "hlo", "time_ns": 1, "text": hlo_row_text("dump", small, 5)},
        {"kind": "hlo", "time_ns": 1, "text": hlo_row_text("dump", large, 6)},
        {
            "kind": "alloc",
            "time_ns": 2,
            "device": "CPU:0",
            "buffer_id": 1,
            "bytes": 900,
            "op": "jit_step",
            "region": "temp",
            "source": "train.py:9",
        },
    ]
    (device,) = analyze(load(make_trace(rows, {"framework": "jax"}))).devices
    assert [x.line for x in device.lines.lines] == ["/work/large.py:2"]


def test_a_programs_name_with_terminal_escapes_reaches_the_terminal_escaped(make_trace):
    module = "a_inference_\x1b]0;pwned\x07_12"
    proto = hlo_proto(
        {1: 400, 2: 800}, [(ALLOC, 2), (FREE, 2)], {1: "parameter"}, module_name=module
    )
    rows = [
        {"kind": "hlo", "time_ns": 1, "text": hlo_row_text("dump", proto, 5)},
        {
            "kind": "alloc",
            "time_ns": 2,
            "device": "CPU:0",
            "buffer_id": 1,
            "bytes": 800,
            "op": "_inference_\x1b]0;pwned\x07_12",
            "source": "train.py:9",
        },
    ]
    analysis = analyze(load(make_trace(rows)))
    for width in (80, 200):
        text = reporter(REPORT, "text").render(analysis, width=width)
        assert "\x1b" not in text and "\x07" not in text
        assert "\\x1b" in text  # shown as its escape


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("state[0][3]", PARAMETERS),
        ("state[1][0]", STATE),
        ("state[2][7]", OPTIMIZER),
        ("state[3][1]", STATE),
        ("data[0]", None),  # its batch: by fate, as any argument
    ],
)
def test_keras_fit_tells_its_states_kinds_by_its_trainers_layout(name, kind):
    assert keras_state_kind(name) == kind


def _at_peak(parts: dict[str, int], phase: str | None = None, superseded: int = 0):
    """A device whose ledger at a 100 MiB peak holds `parts` (kind -> bytes), and
    `superseded` bytes of a variable's earlier value among the activations: what
    the batch rule reads of a DeviceAnalysis."""
    from types import SimpleNamespace

    from tpumem.analysis.kinds import BY_PLAN, BY_SUPERSEDED, KindBytes

    kinds = []
    for kind, size in parts.items():
        if kind == ACTIVATIONS and superseded:
            told = (BY_PLAN, BY_SUPERSEDED)
            kinds.append(KindBytes(kind, size + superseded, told, (size, superseded)))
        else:
            kinds.append(KindBytes(kind, size, (BY_PLAN,), (size,)))
    peak = SimpleNamespace(bytes=100 << 20, phase=phase)
    return SimpleNamespace(device="CPU:0", kinds=SimpleNamespace(kinds=tuple(kinds)), peak=peak)


def test_half_the_batch_is_told_where_activations_hold_half_the_peak_in_the_runs_words():
    from tpumem.analysis.changes import _batch
    from tpumem.report.change_rows import change_lines
    from tpumem.trace.framework_words import WORDS_BEFORE_WRITTEN

    tensorflow = WORDS_BEFORE_WRITTEN["tensorflow"]

    MiB = 1 << 20
    training = {OPTIMIZER: 20 * MiB, ACTIVATIONS: 60 * MiB}
    # Half the activations, less a variable's earlier value the step still held.
    fit = _batch(_at_peak(training, superseded=10 * MiB), keras=True)
    assert fit is not None and (fit.bytes, fit.before_bytes) == (30 * MiB, 60 * MiB)
    assert fit.names == ("fit",) and fit.accumulate
    ((_, said, how),) = change_lines((fit,), tensorflow)
    assert said.startswith("Half the batch (model.fit(..., batch_size=...)): the activations")
    assert "gradient_accumulation_steps=2" in said and how.startswith("estimated: ")
    # A peak in predict(): its own batch_size, and no optimizer to accumulate for.
    predict = _batch(_at_peak(training, phase="predict()"), keras=True)
    assert predict is not None and predict.names == ("predict",) and not predict.accumulate
    ((_, said, _),) = change_lines((predict,), tensorflow)
    assert "model.predict(..., batch_size=...)" in said and "accumulate" not in said
    # A framework with no words for its batch: no empty parentheses.
    ((_, said, _),) = change_lines((_batch(_at_peak(training), keras=False),), None)
    assert said.startswith("Half the batch: the activations")
    # Below half the peak the peak would move: nothing told.
    assert _batch(_at_peak({OPTIMIZER: 60 * MiB, ACTIVATIONS: 40 * MiB}), keras=False) is None


def test_a_terminal_given_no_size_takes_columns_or_the_fallback(monkeypatch):
    """A pseudo-terminal nobody sized (`script`, a container's exec) says 0
    columns: the report takes $COLUMNS, not its narrowest width."""
    reader, terminal = os.openpty()
    try:
        with os.fdopen(os.dup(terminal), "w") as stream:
            assert os.get_terminal_size(terminal).columns == 0
            monkeypatch.setenv("COLUMNS", "100")
            assert text_width(None, stream) == 100
            monkeypatch.setenv("COLUMNS", "0")
            assert text_width(None, stream) == FALLBACK_WIDTH
            monkeypatch.delenv("COLUMNS")
            assert text_width(None, stream) == FALLBACK_WIDTH
    finally:
        os.close(reader)
        os.close(terminal)

"""`%load_ext tpumem` in a real Jupyter kernel (ipykernel, run by nbclient), one
kernel per framework: a `%%tpumem` cell shows its HTML report under it, with the
text report beside it; each cell is its own trace; two cells compare; the kernel
goes on working; bad input is one line."""

from __future__ import annotations

import html
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from page_data import embedded

import tpumem
from sample_traces import buffer_rows
from tpumem.analysis import analyze
from tpumem.errors import TpumemError
from tpumem.trace.reader import load
from tpumem.units import format_bytes

MiB = 1 << 20

# Per framework: in use before the first recorded cell (a notebook's case), a
# cell that keeps two 4 MiB buffers live at its end (three with `more`), and a
# value after.
FRAMEWORKS = {
    "jax": (
        "import jax, jax.numpy as jnp\nwarm = jnp.ones((8,)) * 2",
        "a = jnp.ones((1024, 1024))\nb = a * 2\n{more}b.block_until_ready()",
        "float(jnp.ones((3,)).sum())",
    ),
    "tensorflow": (
        "import tensorflow as tf\nwarm = tf.ones([8]) * 2",
        "a = tf.ones([1024, 1024])\nb = a * 2\n{more}",
        "float(tf.reduce_sum(tf.ones([3])))",
    ),
    "torch_xla": (
        "import torch, torch_xla\nwarm = torch.ones(8, device='xla') * 2",
        "a = torch.ones(1024, 1024, device='xla')\nb = a * 2\n{more}torch_xla.sync()",
        "float(torch.ones(3, device='xla').sum().item())",
    ),
}


def _frame(output: dict) -> str:
    """The report page inside a cell's HTML output."""
    page = output["data"]["text/html"]
    found = re.search(r'<iframe class="tpumem-report" srcdoc="(.*?)"', page, re.DOTALL)
    assert found, page[:300]
    return html.unescape(found.group(1))


def _run_notebook(cells: list[str], tmp_path) -> list[dict]:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": tmp_path}}
    ).execute()
    return [cell.outputs for cell in notebook.cells]


@pytest.mark.parametrize("framework", list(FRAMEWORKS))
def test_a_cell_shows_its_report_under_it(tmp_path, monkeypatch, framework):
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    before, known, after = FRAMEWORKS[framework]
    outputs = _run_notebook(
        [
            "%load_ext tpumem",
            before,
            "%%tpumem\n" + known.format(more=""),
            "%%tpumem\n" + known.format(more="c = b * 2\n"),
            "import tpumem\ntpumem.compare('cell.tpumem', 'cell-2.tpumem')",
            after,
            "%tpumem_report --format text",
            f"%%tpumem -o cell.tpumem\n{after}",
            "%tpumem_report missing.tpumem",
        ],
        tmp_path,
    )
    first, second = (analyze(load(tmp_path / f"{n}.tpumem")) for n in ("cell", "cell-2"))
    for analysis, buffers in ((first, 2), (second, 3)):
        assert analysis.metadata.framework == framework and analysis.complete
        assert analysis.devices[0].peak.bytes >= buffers * 4 * MiB
    # The lines that made them, as the notebook numbers its cells (TensorFlow's
    # allocator events carry no Python line).
    sources = {group.source for group in first.devices[0].peak.groups}
    if framework != "tensorflow":
        assert sources & {"In [3]:1", "In [3]:2"}, sources
    else:  # set when the extension loaded, before TensorFlow started
        set_here = first.metadata.set_by_tpumem  # (and the session's XLA dump: xla_dump.py)
        assert set_here["TF_CPU_ALLOCATOR_USE_BFC"] == "true"
        assert set(set_here) == {"TF_CPU_ALLOCATOR_USE_BFC", "XLA_FLAGS"}
        assert first.devices[0].fidelity == "allocator"
    # Under each recorded cell: the HTML report of its own trace, and the text one.
    for cell_outputs, analysis in ((outputs[2], first), (outputs[3], second)):
        (shown,) = [o for o in cell_outputs if o["output_type"] == "display_data"]
        (run,) = embedded(_frame(shown))["runs"]
        assert run["devices"][0]["peak"]["bytes"] == analysis.devices[0].peak.bytes
        assert run["path"] == Path(analysis.path).name  # the kernel names it as it was made
        assert "What the peak is" in shown["data"]["text/plain"]
        # The answer first, the whole page folded under it.
        summary = shown["data"]["text/html"]
        assert summary.startswith(f"<p><b>Peak {format_bytes(analysis.devices[0].peak.bytes)}")
        assert summary.index("<details") > summary.index("What the peak is")
    # The comparison of the two cells, as the value of the cell.
    (compared,) = [o for o in outputs[4] if o["output_type"] == "execute_result"]
    names = [f"{framework} (cell)", f"{framework} (cell-2)"]
    assert embedded(_frame(compared))["comparison"]["names"] == names
    # The kernel goes on: the framework computes, the last cell's report prints.
    (value,) = [o for o in outputs[5] if o["output_type"] == "execute_result"]
    assert value["data"]["text/plain"] == "3.0"
    printed = "".join(o.get("text", "") for o in outputs[6] if o["output_type"] == "stream")
    assert "cell-2.tpumem" in printed and "What the peak is" in printed
    # Bad input: one line each, no traceback, nothing run or replaced.
    for index, expected in (
        (7, "tpumem: cell.tpumem: exists"),
        (8, "tpumem: missing.tpumem"),
    ):
        (said,) = outputs[index]
        assert said["name"] == "stderr" and said["text"].startswith(expected)
        assert said["text"].count("\n") == 1


def test_a_cell_that_imports_its_framework_is_recorded_and_run(tmp_path, monkeypatch):
    """The framework imported in the recorded cell itself: the recording starts
    with the import, and the cell runs (a later cell uses what it made)."""
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    outputs = _run_notebook(
        [
            "%load_ext tpumem",
            "%%tpumem -o nothing.tpumem\nx = 1",  # before the kernel imports a framework
            "%%tpumem\nimport jax.numpy as jnp\n"
            "kept = jnp.ones((1024, 1024))\nkept.block_until_ready()",
            "float(kept.sum())",
        ],
        tmp_path,
    )
    analysis = analyze(load(tmp_path / "cell.tpumem"))
    assert analysis.metadata.framework == "jax"
    assert analysis.devices[0].peak.bytes >= 4 * MiB
    (value,) = [o for o in outputs[3] if o["output_type"] == "execute_result"]
    assert value["data"]["text/plain"] == str(float(1024 * 1024))
    (said,) = [o for o in outputs[1] if o["output_type"] == "display_data"]
    assert "recorded nothing" in said["data"]["text/plain"]
    assert not (tmp_path / "nothing.tpumem").exists()


def test_runs_and_comparisons_show_their_reports_as_values(make_trace):
    # What a notebook shows for `analysis` or `tpumem.compare(...)` alone in a cell:
    # IPython's display formatter, as tpumem registered it (notebook_display.py).
    from IPython.core.interactiveshell import InteractiveShell

    from tpumem.notebook_display import register

    shell = InteractiveShell.instance()
    register(shell)

    def shown(value: object) -> dict:
        data, _ = shell.display_formatter.format(value)
        return data

    first = make_trace(buffer_rows(), {"framework": "jax"}, name="a.tpumem")
    second = make_trace(buffer_rows(), {"framework": "tensorflow"}, name="b.tpumem")
    analysis = analyze(load(first))
    bundle = shown(analysis)
    (run,) = embedded(_frame({"data": bundle}))["runs"]
    assert run["devices"][0]["peak"]["bytes"] == analysis.devices[0].peak.bytes
    assert bundle["text/plain"].startswith("tpumem report")
    comparison = tpumem.compare(first, analysis, str(second))
    shown_comparison = shown(comparison)
    assert len(embedded(_frame({"data": shown_comparison}))["comparison"]["names"]) == 3
    assert shown_comparison["text/plain"].startswith("tpumem compare")
    with pytest.raises(TpumemError, match="two runs or more"):
        tpumem.compare(first)


def test_tpumem_imported_inside_ipython_shows_its_values(make_trace):
    """Importing tpumem in IPython (a notebook's kernel) is enough: its analyses
    show their reports, with no extension loaded."""
    trace = make_trace(buffer_rows(), {"framework": "jax"})
    code = (
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "shell = InteractiveShell.instance()\n"
        "import tpumem\n"
        "from tpumem.analysis import analyze\n"
        f"data, _ = shell.display_formatter.format(analyze(tpumem.load({str(trace)!r})))\n"
        "print(data['text/plain'].splitlines()[0])\n"
        "print('text/html' in data)\n"
    )
    command = [sys.executable, "-c", code]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines()[-2:] == [f"tpumem report · {trace}", "True"]


def test_a_cell_is_told_only_what_would_work(tmp_path):
    """`%%tpumem -o /dev/full` advised `force=True`, which then refused it: /dev/full
    and a directory are refused as they are, --force or not; an existing trace is
    told the magic's own --force; tpumem.track's API is told force=True only where
    it would do. One line each, nothing run on a refusal, nothing replaced."""
    (tmp_path / "kept.tpumem").write_text("the user's\n")
    (tmp_path / "adir").mkdir()
    code = """
import tpumem
from tpumem.errors import TpumemError
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
shell.run_line_magic("load_ext", "tpumem")
for line in ("-o /dev/full", "-o /dev/full --force", "-o adir --force", "-o kept.tpumem"):
    shell.run_cell(f"%%tpumem {line}\\nopen('ran', 'a').write('x')")
for output, force in (("/dev/full", False), ("/dev/full", True), ("kept.tpumem", False)):
    try:
        tpumem.track(output, force=force).start()
    except TpumemError as error:
        print("track:", error)
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Traceback" not in result.stderr + result.stdout
    assert result.stderr.splitlines() == [
        "tpumem: /dev/full: not a regular file; tpumem writes only to files",
        "tpumem: /dev/full: not a regular file; tpumem writes only to files",
        "tpumem: adir: is a directory; give a file name",
        "tpumem: kept.tpumem: exists; %%tpumem --force replaces it",
    ]
    assert result.stdout.splitlines()[-3:] == [
        "track: /dev/full: not a regular file; tpumem writes only to files",
        "track: /dev/full: not a regular file; tpumem writes only to files",
        "track: kept.tpumem: exists; tpumem.track(..., force=True) replaces it",
    ]
    assert not (tmp_path / "ran").exists()
    assert (tmp_path / "kept.tpumem").read_text() == "the user's\n"


def test_a_cell_after_the_framework_started_still_gets_its_programs(tmp_path, monkeypatch):
    """XLA reads XLA_FLAGS once, as JAX first computes: in a notebook, before the
    first recorded cell. `%load_ext tpumem` opens the kernel's dump then, so a
    program compiled in a later %%tpumem cell has its plan in the trace, and no
    warning says to start tpumem earlier."""
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    _run_notebook(
        [
            "%load_ext tpumem",
            "import jax, jax.numpy as jnp\nwarm = jnp.ones((8,)) * 2",  # JAX starts here
            "%%tpumem\nstep = jax.jit(lambda x: jnp.tanh(x @ x).sum())\n"
            "kept = step(jnp.ones((512, 512)))\nkept.block_until_ready()",
        ],
        tmp_path,
    )
    analysis = analyze(load(tmp_path / "cell.tpumem"))
    assert not [w for w in analysis.warnings if "XLA dumped no compiled programs" in w]
    assert any("jit__lambda" in p.name for p in analysis.compiled), analysis.compiled
    assert "--xla_dump_to=" in analysis.metadata.set_by_tpumem["XLA_FLAGS"]

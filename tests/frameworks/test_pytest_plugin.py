"""The pytest plugin, through pytest's own `pytester`, each inner run a pytest
process of its own with one framework: a test over its device-memory limit fails
with the buffers live at the peak, one under passes, unmarked tests are not
recorded; `--tpumem` lists the largest peaks and `--tpumem-dir` keeps traces."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tpumem.reading.summary_files import read_summary
from tpumem.trace.reader import load

pytest_plugins = ["pytester"]

# Per framework: its import, and a function that keeps two 4 MiB buffers live.
FRAMEWORKS = {
    "jax": """
import jax.numpy as jnp
def make():
    a = jnp.ones((1024, 1024))
    b = a * 2
    b.block_until_ready()
    return a, b
""",
    "tensorflow": """
import tensorflow as tf
def make():
    a = tf.ones([1024, 1024])
    return a, a * 2
""",
    "torch_xla": """
import torch, torch_xla
def make():
    a = torch.ones(1024, 1024, device="xla")
    b = a * 2
    torch_xla.sync()
    return a, b
""",
}
TESTS = """
import pytest

@pytest.mark.limit_device_memory("6 MiB")
def test_over():
    kept = make()

@pytest.mark.limit_device_memory("64 MiB")
def test_under():
    kept = make()

@pytest.mark.limit_device_fragmentation(1.0)
def test_fragmentation_within():
    kept = make()

def test_not_recorded():
    kept = make()
"""


@pytest.fixture
def framework_env(monkeypatch):
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    monkeypatch.setenv("PJRT_DEVICE", "CPU")


@pytest.mark.parametrize("framework", list(FRAMEWORKS))
def test_a_test_over_its_limit_fails_with_what_was_live(pytester, framework_env, framework):
    pytester.makepyfile(test_model=FRAMEWORKS[framework] + TESTS)
    kept = pytester.path / "traces"
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--tpumem-dir={kept}")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_over*",
            "*CPU:0: peak 8.0 MiB * is over the limit 6.0 MiB*",
            "*live at the peak on CPU:0, largest first:*",
            "*4.0 MiB*[[]1024,1024[]]*",
        ]
    )
    assert "Traceback" not in result.stdout.str()
    # Marked tests were recorded, for this framework; the unmarked one was not.
    traces = sorted(p.name for p in kept.glob("*.tpumem"))
    assert traces == [
        f"test_model.py_test_{n}.tpumem" for n in ("fragmentation_within", "over", "under")
    ]
    # Each kept trace has its summary beside it, and nothing else is there.
    assert sorted(p.name for p in kept.iterdir()) == sorted(
        [*traces, *(f"{name}.summary.json" for name in traces)]
    )
    assert all(not isinstance(read_summary(kept / name), str) for name in traces)
    metadata = load(kept / traces[0]).metadata
    assert metadata.framework == framework
    # Set before the tests started the framework, as `tpumem profile` would have:
    # TensorFlow's CPU allocator then reports on any CPU.
    if framework == "tensorflow":
        set_here = metadata.set_by_tpumem  # (and the session's XLA dump: xla_dump.py)
        assert set_here["TF_CPU_ALLOCATOR_USE_BFC"] == "true"
        assert set(set_here) == {"TF_CPU_ALLOCATOR_USE_BFC", "XLA_FLAGS"}


def test_every_test_recorded_with_the_largest_peaks_listed(pytester, framework_env):
    pytester.makepyfile(
        test_sizes=FRAMEWORKS["jax"]
        + """
def test_small():
    kept = jnp.ones((256, 1024)).block_until_ready()  # 1 MiB

def test_large():
    kept = make()  # 8 MiB
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--tpumem")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "*tpumem: largest device peaks*",
            "*8.0 MiB (CPU:0)  test_sizes.py::test_large",
            "*1.0 MiB (CPU:0)  test_sizes.py::test_small",
        ]
    )


def test_a_framework_imported_inside_the_test_is_recorded(pytester, framework_env):
    """The recording starts as the test imports its framework; a marked test
    that imports none fails in one line, an unmarked one under --tpumem passes."""
    pytester.makepyfile(
        test_inside="""
import pytest

# Before any test has imported a framework (after, each test records it).
@pytest.mark.limit_device_memory("6 MiB")
def test_marked_without_a_framework():
    pass

def test_plain():
    pass

@pytest.mark.limit_device_memory("6 MiB")
def test_over():
    import jax.numpy as jnp
    kept = jnp.ones((2048, 1024)).block_until_ready()  # 8 MiB
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--tpumem")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*tpumem: the test imported none of the frameworks*",
            "*CPU:0: peak 8.0 MiB * is over the limit 6.0 MiB*",
        ]
    )
    assert "Traceback" not in result.stdout.str()


def test_a_bad_limit_is_a_usage_error(pytester):
    pytester.makepyfile(
        test_bad="""
import pytest
@pytest.mark.limit_device_memory("lots")
def test_it():
    pass
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*limit_device_memory('lots'): not a size*"])


@pytest.mark.parametrize(
    ("mark", "words"),
    [
        ("limit_device_memory(-5)", "not a size"),
        ("limit_device_memory(10**400)", "larger than any memory"),
        ("limit_device_memory(2**63)", "larger than any memory"),
        ("limit_device_memory(1.5)", "give a size"),
        ("limit_device_fragmentation(True)", "give a ratio from 0 to 1"),
    ],
)
def test_a_limit_given_as_a_number_keeps_the_strings_rules(pytester, mark, words):
    """An int is a size by the same rule as a string (bytes, 0 .. 2^63 - 1); a
    bool is not a ratio."""
    pytester.makepyfile(test_bad=f"import pytest\n@pytest.mark.{mark}\ndef test_it():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{words}*"])


def test_a_marked_test_that_fails_or_skips_leaves_no_trace_behind(
    pytester, framework_env, monkeypatch
):
    """Without --tpumem-dir a test's trace is temporary: one that raises, or that
    calls pytest.skip, removes it as a passing one does."""
    temporary = pytester.path / "tmp"
    temporary.mkdir()
    monkeypatch.setenv("TMPDIR", str(temporary))
    pytester.makepyfile(
        test_ends="""
import pytest
import jax.numpy as jnp

@pytest.mark.limit_device_memory("64 MiB")
def test_raises():
    jnp.ones((256, 256)).block_until_ready()
    raise RuntimeError("the test's own failure")

@pytest.mark.limit_device_memory("64 MiB")
def test_skips():
    jnp.ones((256, 256)).block_until_ready()
    pytest.skip("not today")

@pytest.mark.limit_device_memory("64 MiB")
def test_passes():
    jnp.ones((256, 256)).block_until_ready()
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1, skipped=1)
    assert list(temporary.glob("tpumem-test-*")) == []


def test_the_lines_are_the_test_files_run_from_another_directory(tmp_path, framework_env):
    """`pytest ../suite/test_model.py` through the environment's `pytest` script:
    pytest puts the test's directory on sys.path and the script is a launcher in
    the environment's bin/; the lines are still the test file's, not either."""
    (tmp_path / "suite").mkdir()
    (tmp_path / "work").mkdir()
    (tmp_path / "suite" / "test_model.py").write_text(FRAMEWORKS["jax"] + TESTS)
    launcher = Path(sys.executable).parent / "pytest"
    result = subprocess.run(
        [launcher, "-p", "no:cacheprovider", "-p", "no:xdist", "../suite/test_model.py"],
        cwd=tmp_path / "work",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    lines = [line for line in result.stdout.splitlines() if "1 x " in line]
    assert lines, result.stdout[-3000:]
    for line in lines:
        assert line.rsplit(None, 1)[-1] in ("../suite/test_model.py:4", "../suite/test_model.py:5")

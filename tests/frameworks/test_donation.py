"""Donation found by what happens in the run, never by the arguments' names: a
jitted update called on state the caller drops after each call (here named
`state`, no word of which says parameters) holds its outputs twice at the peak.
The advice's figure is held to the run with the donation applied: its peak is
exactly the bytes the advice said less. Each run in its own process, on JAX."""

from __future__ import annotations

import textwrap

from profiling import profile
from tpumem.analysis import analyze
from tpumem.analysis.changes import DONATE
from tpumem.trace.reader import load

UPDATE = textwrap.dedent(
    """
    import functools
    import jax, jax.numpy as jnp

    @DECORATOR
    def update(state):
        return jax.tree_util.tree_map(lambda a: a * 0.99 + 1.0, state)

    state = {"a": jnp.ones((4096, 2048), jnp.float32), "b": jnp.ones((4096, 2048), jnp.float32)}
    for i in range(5):
        state = update(state)
    print(float(state["a"][0, 0]))
    """
)


def _run(tmp_path, name: str, decorator: str):
    (tmp_path / f"{name}.py").write_text(UPDATE.replace("DECORATOR", decorator))
    result = profile(tmp_path, "--width", "200", f"{name}.py")
    assert result.returncode == 0, result.stderr[-3000:]
    return result, analyze(load(tmp_path / f"{name}.tpumem"))


def test_an_update_the_caller_drops_gets_donation_that_the_rerun_confirms(tmp_path):
    result, analysis = _run(tmp_path, "update", "jax.jit")
    (donate,) = [c for c in analysis.changes if c.key == DONATE]
    assert donate.names == ("state",) and donate.bytes == 64 << 20
    assert "donate_argnames=('state',)" in " ".join(result.stderr.split())

    donated, after = _run(
        tmp_path, "donated", 'functools.partial(jax.jit, donate_argnames=("state",))'
    )
    assert donated.stdout == result.stdout  # the same program, donating
    # Less by the advice's bytes, to the scalars (JAX's 4-byte constants) that
    # happen to be live at the new peak's moment and not the old one's.
    assert abs(after.total_peak_bytes - (analysis.total_peak_bytes - donate.bytes)) <= 64
    assert not [c for c in after.changes if c.key == DONATE]

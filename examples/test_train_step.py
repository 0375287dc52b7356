"""A memory budget as a test: tpumem's pytest plugin (installed with tpumem, off
unless a test is marked or pytest runs with --tpumem) records the test's device
memory and fails it above the limit, with what was live at its peak.

pytest examples/test_train_step.py
"""

import jax
import jax.numpy as jnp
import pytest


def train_step(batch: int) -> jax.Array:
    w = jnp.ones((1024, 1024))
    return jnp.tanh(jnp.ones((batch, 1024)) @ w)


@pytest.mark.limit_device_memory("12 MiB")  # also: limit_device_fragmentation(0.3)
def test_train_step_fits():
    kept = train_step(batch=2048)
    assert kept.shape == (2048, 1024)

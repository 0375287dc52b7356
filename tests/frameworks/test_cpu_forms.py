"""Code a CPU run lowered in the CPU's form (analysis/compiled/cpu_forms.py), read from
programs JAX lowers on the CPU in a process of their own: a branch
lax.platform_dependent chose (at a jit's root, inside a nested jit, beside a
lax.cond taken at run time) and the CPU's LAPACK kernels are named; a shard_map's
custom calls and a run-time lax.cond are not."""

from __future__ import annotations

import base64

from conftest import run_python
from tpumem.analysis.compiled.cpu_forms import CHOSEN_BRANCH, cpu_forms

PROGRAMS = """
import base64, json
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import Mesh, PartitionSpec as P

def chosen(x):
    return lax.platform_dependent(x, cpu=lambda x: x * 2.0, tpu=lambda x: x * 3.0)

@jax.jit
def inner(x):
    return chosen(x)

def nested(x):
    return inner(x) + 1.0

def beside_a_cond(x):
    taken = lax.cond(x.sum() > 0, lambda x: x + 1.0, lambda x: x - 1.0, x)
    return taken + chosen(x)

def run_time_cond(x):
    return lax.cond(x.sum() > 0, lambda x: jnp.sin(x), lambda x: jnp.cos(x), x)

mesh = Mesh(jax.devices(), ("x",))
def sharded(x):
    return jax.shard_map(lambda b: b * 2.0, mesh=mesh, in_specs=P("x"), out_specs=P("x"))(x)

x = jnp.ones((8, 8))
functions = {"root": chosen, "nested": nested, "beside_a_cond": beside_a_cond,
             "run_time_cond": run_time_cond, "sharded": sharded, "inverse": jnp.linalg.inv}
print(json.dumps({
    name: base64.b64encode(
        jax.jit(f).lower(x).compiler_ir("hlo").as_serialized_hlo_module_proto()
    ).decode()
    for name, f in functions.items()
}))
"""


def _hlo_proto(module: bytes) -> bytes:
    """An HloProto (as XLA dumps a program) holding the HloModuleProto JAX gives."""
    length, size = b"", len(module)
    while True:
        length += bytes([(size & 0x7F) | (0x80 if size > 0x7F else 0)])
        size >>= 7
        if not size:
            break
    return b"\x0a" + length + module  # field 1 (hlo_module), length-delimited


def test_the_cpus_own_forms_are_named_and_every_platforms_are_not(tmp_path):
    env = {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    programs = run_python(PROGRAMS, tmp_path, env=env)
    found = {
        name: {form.what for form in cpu_forms(1, _hlo_proto(base64.b64decode(hlo)))}
        for name, hlo in programs.items()
    }
    assert found["root"] == found["nested"] == found["beside_a_cond"] == {CHOSEN_BRANCH}
    assert found["run_time_cond"] == set() and found["sharded"] == set()
    assert any(what.startswith("custom call lapack_") for what in found["inverse"])
    assert cpu_forms(1, b"not a proto") == ()

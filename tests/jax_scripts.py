"""JAX scripts of known sizes, shared by the tests of `tpumem profile` and of
`tpumem.track`."""

# The script counts its own live bytes after every line that changes them.
COUNTS_ITSELF = """
import json
import jax, jax.numpy as jnp, numpy as np

peak = {}
def note():
    # Each buffer once: a shard's array can be a second view of its buffer.
    buffers = {}
    for array in jax.live_arrays():
        for shard in array.addressable_shards:
            key = (shard.device.id, shard.data.unsafe_buffer_pointer())
            buffers[key] = shard.data.nbytes
    for device in jax.devices():
        live = sum(size for (where, _), size in buffers.items() if where == device.id)
        name = f"CPU:{device.id}"
        peak[name] = max(peak.get(name, 0), live)
"""

# 1..4 MiB made, the first freed, then 8 MiB put and 8 MiB made from it: a peak
# of 25 MiB, for a moment.
KNOWN_LINES = """
held = []
for i in range(4):
    held.append(jnp.ones((256 * 1024 * (i + 1),), jnp.float32)); note()  # 1..4 MiB
del held[0]; note()
extra = jax.device_put(np.ones((1024, 2048), np.float32)); note()  # 8 MiB: 17 in all
doubled = extra * 2; note()  # 8 MiB more: 25
del extra, doubled; note()
small = jnp.arange(1000); note()
"""

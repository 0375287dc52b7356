#!/usr/bin/env bash
# Records the JAX adapter's GPU traces that tests/unit/test_gpu_traces.py reads (run on a
# machine with an NVIDIA GPU and jax[cuda]; writes into DIR, default tests/data/gpu):
#   known.tpumem  arrays of known sizes; known.json: what memory_stats() said
#   oom.tpumem    a run that asks for more than a 2% memory fraction holds
#   mlp.tpumem    examples/jax_mlp.py at JAX's default preallocation (75%)
set -uo pipefail
root=$(pwd)
out=$(realpath -m "${1:-tests/data/gpu}")
mkdir -p "$out"
python3 -m pip install -q --no-deps --no-build-isolation --no-index --upgrade --target /tmp/tpumem-site . || exit 1
export PYTHONPATH=/tmp/tpumem-site
work=$(mktemp -d)
cat > "$work/known.py" <<'PY'
import json
import jax
import jax.numpy as jnp
device = jax.devices()[0]
held = [jnp.ones((1024, 256 * (i + 1)), jnp.float32) for i in range(4)]  # 1..4 MiB
del held[0]
extra = jnp.ones((2048, 1024), jnp.float32)  # 8 MiB on top of 9 MiB
extra.block_until_ready()
del extra
product = jax.jit(lambda a: a @ a.T)(held[-1]).block_until_ready()
stats = device.memory_stats()
print(json.dumps({key: stats[key] for key in ("peak_bytes_in_use", "bytes_in_use", "bytes_limit", "pool_bytes") if key in stats}))
PY
cat > "$work/oom.py" <<'PY'
import jax.numpy as jnp
keep = jnp.ones((256, 1024, 1024), jnp.float32).block_until_ready()  # 1 GiB
more = jnp.ones((1024, 1024, 1024), jnp.float32).block_until_ready()  # 4 GiB: past the limit
PY
cd "$work"
python3 -m tpumem profile -o known.tpumem known.py > known.json
XLA_PYTHON_CLIENT_MEM_FRACTION=0.02 python3 -m tpumem profile -o oom.tpumem oom.py > oom.out 2> oom.err
echo "oom exit status $?"
head -c 1500 oom.err
# Not from the checkout: its tpumem/ would shadow the installed one.
python3 -m tpumem profile -o mlp.tpumem "$root/examples/jax_mlp.py" --steps 5 2> mlp.err | tail -2
cd "$root"
tail -40 "$work/mlp.err"
cp "$work"/known.tpumem "$work"/known.json "$work"/oom.tpumem "$work"/mlp.tpumem "$out"/
ls -la "$out"

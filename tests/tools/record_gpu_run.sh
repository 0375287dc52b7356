#!/usr/bin/env bash
# Records a two-process jax.distributed run on one GPU for tests/unit/test_gpu_traces.py
# (run on a machine with an NVIDIA GPU and jax[cuda]; writes into DIR, default
# tests/data/gpu/run): each process under `tpumem profile -o 'run/{host}-{rank}.tpumem'`,
# both on GPU 0 (local_device_ids), each with a 20% memory fraction; rank r keeps
# 8 MiB x (r + 1) on top of 4 MiB. No collectives: two processes on one GPU cannot
# run NCCL's. Each writes what memory_stats() said at its end (rank-R.json).
set -uo pipefail
out=$(realpath -m "${1:-tests/data/gpu/run}")
mkdir -p "$out"
python3 -m pip install -q --no-deps --no-build-isolation --no-index --upgrade --target /tmp/tpumem-site . || exit 1
export PYTHONPATH=/tmp/tpumem-site
work=$(mktemp -d)
cat > "$work/ranks.py" <<'PY'
import json, sys
import jax
port, rank = sys.argv[1], int(sys.argv[2])
jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=rank, local_device_ids=[0])
import jax.numpy as jnp
device = jax.local_devices()[0]
weights = jnp.ones((1024, 1024), jnp.float32).block_until_ready()  # 4 MiB
keep = jnp.zeros((2 * (rank + 1), 1024, 1024), jnp.float32).block_until_ready()  # 8 MiB x (rank + 1)
stats = device.memory_stats()
json.dump({"process_index": jax.process_index(), "process_count": jax.process_count(),
           **{key: stats[key] for key in ("peak_bytes_in_use", "bytes_in_use", "bytes_limit") if key in stats}},
          open(f"rank-{rank}.json", "w"))
PY
cd "$work"
port=$((20000 + RANDOM % 20000))
for rank in 0 1; do
  XLA_PYTHON_CLIENT_MEM_FRACTION=0.2 timeout 300 python3 -m tpumem profile -q -o 'run/{host}-{rank}.tpumem' ranks.py "$port" "$rank" > "out-$rank.txt" 2>&1 &
done
wait
tail -5 out-0.txt out-1.txt
cat rank-0.json rank-1.json; cp out-*.txt "$out"/ 2>/dev/null
ls -la run
python3 -m tpumem report run | head -30
cp run/*.tpumem rank-*.json "$out"/
ls -la "$out"

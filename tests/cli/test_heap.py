"""The CLI keeps the C heap's freed memory for the next arrays (tpumem/heap.py)."""

from __future__ import annotations

from conftest import run_python

# Ten arrays of 3 MB made, freed and made again; the page faults of each round.
ROUNDS = """
import json, resource, sys
import numpy as np
from tpumem.heap import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory()
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
counts = []
for _ in range(2):
    before = faults()
    arrays = [np.ones(3 << 17) for _ in range(10)]
    counts.append(faults() - before)
    del arrays
print(json.dumps(counts))
"""


def test_freed_arrays_serve_the_next_ones_without_new_pages(tmp_path):
    def rounds(mode: str) -> list[int]:
        return run_python(ROUNDS, tmp_path, args=[mode])

    kept = rounds("keep")
    assert kept[0] > 5_000  # 30 MB of new pages
    assert kept[1] < kept[0] // 10
    default = rounds("default")  # glibc's own rules fault the second round in again
    assert default[1] > default[0] // 2

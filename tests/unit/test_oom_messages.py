"""The frameworks' out-of-memory messages, read. The inputs are real: TensorFlow's
exception and its BFC allocator's log from this machine (a 48 MiB limit), JAX's on
an H100 (tests/data/gpu/oom.tpumem), and messages users quoted in public threads for
the TPU formats this machine cannot produce (the thread is named at each)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tpumem.analysis.oom_messages import combine, parse_allocator_log, parse_exception
from tpumem.launch.oom_log import OomLogReader

MiB, GiB = 1 << 20, 1 << 30

TF_EXCEPTION = (
    "ResourceExhaustedError: {{function_node __wrapped__Fill_device_/job:localhost/replica:0/"
    "task:0/device:CPU:0}} OOM when allocating tensor with shape[1024,2304] and type float on "
    "/job:localhost/replica:0/task:0/device:CPU:0 by allocator bfc_cpu_allocator_for_gpu "
    "[Op:Fill] name: "
)
BFC_LOG = """\
W0000 00:00:1795456706.321396   13704 bfc_allocator.cc:502] Allocator (bfc_cpu_allocator_for_gpu) ran out of memory trying to allocate 9.00MiB (rounded to 9437184)requested by op Fill
Limit:                        48.00MiB
InUse:                        46.00MiB
MaxInUse:                     46.00MiB
NumAllocs:                          17
MaxAllocSize:                 11.00MiB
LargestFreeBlock:                   0B"""  # noqa: E501
JAX_GPU = (
    "JaxRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 4.00GiB with "
    "allocator GPU_0_bfc on device 0. [tf-allocator-allocation-error=''] "
    "[executable_name='jit_broadcast_in_dim']"
)
# huggingface/diffusers#8358 (JAX on a TPU v3-8)
JAX_TPU = (
    "XlaRuntimeError: RESOURCE_EXHAUSTED: Error allocating device buffer: Attempting to "
    "allocate 4.39G. That was not possible. There are 2.30G free.; (0x0x0_HBM0)"
)
# pytorch/xla#8020
TORCH_XLA_TPU = (
    "RuntimeError: Bad StatusOr access: RESOURCE_EXHAUSTED: Error allocating device buffer: "
    "Attempting to allocate 196.00M. That was not possible. There are 134.44M free.; "
    "(1x0x0_HBM0): while running replica 0 and partition 0 of a replicated computation"
)
# kingoflolz/mesh-transformer-jax#237
OLD_TPU = (
    "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Failed to allocate request "
    "for 32.00MiB (33554432B) on device ordinal 0: while running replica 0"
)
# erfanzar/EasyDeL#166 (a v4-32), cut after its first allocation
TPU_COMPILE = """\
XlaRuntimeError: RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space hbm. Used 63.80G of 30.75G hbm. Exceeded hbm capacity by 33.05G.

Total hbm usage >= 65.05G:
    reserved          1.25G
    program          63.80G
    arguments            0B

  Largest program allocations in hbm:

  1. Size: 2.00G
     Operator: op_name="jit(train_step)/jit(main)/attention/dot_general" source_file="/src/attention_module.py" source_line=1059
     Shape: f32[32,4096,4096]{1,2,0:T(8,128)}
     Unpadded size: 2.00G
     Allocation type: HLO temp
     ==========================
"""  # noqa: E501


def test_tensorflow_says_shape_type_device_and_op():
    found = parse_exception(TF_EXCEPTION)
    assert found is not None and found.phase == "run"
    assert (found.shape, found.dtype, found.device, found.op) == (
        "[1024,2304]",
        "float",
        "CPU:0",
        "Fill",
    )
    assert found.allocator == "bfc_cpu_allocator_for_gpu" and found.requested_bytes is None


def test_the_bfc_log_says_the_bytes():
    found = parse_allocator_log(BFC_LOG)
    assert found is not None
    assert (found.requested_bytes, found.rounded_bytes) == (9 * MiB, 9437184)
    # Its stats say "LargestFreeBlock: 0B" unless told to track it: not a figure.
    assert (found.limit_bytes, found.in_use_bytes, found.largest_free_block_bytes) == (
        48 * MiB,
        46 * MiB,
        None,
    )
    assert found.op == "Fill" and found.allocator == "bfc_cpu_allocator_for_gpu"
    both = combine(parse_exception(TF_EXCEPTION), found)
    assert (both.shape, both.rounded_bytes, both.in_use_bytes) == ("[1024,2304]", 9437184, 46 * MiB)


def test_the_chunk_dump_gives_the_exact_bytes():
    """A whole dump (TensorFlow on this machine, 40 MiB limit, tensors dropped so
    the free memory was in pieces): the reader sums the chunks as they pass; its
    stats round 21 MiB + 256 B to 21.00MiB, the chunks do not."""
    dump = Path(__file__).parent.parent / "data" / "bfc_oom_dump.txt"
    reader = OomLogReader()
    for line in dump.read_bytes().splitlines():
        reader.feed(line)
    (log,) = reader.finish()
    assert (log.chunks_in_use_bytes, log.largest_free_chunk_bytes) == (21 * MiB + 256, 11 * MiB)
    assert "Chunk" not in log.text and "Total size in pool" in log.text
    found = parse_allocator_log(log.text, log.chunks_in_use_bytes, log.largest_free_chunk_bytes)
    assert found is not None
    assert (found.rounded_bytes, found.limit_bytes) == (13 * MiB, 40 * MiB)
    assert found.in_use_bytes == 21 * MiB + 256
    # An 11 MiB free chunk, and 6 MiB the limit left to grow by: 11 MiB at most.
    assert found.largest_free_block_bytes == 11 * MiB


@pytest.mark.parametrize(
    ("text", "requested", "free", "device", "op"),
    [
        (JAX_GPU, 4 * GiB, None, "GPU:0", "jit_broadcast_in_dim"),
        (JAX_TPU, round(4.39 * GiB), round(2.30 * GiB), None, None),
        (TORCH_XLA_TPU, 196 * MiB, round(134.44 * MiB), None, None),
        (OLD_TPU, 33554432, None, None, None),
    ],
)
def test_xla_runtime_messages(text, requested, free, device, op):
    found = parse_exception(text)
    assert found is not None and found.phase == "run"
    assert (found.requested_bytes, found.free_bytes, found.device, found.op) == (
        requested,
        free,
        device,
        op,
    )


def test_xla_tpu_compile_says_what_the_program_needs_and_its_largest_allocations():
    found = parse_exception(TPU_COMPILE)
    assert found is not None and found.phase == "compile"
    assert found.requested_bytes == round(63.80 * GiB) and found.limit_bytes == round(30.75 * GiB)
    (largest,) = found.largest
    assert largest.bytes == 2 * GiB and largest.shape == "f32[32,4096,4096]{1,2,0:T(8,128)}"
    assert largest.source == "/src/attention_module.py:1059"
    assert largest.op == "jit(train_step)/jit(main)/attention/dot_general"


def test_other_errors_are_not_out_of_memory():
    assert parse_exception("ValueError: shapes (3,) and (4,) not aligned") is None
    assert parse_exception("") is None
    assert parse_allocator_log("Allocator (x) ran a marathon") is None

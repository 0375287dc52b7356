"""Why a profiled run recorded nothing, in one line (profile's and compare's)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tpumem.launch.launcher import ProfileOutcome


def unrecorded_line(target: str, outcome: ProfileOutcome) -> str:
    """Why a run recorded nothing, in one line: the script ended before it imported
    a framework (a syntax error, a crash), or imported none that tpumem records."""
    said = outcome.unrecorded or {}
    frameworks = "jax, tensorflow, torch_xla"
    if outcome.returncode and not said.get("imported") and said.get("torch_cuda") is None:
        how = said.get("how") or f"ended with status {outcome.returncode}"
        return f"{target} {how} before it imported a framework: nothing was recorded"
    if said.get("wanted"):
        nothing = f"{target} never imported {said['wanted']} (--framework): nothing was recorded"
    elif said.get("keras_backend") and said.get("imported"):
        nothing = (
            f"{target} imported {' and '.join(said['imported'])}, but Keras's backend is "
            f"{said['keras_backend']}, which it never imported: nothing was recorded "
            "(--framework tensorflow records TensorFlow)"
        )
    elif said.get("torch_cuda") is False:
        nothing = (
            f"{target} ran PyTorch without a CUDA device (none here, or the script kept to "
            "the CPU): nothing was recorded; tpumem reads PyTorch's memory on CUDA GPUs "
            "(from its snapshots: tpumem import) and records PyTorch/XLA"
        )
    elif said.get("torch_cuda"):
        nothing = (
            f"{target} ran PyTorch on CUDA, which `tpumem profile` does not record yet: save "
            "torch.cuda.memory._dump_snapshot('run.pickle') after "
            "torch.cuda.memory._record_memory_history() and `tpumem import run.pickle`; "
            "nothing was recorded"
        )
    else:
        nothing = (
            f"{target} imported none of the frameworks tpumem profiles ({frameworks}): "
            "nothing was recorded"
        )
    if outcome.returncode:
        how = said.get("how") or f"ended with status {outcome.returncode}"
        return f"{nothing}; it {how} first"
    return nothing

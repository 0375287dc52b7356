"""Why a profiled run recorded nothing, in one line (profile's and compare's)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tpumem.adapters.import_watch import FRAMEWORKS

if TYPE_CHECKING:
    from tpumem.launch.launcher import ProfileOutcome


def unrecorded_line(target: str, outcome: ProfileOutcome) -> str:
    """Why a run recorded nothing, in one line: the script ended before it imported
    a framework (a syntax error, a crash), or imported none that tpumem records."""
    said = outcome.unrecorded or {}
    frameworks = ", ".join(FRAMEWORKS)
    if outcome.returncode and not said.get("imported"):
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
    else:
        nothing = (
            f"{target} imported none of the frameworks tpumem profiles ({frameworks}): "
            "nothing was recorded"
        )
    if outcome.returncode:
        how = said.get("how") or f"ended with status {outcome.returncode}"
        return f"{nothing}; it {how} first"
    return nothing

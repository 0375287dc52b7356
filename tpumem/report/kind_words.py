"""The words for each kind of memory the analysis keys (analysis/kinds.py), in the
report's first table, the comparison and the page alike; and the sentence that
says which kind explains most of the difference between runs."""

from __future__ import annotations

from tpumem.analysis.comparison import Comparison
from tpumem.analysis.kinds import KindBytes
from tpumem.units import format_bytes

KIND_HEADERS = ("bytes", "share", "kind", "how it is known")
KIND_WORDS = {
    "parameters": "parameters",
    "gradients": "gradients",
    "optimizer_state": "optimizer state",
    "activations": "activations and temporaries",
    "inputs": "inputs",
    "other_state": "other state carried between steps",
    "overhead": "framework overhead",
    "not_told": "other arrays",
    "unattributed": "unattributed",
}


def difference_sentence(comparison: Comparison) -> str | None:
    """The kind whose bytes differ most between a run and the first, in one
    sentence: "Most of the difference is activations and temporaries: jax holds
    44.8 MiB where tensorflow holds 40.7 MiB (4.1 MiB more)"."""
    names = comparison.names
    if len(names) < 2 or not comparison.kinds:
        return None
    top = comparison.kinds[0]
    run = max(range(1, len(names)), key=lambda i: abs(top.change[i]))
    change = top.change[run]
    if not change:
        return None
    more = "more" if change > 0 else "less"
    return (
        f"Most of the difference is {KIND_WORDS[top.kind]}: {names[run]} holds "
        f"{format_bytes(top.bytes[run])} where {names[0]} holds {format_bytes(top.bytes[0])} "
        f"({format_bytes(abs(change))} {more})"
    )


def kinds_rows(kinds: tuple[KindBytes, ...], total: int) -> list[tuple[str, str, str, str]]:
    """A ledger's rows (KIND_HEADERS): each kind's bytes and share of `total`."""
    share = [share_words(k.bytes / (total or 1)) for k in kinds]
    return [
        (format_bytes(k.bytes), s, KIND_WORDS[k.kind], "; ".join(k.how))
        for k, s in zip(kinds, share, strict=True)
    ]


def share_words(share: float) -> str:
    return "<1%" if 0 < share < 0.005 else f"{share:.0%}"

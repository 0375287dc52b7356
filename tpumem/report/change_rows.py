"""What to change, in words: each change the analysis found (analysis/changes.py)
as one sentence that starts with its figure and names what to set or edit."""

from __future__ import annotations

from tpumem.analysis.changes import (
    BATCH,
    BF16,
    DONATE,
    GROWTH,
    HEADROOM,
    LARGER,
    MOMENTS,
    PADDING,
    POOL,
    REMAT,
    SEARCH,
    Change,
)
from tpumem.report.shorten import op_tail
from tpumem.trace.framework_words import FrameworkWords
from tpumem.trace.tpu_rows import SHARDED_OVER
from tpumem.units import format_bytes

CHANGES_TITLE = "What to change"

# Keras' own words, whatever its backend: a run whose batch Keras' fit (or
# evaluate, predict) set keeps the batch its optimizer sees with this.
_KERAS_ACCUMULATE = "the Keras optimizer's gradient_accumulation_steps=2"
_NO_WORDS = FrameworkWords()


def change_lines(
    changes: tuple[Change, ...], words: FrameworkWords | None
) -> list[tuple[str, str, str]]:
    """(figure, sentence, how the figure was obtained) for each change, in the
    analysis' order, in the framework's words (as the trace carries them)."""
    said = words or _NO_WORDS
    return [(_figure(c), _sentence(c, said), f"{c.known}: {c.how}") for c in changes]


def _figure(change: Change) -> str:
    if change.key == SEARCH and change.before_bytes is None:
        return "refused"
    if change.key in (SEARCH, LARGER) and change.before_bytes is not None:
        return f"{format_bytes(change.before_bytes)}/chip"
    if change.key == LARGER:
        return "no larger"
    if change.key == GROWTH:
        return f"+{format_bytes(change.bytes)}/step"
    return format_bytes(change.bytes)


def _cost(change: Change) -> str:
    """What recomputing costs, as XLA's cost analysis counts it."""
    if change.flops is None or not change.flops_before:
        return ""
    more = change.flops / change.flops_before - 1
    return (
        f" Its cost: {change.flops / 1e12:,.2f} TFLOP a chip a step, against "
        f"{change.flops_before / 1e12:,.2f} as written ({more:+.0%}; XLA's counts, as written "
        "where it compiled the program to show what fills it)."
    )


def _sentence(change: Change, words: FrameworkWords) -> str:
    if change.key == SEARCH:
        changed = change.ops[0] if change.ops else "changed"
        left = (
            "a larger slice"
            if SHARDED_OVER in changed
            else "a larger slice, with its state sharded over the chips"
        )
        if change.before_bytes is None:
            return (
                f"On {change.topology}, XLA:TPU refused {change.program}, and still refuses it "
                f"{changed}: it needs {left}."
            )
        fits = change.pool_bytes is not None and change.before_bytes <= change.pool_bytes
        verdict = "it fits" if fits else f"still over, with what the script holds beside it: {left}"
        return (
            f"On {change.topology}, XLA:TPU refused {change.program}; {changed}, it compiles "
            f"and a chip needs {format_bytes(change.before_bytes)}, of the "
            f"{format_bytes(change.pool_bytes)} there is: {verdict}.{_cost(change)}"
        )
    if change.key == LARGER:
        best, over = change.ops
        refused = f"; at {over.partition(',')[0]} it does not fit" if over else ""
        if change.before_bytes is None:
            return (
                f"On {change.topology}, {change.program} fits, and at {over} it does not: "
                "its batch is the largest of the doublings that fits."
            )
        return (
            f"On {change.topology}, {change.program} also compiles at {best}: a chip needs "
            f"{format_bytes(change.before_bytes)} of the {format_bytes(change.pool_bytes)} "
            f"there is{refused or ' (the largest tried)'}: fewer steps an epoch."
        )
    if change.key == DONATE:
        names = ", ".join(change.names) or "its arguments"
        donate = (
            f"jax.jit(..., donate_argnames={_tuple(change.names)})"
            if change.names
            else "jax.jit(..., donate_argnums=...)"
        )
        return (
            f"{change.program} returns new arrays of the shapes of {names} while those stay "
            f"live: {format_bytes(change.bytes)} held twice at the peak. Donate them "
            f"({donate}) and its outputs reuse their memory."
        )
    if change.key == REMAT:
        ops = ", ".join(dict.fromkeys(op_tail(op) for op in change.ops[:4]))
        how = words.remat or "rematerialization (recomputing in the backward pass)"
        where = f" on {change.topology}" if change.topology else ""
        return (
            f"{change.line} keeps forward values ({ops}) live at {change.program}'s peak"
            f"{where} for the backward pass: {how} around it recomputes them there, up to "
            f"{format_bytes(change.bytes)} less at the peak."
        )
    if change.key == BF16:
        names = ", ".join(change.names)
        return (
            f"On {change.topology}, {change.program} takes {names} as float32: "
            f"{format_bytes(change.before_bytes)} a chip; in bfloat16, "
            f"{format_bytes(change.bytes)} less (keep an f32 master copy where the optimizer "
            "needs one)."
        )
    if change.key == MOMENTS:
        one = words.one_moment_optimizer or "SGD with momentum"
        return (
            f"The optimizer keeps two values for each parameter "
            f"({format_bytes(change.before_bytes)} at the peak, about twice the parameters: "
            f"Adam's moments). One that keeps one ({one}) holds "
            f"{format_bytes(change.bytes)} less; it trains differently, so check the loss."
        )
    if change.key == BATCH:
        where = (
            f"model.{change.names[0]}(..., batch_size=...)" if change.names else words.batch or ""
        )
        keep = _KERAS_ACCUMULATE if change.names else words.accumulate
        said = (
            f"Half the batch{f' ({where})' if where else ''}: the activations, "
            f"{format_bytes(change.before_bytes)} at the peak, scale with it; at half the "
            f"batch they hold about {format_bytes(change.bytes)} less."
        )
        if change.accumulate:
            said += " The optimizer then sees half the examples a step" + (
                f"; to keep the batch it sees, accumulate two halves ({keep})." if keep else "."
            )
        return said
    if change.key == PADDING:
        return (
            f"On {change.topology}, {change.names[0]} buffers at {change.program}'s peak take "
            f"{format_bytes(change.before_bytes)}, {format_bytes(change.bytes)} of it XLA:TPU's "
            "tile padding: dimensions that are multiples of 128 (the last) and 8 (the one "
            "before it) pad least."
        )
    if change.key == GROWTH:
        made = (
            f"{change.line or 'A line with no stack recorded'} makes arrays that stay, "
            f"{format_bytes(change.start_bytes)} to {format_bytes(change.end_bytes)}"
        )
        kept = change.kept
        if kept is None:
            return (
                f"{made}: something holds every step's arrays (a list, a cache, a metric "
                "kept on the device)."
            )
        at = f", filled at {kept.line}" if kept.line else ""
        return (
            f"{made}: {kept.name} ({kept.container}{at}) held {kept.arrays} device arrays "
            "when the script ended. Keep a Python number (float(x)) or a host copy "
            f"({words.host_copy or 'a copy in host memory'}) instead, or only the "
            "last few."
        )
    if change.key == POOL:
        setting = " or ".join(change.names) or "its preallocation setting"
        return (
            f"The allocator held {format_bytes(change.pool_bytes)}, "
            f"{format_bytes(change.bytes)} more than the run used at its peak: {setting} "
            "holds it to the need (for other processes on the device; the run needs no more)."
        )
    if change.key == HEADROOM:
        return (
            f"{format_bytes(change.bytes)} of the free memory at the peak was in pieces "
            f"no larger request could use (fragmentation): {change.names[0]} replaces the "
            "allocator whose free memory fragmented."
        )
    return change.key


def _tuple(names: tuple[str, ...]) -> str:
    quoted = ", ".join(repr(n) for n in names)
    return f"({quoted},)" if len(names) == 1 else f"({quoted})"

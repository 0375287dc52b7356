"""Long names cut to a width where what tells them apart stays: a path from the
left (its file and line are at the end), an op's name to its last parts (the
scopes before them repeat from op to op)."""

from __future__ import annotations

import re

ELLIPSIS = "…"


def from_left(text: str, width: int) -> str:
    """`text` in `width` columns, cut from the left, at a `/` where one is near."""
    if len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    tail = text[len(text) - (width - 1) :]
    slash = tail.find("/")
    if 0 <= slash < len(tail) - 1 and len(tail) - slash - 1 >= width // 2:
        tail = tail[slash:]
    return ELLIPSIS + tail


def last_parts(name: str, width: int) -> str:
    """An op's name (`scope/scope/op`) in `width` columns: as many of its last
    parts as fit, after an ellipsis; the last part cut from the left where even
    it does not fit."""
    if len(name) <= width:
        return name
    parts = name.split("/")
    kept = parts[-1]
    for part in reversed(parts[:-1]):
        if len(part) + 1 + len(kept) + 2 > width:
            break
        kept = f"{part}/{kept}"
    if len(kept) + 2 > width:
        return from_left(parts[-1], width)
    return f"{ELLIPSIS}/{kept}"


# JAX names an op by the transformations it is under (`transpose(jvp(...))`),
# which say its pass, not what it is.
_TRANSFORMED = re.compile(r"^(?:jvp|transpose|jit|pjit|vmap|remat|checkpoint|shard_map)\((.*)\)$")


def op_tail(name: str) -> str:
    """An op's last part (`exp` of `jvp(jit(log_softmax))/exp`), out of JAX's
    transformations (`log_softmax` of `transpose(jvp(jit(log_softmax)))`)."""
    tail = name.rsplit("/", 1)[-1] or name
    while (inner := _TRANSFORMED.match(tail)) is not None and inner[1]:
        tail = inner[1]
    return tail


def at_a_word(text: str, width: int) -> str:
    """Words in `width` columns, cut after the last whole word that fits, before an
    ellipsis: never mid-word (`temporaries: exp, reduc…` reads as another op)."""
    if len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    head = text[: width - 1]
    space = head.rfind(" ")
    if space > 0:
        head = head[:space].rstrip(",;:(")
    return head + ELLIPSIS

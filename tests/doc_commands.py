"""The commands README.md and docs/ show, and what they show of each one's
output, read out of their fenced blocks: a line `$ command` (continued by a
trailing backslash) and the lines under it up to the next `$`, the block's end,
or a line `...` (what the page leaves out). A figure shown must be the figure
the command prints, within TOLERANCE (or what a comment right above the block
states and says why: `<!-- tour: within 10%: ... -->`); times (`3.888 s`) are
the machine's."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

TOLERANCE = 0.02  # of each size, share and count a page shows
ELIDED = "..."

# A figure: a number, with its unit where one follows (sizes, shares, seconds).
_FIGURE = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?(?:\s?(?:B|KiB|MiB|GiB|TiB|%|s)\b)?")
_SCALE = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
_BOX = re.compile(r"[│┃┆┇┊┋║]")


_WITHIN = re.compile(r"<!-- tour: within (\d+)%: .+ -->")


@dataclass
class Shown:
    where: str  # "README.md:92"
    command: str
    tolerance: float = TOLERANCE
    output: list[str] = field(default_factory=list)


def shown_commands(path: Path) -> list[list[Shown]]:
    """Each fenced block's commands, in the page's order (blocks without one left out)."""
    blocks: list[list[Shown]] = []
    block: list[Shown] = []
    inside = continued = False
    tolerance, above = TOLERANCE, ""
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.startswith("```"):
            if inside and block:
                blocks.append(block)
            if not inside:
                stated = _WITHIN.fullmatch(above.strip())
                tolerance = int(stated.group(1)) / 100 if stated else TOLERANCE
            inside, block, continued = not inside, [], False
        elif not inside:
            above = line if line.strip() else above
            continue
        elif continued:
            block[-1].command += " " + line.strip().removesuffix("\\").strip()
            continued = line.rstrip().endswith("\\")
        elif line.startswith("$ "):
            command = line[2:].rstrip()
            continued = command.endswith("\\")
            command = command.removesuffix("\\").strip()
            block.append(Shown(f"{path.name}:{number}", command, tolerance))
        elif block:
            block[-1].output.append(ELIDED if line.strip() == ELIDED else line)
    return blocks


def shape(line: str) -> str:
    """A line less its figures and its layout: what matches it across runs."""
    return " ".join(_FIGURE.sub("#", _BOX.sub(" ", line)).split())


def figures(line: str) -> list[tuple[float, str]]:
    found = []
    for match in _FIGURE.finditer(_BOX.sub(" ", line)):
        text = match.group(0)
        number = re.match(r"[-+]?[\d,]*(?:\.\d+)?", text.replace(" ", ""))
        unit = text[number.end() :].strip() if number else ""
        value = float(number.group(0).replace(",", "")) if number and number.group(0) else 0.0
        found.append((value * _SCALE.get(unit, 1), unit))
    return found


def mismatch(shown: str, printed: list[str], tolerance: float = TOLERANCE) -> str | None:
    """Why no printed line is the shown one (its words, and its figures within
    `tolerance`, times aside); None where one is."""
    same = [line for line in printed if shape(line) == shape(shown)]
    if not same:
        return f"no printed line reads {shown.strip()!r}"
    want = figures(shown)
    for line in same:
        got = figures(line)
        pairs = zip(want, got, strict=True)
        if all(unit == "s" or _close(a, b, tolerance) for (a, unit), (b, _) in pairs):
            return None
    return f"{shown.strip()!r} printed as {same[0].strip()!r}"


def _close(shown: float, printed: float, tolerance: float) -> bool:
    return abs(shown - printed) <= tolerance * max(abs(shown), abs(printed))

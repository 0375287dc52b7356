"""PyTorch/XLA's own account of its graphs, read from its debug output.

PyTorch/XLA exposes no Python API for a compiled graph's memory. With
`PT_XLA_DEBUG_LEVEL=2` it writes, for every compilation, the graph's hash and a
"Post Compilation Analysis" (graph input, output, aliased input and intermediate
sizes, and the compiled program's size, from XLA's own memory analysis of the
executable), and for every execution the hash of the graph that ran and why it
ran. `PT_XLA_DEBUG_FILE` sends all of it to a file, which this module reads as
it grows: each block is written whole and flushed.

The sizes are printed in GiB with six decimals, so they are known to +-537
bytes (half of 1e-6 GiB); the trace records them with that precision.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

GIB = 1 << 30
PRECISION_BYTES = GIB // 2_000_000  # half the last printed digit: 536 bytes
LEVEL_VARIABLE = "PT_XLA_DEBUG_LEVEL"
FILE_VARIABLE = "PT_XLA_DEBUG_FILE"

_SIZES = {
    "Graph input size": "argument_bytes",
    "Graph output size": "output_bytes",
    "Aliased Input size": "alias_bytes",
    "Intermediate tensor size": "temp_bytes",
    "Compiled program size": "generated_code_bytes",
}
_SIZE_LINE = re.compile(r"^Post Compilation Analysis: (.+?): ([0-9.]+) GB\s*$")
_HASH_LINE = re.compile(r"^(\w+) Analysis:\s+Graph Hash: ([0-9a-f]+)\s*$")
_FRAME_LINE = re.compile(r"^(\w+) Analysis:\s+(\S+) \((.+):(\d+)\)\s*$")
_END = "Analysis: " + "=" * 80


@dataclass(slots=True)
class Graph:
    """A compiled graph: its hash and XLA's memory analysis of it."""

    hash: str
    sizes: dict[str, int] = field(default_factory=dict)
    frames: list[str] = field(default_factory=list)  # file:line, innermost first


@dataclass(slots=True)
class _Block:
    kind: str  # Compilation, Post Compilation, Execution
    lines: list[str] = field(default_factory=list)


class DebugLog:
    """Reads the debug file as it grows: new graphs and new executions."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = ""
        self._block: _Block | None = None
        self._compiling: Graph | None = None  # compiled, its sizes not yet read
        self.graphs: dict[str, Graph] = {}

    def read(self) -> tuple[list[Graph], list[str]]:
        """Graphs compiled, and the hashes of graphs run, since the last call."""
        try:
            with open(self.path, encoding="utf-8", errors="replace") as handle:
                handle.seek(self._offset)
                text = handle.read()
                self._offset = handle.tell()
        except OSError:
            return [], []
        compiled: list[Graph] = []
        executed: list[str] = []
        text, self._partial = self._partial + text, ""
        lines = text.split("\n")
        self._partial = lines.pop()  # a line still being written, or ""
        for line in lines:
            self._line(line, compiled, executed)
        return compiled, executed

    def _line(self, line: str, compiled: list[Graph], executed: list[str]) -> None:
        if self._block is None:
            for kind in ("Post Compilation", "Compilation", "Execution"):
                if line.startswith(f"{kind} Analysis: ="):
                    self._block = _Block(kind)
                    return
            return
        if line.startswith(self._block.kind + " " + _END) and len(self._block.lines) > 1:
            block, self._block = self._block, None
            self._finish(block, compiled, executed)
            return
        self._block.lines.append(line)

    def _finish(self, block: _Block, compiled: list[Graph], executed: list[str]) -> None:
        if block.kind == "Post Compilation":
            graph, self._compiling = self._compiling, None
            if graph is None:
                return
            for line in block.lines:
                match = _SIZE_LINE.match(line)
                if match and match.group(1) in _SIZES:
                    graph.sizes[_SIZES[match.group(1)]] = round(float(match.group(2)) * GIB)
            self.graphs[graph.hash] = graph
            compiled.append(graph)
            return
        hashes = [m.group(2) for m in map(_HASH_LINE.match, block.lines) if m]
        if not hashes:
            return
        if block.kind == "Compilation":
            matches = [m for m in map(_FRAME_LINE.match, block.lines) if m]
            frames = [f"{m.group(3)}:{m.group(4)}" for m in matches]
            self._compiling = Graph(hashes[0], frames=frames)
        else:
            executed.append(hashes[0])

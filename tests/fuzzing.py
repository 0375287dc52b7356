"""Mutating real traces and profiles, and running tpumem on each mutant.

`mutants()` makes seeded mutants of a file: bit flips, cuts, inserted and deleted
bytes, 32- and 64-bit boundary values written over Arrow's lengths and offsets,
protobuf varints made huge. `Campaign` feeds them to a worker process that runs
the real CLI entry point (`tpumem.cli.main`) on each one in turn, and judges the
outcome: exit 0 with a valid report, or exit 2 with one line. A worker that dies
(a crash inside a library) or stops answering (a hang) is a finding too; the next
worker goes on from the mutant after.

Used by tests/slow/test_fuzz.py (a few hundred mutants per run) and by
tests/tools/fuzz_campaign.py (thousands, with counts per outcome).
"""

from __future__ import annotations

import json
import os
import random
import select
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

BOUNDARIES = (
    0,
    1,
    0x7F,
    0x80,
    0xFF,
    0x7FFF,
    0xFFFF,
    0x7FFFFFFF,
    0x80000000,
    0xFFFFFFFF,
    0x7FFFFFFFFFFFFFFF,
    0x8000000000000000,
    0xFFFFFFFFFFFFFFFF,
)


def _flip(data: bytearray, rng: random.Random) -> str:
    for _ in range(rng.randint(1, 8)):
        at = rng.randrange(len(data))
        data[at] ^= 1 << rng.randrange(8)
    return "bit flips"


def _cut(data: bytearray, rng: random.Random) -> str:
    del data[rng.randrange(len(data)) :]
    return "cut"


def _insert(data: bytearray, rng: random.Random) -> str:
    at = rng.randrange(len(data) + 1)
    data[at:at] = rng.randbytes(rng.randint(1, 64))
    return "inserted bytes"


def _delete(data: bytearray, rng: random.Random) -> str:
    at = rng.randrange(len(data))
    del data[at : at + rng.randint(1, 64)]
    return "deleted bytes"


def _boundary(data: bytearray, rng: random.Random) -> str:
    width = rng.choice((4, 8))
    at = rng.randrange(0, max(1, len(data) - width), 4)  # Arrow aligns its fields
    value = rng.choice(BOUNDARIES) & ((1 << (8 * width)) - 1)
    data[at : at + width] = value.to_bytes(width, "little")
    return "boundary value"


def _varint(data: bytearray, rng: random.Random) -> str:
    at = rng.randrange(len(data))
    data[at : at + rng.randint(0, 2)] = b"\xff" * rng.randint(5, 10) + b"\x01"
    return "huge varint"


MUTATORS = (_flip, _cut, _insert, _delete, _boundary, _varint)


def mutants(data: bytes, count: int, seed: int) -> list[tuple[str, bytes]]:
    """(how it was made, bytes), `count` of them, the same for the same seed."""
    rng = random.Random(seed)
    made = []
    for _ in range(count):
        mutant = bytearray(data)
        kinds = [rng.choice(MUTATORS)(mutant, rng) for _ in range(rng.choice((1, 1, 1, 2, 3)))]
        if not mutant:
            mutant = bytearray(b"\x00")
        made.append(("+".join(kinds), bytes(mutant)))
    return made


@dataclass
class Outcome:
    path: str
    how: str
    verdict: str  # "report", "refused", or what went wrong
    detail: str = ""


@dataclass
class Campaign:
    """Runs `tpumem ARGS` in a worker for each (path, how, args), one at a time."""

    timeout_s: float = 30.0
    outcomes: list[Outcome] = field(default_factory=list)

    def run(self, jobs: list[tuple[str, str, list[str]]]) -> list[Outcome]:
        pending = list(jobs)
        while pending:
            worker = subprocess.Popen(
                [sys.executable, __file__, "--worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                bufsize=1,
            )
            try:
                while pending:
                    path, how, args = pending[0]
                    assert worker.stdin is not None and worker.stdout is not None
                    worker.stdin.write(json.dumps(args) + "\n")
                    worker.stdin.flush()
                    ready, _, _ = select.select([worker.stdout], [], [], self.timeout_s)
                    line = worker.stdout.readline() if ready else ""
                    pending.pop(0)
                    if not ready:
                        self.outcomes.append(Outcome(path, how, "hang", f"> {self.timeout_s} s"))
                        break
                    if not line:
                        code = worker.wait()
                        self.outcomes.append(Outcome(path, how, "crash", f"worker exit {code}"))
                        break
                    verdict, detail = json.loads(line)
                    self.outcomes.append(Outcome(path, how, verdict, detail))
            finally:
                worker.kill()
                worker.wait()
        return self.outcomes

    def counts(self) -> Counter[str]:
        return Counter(outcome.verdict for outcome in self.outcomes)

    def failures(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.verdict not in ("report", "refused")]


def _strict_json(text: str) -> object:
    def refuse(constant: str) -> object:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def judge(args: list[str], code: int, out: str, err: str, escaped: str | None) -> tuple[str, str]:
    """What a user would make of one run."""
    if escaped is not None:
        return "traceback", escaped
    lines = err.strip().splitlines()
    if code == 2:
        if len(lines) == 1 and lines[0].startswith("tpumem: error: "):
            return "refused", lines[0]
        return "not one line", err[-500:]
    if code != 0:
        return f"exit {code}", err[-500:]
    if "json" in args:
        try:
            _strict_json(out)
        except ValueError as error:
            return "invalid json", str(error)
    elif "report" in args and not out.strip():
        return "empty report", ""
    if any(char in out for char in "\x1b\x07\x9b"):
        return "terminal escape in the report", repr(out[:200])
    return "report", ""


def _worker() -> None:
    """Reads argument lists, one JSON line each; answers [verdict, detail]."""
    import contextlib
    import io
    import traceback

    from tpumem.cli import main

    answer = sys.stdout
    for line in sys.stdin:
        args = json.loads(line)
        out, err = io.StringIO(), io.StringIO()
        code, escaped = 0, None
        sys.argv = ["tpumem", *args]
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main()
            except SystemExit as stop:
                code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
            except BaseException:  # what a user would see as a traceback
                escaped = traceback.format_exc()[-1500:]
        answer.write(json.dumps(judge(args, code, out.getvalue(), err.getvalue(), escaped)) + "\n")
        answer.flush()


def write_mutants(sources: list[Path], directory: Path, per_source: int, seed: int) -> list:
    """Writes mutants of each source; (path, how, source) for each."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for number, source in enumerate(sources):
        for index, (how, data) in enumerate(
            mutants(source.read_bytes(), per_source, seed + number)
        ):
            path = directory / f"{source.name.split('.')[0]}-{index}{''.join(source.suffixes)}"
            path.write_bytes(data)
            written.append((path, how, source))
    return written


if __name__ == "__main__" and sys.argv[1:] == ["--worker"]:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    _worker()

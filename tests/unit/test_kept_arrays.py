"""The containers a script's globals hold arrays in at its end, and the line
that fills each (adapters/kept_arrays.py), on plain objects standing for arrays:
which container a leak is in is a walk of Python objects, not a framework's."""

from __future__ import annotations

import collections
import os
import textwrap

from tpumem.adapters.kept_arrays import LEAST, kept_arrays

SCRIPT = textwrap.dedent(
    """
    history = []
    metrics = {"loss": []}
    class Trainer: pass
    trainer = Trainer()
    trainer.outputs = collections.deque()
    for step in range(8):
        x = make()
        history.append((x, x))
        metrics["loss"] += [x]
        trainer.outputs.appendleft(x)
    """
)


class Array:
    """Stands for a device array: its id is its buffer's."""

    def __init__(self, number: int) -> None:
        self.number = number


class Trainer:  # (an object of the script's own class: `__main__` below)
    pass


Trainer.__module__ = "__main__"


def test_each_container_and_the_line_that_fills_it(tmp_path, monkeypatch):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    monkeypatch.chdir(tmp_path)
    arrays = [Array(n) for n in range(8)]
    trainer = Trainer()
    trainer.outputs = collections.deque(arrays[:LEAST])
    namespace = {
        "__name__": "__main__",
        "history": [(a, a) for a in arrays],
        "metrics": {"loss": list(arrays), "steps": list(range(8))},
        "trainer": trainer,
        "few": arrays[: LEAST - 1],  # too few to be a pile
        "os": os,  # a module: skipped
    }
    found = kept_arrays(
        namespace,
        str(script),
        lambda v: isinstance(v, Array),
        lambda held: [a.number for a in held],
    )
    by_name = {k.name: k for k in found}
    assert set(by_name) == {"history", "metrics['loss']", "trainer.outputs"}
    assert by_name["history"].arrays == 16 and by_name["history"].line == "train.py:9"
    assert by_name["metrics['loss']"].line == "train.py:10"
    assert by_name["trainer.outputs"].container == "deque"
    assert by_name["trainer.outputs"].line == "train.py:11"
    assert by_name["trainer.outputs"].buffer_ids == (0, 1, 2, 3)
    assert found[0].name == "history"  # largest first


def test_an_unreadable_script_gives_the_containers_without_lines(tmp_path):
    found = kept_arrays(
        {"kept": [Array(n) for n in range(LEAST)]},
        str(tmp_path / "gone.py"),
        lambda v: isinstance(v, Array),
        lambda held: [],
    )
    assert [(k.name, k.line) for k in found] == [("kept", None)]

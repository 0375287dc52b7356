"""How the tour's test reads a page's commands and holds their output to it
(tests/doc_commands.py): continued lines, left-out lines, a stated tolerance,
figures that moved, times that are the machine's."""

from __future__ import annotations

from doc_commands import ELIDED, mismatch, shown_commands

PAGE = """Text.

```
$ tpumem profile -q -o a.tpumem \\
    examples/train.py
$ tpumem report a.tpumem
...
Peak 10.6 MiB on CPU:0 at 9.709 s, step 1 (derived)
```

<!-- tour: within 10%: its ops run on several threads -->
```
$ tpumem compare a b
│ parameters │ 2.0 MiB │
```

```
tpumem export tensorboard a --logdir tb
```
"""


def test_commands_their_output_and_tolerance(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    first, second = shown_commands(page)
    assert [s.command for s in first] == [
        "tpumem profile -q -o a.tpumem examples/train.py",
        "tpumem report a.tpumem",
    ]
    assert first[0].output == [] and first[1].output[0] == ELIDED
    assert (first[1].where, first[1].tolerance) == ("page.md:6", 0.02)
    assert second[0].tolerance == 0.10  # (a block of no `$` line is no command's)


def test_a_figure_that_moved_is_told_a_time_is_not():
    shown = "Peak 10.6 MiB on CPU:0 at 9.709 s, step 1 (derived)"
    assert mismatch(shown, ["Peak 10.6 MiB on CPU:0 at 2.001 s, step 1 (derived)  "]) is None
    assert mismatch(shown, ["Peak 10.7 MiB on CPU:0 at 9.709 s, step 1 (derived)"]) is None
    assert "printed as" in mismatch(shown, ["Peak 11.0 MiB on CPU:0 at 9.709 s, step 1 (derived)"])
    assert "printed as" in mismatch(shown, ["Peak 10.6 MiB on CPU:0 at 9.709 s, step 2 (derived)"])
    assert "no printed line" in mismatch(shown, ["Peak 10.6 MiB on GPU:0 at 9.709 s, step 1"])
    assert mismatch("│ parameters │ 2.0 MiB │", ["│ parameters  │  2.1 MiB │"], 0.10) is None

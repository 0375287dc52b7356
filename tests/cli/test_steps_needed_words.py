"""How many step marks growth needs: `report` and `check` say the same number
(they said 5 and 4, counting marks and steps)."""

from __future__ import annotations

from conftest import run_tpumem
from sample_traces import buffer_rows
from tpumem.analysis.growth import MARKS_NEEDED


def test_report_and_check_name_the_same_step_marks(make_trace):
    path = str(make_trace(buffer_rows()))  # (two step marks)
    report = run_tpumem("report", "--full", "--width", "200", path)
    assert report.returncode == 0, report.stderr
    assert f"not checked: 2 step marks ({MARKS_NEEDED} needed)" in report.stdout
    check = run_tpumem("check", path, "--max-growth", "1MiB")
    said = check.stdout + check.stderr
    assert f"fewer than {MARKS_NEEDED} step marks, so growth across steps" in said
    assert MARKS_NEEDED == 5

"""`tpumem report PROFILE` and `tpumem check PROFILE`: an XSpace profile (a file or
a logdir) reported in one process, with the figures `import` then `report` give."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import assert_one_line_error, run_tpumem

TF_PROFILE = Path(__file__).parent.parent / "data" / "xplane" / "tf_cpu.xplane.pb"


def _figures(text: str) -> dict:
    document = json.loads(text)
    document.pop("path")  # (the profile's, or the imported trace's)
    return document


def test_a_profile_reports_as_its_imported_trace(tmp_path):
    trace = tmp_path / "imported.tpumem"
    assert run_tpumem("import", str(TF_PROFILE), "-o", str(trace)).returncode == 0
    imported = run_tpumem("report", str(trace), "--format", "json")
    direct = run_tpumem("report", str(TF_PROFILE), "--format", "json")
    assert direct.returncode == 0, direct.stderr
    assert json.loads(direct.stdout)["path"] == str(TF_PROFILE)
    assert _figures(direct.stdout) == _figures(imported.stdout)
    text = run_tpumem("report", str(TF_PROFILE))
    assert text.returncode == 0 and f"tpumem report · {TF_PROFILE}" in text.stdout


def test_a_logdir_reports_and_leaves_no_file_behind(tmp_path):
    logdir = tmp_path / "logs"
    run = logdir / "plugins" / "profile" / "2026_11_24_10_00_00"
    run.mkdir(parents=True)
    shutil.copy(TF_PROFILE, run / "vm.xplane.pb")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "tpumem", "report", str(logdir), "--format", "json"],
        capture_output=True,
        text=True,
        env={**os.environ, "TMPDIR": str(scratch)},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["path"] == str(logdir)
    assert list(scratch.iterdir()) == []  # the imported trace went with the process
    assert sorted(p.name for p in run.iterdir()) == ["vm.xplane.pb"]


def test_check_takes_a_profile():
    result = run_tpumem("check", str(TF_PROFILE), "--max-peak", "1B")
    assert result.returncode == 1
    assert "tpumem: breach: CPU:0: peak" in result.stderr
    assert run_tpumem("check", str(TF_PROFILE), "--max-peak", "64GiB").returncode == 0


def test_a_truncated_profile_is_one_line(tmp_path):
    cut = tmp_path / "cut.xplane.pb"
    cut.write_bytes(TF_PROFILE.read_bytes()[: TF_PROFILE.stat().st_size // 2])
    assert_one_line_error(run_tpumem("report", str(cut)), str(cut), "corrupt or truncated")


def test_compare_diff_and_export_take_a_profile_as_report_does(tmp_path):
    """One way in: every command that reads runs reads an XSpace profile as the
    trace `import` makes of it, and leaves no file of the import behind."""
    trace = tmp_path / "imported.tpumem"
    assert run_tpumem("import", str(TF_PROFILE), "-o", str(trace)).returncode == 0
    compared = run_tpumem("compare", str(TF_PROFILE), str(trace), "-f", "json", cwd=tmp_path)
    assert compared.returncode == 0, compared.stderr
    rows = {row["figure"]: row["values"] for row in json.loads(compared.stdout)["rows"]}
    assert rows["Peak in use"][0] == rows["Peak in use"][1] > 0
    diffed = run_tpumem("diff", str(TF_PROFILE), str(trace), "-f", "json", cwd=tmp_path)
    assert diffed.returncode == 0, diffed.stderr
    devices = json.loads(diffed.stdout)["devices"]
    peaks = [d["figures"]["peak"] for d in devices]
    assert peaks and all(p["before"] == p["after"] > 0 for p in peaks)
    logdir = tmp_path / "tb"
    exported = run_tpumem("export", "tensorboard", str(TF_PROFILE), "--logdir", str(logdir))
    assert exported.returncode == 0, exported.stderr
    assert list(logdir.rglob("*.xplane.pb"))
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "imported.tpumem",
        "imported.tpumem.summary.json",
        "tb",
    ]


def _two_host_logdir(tmp_path: Path) -> Path:
    logdir = tmp_path / "logs"
    run = logdir / "plugins" / "profile" / "2026_11_27_10_00_00"
    run.mkdir(parents=True)
    for host in ("hostA", "hostB"):
        shutil.copy(TF_PROFILE, run / f"{host}.xplane.pb")
    return logdir


def test_a_profiles_processes_go_by_the_profiles_name_not_a_scratch_file(tmp_path):
    """A logdir of two hosts, diffed and compared: each process named after the
    logdir and its host; the scratch traces it was imported into never show."""
    logdir = _two_host_logdir(tmp_path)
    diffed = run_tpumem("diff", str(logdir), str(logdir), "--width", "400")
    assert diffed.returncode == 0, diffed.stderr
    title = diffed.stdout.splitlines()[0]
    assert f"{logdir} (host" in title and "tpumem-" not in title, title
    compared = run_tpumem("compare", str(logdir), str(TF_PROFILE), "-f", "json", cwd=tmp_path)
    assert compared.returncode == 0, compared.stderr
    assert "stands for its busiest" in compared.stderr and "tpumem-" not in compared.stderr
    names = json.loads(compared.stdout)["names"]
    assert not any("tpumem-" in name for name in names), names


def test_check_takes_a_profile_as_its_baseline():
    result = run_tpumem("check", str(TF_PROFILE), "--baseline", str(TF_PROFILE))
    assert result.returncode == 0, result.stderr


def test_compare_says_a_directory_without_traces_before_it_runs_a_script(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    script = tmp_path / "train.py"
    script.write_text("open('ran', 'w').close()\n")
    result = run_tpumem("compare", str(empty), str(script), cwd=tmp_path)
    assert_one_line_error(result, "no traces")
    assert not (tmp_path / "ran").exists()

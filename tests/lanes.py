"""The suite's four lanes: every test's lane is decided here, by its folder and
OTHER_LANES, and the lanes without frameworks are held to their word while each
test runs (conftest.py's hooks).

- unit: in the test's own process; it imports no framework and starts no process.
- cli: starts processes (`python -m tpumem` on recorded traces, mostly) in which
  no framework is ever imported.
- slow: as cli, but seconds a test: fuzzing, storage emulators and servers that
  never answer, inputs at the bounds' scale.
- frameworks: runs real frameworks (profile runs, notebooks, the pytest plugin,
  distributed runs, XProf and TensorBoard), and Chromium's pages.

`make test-fast` runs the unit and cli lanes (`pytest -m "unit or cli"`), `make
test` all four. A test file's folder is its lane (tests/unit, ...); a file in no
lane's folder stops the collection; a unit, cli or
slow test that imports a framework, in its own process or in any process it
starts, fails, and so does a unit test that starts a process. A frameworks test
that needs no framework only costs time: put it where it belongs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

UNIT, CLI, SLOW, FRAMEWORKS = "unit", "cli", "slow", "frameworks"
WITHOUT_FRAMEWORKS = (UNIT, CLI, SLOW)

# What those lanes never import. A package's submodules import it first.
FRAMEWORK_PACKAGES = ("jax", "jaxlib", "tensorflow", "keras", "torch", "torch_xla")
TESTS = Path(__file__).resolve().parent

# Each test file's lane is its folder's (tests/unit, tests/cli, tests/slow,
# tests/frameworks; tests/browser, whose pages run Chromium, is the frameworks
# lane). The tests of a file that take another lane are named here, under it.
FOLDERS = {"unit": UNIT, "cli": CLI, "slow": SLOW, "frameworks": FRAMEWORKS, "browser": FRAMEWORKS}
OTHER_LANES: dict[str, dict[str, list[str]]] = {
    "test_capacity.py": {
        CLI: [
            "test_buffer_traces_through_the_command_line",
            "test_check_fails_the_gate_on_a_modeled_failure",
            "test_compare_shows_each_run_at_the_capacity",
            "test_a_capacity_that_is_not_a_size_is_one_clear_line",
        ],
    },
    "test_check.py": {
        UNIT: [
            "test_sizes",
            "test_bad_sizes",
        ],
    },
    "test_compare.py": {
        UNIT: [
            "test_rows_best_ratios_and_kind_differences",
        ],
        FRAMEWORKS: [
            "test_a_script_that_fails_stops_the_comparison_and_keeps_its_trace",
            "test_the_three_frameworks_compared_from_their_scripts",
        ],
    },
    "test_export.py": {
        FRAMEWORKS: [
            "test_scalars_read_back_with_tensorboards_reader",
            "test_three_frameworks_export_and_a_tensorboard_server_serves_them",
        ],
    },
    "test_fit_frontier.py": {
        CLI: [
            "test_sweeps_fit_cannot_make_are_one_line_before_any_compile",
        ],
    },
    "test_follow.py": {
        CLI: [
            "test_follow_refuses_what_takes_one_trace",
            "test_a_run_that_imports_no_framework_is_an_error_followed_or_not",
        ],
    },
    "test_fuzz.py": {
        UNIT: [
            "test_a_damaged_batch_keeps_the_batches_before_it",
            "test_many_small_batches_load_as_few_chunks",
        ],
    },
    "test_gpu_traces.py": {
        CLI: [
            "test_the_gpu_traces_report_and_export_as_any_other",
            "test_a_distributed_run_on_the_gpu_reads_as_one",
        ],
    },
    "test_hostile_inputs.py": {
        SLOW: [
            "test_a_snapshot_whose_addresses_share_a_hash_slot_imports_whole",
            "test_a_program_row_past_the_bound_is_left_out_with_one_warning",
        ],
        UNIT: [
            "test_the_bounds_of_a_shape_and_a_dtype",
            "test_the_best_layout_is_found_without_trying_every_pair",
            "test_the_largest_slices_are_topologies",
            "test_the_analysis_of_many_devices_reads_each_column_a_bounded_number_of_times",
            "test_a_packed_proto_is_read_up_to_the_bound",
        ],
    },
    "test_html.py": {
        UNIT: [
            "test_drawing_points_are_thinned_but_keep_the_peak",
            "test_the_page_says_only_the_words_python_gives_it",
        ],
    },
    "test_imports.py": {
        UNIT: [
            "test_every_package_is_installed",
            "test_follow_boot_watches_the_frameworks_the_import_watch_does",
            "test_the_floors_import_downwards_only",
            "test_the_import_reader_sees_every_form",
            "test_the_launcher_takes_from_the_adapters_their_registry_and_protocol_alone",
            "test_only_the_cli_imports_a_command",
            "test_an_upward_import_is_found_in_any_form",
        ],
    },
    "test_json_schema.py": {
        CLI: [
            "test_a_comparison_keeps_to_its_schema",
            "test_every_json_a_command_writes_keeps_to_its_schema",
        ],
    },
    "test_notebook.py": {
        CLI: [
            "test_tpumem_imported_inside_ipython_shows_its_values",
            "test_a_cell_is_told_only_what_would_work",
        ],
    },
    "test_object_storage.py": {
        FRAMEWORKS: [
            "test_profile_puts_its_trace_and_summary_where_o_says",
            "test_a_followed_run_is_put_there_process_by_process",
        ],
    },
    "test_oom_killed.py": {
        FRAMEWORKS: [
            "test_a_real_kill_records_the_processs_memory_and_the_limit",
        ],
    },
    "test_outputs.py": {
        FRAMEWORKS: [
            "test_profile_leaves_the_users_file_where_its_summary_would_go",
            "test_an_existing_trace_is_replaced_only_with_force",
            "test_default_names_are_numbered_not_replaced",
            "test_a_full_disk_keeps_the_scripts_status_and_what_was_written",
            "test_a_forked_child_leaves_the_parents_trace_alone",
            "test_the_script_does_not_outlive_tpumem",
            "test_an_adapter_that_fails_to_start_is_one_line_and_the_trace_says_why",
        ],
    },
    "test_profile_pieces.py": {
        CLI: [
            "test_a_reader_process_reads_sessions_as_this_process_would",
            "test_a_reader_process_that_dies_leaves_the_rest_to_this_process",
            "test_sessions_handed_over_as_files_are_read_and_deleted",
            "test_capture_gaps_come_from_what_the_sessions_recorded",
        ],
        FRAMEWORKS: [
            "test_a_stack_pytorch_captures_is_the_stack_a_walk_finds",
        ],
    },
    "test_programs.py": {
        UNIT: [
            "test_the_peak_counts_whole_program_buffers_and_the_heap_at_its_highest",
            "test_a_shared_buffer_holds_its_memory_until_the_last_user_frees_it",
            "test_a_heap_that_frees_twice_or_bytes_that_are_not_a_proto_are_refused",
        ],
    },
    "test_reports.py": {
        CLI: [
            "test_json_report_carries_the_analysis_figures",
            "test_output_extension_picks_the_format",
            "test_a_trace_cut_mid_stream_still_reports_and_says_so",
        ],
    },
    "test_runs.py": {
        UNIT: [
            "test_worker_processes_give_what_this_process_gives",
            "test_placeholders_are_filled_and_checked",
            "test_a_rename_never_replaces_a_trace_silently",
            "test_ranks_from_the_launchers_environment",
            "test_counts_are_worded_by_one_rule",
        ],
        FRAMEWORKS: [
            "test_a_brace_written_twice_is_one_brace_in_the_traces_name",
        ],
    },
    "test_snapshot_import.py": {
        CLI: [
            "test_a_bad_snapshot_leaves_no_trace_and_says_one_line",
            "test_importing_a_snapshot_names_the_trace_after_it",
            "test_jax_and_pytorch_on_one_gpu_side_by_side",
            "test_check_fails_a_run_that_ended_out_of_memory_not_one_that_went_on",
        ],
    },
    "test_summaries.py": {
        CLI: [
            "test_run_reports_equal_field_by_field_and_say_what_was_read_in_full",
            "test_check_trusting_summaries_reads_no_trace_but_the_busiest",
            "test_check_judges_a_run_by_its_traces_not_a_summary_anyone_could_write",
            "test_a_summary_of_another_tpumems_analysis_is_made_again",
            "test_a_summary_is_read_as_a_trace_is_not_through_a_link",
            "test_a_summary_that_no_longer_stands_for_its_trace_is_not_used",
            "test_a_runs_files_given_one_by_one_leave_the_summaries_to_their_traces",
        ],
    },
    "test_tpu.py": {
        CLI: [
            "test_a_topology_tpumem_does_not_know_is_one_line_before_anything_runs",
        ],
        UNIT: [
            "test_libtpu_is_where_only_tpumem_looks",
        ],
    },
    "test_unseen_frees.py": {
        CLI: [
            "test_the_unseen_row_says_where_those_bytes_were_made",
        ],
    },
    "test_watch.py": {
        CLI: [
            "test_watch_of_a_batch_claiming_a_terabyte_reads_up_to_it",
            "test_a_live_trace_deleted_under_watch_is_said_deleted",
        ],
        SLOW: [
            "test_watch_refuses_what_never_is_a_trace_by_reports_rule",
            "test_watch_of_every_hand_built_hostile_trace_ends_in_a_line_or_one_error",
        ],
    },
}


def lane_of(item: pytest.Item) -> str:
    """The lane of the test's folder, or the one OTHER_LANES names it under; a test
    file outside the lanes' folders, or a test OTHER_LANES names that its file
    does not have, stops the run: a lane is never a default."""
    path = Path(str(item.fspath))
    lane = FOLDERS.get(path.parent.name)
    if lane is None or path.parent.parent != TESTS:
        raise pytest.UsageError(
            f"{path.name} is in no lane's folder: move it to tests/unit, tests/cli, "
            "tests/slow, tests/frameworks or tests/browser"
        )
    for other, names in OTHER_LANES.get(path.name, {}).items():
        missing = [name for name in names if not hasattr(item.module, name)]
        if missing:
            raise pytest.UsageError(f"tests/lanes.py names {missing} in {path.name}: no such test")
        if item.originalname in names:
            return other
    return lane


def mark_lanes(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(lane_of(item))


class LaneViolation(Exception):
    """A test did what its lane rules out."""


class LaneGuard:
    """Holds the test now running to its lane (one test at a time in a process).

    In the test's own process, a framework in sys.modules that was not there before
    the test gives it away. In the processes it starts, a package of each
    framework's name, put first on PYTHONPATH, stands in for the framework: its
    import writes to a log the guard reads after the test, and fails, so that no
    framework ever runs in those lanes (and a process that catches the ImportError
    is still caught). The environment carries it to every process the test starts,
    and to theirs; Popen adds it to an environment given whole. No sitecustomize:
    tpumem's --follow puts its own on the path."""

    def __init__(self) -> None:
        self.tripwire = Path(tempfile.mkdtemp(prefix="tpumem-lanes-"))
        self.log = self.tripwire / "imported.log"
        for package in FRAMEWORK_PACKAGES:
            (self.tripwire / package).mkdir()
            (self.tripwire / package / "__init__.py").write_text(TRIPWIRE.format(log=str(self.log)))
        self.lane: str | None = None
        self.loaded_before: set[str] = set()
        self.saved_environ: dict[str, str | None] = {}
        self.popen_init: Any = None

    def close(self) -> None:
        shutil.rmtree(self.tripwire, ignore_errors=True)

    def start(self, item: pytest.Item) -> None:
        self.lane = lane_of(item)
        if self.lane not in WITHOUT_FRAMEWORKS:
            return
        self.loaded_before = _frameworks_loaded()
        self.log.unlink(missing_ok=True)
        self.saved_environ = {"PYTHONPATH": os.environ.get("PYTHONPATH")}
        os.environ["PYTHONPATH"] = self._python_path(os.environ)
        self.popen_init = subprocess.Popen.__init__
        subprocess.Popen.__init__ = self._popen_init(self.lane)  # type: ignore[method-assign]

    def check(self) -> None:
        if self.lane not in WITHOUT_FRAMEWORKS:
            return
        # Each import is told once: the check after the call and after the teardown.
        problems = []
        loaded = _frameworks_loaded() - self.loaded_before
        self.loaded_before |= loaded
        if loaded:
            problems.append(f"it imported {', '.join(sorted(loaded))} in its own process")
        if self.log.exists():
            imports = sorted(set(self.log.read_text().splitlines()))
            self.log.unlink()
            problems.append(f"a process it started imported {', '.join(imports)}")
        if problems:
            raise LaneViolation(
                f"a test of the {self.lane} lane: {'; '.join(problems)}; "
                "give it the frameworks lane in tests/lanes.py"
            )

    def stop(self) -> None:
        if self.lane not in WITHOUT_FRAMEWORKS:
            return
        subprocess.Popen.__init__ = self.popen_init  # type: ignore[method-assign]
        for name, value in self.saved_environ.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self.lane = None

    def _python_path(self, environ: Any) -> str:
        path = [str(self.tripwire), environ.get("PYTHONPATH", "")]
        return os.pathsep.join(part for part in path if part)

    def _popen_init(self, lane: str) -> Any:
        original, guard = self.popen_init, self

        def init(popen: subprocess.Popen, *args: Any, **options: Any) -> None:
            if lane == UNIT:
                command = args[0] if args else options.get("args")
                raise LaneViolation(
                    f"a test of the unit lane started a process ({command!r}): "
                    "give it the cli lane (or frameworks) in tests/lanes.py"
                )
            env = options.get("env")
            if env is not None and str(guard.tripwire) not in env.get("PYTHONPATH", ""):
                options["env"] = {**env, "PYTHONPATH": guard._python_path(env)}
            original(popen, *args, **options)

        return init


def _frameworks_loaded() -> set[str]:
    return {name for name in FRAMEWORK_PACKAGES if name in sys.modules}


# A framework's stand-in on the PYTHONPATH of a lane without frameworks.
TRIPWIRE = """\
with open({log!r}, "a") as log:
    log.write(__name__ + "\\n")
raise ImportError(__name__ + " imported in a test of a lane without frameworks (tests/lanes.py)")
"""

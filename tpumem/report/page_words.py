"""Every word the HTML page shows that its data does not already carry: titles
and notes, by key. The page's script draws and looks its words up here
(`say(key, ...)` fills each {} in order); a title the text reports also show is
theirs, imported, so the two cannot drift apart."""

from __future__ import annotations

from tpumem.report.compare_text import PROGRAMS_TITLE
from tpumem.report.diff_report import PROCESS_PEAKS_TITLE
from tpumem.report.run_report import PROCESSES_TITLE, SPREAD_TITLE
from tpumem.report.sections import NO_EVENTS_TEXT

PAGE_WORDS = {
    # One run
    "regions_title": "Bytes in use, by region",
    "gaps_note": "Shaded: {} stretches the capture did not see (between profiler sessions); "
    "what happened in them is not drawn.",
    "fragmentation_title": "Fragmentation",
    "thinned_note": "Drawn from {} points standing for {} events: each point is the moment "
    "of its stretch of time where bytes in use were highest, so no peak falls between "
    "points. Only the drawing is thinned; every figure in the tables comes from all events.",
    "live_title": "Live at the peak (click a heading to sort)",
    "groups_note": "The {} largest of {} groups.",
    "no_heap_note": "XLA recorded no heap simulation for this program: only its "
    "whole-program buffers are shown.",
    "programs_title": "Compiled programs ({}), largest peak first",
    "programs_note": "From XLA's buffer assignment at compile time (XLA's totals where no HLO "
    "was recorded). Pick a program to see what fills it.",
    "program_pick": "Program: ",
    "no_events": NO_EVENTS_TEXT,
    "stacks_title": "Call stacks at the peak",
    # Runs side by side
    "compare_note": "Green: the lowest in its row. ×N: against the first run. Under each "
    "value: how it was obtained.",
    "overlaid_title": "Bytes in use, runs overlaid",
    "by_step_note": "Aligned by training step (start-up before the first step is drawn as "
    "the step before it).",
    "by_time_note": "Aligned by normalized time: 0% is each run's first event, 100% its last "
    "(not every run has step marks).",
    "fragmentation_overlaid_title": "Fragmentation, runs overlaid",
    "differences_title": "Where the peaks differ",
    "top_ops_title": "Largest ops at each peak",
    "step_program_title": PROGRAMS_TITLE,
    # A diff
    "noise_note": "Changes of live bytes at the peak within {} are left out as noise.",
    "process_peaks_title": PROCESS_PEAKS_TITLE,
    "diff_in_use_title": "Bytes in use over time, both runs from their start",
    "diff_steps_title": "Peak of each step, aligned by step number",
    "diff_live_title": "Live at the peak, change by {}",
    "diff_stacks_title": "The difference by call stack: red grew, blue shrank, width the "
    "larger of the two",
    # A distributed run
    "processes_title": PROCESSES_TITLE,
    "spread_title": SPREAD_TITLE,
    "process_lines_title": "Bytes in use on each process's busiest device",
    "process_steps_note": "Aligned by training step: every process marked its steps, so the "
    "hosts' clocks do not matter.",
    "process_clocks_note": "By each host's wall clock, from the earliest start: clocks of "
    "different hosts may differ (no step marks to align by).",
}

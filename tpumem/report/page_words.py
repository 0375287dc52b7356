"""Every word the HTML page shows that its data does not already carry: titles
and notes, by key. The page's script draws and looks its words up here
(`say(key, ...)` fills each {} in order); a title the text reports also show is
theirs, imported, so the two cannot drift apart."""

from __future__ import annotations

from tpumem.analysis.provenance import NOT_AVAILABLE
from tpumem.report.compare_text import PROGRAMS_TITLE
from tpumem.report.diff_report import (
    BREAKDOWNS,
    CHANGE_HEADERS,
    FIGURE_HEADERS,
    PROCESS_PEAKS_TITLE,
)
from tpumem.report.diff_report import PROCESS_HEADERS as DIFF_PROCESS_HEADERS
from tpumem.report.kind_words import KIND_WORDS
from tpumem.report.live_rows import GROUP_HEADERS, NO_STACK
from tpumem.report.program_rows import BUFFER_HEADERS, PADDING_SUFFIX, PROGRAM_HEADERS
from tpumem.report.run_report import PROCESS_HEADERS, PROCESSES_TITLE, SPREAD_HEADERS, SPREAD_TITLE
from tpumem.report.sections import NO_EVENTS_TEXT
from tpumem.report.tpu_tables import REFUSED_NEED, TPU_HEADERS

PAGE_WORDS: dict[str, object] = {
    # Column titles: the text report's own (lists).
    "group_headers": GROUP_HEADERS,
    "buffer_headers": BUFFER_HEADERS,
    # The page's program table has no temporaries column (the picked program's
    # detail shows them).
    "page_program_headers": tuple(h for h in PROGRAM_HEADERS if h != "temps at peak"),
    "tpu_headers": TPU_HEADERS,
    "process_headers": PROCESS_HEADERS,
    "spread_headers": SPREAD_HEADERS,
    "diff_process_headers": DIFF_PROCESS_HEADERS,
    "diff_figure_headers": FIGURE_HEADERS,
    "change_headers": CHANGE_HEADERS,
    "breakdowns": BREAKDOWNS,
    "not_available": NOT_AVAILABLE,
    "accelerator_head": "accelerator",
    "memory_head": "memory",
    "figure_head": "figure",
    "kind_head": "kind",
    "kind_words": KIND_WORDS,
    "against_first": "{} (vs {})",
    # Titles, axes and series
    "report_title": "tpumem report · {}",
    "compare_title": "tpumem compare · {}",
    "diff_title": "tpumem diff · {} → {}",
    "processes_report_title": "tpumem report · {} ({} processes{})",
    "run_id": ", run {}",
    "device_title": "{} · fidelity: {} · {} allocations",
    "every_figure": "{}: every figure and plot",
    "warning": "warning: {}",
    "step_axis": "step {}",
    "event_axis": "event {}",
    "pool_series": "pool held",
    "fragmentation_series": "fragmentation ({})",
    "heap_series": "heap (arguments, outputs, constants and live temporaries)",
    "padding_suffix": PADDING_SUFFIX,
    "refused_need": REFUSED_NEED,
    "program_peak_title": "{}: {} at its peak",
    "program_peak_at": " (at {})",
    "whole_program_note": "{} live the whole program (arguments {}, outputs {}); x: the heap "
    "simulator's events in program order.",
    # The flame graph
    "no_stack": NO_STACK,
    "search_frames": "search frames",
    "flame_hint": "{} (click a frame to zoom, the top bar to zoom out)",
    "flame_label": "flame graph of the bytes live at the peak",
    "flame_root": "all live at the peak · {}",
    "flame_root_two": "all live at the peaks",
    "frame_share": "{} ({}% of the peak's live bytes) · {} buffers",
    "frame_change": "before {} → after {} ({})",
    "matched": "matched: {} ({}% of the live bytes at the peak)",
    "matched_two": "matched: {} ({}% of the second run's live bytes at the peak)",
    # One run
    "timeline_title": "Bytes in use over the run",
    "timeline_hint": "Drag across a stretch to zoom into it, the wheel to zoom, shift+wheel "
    "or the \u25c0 \u25b6 buttons to pan, a double click for the whole run. Click a moment: "
    "what was live there shows below.",
    "timeline_regions": "Drawn: bytes in use by region, from {} points",
    "timeline_detail": "Drawn: bytes in use by region, the run cut into {} stretches, each "
    "by its highest, lowest and last moment ({} points)",
    "view_range": "showing {} to {} of {} to {}",
    "zoom_in": "Zoom in",
    "zoom_out": "Zoom out",
    "pan_left": "\u25c0",
    "pan_right": "\u25b6",
    "whole_run": "Whole run",
    "peak_mark": "peak {}",
    "pool_above": "- - pool held: {}, above the chart",
    "in_use_tip": "in use {}",
    "before_first_tip": "before the first event",
    "live_title_peak": "Live at the peak, {}",
    "live_at_title": "Live at {}",
    "live_figures": "{} in use; the buffers the trace saw made and live: {} in {} buffers",
    "live_stack": "; {} reserved outside the heap (the program's stack)",
    "live_unattributed": "; {} in the heap that none of them accounts for (allocated unseen: "
    "the capture did not see it made)",
    "live_rest": "(the smaller groups)",
    "unchanged_until": "the same until the next event, at {}",
    "unchanged_to_end": "the same to the end of the trace (its last event)",
    "nearest_moment": "the moment the analysis took nearest to {}, where the click fell ({})",
    "largest_in_view": "{} of the {} live in this view",
    "moments_note": "The analysis took what was live at {} moments: the highest and the "
    "last event of each stretch of the run (the peak among them). A click shows the one whose "
    "live set still holds at the time clicked (nothing changed between them), elsewhere the "
    "nearest; it is marked on the chart.",
    "largest_title": "The {} largest buffers of {} allocations, over their lives",
    "largest_note": "Each block is a buffer, as wide as its life and as tall as its size, "
    "stacked where it first fits in the order they were made (not device addresses). Hover "
    "over one for the stack that made it.",
    "step_tick": "step {}",
    "gaps_note": "Shaded: {} stretches the capture did not see (between profiler sessions); "
    "what happened in them is not drawn.",
    "fragmentation_title": "Fragmentation",
    "thinned_note": "Drawn from {} points standing for {} events: each stretch of time's "
    "highest event, so no peak falls between points, and its last, whose bytes hold until "
    "the next stretch. Only the drawing is thinned; every figure in the tables comes from all "
    "events.",
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

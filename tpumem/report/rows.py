"""The analysis as rows of words, shared by the text and markdown reports."""

from __future__ import annotations

import itertools
import re

from tpumem.analysis import figures as fig
from tpumem.analysis.compiled.programs import RunningAtPeak, largest_temp
from tpumem.analysis.growth import MARKS_NEEDED
from tpumem.analysis.peak import LiveGroup, PeakBreakdown
from tpumem.analysis.provenance import NOT_AVAILABLE
from tpumem.analysis.trace_figures import DeviceAnalysis, TraceAnalysis
from tpumem.report.growth_rows import GROWTH_HOW, growth_text
from tpumem.report.oom_rows import capacity_rows, oom_rows, shown_checks
from tpumem.trace.metadata import (
    COMPILED_ONLY,
    IMPORTED,
    TRACKED,
    CaptureSummary,
    ExitStatus,
    JaxBook,
    TorchXlaBook,
    TraceMetadata,
)
from tpumem.trace.schema import ALLOCATOR, BUFFER
from tpumem.units import counted, format_bytes, format_seconds

# A run on many devices (a pod slice, a multi-host job) is read by its largest
# peaks: these are shown in full, the next ones a line each, the rest counted.
SHOWN_DEVICES = 8
LISTED_DEVICES = 32
BRIEF_HEADERS = ("device", fig.PEAK.short, fig.POOL.short, fig.FRAGMENTATION.short)
_SPARK = "▁▂▃▄▅▆▇█"


def headline_rows(analysis: TraceAnalysis) -> list[tuple[str, str]]:
    """What people came for, first: the failure that ended the run, and what the
    capacity they asked about would give."""
    return [*oom_rows(analysis.out_of_memory), *capacity_rows(analysis.capacity)]


def unclean_ending(analysis: TraceAnalysis) -> list[tuple[str, str]]:
    """The "Ended" row, where the run did not end with exit status 0 and no
    out-of-memory row says why already (the answer-only report's too: a killed
    or failed run's figures stop early)."""
    meta, exit_info = analysis.metadata, analysis.metadata.exit
    if meta.source == COMPILED_ONLY:
        return []  # (nothing ran)
    if analysis.running or not analysis.complete or (exit_info and exit_info.signal):
        return [_ended(analysis)]
    if exit_info is None or (exit_info.exception and analysis.out_of_memory):
        return []  # (an imported profile: no ending seen; or the OOM rows say it)
    failed = exit_info.exception or exit_info.code not in (0, None)
    return [_ended(analysis)] if failed else []


def _ended(analysis: TraceAnalysis) -> tuple[str, str]:
    return ("Ended", _ending(analysis.metadata, analysis.complete, analysis.running))


def failure_tables(analysis: TraceAnalysis) -> list[tuple[str, tuple[LiveGroup, ...]]]:
    """(title, groups) of the buffers live at each failure, real and modeled, in
    the order the headline rows tell them."""
    tables = [
        (f"Live at the failure on {oom.device or '?'}, largest first", oom.live)
        for oom in reversed(analysis.out_of_memory)
    ]
    tables += [
        (
            f"Live at the modeled failure on {check.device} at "
            f"{format_bytes(check.capacity_bytes)}, largest first",
            check.failure.live,
        )
        for check in shown_checks(analysis.capacity)
        if check.failure is not None
    ]
    return [(title, groups) for title, groups in tables if groups]


def fact_rows(analysis: TraceAnalysis) -> list[tuple[str, str]]:
    meta = analysis.metadata
    framework = f"{analysis.framework} (backend: {analysis.backend})"
    if meta.source == COMPILED_ONLY:
        version = f" {meta.framework_version}" if meta.framework_version else ""
        framework = f"{analysis.framework}{version}, compiled for TPU slices, never run"
    rows = [
        ("Framework", framework),
        ("Source", _source(meta)),
    ]
    if meta.process is not None:
        rows.append(("Process", process_text(meta)))
    if meta.source != COMPILED_ONLY:
        rows += [
            ("Duration", format_seconds(analysis.duration_ns)),
            ("Ended", _ending(meta, analysis.complete, analysis.running)),
        ]
    if meta.capture is not None and meta.capture.chunks:
        rows.append(("Capture", _capture(meta.capture)))
    book = meta.extra.buffer_book if meta.extra is not None else None
    if book is not None:
        rows.append(("Buffers", _book(book)))
    if analysis.programs:
        rows.append(("Compiled programs", _programs(analysis, book)))
    if meta.set_by_tpumem:
        rows.append(("Set by tpumem", " ".join(f"{k}={v}" for k, v in meta.set_by_tpumem.items())))
    if meta.not_exposed:
        rows.append(("Not exposed", "; ".join(meta.not_exposed)))
    if len(analysis.devices) > 1:
        rows.append(
            (
                "Peak, all devices",
                f"{format_bytes(analysis.total_peak_bytes)} at "
                f"{format_seconds(analysis.total_peak_time_ns)}",
            )
        )
    return rows


def _source(meta: TraceMetadata) -> str:
    if meta.source == IMPORTED:
        return f"imported from {meta.imported_from or '?'} (host {meta.host or '?'})"
    return " ".join(meta.command) if meta.command is not None else meta.source


def process_text(meta: TraceMetadata) -> str:
    """'1 of 2 on vm-3 (jax.process_index()), run 5f26eafa'."""
    process = meta.process
    assert process is not None
    index = "?" if process.index is None else f"{process.index:,}"
    count = f" of {process.count:,}" if process.count is not None else ""
    host = f" on {meta.host}" if meta.host else ""
    said = f" ({process.source})" if process.source else ""
    run = f", run {meta.run}" if meta.run else ""
    return f"{index}{count}{host}{said}{run}"


def _capture(capture: CaptureSummary) -> str:
    text = counted(capture.chunks or 0, "profiler session")
    if capture.chunk_s is not None:
        text += f" of {capture.chunk_s:g} s"
    if capture.sessions_overrun:
        text += (
            f"; {counted(capture.sessions_overrun, 'session')} ran long (longest "
            f"{format_seconds(capture.longest_session_ns)}): tpumem's capture thread "
            "was short of CPU"
        )
    if capture.gaps:
        text += (
            f"; {counted(capture.gaps, 'gap')} between them, "
            f"{format_seconds(capture.gap_total_ns)} in all "
            f"(longest {format_seconds(capture.gap_max_ns)})"
        )
        if capture.covered_fraction is not None:
            text += f": {capture.covered_fraction:.1%} of the time captured"
    if capture.reader_cpu_s is not None:
        text += f"; read by a process of their own ({capture.reader_cpu_s:.1f} s of CPU)"
    return text


def _book(book: JaxBook | TorchXlaBook) -> str:
    if isinstance(book, TorchXlaBook):  # PyTorch/XLA's book of materialized tensors
        text = (
            f"{book.tensors_transferred or 0:,} tensors put on the device, "
            f"{book.tensors_materialized_by_graphs or 0:,} materialized by graphs, "
            f"{book.buffers_replaced_in_place or 0:,} buffers replaced by in-place updates; "
            f"{book.executions_observed or 0:,} graph executions"
        )
        if book.executions_not_observed:
            text += f" ({book.executions_not_observed:,} more seen only in PyTorch/XLA's log)"
        if book.spmd_devices:
            text += (
                f"; SPMD over {book.spmd_devices} devices: the figures are one device's "
                f"(its shard of each of {book.sharded_tensors or 0:,} sharded tensors, "
                "the others whole)"
            )
        return text
    text = f"{book.arrays_entered or 0:,} arrays entered as they were made"
    if book.arrays_found_by_poll:
        text += f", {book.arrays_found_by_poll:,} found later by polling"
    if book.arrays_donated:
        text += f"; {book.arrays_donated:,} donated to programs"
    if book.shard_arrays_listed and book.shard_arrays_hidden:
        text += (
            f"; to read buffers tpumem used {book.shard_arrays_listed:,} per-device array "
            "objects, which JAX keeps with their arrays: they hold no memory, and "
            "jax.live_arrays() left them out, as the script would have seen it without tpumem"
        )
    elif book.shard_arrays_listed:
        text += (
            f"; to read buffers tpumem used {book.shard_arrays_listed:,} per-device array "
            "objects, which JAX keeps with their arrays: they hold no memory, but while the "
            "run was profiled jax.live_arrays() listed up to that many more arrays"
        )
    return text


def _programs(analysis: TraceAnalysis, book: JaxBook | TorchXlaBook | None) -> str:
    text = f"{len(analysis.programs):,} compiled"
    top = largest_temp(analysis.programs)
    if top is not None:
        text += f"; largest temp {format_bytes(top.temp_bytes)} ({top.name})"
        if book is not None:  # tpumem's book: temps placed where run times were seen
            text += (
                ", shown live while each program ran"
                if book.program_temp_shown
                else ", not in the figures (run times not observed)"
            )
        elif any(d.fidelity == ALLOCATOR for d in analysis.devices):
            text += ", in the allocator's events as it allocated them"
    return text + " · XLA's memory analysis at compile time"


def _ending(meta: TraceMetadata, complete: bool, running: bool) -> str:
    return ending_text(meta.exit, complete, meta.source, running)


def ending_text(
    exit_info: ExitStatus | None, complete: bool, source: str, running: bool = False
) -> str:
    """How a run ended, in words."""
    if running:
        return "not yet: the run goes on (its trace is being written)"
    if exit_info is not None and exit_info.signal:
        name = exit_info.signal_name or f"signal {exit_info.signal}"
        if exit_info.exception == "KeyboardInterrupt":
            return f"interrupted ({name}, KeyboardInterrupt)"
        return f"killed by {name}"
    if not complete:
        return "the trace was not closed: the process crashed or was killed"
    if exit_info is None:
        return "not recorded" if source != IMPORTED else "(imported profile)"
    code = "?" if exit_info.code is None else exit_info.code
    if source == TRACKED:  # a block of a process that went on
        if exit_info.exception:
            return f"the tracked block raised {one_line(exit_info.exception)}"
        return "the tracked block ended"
    if exit_info.exception:
        return f"uncaught exception: {one_line(exit_info.exception)} (exit status {code})"
    return f"exit status {code}"


_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b.")
LONGEST_LINE = 160


def one_line(text: str) -> str:
    """A message as one plain line: terminal escapes out, the first line that says
    something, at most LONGEST_LINE characters (the trace keeps the whole text)."""
    plain = _ESCAPES.sub("", text)
    lines = [line.strip() for line in plain.splitlines() if line.strip()]
    line = lines[0] if lines else ""
    if len(lines) > 1:
        line += " …"
    return line if len(line) <= LONGEST_LINE else line[: LONGEST_LINE - 1] + "…"


def devices_shown(
    analysis: TraceAnalysis,
) -> tuple[list[DeviceAnalysis], list[tuple[str, ...]], str | None]:
    """(devices shown in full, a brief row for each of the next ones, a line that
    says what was left out, if anything was)."""
    devices = list(analysis.devices)
    if len(devices) <= SHOWN_DEVICES:
        return devices, [], None
    by_peak = sorted(devices, key=lambda d: d.peak.bytes, reverse=True)
    rest = by_peak[SHOWN_DEVICES:]
    brief: list[tuple[str, ...]] = [
        (
            d.device,
            format_bytes(d.peak.bytes),
            format_bytes(d.preallocation.pool_peak_bytes),
            "-" if d.fragmentation.at_peak is None else f"{d.fragmentation.at_peak:.3f}",
        )
        for d in rest[:LISTED_DEVICES]
    ]
    unlisted = len(rest) - len(brief)
    note = (
        f"{len(devices):,} devices: the {SHOWN_DEVICES} with the largest peaks in full, "
        f"the next {len(brief)} in brief"
        + (f", {unlisted:,} more not shown" if unlisted else "")
        + "; every device is in --format json"
    )
    return by_peak[:SHOWN_DEVICES], brief, note


def _live_at_peak(peak: PeakBreakdown) -> str:
    text = counted(peak.live_buffers, "buffer")
    if peak.unattributed_bytes:
        text += f"; {format_bytes(peak.unattributed_bytes)} in buffers allocated unseen"
    if peak.stack_bytes:
        # XProf counts it in the peak too (bytes_reserved: the TPU program stack).
        text += f"; {format_bytes(peak.stack_bytes)} reserved by the runtime as stack"
    return text


def step_words(peak: PeakBreakdown) -> str:
    """Where in the run the peak fell: its training step, or the phase (Keras'
    evaluate() or predict()) it fell in instead."""
    if peak.phase is not None:
        return f", in {peak.phase}"
    return "" if peak.step is None else f", step {peak.step}"


def device_rows(device: DeviceAnalysis) -> list[tuple[str, str, str]]:
    """(figure, value, how it was obtained)."""
    peak, pre, frag, waste = device.peak, device.preallocation, device.fragmentation, device.waste
    step = step_words(peak)
    temp = dict(peak.by_region).get("temp")
    rows = [
        (
            fig.PEAK.title,
            f"{format_bytes(peak.bytes)} at {format_seconds(peak.time_ns)}{step}",
            device.peak_label + _temp_note(device.fidelity, temp),
        ),
        *_counter_rows(device),
        ("Live at peak", _live_at_peak(peak), device.peak_label),
        (
            fig.POOL.title,
            format_bytes(pre.pool_peak_bytes),
            f"{pre.pool_label}" + (f" ({pre.pool_source})" if pre.pool_source else ""),
        ),
        (fig.UNUSED.title, format_bytes(pre.unused_bytes), pre.pool_label),
    ]
    if pre.limit_bytes is not None:
        rows.append(("Allocator limit", format_bytes(pre.limit_bytes), "measured"))
    if pre.smallest_fraction is not None:
        rows.append(
            (
                "Smallest memory fraction that fits",
                f"{pre.smallest_fraction:.2f} of {format_bytes(pre.capacity_bytes)}",
                device.peak_label,
            )
        )
    for running in device.programs_at_peak:
        rows.append(_running_row(running, peak.bytes))
    settings = ", ".join(f"{k}={v}" for k, v in pre.settings.items()) or "none recorded"
    rows.append(("Allocator settings", settings, ""))
    if frag.maximum is not None:
        at_peak = "-" if frag.at_peak is None else f"{frag.at_peak:.3f}"
        rows.append(
            (
                "Fragmentation",
                f"{at_peak} at peak; max {frag.maximum:.3f} at "
                f"{format_seconds(frag.time_of_maximum_ns)}",
                f"{frag.label} ({frag.source})",
            )
        )
    else:
        rows.append(("Fragmentation", "-", f"{frag.label} ({frag.source})"))
    if frag.check_agrees:
        rows.append(
            (
                "Address-map check",
                f"agrees within {frag.check_max_error:.1e} at {frag.check_points} events",
                f"derived (BFC regions: {frag.check_schedule})",
            )
        )
    elif frag.check_agrees is False:
        rows.append(
            (
                "Address-map check",
                f"off by up to {frag.check_max_error:.2f} at {frag.check_points} events "
                "where the map looked complete",
                "derived",
            )
        )
    elif frag.check_unavailable:
        rows.append(("Address-map check", "not possible", frag.check_unavailable))
    rows.append(
        (
            fig.HEADROOM.title,
            format_bytes(device.headroom_bytes),
            device.headroom_label
            + (
                " (free bytes at the peak outside the largest free block)"
                if device.headroom_bytes is not None
                else ""
            ),
        )
    )
    if waste.at_peak_bytes is not None:
        rows.append(
            (
                fig.WASTE.title,
                f"{format_bytes(waste.at_peak_bytes)} ({waste.at_peak_share:.1%} of live bytes)",
                waste.label,
            )
        )
    else:
        rows.append(("Internal waste", "-", f"{waste.label} (requested sizes not recorded)"))
    rows.append(_padding_row(device))
    if device.allocations_per_s is not None:
        rate = f"{device.allocations_per_s:,.0f} per second"
        rows.append((fig.ALLOCATION_RATE.title, rate, fig.ALLOCATION_RATE.label(device)))
    rows.append(growth_row(device))
    return rows


def growth_row(device: DeviceAnalysis) -> tuple[str, str, str]:
    """Whether the bytes kept from step to step grow, or why it was not checked
    (what to do about it, in its third cell)."""
    if device.growth is not None:
        return ("Growth across steps", growth_text(device.growth), GROWTH_HOW)
    found = "no step marks" if not device.step_marks else f"{device.step_marks} step marks"
    return ("Growth across steps", f"not checked: {found} ({MARKS_NEEDED} needed)", MARK_STEPS)


# Where nothing marked the steps (Keras fit(), a jitted JAX step that donates its
# arguments and PyTorch/XLA's optimizer steps are marked without it): what to do,
# and the row's provenance cell that says it.
HOW_TO_MARK_STEPS = (
    "mark each step with jax.profiler.StepTraceAnnotation(name, step_num=N); "
    "TensorFlow: tf.profiler.experimental.Trace; PyTorch/XLA: xp.StepTrace"
)
MARK_STEPS = f"{NOT_AVAILABLE}: {HOW_TO_MARK_STEPS}"


def _temp_note(fidelity: str, temp: int | None) -> str:
    """Temp buffers are compiled programs' working memory, sized by XLA, where tpumem
    keeps the book; where the allocator reported them, they are what it allocated."""
    if not temp:
        return ""
    if fidelity == BUFFER:
        return f" ({format_bytes(temp)} of programs' temp: XLA's compile-time size)"
    return f" ({format_bytes(temp)} of op temporaries, as allocated)"


def _padding_row(device: DeviceAnalysis) -> tuple[str, str, str]:
    padding = device.padding
    if padding.included:
        return ("TPU layout padding", "included in the recorded sizes", "measured (a TPU run)")
    if padding.extra_bytes is None:
        why = "no shapes and dtypes recorded"
        if padding.beyond_bytes:
            why = f"the shapes or dtypes of {format_bytes(padding.beyond_bytes)} are no array's"
        return ("TPU layout padding", "-", f"{padding.label} ({why})")
    how = (
        f"{padding.label} in XLA:TPU's layouts from the shapes of "
        f"{format_bytes(padding.counted_bytes)} live at peak"
    )
    # The bound with every array row-major, where it says something: past the
    # live bytes themselves (small trailing dimensions padded to 128) it is noise.
    bound = padding.row_major_extra_bytes
    if bound is not None and bound <= padding.counted_bytes:
        how += f" (all row-major: +{format_bytes(bound)})"
    return ("TPU layout padding", f"+{format_bytes(padding.extra_bytes)} on a TPU", how)


def _counter_rows(device: DeviceAnalysis) -> list[tuple[str, str, str]]:
    reported = device.counters.reported_peak_bytes
    if reported is None:
        return []
    value = format_bytes(reported)
    if device.counters.peak_missed_by_events(device.peak.bytes):
        value += (
            " (higher than the events show: reached before the capture or between its sessions)"
        )
    return [("Allocator's own peak", value, "measured (its running peak)")]


def sparkline(
    values: tuple[float | int | None, ...], top: float | None = None, width: int | None = None
) -> str:
    """Values as a line of block marks; in at most `width` marks, each the most
    of the values it stands for (a peak stays seen)."""
    if width is not None and 0 < width < len(values):
        edges = [round(i * len(values) / width) for i in range(width + 1)]
        merged = []
        for low, high in itertools.pairwise(edges):
            known_here = [v for v in values[low:high] if v is not None]
            merged.append(max(known_here) if known_here else None)
        values = tuple(merged)
    known = [v for v in values if v is not None]
    ceiling = top if top is not None else max(known, default=0)
    if not ceiling:
        return _SPARK[0] * len(values)
    marks = []
    for value in values:
        if value is None:
            marks.append(" ")
        else:
            level = round(value / ceiling * (len(_SPARK) - 1))
            marks.append(_SPARK[min(max(level, 0), len(_SPARK) - 1)])
    return "".join(marks)


def _running_row(running: RunningAtPeak, peak_bytes: int) -> tuple[str, str, str]:
    """The program running at the peak: the peak as live arrays + its working memory."""
    program = running.program
    value = (
        f"{program.shown_name}: {format_bytes(running.temp_bytes)} of its temporaries, "
        f"{format_bytes(peak_bytes - running.temp_bytes)} in arrays (its arguments and "
        "outputs among them)"
    )
    if program.heap is not None:
        # (Not the run's peak: the plan holds every output for the whole program.)
        value += (
            f"; its own peak {format_bytes(program.heap.peak_bytes)} in XLA's plan, which "
            "holds its arguments and every output for the whole program beside its "
            "temporaries at their peak, where the run's peak counts the arrays live then"
        )
    return ("Program at peak", value, "derived; the plan: compile-time")

"""A run's report as sections, in the order every format shows them: how the run
failed, where it did; the answer (the peak, the lines that hold it); the run's
facts, what failed, the warnings, each device in full (and the rest in brief),
the compiled programs, what XLA:TPU compiled, whether it would fit. The text and
markdown reports render each kind of section their own way; the order and what
each section holds are decided here, once.

The terminal's report opens with the answer alone (`brief_sections`): how the
run failed, the peak, its kinds and lines, what to change, the warnings and
whether it would fit in a line, then the command that shows the rest, as
memray's `summary` stands beside its `stats`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tpumem.analysis.trace_figures import TraceAnalysis
from tpumem.report.change_rows import CHANGES_TITLE, change_lines
from tpumem.report.rows import (
    devices_shown,
    fact_rows,
    failure_tables,
    headline_rows,
    unclean_ending,
)
from tpumem.trace.metadata import COMPILED_ONLY

HEADLINE = "headline"  # what ended the run, what a capacity asked about gives: (name, value)
ANSWER = "answer"  # the TraceAnalysis, as the answer opens the report (answer_rows.py)
RUN = "run"  # the run's facts: list of (name, value)
FAILURE = "failure"  # (title, live groups) of a failure
WARNINGS = "warnings"  # the run's warnings (a tuple of text; there, if empty)
NO_EVENTS = "no events"  # the trace holds no allocation event
LEFT_OUT = "left out"  # the line that says which devices are not shown in full
DEVICE = "device"  # a DeviceAnalysis, in full
OTHER_DEVICES = "other devices"  # a brief row for each of the next devices
PROGRAMS = "programs"  # the compiled programs (a tuple of CompiledProgram)
TPU = "tpu"  # a TpuTarget: what XLA:TPU compiled for one topology
FIT = "fit"  # the FitAdvice
FIT_BRIEF = "fit brief"  # the FitAdvice, in a line or two
MORE = "more"  # the line that says what --full adds: the report's path as given
# What to change where no answer holds it (a trace `tpumem fit` wrote: no device
# ran): (title, change lines as change_rows.change_lines gives them).
CHANGES = "changes"
NO_EVENTS_TEXT = "No allocation events in this trace."
KINDS = (
    HEADLINE,
    ANSWER,
    RUN,
    FAILURE,
    WARNINGS,
    NO_EVENTS,
    LEFT_OUT,
    DEVICE,
    OTHER_DEVICES,
    PROGRAMS,
    TPU,
    CHANGES,
    FIT,
    FIT_BRIEF,
    MORE,
)
# The sections of the terminal's answer-only report alone (brief_sections).
BRIEF_ONLY = (FIT_BRIEF, MORE)


@dataclass(frozen=True, slots=True)
class Section:
    kind: str  # one of KINDS
    value: Any


def report_sections(analysis: TraceAnalysis) -> list[Section]:
    headline = headline_rows(analysis)
    sections = [Section(HEADLINE, headline)] if headline else []
    if analysis.devices:
        sections.append(Section(ANSWER, analysis))
    sections.append(Section(RUN, fact_rows(analysis)))
    sections += [Section(FAILURE, table) for table in failure_tables(analysis)]
    sections.append(Section(WARNINGS, tuple(analysis.warnings)))
    if not analysis.devices and analysis.source != COMPILED_ONLY:
        sections.append(Section(NO_EVENTS, NO_EVENTS_TEXT))
    full, brief, note = devices_shown(analysis)
    if note:
        sections.append(Section(LEFT_OUT, note))
    sections += [Section(DEVICE, device) for device in full]
    if brief:
        sections.append(Section(OTHER_DEVICES, brief))
    if analysis.compiled:
        sections.append(Section(PROGRAMS, analysis.compiled))
    sections += [Section(TPU, target) for target in analysis.tpu]
    if not analysis.devices and analysis.changes:
        lines = change_lines(analysis.changes, analysis.metadata.words)
        sections.append(Section(CHANGES, (CHANGES_TITLE, lines)))
    if analysis.fit is not None:
        sections.append(Section(FIT, analysis.fit))
    return sections


def brief_sections(analysis: TraceAnalysis) -> list[Section]:
    """The answer alone, and where the rest is. A trace without a device's events
    (`tpumem fit` compiled its programs, none ran) is all answer: in full."""
    if not analysis.devices:
        return report_sections(analysis)
    headline = headline_rows(analysis) + unclean_ending(analysis)
    sections = [Section(HEADLINE, headline)] if headline else []
    sections.append(Section(ANSWER, analysis))  # (with each TPU slice's verdict)
    if analysis.warnings:
        sections.append(Section(WARNINGS, tuple(analysis.warnings)))
    if analysis.fit is not None:
        sections.append(Section(FIT_BRIEF, analysis.fit))
    sections.append(Section(MORE, analysis.path or ""))
    return sections

"""Each framework's facts about its allocator, and its users' words: declared in
its package (adapters/<framework>/framework.py), written into the trace's header,
and read by the analysis and the reports from the metadata alone; a trace written
before they were reads what its adapter declared then, by its framework's name."""

from __future__ import annotations

import ast
from pathlib import Path

from tpumem.adapters.base import declared, get_adapter
from tpumem.adapters.import_watch import FRAMEWORKS
from tpumem.adapters.run_header import run_metadata
from tpumem.analysis import analyze
from tpumem.analysis.allocators import caching_allocator
from tpumem.analysis.allocators.capacity import GROWTH, PREALLOCATED, pool_growth
from tpumem.analysis.changes import GROWTH as GROWTH_CHANGE
from tpumem.analysis.changes import MOMENTS, Change
from tpumem.analysis.compiled.step_programs import no_program_reason
from tpumem.report.change_rows import change_lines
from tpumem.report.fit_rows import fit_note
from tpumem.trace.framework_words import WORDS_BEFORE_WRITTEN, FrameworkWords
from tpumem.trace.memory_settings import (
    CUDA_CACHING,
    DECLARED_BEFORE_WRITTEN,
    GrowthSetting,
    MemorySettings,
)
from tpumem.trace.metadata import KeptArrays
from tpumem.trace.reader import load
from tpumem.trace.writer import TraceWriter

GiB = 1 << 30

# A framework tpumem has no adapter for, declaring its own settings.
FOURTH = {
    "fraction_variable": "FOURTH_MEM_FRACTION",
    "default_fraction": 0.5,
    "growth_settings": [{"name": "FOURTH_GROWS", "values": ["yes"]}],
    "no_program": "no program: the fourth compiles nothing",
}


def memory_settings(name: str) -> MemorySettings | None:
    framework = declared(name)
    return None if framework is None else framework.memory_settings


def test_every_framework_declares_its_settings():
    for name in FRAMEWORKS:
        assert isinstance(memory_settings(name), MemorySettings), name
    assert declared("unknown") is None


def test_the_header_carries_the_frameworks_settings_and_words(tmp_path):
    path = tmp_path / "t.tpumem"
    header = run_metadata("torch_xla", "tpumem profile", ["s.py"], {}, {})
    with TraceWriter(path, header):
        pass
    metadata = load(path).metadata
    facts = declared("torch_xla")
    assert facts is not None and facts.name == "torch_xla"
    assert metadata.memory_settings == memory_settings("torch_xla") == facts.memory_settings
    assert metadata.words == facts.words and facts.words.title == "PyTorch/XLA"


def test_an_adapters_names_are_its_declarations():
    """The adapter class takes its names from its package's declaration: one place."""
    for name in FRAMEWORKS:
        facts, adapter = declared(name), get_adapter(name)
        assert facts is not None and adapter.framework is facts
        assert (adapter.name, adapter.module, adapter.import_names, adapter.imported_by) == (
            facts.name,
            facts.module,
            facts.import_names,
            facts.imported_by,
        )


def test_a_framework_yields_only_to_one_that_imports_it():
    """The import watch's table (the standard library's data) says what the
    declarations say: torch yields to PyTorch/XLA, which imports it."""
    from tpumem.adapters.import_watch import YIELDS_TO

    assert YIELDS_TO == {"torch": ("torch_xla",)}
    for name, takers in YIELDS_TO.items():
        facts = declared(name)
        assert facts is not None and set(takers) <= set(facts.imported_by)


def test_the_advice_speaks_the_words_the_trace_carries(make_trace):
    """A fourth framework's words, written in its trace, are the advice's; a trace
    without words reads its framework's words as declared before they were
    written, and a framework tpumem never knew gets plain words, not another's."""
    words = {"title": "Fourth", "one_moment_optimizer": "fourth.sgd()", "host_copy": "x.host()"}
    metadata = load(make_trace([], {"framework": "fourth", "words": words})).metadata
    assert metadata.words == FrameworkWords(**words)
    moments = Change(MOMENTS, "GPU:0", 8 << 20, "rule", before_bytes=16 << 20)
    kept = KeptArrays(name="history", container="list", arrays=3)
    growth = Change(GROWTH_CHANGE, "GPU:0", 1 << 20, "rule", line="t.py:3", kept=kept)
    said = [sentence for _, sentence, _ in change_lines((moments, growth), metadata.words)]
    assert "(fourth.sgd())" in said[0] and "(x.host())" in said[1]
    for name, before in WORDS_BEFORE_WRITTEN.items():
        read = load(make_trace([], {"framework": name}, f"{name}.tpumem")).metadata
        assert read.words == before
    unknown = load(make_trace([], {"framework": "test"}, "test.tpumem")).metadata
    assert unknown.words is None
    plain = [s for _, s, _ in change_lines((moments, growth), unknown.words)]
    assert "SGD with momentum" in plain[0] and "a copy in host memory" in plain[1]


def test_a_trace_written_before_reads_what_its_adapter_declared_then(make_trace):
    for name, before in DECLARED_BEFORE_WRITTEN.items():
        metadata = load(make_trace([], {"framework": name}, f"{name}.tpumem")).metadata
        assert metadata.memory_settings == before
    assert load(make_trace([], {"framework": "test"})).metadata.memory_settings is None


def test_the_analysis_reads_a_fourth_frameworks_settings_from_its_trace(make_trace):
    rows = [
        {
            "kind": "alloc",
            "time_ns": 1,
            "device": "GPU:0",
            "buffer_id": 1,
            "bytes": 30 * GiB,
            "requested_bytes": 30 * GiB,
            "op": "op1",
            "region": "output",
        }
    ]
    meta = {"framework": "fourth", "backend": "gpu", "memory_settings": FOURTH}
    analysis = analyze(load(make_trace(rows, meta)))
    fit = {row.accelerator: row for row in analysis.fit.rows}
    assert (fit["A100 40GB"].setting or "").startswith("FOURTH_MEM_FRACTION=0.")
    notes = [fit_note(note) for note in analysis.fit.notes]
    assert any("FOURTH_MEM_FRACTION above its default 0.50" in note for note in notes)
    assert no_program_reason(analysis) == FOURTH["no_program"]
    assert analysis.metadata.memory_settings.growth_settings == (
        GrowthSetting("FOURTH_GROWS", ("yes",)),
    )
    assert pool_growth(analysis.metadata) == PREALLOCATED
    grown = load(make_trace(rows, {**meta, "env": {"FOURTH_GROWS": "YES"}}, "grown.tpumem"))
    assert pool_growth(grown.metadata) == GROWTH


def test_the_header_records_the_variables_the_framework_declared(monkeypatch):
    monkeypatch.setenv("PJRT_ALLOCATOR_PREALLOCATE", "false")
    header = run_metadata("torch_xla", "tpumem profile", ["s.py"], {}, {})
    assert header["env"]["PJRT_ALLOCATOR_PREALLOCATE"] == "false"


def test_a_fact_added_since_a_trace_was_written_reads_as_declared_then(make_trace):
    """A JAX trace written before the adapters declared how their framework
    donates still says donate_argnums (the donation advice asks the trace, not
    the framework's name), beside the facts it holds itself; a framework that
    declared none has none."""
    written = {"fraction_variable": "XLA_CLIENT_MEM_FRACTION", "defragment_setting": "X=platform"}
    meta = {"framework": "jax", "memory_settings": written}
    settings = load(make_trace([], meta, "jax.tpumem")).metadata.memory_settings
    assert settings.donation == "donate_argnums" == memory_settings("jax").donation
    assert settings.defragment_setting == "X=platform"  # (the trace's own)
    # A fact written from the start and left out is one declared None (a writer
    # leaves None out): it stays None, whatever the framework declared before.
    assert settings.default_fraction is None
    fourth = load(make_trace([], {"framework": "fourth", "memory_settings": FOURTH}))
    assert fourth.metadata.memory_settings.donation is None
    assert memory_settings("torch_xla").donation is None


def test_the_allocator_model_is_the_one_the_trace_declares(make_trace):
    """The caching allocator's model replays a GPU run whose trace declares that
    allocator, whatever its framework is called; PyTorch's snapshots (imported,
    no adapter's) declare it by their framework's name."""
    gpu = {"backend": "gpu"}
    declared = {**FOURTH, "allocator_model": CUDA_CACHING}
    fourth = load(make_trace([], {**gpu, "framework": "fourth", "memory_settings": declared}))
    assert caching_allocator.models(fourth.metadata)
    pytorch = load(make_trace([], {**gpu, "framework": "pytorch"}, "pytorch.tpumem"))
    assert caching_allocator.models(pytorch.metadata)
    jax = load(make_trace([], {**gpu, "framework": "jax"}, "jax.tpumem"))
    assert not caching_allocator.models(jax.metadata)
    plain = load(
        make_trace([], {**gpu, "framework": "fourth", "memory_settings": FOURTH}, "f.tpumem")
    )
    assert not caching_allocator.models(plain.metadata)


def test_no_analysis_or_report_module_names_a_framework():
    """The analysis and the reports ask the trace what a framework declared (its
    settings, its words); a comparison with a framework's name (`framework ==
    "pytorch"`) is a rule that a fourth framework would have to find and edit."""
    names = {*FRAMEWORKS, "pytorch", "torch", "keras"}
    root = Path(__file__).resolve().parent.parent.parent / "tpumem"
    found = [
        (path.name, node.value)
        for package in ("analysis", "report", "reading", "export")
        for path in sorted((root / package).rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and node.value in names
    ]
    assert found == []

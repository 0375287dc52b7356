"""The figures tpumem reports, computed from a trace (docs/figures.md)."""

from tpumem.analysis.trace_figures import DeviceAnalysis, TraceAnalysis, analyze

__all__ = ["DeviceAnalysis", "TraceAnalysis", "analyze"]

"""The figures tpumem reports, computed from a trace (docs/figures.md)."""

from tpumem.analysis.run_figures import DeviceAnalysis, RunAnalysis, analyze

__all__ = ["DeviceAnalysis", "RunAnalysis", "analyze"]

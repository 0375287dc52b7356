"""The figures tpumem reports, computed from a trace (DESIGN.md, "The figures")."""

from tpumem.analysis.summary import DeviceAnalysis, RunAnalysis, analyze

__all__ = ["DeviceAnalysis", "RunAnalysis", "analyze"]

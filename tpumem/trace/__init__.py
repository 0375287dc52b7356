"""The trace: what one profiled process recorded, as an Arrow IPC stream."""

from tpumem.trace.metadata import TraceMetadata
from tpumem.trace.model import Trace
from tpumem.trace.reader import load
from tpumem.trace.writer import TraceWriter

__all__ = ["Trace", "TraceMetadata", "TraceWriter", "load"]

"""Reading traces into columnar tables. Needs no torch."""

from gpucheckup.trace.reader import find_trace_files, read_trace
from gpucheckup.trace.tables import Trace

__all__ = ["Trace", "find_trace_files", "read_trace"]

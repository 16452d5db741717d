"""Reading traces into columnar tables. Needs no torch.

The names below load their modules on first use, so that importing a light part of this package
(`trace.rundir`, `trace.parallel`) does not import numpy."""

from __future__ import annotations

import importlib

_HOMES = {"Trace": "gpucheckup.trace.tables", "find_trace_files": "gpucheckup.trace.reader",
          "read_trace": "gpucheckup.trace.reader"}
__all__ = ["Trace", "find_trace_files", "read_trace"]


def __getattr__(name: str):
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

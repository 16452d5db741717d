"""Communication kernels (NCCL) and how much of their time compute hides.

Definitions (also in docs/metrics.md). Counted: kernels of category `communication` (see
`kernels.CATEGORY_RULES`) inside the analysis window, per device.
- comm time: the union of communication kernel intervals.
- overlap %: the share of comm time during which a non-communication kernel ran on the same
  device. Healthy: most of it (DDP and FSDP overlap gradient reduction with backward).
- exposed comm: comm time with no compute beside it, per step and device and as % of step time
  (analysis/one_trace/window.py): the time a faster network or better overlap would save.
"""

from __future__ import annotations

import msgspec

from gpucheckup.analysis import intervals as iv
from gpucheckup.analysis.groups import by_key
from gpucheckup.analysis.one_trace.gpu.kernels import CATEGORIES, KernelStats
from gpucheckup.analysis.one_trace.steps import Steps
from gpucheckup.analysis.one_trace.window import Window
from gpucheckup.trace.tables import Trace

COMM = CATEGORIES.index("communication")


class CommStats(msgspec.Struct):
    """Communication kernel time and its overlap with compute (the report's `communication`)."""

    present: bool
    time_ms: float
    overlap_pct: float | None
    exposed_ms_per_step: float
    exposed_pct_of_step: float


def comm_stats(trace: Trace, steps: Steps, kernels: KernelStats, window: Window) -> CommStats:
    """Communication kernel time, its overlap with compute, and the exposed remainder."""
    gpu = trace.gpu
    rows, cat = kernels.rows, kernels.category_of_row
    comm_total = exposed = 0.0
    for on in by_key(gpu.device[rows]).values():  # one sort, not a mask per device
        c, k = rows[on[cat[on] == COMM]], rows[on[cat[on] != COMM]]
        comm = iv.union(gpu.start[c], gpu.end[c])
        compute = iv.union(gpu.start[k], gpu.end[k])
        comm_total += iv.total(comm)
        exposed += iv.total(iv.subtract(comm, compute))
    return CommStats(
        present=comm_total > 0,
        time_ms=comm_total / 1000,
        overlap_pct=100 * (comm_total - exposed) / comm_total if comm_total > 0 else None,
        exposed_ms_per_step=window.ms(exposed),
        exposed_pct_of_step=window.pct(window.ms(exposed)),
    )

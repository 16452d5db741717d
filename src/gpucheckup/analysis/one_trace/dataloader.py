"""Input pipeline: how much of each step the training loop spends waiting for the next batch.

Definition (also in docs/metrics.md): dataloader % of step = the union of
`enumerate(DataLoader)#...__next__` annotations (the host waiting for a batch) clipped to the
step windows, over the summed step window length; as ms per step, that share of the step time
(analysis/one_trace/window.py). It counts host time; whether the GPU idled
meanwhile is `gap_causes`' `input`. Over 10% deserves a look; the DataLoader can usually hide
behind compute entirely (num_workers, prefetching).
"""

from __future__ import annotations

import msgspec

from gpucheckup.analysis.one_trace import host_calls
from gpucheckup.analysis import intervals as iv
from gpucheckup.analysis.distinct import median
from gpucheckup.analysis.one_trace.steps import Steps
from gpucheckup.analysis.one_trace.window import Window
from gpucheckup.trace.tables import Trace


class DataLoaderStats(msgspec.Struct):
    """Time in DataLoader `__next__` (the report's `dataloader`)."""

    present: bool
    count: int
    iterators: list[str]
    per_step_ms: list[float]
    median_ms: float
    ms_per_step: float
    pct_of_step: float


def dataloader_stats(trace: Trace, steps: Steps, window: Window) -> DataLoaderStats:
    """Time in DataLoader `__next__` per step and as a share of step time."""
    rows = host_calls.dataloader_rows(trace)
    host = trace.host
    waits = iv.union(host.start[rows], host.end[rows])
    per_step = iv.covered_between(waits, steps.start, steps.end)
    names = sorted({trace.names[host.name[r]] for r in rows})
    ms = window.host_ms(float(per_step.sum()))
    return DataLoaderStats(
        present=bool(len(rows)),
        count=int(len(rows)),
        iterators=names,
        per_step_ms=[float(x) / 1000 for x in per_step],
        median_ms=float(median(per_step)) / 1000 if len(per_step) else 0.0,
        ms_per_step=ms,
        pct_of_step=window.pct(ms),
    )

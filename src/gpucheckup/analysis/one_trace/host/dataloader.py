"""Input pipeline: how much of each step the training loop spends waiting for the next batch.

Definition (also in docs/metrics.md): dataloader % of step = the union of
`enumerate(DataLoader)#...__next__` annotations (the host waiting for a batch) clipped to the
step windows, over the summed step window length; as ms per step, that share of the step time
(analysis/one_trace/window.py). It counts host time; whether the GPU idled
meanwhile is `gap_causes`' `input`. Over 10% deserves a look; the DataLoader can usually hide
behind compute entirely (num_workers, prefetching).

workers to keep pace (`workers_to_keep_pace`, an in-process loader only): the fewest DataLoader worker processes
that deliver a batch per step, ceil(L / R), where L is the time in `__next__` per step (loading a batch in the
training process) and R the rest of the step: N workers, each as fast as the training process was, deliver N / L
batches per millisecond while the rest of the step runs, which keeps pace once N / L >= 1 / R. At most
MAX_WORKERS (a step that is nearly all loading would ask for more than any host has); 0 where nothing is loaded
in-process. It assumes N free cores; with fewer the wait shrinks in proportion. The fix's advice and its what-if
edit use this one count.
"""

from __future__ import annotations

import math

import msgspec

from gpucheckup.analysis.one_trace.host import host_calls
from gpucheckup.analysis import intervals as iv
from gpucheckup.analysis.distinct import median
from gpucheckup.analysis.one_trace.steps import Steps
from gpucheckup.analysis.one_trace.window import Window
from gpucheckup.trace.tables import Trace

MAX_WORKERS = 32
IN_PROCESS = "_SingleProcessDataLoaderIter"


class DataLoaderStats(msgspec.Struct):
    """Time in DataLoader `__next__` (the report's `dataloader`)."""

    present: bool
    count: int
    iterators: list[str]
    per_step_ms: list[float]
    median_ms: float
    ms_per_step: float
    pct_of_step: float
    workers_to_keep_pace: int = 0


def workers_to_keep_pace(load_ms: float, step_ms: float) -> int:
    """The fewest workers that load a batch per step (see the module docstring): ceil(L / R), at most MAX_WORKERS."""
    if load_ms <= 0:
        return 0
    rest = step_ms - load_ms
    return MAX_WORKERS if rest <= load_ms / MAX_WORKERS else max(1, math.ceil(load_ms / rest))


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
        workers_to_keep_pace=workers_to_keep_pace(ms, window.step_ms) if any(IN_PROCESS in n for n in names) else 0,
    )

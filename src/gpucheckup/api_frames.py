"""The check-up's tables as pandas DataFrames: `gpucheckup.analyze(path).frame(name)`.

Each frame is rows of one part of the document (gpucheckup/document.py), its columns the JSON's keys
(FRAMES lists them), with `rank` first: the trace's rank, or its position among the check-ups when
it has none (a single trace: 0). Nothing is computed here: every value is the document's.
pandas is an optional extra (`pip install 'gpucheckup[pandas]'`); without it, one clear error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import msgspec

from gpucheckup.document import Document, TraceReport
from gpucheckup.errors import CheckupError

Rows = Iterator[dict]


def _reports(doc: Document) -> Iterator[tuple[int, TraceReport]]:
    """(rank, report) of each GPU check-up, in rank order."""
    for i, r in enumerate(doc.checkups):
        rank = r.trace.rank
        yield (rank if rank is not None else i), r


def _steps(doc: Document) -> Rows:
    for rank, r in _reports(doc):
        busy = r.gpu.step_busy_pct
        for i, (label, ms) in enumerate(zip(r.steps.labels, r.steps.per_step_ms)):
            yield {"rank": rank, "label": label, "ms": ms, "busy_pct": busy[i] if i < len(busy) else None}


def _kernels(doc: Document) -> Rows:
    for rank, r in _reports(doc):
        for k in r.kernels.by_name:
            yield {"rank": rank, **msgspec.to_builtins(k)}  # a row's keys as the JSON has them (`label`: top ones)


def _gaps(doc: Document) -> Rows:
    for rank, r in _reports(doc):
        g = r.gaps
        for cause, ms in g.by_cause_ms.items():
            yield {"rank": rank, "cause": cause, "by_cause_ms": ms, "per_step_ms": g.per_step_ms.get(cause),
                   "pct_of_step": g.pct_of_step.get(cause)}


def _syncs(doc: Document) -> Rows:
    for rank, r in _reports(doc):
        for s in r.sync.by_cause:
            yield {"rank": rank, **{k: v for k, v in msgspec.to_builtins(s).items() if k != "calls"}}


def _copies(doc: Document) -> Rows:
    for rank, r in _reports(doc):
        for direction, c in r.copies.by_direction.items():
            yield {"rank": rank, "direction": direction, **msgspec.to_builtins(c)}


def _collectives(doc: Document) -> Rows:
    comm = doc.job.communication if doc.job else None
    for c in comm.collectives if comm else []:
        yield msgspec.structs.asdict(c)


def _ranks(doc: Document) -> Rows:
    for row in doc.job.ranks.table if doc.job else []:
        yield dict(row)


def _findings(doc: Document) -> Rows:
    for rank, r in _reports(doc):
        for f in r.verdict.findings:
            yield {"rank": rank, **{k: getattr(f, k) for k in FINDING_COLUMNS}}


def _fixes(doc: Document) -> Rows:
    for rank, r in _reports(doc):
        for f in r.fixes:
            p = f.predicted
            yield {"rank": rank, **{k: getattr(f, k) for k in FIX_COLUMNS},
                   "predicted_saving_ms": p.saving_ms if p else None,
                   "predicted_saving_pct": p.saving_pct if p else None}


FINDING_COLUMNS = ("id", "severity", "title", "rule", "cost_ms_per_step", "cost_pct_of_step")
FIX_COLUMNS = ("key", "action", "tier", "saving_ms", "finding")

# name: (the rows, the columns in order: the document's key names, rank first where rows are per trace)
FRAMES: dict[str, tuple[Callable[[Document], Rows], tuple[str, ...]]] = {
    "steps": (_steps, ("rank", "label", "ms", "busy_pct")),
    "kernels": (_kernels, ("rank", "name", "category", "count", "total_ms", "mean_us", "pct")),
    "gaps": (_gaps, ("rank", "cause", "by_cause_ms", "per_step_ms", "pct_of_step")),
    "syncs": (_syncs, ("rank", "op", "inner_op", "frame", "count", "blocked_ms", "gpu_idle_ms", "per_step")),
    "copies": (_copies, ("rank", "direction")),
    "collectives": (_collectives, ("name", "bytes", "count", "group_size", "transfer_ms", "wait_ms")),
    "ranks": (_ranks, ("rank", "step_ms", "compute_ms", "transfer_ms", "wait_ms", "exposed_wait_ms", "idle_ms",
                       "late_ms", "last_pct", "verdict")),
    "findings": (_findings, ("rank",) + FINDING_COLUMNS),
    "fixes": (_fixes, ("rank",) + FIX_COLUMNS + ("predicted_saving_ms", "predicted_saving_pct")),
}


def frame(doc: Document, name: str):
    """The named table of the document as a DataFrame (FRAMES); CheckupError for an unknown name or no pandas."""
    if name not in FRAMES:
        raise CheckupError(f"frame {name!r}: not a table of the check-up; one of {', '.join(FRAMES)}")
    try:
        import pandas as pd
    except ImportError:
        raise CheckupError("frame(): pandas is not installed; pip install 'gpucheckup[pandas]'") from None
    rows, columns = FRAMES[name]
    data = list(rows(doc))
    df = pd.DataFrame(data)
    first = [c for c in columns if c in df.columns] if len(df.columns) else list(columns)
    return df.reindex(columns=first + [c for c in df.columns if c not in first])

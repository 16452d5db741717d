"""Why the GPU was idle: each gap's time split by what the host was doing meanwhile.

For an idle gap [a, b] on a device, take the GPU op that ends it and the host call that
launched it (correlation id), started at time L on thread T.
- If L <= a, the work was already queued when the GPU went idle: the whole gap is `queued`
  (GPU-side latency or a wait on another stream), not the host's doing.
- Otherwise the host is to blame for [a, min(L, b)]. That stretch is split by thread T's state,
  in this priority: `input` (inside a DataLoader `__next__`), `sync` (inside a synchronizing
  call or `.item()`), `communication` (inside a collective op), `allocation` (inside a
  cudaMalloc-like call), `launch` (inside any other operator or CUDA call: dispatch and launch
  overhead), `other_host` (outside every profiled op: Python code, logging, CPU work).
  The rest of the gap, [L, b], is the launch's own latency and counts as `launch`.
- Sync drain rule: when a synchronizing call on T returned inside the gap, the GPU went idle
  because that sync drained its queue, so the gap's `launch` and `other_host` time counts as
  `sync` too.
The gaps of the last step with no following op are split the same way up to the window end.
Host categories come from `host_calls`.
"""

from __future__ import annotations

import msgspec
import numpy as np

from gpucheckup.analysis.one_trace.host import host_calls
from gpucheckup.analysis import intervals as iv
from gpucheckup.analysis.distinct import union1d
from gpucheckup.analysis.groups import by_key, pair_ids
from gpucheckup.analysis.one_trace.steps import Steps
from gpucheckup.analysis.one_trace.timeline import Timeline
from gpucheckup.analysis.one_trace.window import Window
from gpucheckup.trace.tables import Trace

CAUSES = ("input", "sync", "communication", "allocation", "launch", "other_host", "queued")
INPUT, SYNC, COMM, ALLOC, LAUNCH, OTHER, QUEUED = range(len(CAUSES))
CAUSE_TITLES = {
    "input": "waiting for data (DataLoader)",
    "sync": "synchronizing (host waits for GPU)",
    "communication": "waiting on communication",
    "allocation": "allocating memory (cudaMalloc/cudaFree)",
    "launch": "launching (op dispatch and CUDA launch overhead)",
    "other_host": "other host work (Python outside profiled ops)",
    "queued": "next op already queued (GPU-side latency)",
}


class GapCauses(msgspec.Struct):
    """Per gap, microseconds attributed to each cause (columns in CAUSES order)."""

    time: np.ndarray  # shape (n_gaps, len(CAUSES))
    thread: np.ndarray  # (pid, tid) of the launching thread per gap, as an (n, 2) array
    sync_row: np.ndarray  # host row of the sync call that drained the queue, or -1

    def by_cause_us(self) -> dict[str, float]:
        tot = self.time.sum(axis=0) if len(self.time) else np.zeros(len(CAUSES))
        return {c: float(tot[i]) for i, c in enumerate(CAUSES)}

    def dominant(self) -> np.ndarray:
        """Index of the largest cause per gap."""
        return np.argmax(self.time, axis=1) if len(self.time) else np.zeros(0, dtype=int)


def attribute_gaps(trace: Trace, steps: Steps, timeline: Timeline, launch_rows: np.ndarray) -> GapCauses:
    """Split every idle gap's time among the causes."""
    gaps = timeline.gaps
    n = len(gaps)
    time = np.zeros((n, len(CAUSES)))
    sync_row = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return GapCauses(time, np.zeros((n, 2), dtype=np.int64), sync_row)
    host = trace.host
    launch_t, threads = _ending_launches(trace, gaps, launch_rows)

    queued = launch_t <= gaps.start
    time[queued, QUEUED] = gaps.dur[queued]
    host_end = np.minimum(launch_t, gaps.end)
    time[~queued, LAUNCH] += (gaps.end - host_end)[~queued]  # launch latency after the call

    layers = _cause_rows(trace, launch_rows)
    all_sync_rows = host_calls.sync_call_rows(trace, launch_rows)
    host_key, gap_key = _thread_keys(host, threads)
    layer_rows = [(cause, {k: rows[i] for k, i in by_key(host_key[rows]).items()}) for cause, rows in layers]
    sync_of = {k: all_sync_rows[i] for k, i in by_key(host_key[all_sync_rows]).items()}
    none = np.zeros(0, dtype=np.int64)
    for key, g in by_key(np.where(queued, -1, gap_key)).items():
        if key < 0:
            continue
        a, b = gaps.start[g], host_end[g]
        claimed = iv.EMPTY
        explained = np.zeros(len(g))
        for cause, by_thread in layer_rows:
            rows = by_thread.get(key, none)
            own = iv.union(host.start[rows], host.end[rows])
            part = iv.covered_between(iv.subtract(own, claimed), a, b)
            time[g, cause] += part
            explained += part
            claimed = iv.union(np.concatenate([claimed[0], own[0]]), np.concatenate([claimed[1], own[1]]))
        time[g, OTHER] += np.maximum((b - a) - explained, 0.0)
        _apply_sync_drain(time, sync_row, g, a, b, host, sync_of.get(key, none))
    return GapCauses(time, threads, sync_row)


def _ending_launches(trace: Trace, gaps, launch_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each gap, the launch call of the op that ends it (the first op on the device starting at or after the
    gap's end): its start (the gap's end when none) and its thread (pid, tid; the main thread when none)."""
    host, gpu = trace.host, trace.gpu
    n = len(gaps)
    main = _main_thread(trace, launch_rows)
    launch_t = np.full(n, np.nan)
    threads = np.zeros((n, 2), dtype=np.int64)
    gpu_of_dev = by_key(gpu.device)  # one sort, not a mask per device (linear in devices x ops)
    for dev, g in by_key(gaps.device).items():
        on_dev = gpu_of_dev.get(dev, np.zeros(0, dtype=np.int64))
        k = np.searchsorted(gpu.start[on_dev], gaps.end[g] - 1e-6, side="left")
        has = k < len(on_dev)
        op = np.where(has, on_dev[np.minimum(k, len(on_dev) - 1)], -1)
        row = np.where(op >= 0, launch_rows[np.maximum(op, 0)], -1)
        ok = row >= 0
        launch_t[g[ok]] = host.start[row[ok]]
        threads[g[ok], 0] = host.pid[row[ok]]
        threads[g[ok], 1] = host.tid[row[ok]]
        threads[g[~ok]] = main
    no_launch = np.isnan(launch_t)
    launch_t[no_launch] = gaps.end[no_launch]
    return launch_t, threads


def _thread_keys(host, threads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One key per (pid, tid) over the host rows and the gaps' threads, so rows are grouped by thread once (not
    a mask per thread): pair_ids, a search among the few threads' keys, not a lexsort of every host row."""
    thread_key = pair_ids(np.concatenate([host.pid.astype(np.int64), threads[:, 0]]),
                          np.concatenate([host.tid.astype(np.int64), threads[:, 1]]))
    return thread_key[:len(host)], thread_key[len(host):]


def _apply_sync_drain(time, sync_row, g, a, b, host, sync_rows) -> None:
    """Move a gap's launch and other-host time to `sync` when a sync call returned inside it."""
    if len(sync_rows) == 0:
        return
    ends = host.end[sync_rows]
    order = np.argsort(ends)
    ends, sync_sorted = ends[order], sync_rows[order]
    j = np.searchsorted(ends, b, side="right") - 1
    hit = (j >= 0) & (ends[np.maximum(j, 0)] >= a)
    gh = g[hit]
    sync_row[gh] = sync_sorted[j[hit]]
    time[gh, SYNC] += time[gh, LAUNCH] + time[gh, OTHER]
    time[gh, LAUNCH] = 0.0
    time[gh, OTHER] = 0.0


def _cause_rows(trace: Trace, launch_rows: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """Host rows of each cause, in priority order."""
    return [
        (INPUT, host_calls.dataloader_rows(trace)),
        (SYNC, union1d(host_calls.sync_call_rows(trace, launch_rows), host_calls.sync_op_rows(trace))),
        (COMM, host_calls.comm_rows(trace)),
        (ALLOC, host_calls.alloc_rows(trace)),
        (LAUNCH, host_calls.op_rows(trace)),
    ]


def _main_thread(trace: Trace, launch_rows: np.ndarray) -> tuple[int, int]:
    """The thread that launched the most GPU work (the training loop's thread)."""
    rows = launch_rows[launch_rows >= 0]
    host = trace.host
    if len(rows) == 0:
        if len(host) == 0:
            return (0, 0)
        return int(host.pid[0]), int(host.tid[0])
    ids = pair_ids(host.pid[rows], host.tid[rows])  # numbered in (pid, tid) order: ties go to the first, as before
    first = rows[np.flatnonzero(ids == np.argmax(np.bincount(ids)))[0]]
    return int(host.pid[first]), int(host.tid[first])


class GapSummary(msgspec.Struct):
    """Idle time per cause (the report's `gaps` figures); `traced` keeps the uncorrected ones when the
    profiler-overhead correction applied."""

    by_cause_ms: dict[str, float]  # in total, all devices
    per_step_ms: dict[str, float]  # per step and device
    pct_of_step: dict[str, float]  # of the window's step time
    traced: dict | None = None  # {"per_step_ms", "pct_of_step"} as traced, when corrected


def summarize(causes: GapCauses, window: Window) -> GapSummary:
    """Idle time per cause in ms: in total (all devices), per step and as a share of step time (per device,
    through the one normalizer of analysis/one_trace/window.py)."""
    by = causes.by_cause_us()
    per_step = {c: window.ms(by[c]) for c in CAUSES}
    return GapSummary(by_cause_ms={c: by[c] / 1000 for c in CAUSES}, per_step_ms=per_step,
                      pct_of_step={c: window.pct(per_step[c]) for c in CAUSES})

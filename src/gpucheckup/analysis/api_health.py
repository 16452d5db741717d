"""CUDA API health: runtime calls far slower than usual, and lock contention behind them.

Definitions (also in docs/metrics.md).
- typical duration of a call: the median duration of all calls of that name in the trace.
- slow call: at least SLOW_FACTOR (10) times its typical duration and at least SLOW_FLOOR_US
  (50 us) long. Calls that wait by design (synchronizations, blocking copies) and the
  allocation calls themselves are not judged.
- lock contention: a slow call that overlaps in time an allocation call (cudaMalloc,
  cudaFree, cudaHostAlloc, ...) on another thread. The CUDA driver serialises these on a
  context-wide lock, so a pinned-memory allocation in a DataLoader worker thread can stall
  the training thread's kernel launches.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from gpucheckup.analysis import host_calls
from gpucheckup.trace.tables import DRIVER, RUNTIME, Trace

SLOW_FACTOR = 10.0
SLOW_FLOOR_US = 50.0
MAX_LISTED = 10


@dataclass
class CallStats:
    """One CUDA API call name: how often, how long typically, in total."""

    count: int
    median_us: float
    total_ms: float


@dataclass
class SlowCall:
    """One call far slower than its typical duration."""

    call: str
    thread: str
    dur_us: float
    typical_us: float
    t_us: float


@dataclass
class Contention:
    """Slow calls of one name on one thread that overlapped an allocation on another thread."""

    call: str
    thread: str
    blocker: str
    blocker_thread: str
    count: int
    slow_ms: float
    typical_us: float


@dataclass
class ApiHealth:
    """The report's `cuda_api` figures (calls stay internal)."""

    calls: dict[str, CallStats] = field(default_factory=dict)
    slow_count: int = 0
    slow: list[SlowCall] = field(default_factory=list)
    contention: list[Contention] = field(default_factory=list)


def api_health(trace: Trace, launch_rows: np.ndarray) -> ApiHealth:
    """Per call name: count and typical duration; slow calls; contention with allocations."""
    host = trace.host
    rows = np.flatnonzero((host.cat == RUNTIME) | (host.cat == DRIVER))
    if len(rows) == 0:
        return ApiHealth()
    dur = host.end[rows] - host.start[rows]
    names = host.name[rows]
    uniq, inv = np.unique(names, return_inverse=True)
    # Per name, by one sort (not a mask per name: names x calls on a trace of many names): count, total, median.
    count = np.bincount(inv, minlength=len(uniq))
    total = np.bincount(inv, weights=dur, minlength=len(uniq))
    sd = dur[np.lexsort((dur, inv))]  # durations sorted within each name, names in order
    first = np.concatenate([[0], np.cumsum(count)[:-1]])
    lo, hi = sd[first + (count - 1) // 2], sd[first + count // 2]
    median = np.where(lo == hi, lo, (lo + hi) / 2)
    calls = {
        trace.names[n]: CallStats(count=int(count[i]), median_us=float(median[i]), total_ms=float(total[i]) / 1000)
        for i, n in enumerate(uniq)
    }
    exempt = np.union1d(host_calls.sync_call_rows(trace, launch_rows), host_calls.alloc_rows(trace))
    slow = (dur >= SLOW_FACTOR * median[inv]) & (dur >= SLOW_FLOOR_US) & ~np.isin(rows, exempt)
    slow_rows = rows[slow]

    alloc = host_calls.alloc_rows(trace)
    contention = []
    pairs: dict[tuple, dict] = defaultdict(lambda: {"count": 0, "slow_ms": 0.0, "typical_us": 0.0})
    for r in slow_rows:
        other = alloc[
            (host.start[alloc] < host.end[r]) & (host.end[alloc] > host.start[r])
            & ((host.tid[alloc] != host.tid[r]) | (host.pid[alloc] != host.pid[r]))
        ]
        if len(other) == 0:
            continue
        o = other[np.argmax(host.end[other] - host.start[other])]
        key = (trace.names[host.name[r]], _thread(trace, r), trace.names[host.name[o]], _thread(trace, o))
        p = pairs[key]
        p["count"] += 1
        p["slow_ms"] += float(host.end[r] - host.start[r]) / 1000
        p["typical_us"] = calls[key[0]].median_us
    for (call, thread, blocker, blocker_thread), p in sorted(pairs.items(), key=lambda kv: -kv[1]["slow_ms"]):
        contention.append(Contention(call, thread, blocker, blocker_thread, p["count"], p["slow_ms"], p["typical_us"]))
    slow_list = sorted(
        (SlowCall(call=trace.names[host.name[r]], thread=_thread(trace, r), dur_us=float(host.end[r] - host.start[r]),
                  typical_us=calls[trace.names[host.name[r]]].median_us, t_us=float(host.start[r]))
         for r in slow_rows),
        key=lambda s: -s.dur_us,
    )[:MAX_LISTED]
    return ApiHealth(calls=calls, slow_count=int(len(slow_rows)), slow=slow_list, contention=contention[:MAX_LISTED])


def _thread(trace: Trace, row: int) -> str:
    """A thread's name as the trace labels it, else its id."""
    key = (int(trace.host.pid[row]), int(trace.host.tid[row]))
    name = trace.thread_names.get(key)
    return name if name else f"thread {key[1]}"

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

import msgspec
import numpy as np

from gpucheckup.analysis.one_trace.host import host_calls
from gpucheckup.analysis.distinct import union1d, unique
from gpucheckup.analysis.groups import pair_ids
from gpucheckup.trace.tables import DRIVER, RUNTIME, Trace

SLOW_FACTOR = 10.0
SLOW_FLOOR_US = 50.0
MAX_LISTED = 10


class CallStats(msgspec.Struct):
    """One CUDA API call name: how often, how long typically, in total."""

    count: int
    median_us: float
    total_ms: float


class SlowCall(msgspec.Struct):
    """One call far slower than its typical duration."""

    call: str
    thread: str
    dur_us: float
    typical_us: float
    t_us: float


class Contention(msgspec.Struct):
    """Slow calls of one name on one thread that overlapped an allocation on another thread."""

    call: str
    thread: str
    blocker: str
    blocker_thread: str
    count: int
    slow_ms: float
    typical_us: float


class ApiHealth(msgspec.Struct):
    """The report's `cuda_api` figures (calls stay internal)."""

    calls: dict[str, CallStats] = msgspec.field(default_factory=dict)
    slow_count: int = 0
    slow: list[SlowCall] = msgspec.field(default_factory=list)
    contention: list[Contention] = msgspec.field(default_factory=list)


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
    exempt = union1d(host_calls.sync_call_rows(trace, launch_rows), host_calls.alloc_rows(trace))
    slow = (dur >= SLOW_FACTOR * median[inv]) & (dur >= SLOW_FLOOR_US) & ~np.isin(rows, exempt)
    slow_rows = rows[slow]

    alloc = host_calls.alloc_rows(trace)
    blocker = longest_overlapping(host, slow_rows, alloc)
    contention = []
    pairs: dict[tuple, dict] = defaultdict(lambda: {"count": 0, "slow_ms": 0.0, "typical_us": 0.0})
    for r, o in zip(slow_rows, blocker):
        if o < 0:
            continue
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


def longest_overlapping(host, rows: np.ndarray, alloc: np.ndarray) -> np.ndarray:
    """Per row of `rows`: the longest row of `alloc` overlapping it in time on another thread (the first in
    `alloc` among equally long ones), else -1.

    Overlap: alloc start < row end and alloc end > row start (rows must last > 0). One segment tree over
    the allocations' times, each node holding the best allocation and the best on another thread than
    that one, so that a query can skip its own thread: O((rows + alloc) log alloc), not rows x alloc.
    """
    out = np.full(len(rows), -1, dtype=np.int64)
    if len(rows) == 0 or len(alloc) == 0:
        return out
    pid = np.concatenate([host.pid[alloc], host.pid[rows]])
    tid = np.concatenate([host.tid[alloc], host.tid[rows]])
    thread = pair_ids(pid, tid)
    a_thread, r_thread = thread[: len(alloc)], thread[len(alloc):]
    a_start, a_end = host.start[alloc], host.end[alloc]
    # rank: larger is better; longer first, then earlier in `alloc`
    order = np.lexsort((np.arange(len(alloc)), -(a_end - a_start)))
    rank = np.empty(len(alloc), dtype=np.int64)
    rank[order] = np.arange(len(alloc) - 1, -1, -1)
    by_rank = order[::-1]  # by_rank[k]: the allocation of rank k
    # Leaves: 2i is the time xs[i], 2i+1 the open gap (xs[i], xs[i+1]). An allocation covers the open interval
    # (start, end), or its one time when it lasts 0; a row, the open interval (start, end).
    xs = unique(np.concatenate([a_start, a_end]))
    size = 1 << max(0, int(2 * len(xs) - 2).bit_length())
    i, j = np.searchsorted(xs, a_start), np.searchsorted(xs, a_end)
    lo, hi = np.where(j > i, 2 * i + 1, 2 * i), np.where(j > i, 2 * j - 1, 2 * i)
    item, node = (np.concatenate(x) for x in zip(*_cover(lo, hi, size)))
    here = _best_per_node(node, rank[item], a_thread[item], 2 * size)
    sub = [a.copy() for a in here]
    level = size // 2
    while level >= 1:  # sub[v]: every allocation held at v or below
        v = np.arange(level, 2 * level)
        merged = _merge(_merge(_at(here, v), _at(sub, 2 * v)), _at(sub, 2 * v + 1))
        for a, m in zip(sub, merged):
            a[v] = m
        level //= 2
    r_start, r_end = host.start[rows], host.end[rows]
    qlo = np.maximum(2 * np.searchsorted(xs, r_start, side="right") - 1, 0)
    qhi = np.minimum(2 * (np.searchsorted(xs, r_end, side="left") - 1) + 1, 2 * len(xs) - 2)
    q = np.flatnonzero(qlo <= qhi)
    acc = tuple(np.full(len(q), -1, dtype=np.int64) for _ in range(4))
    for qi, qnode in _cover(qlo[q], qhi[q], size):  # each query at most once per piece
        merged = _merge(_at(acc, qi), _at(sub, qnode))
        for a, m in zip(acc, merged):
            a[qi] = m
    for leaf in (qlo[q], qhi[q]):  # the allocations held on the path to either end cover an end: they overlap
        v = leaf + size
        while np.any(v > 0):
            acc = _merge(acc, _at(here, v))
            v = v >> 1
    k1, t1, k2, _ = acc
    best = np.where(t1 != r_thread[q], k1, k2)
    out[q] = np.where(best >= 0, alloc[by_rank[np.maximum(best, 0)]], -1)
    return out


def _cover(lo: np.ndarray, hi: np.ndarray, size: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The segment tree nodes that together cover leaves lo..hi of each range, as (range index, node) pieces,
    a range at most once in each piece."""
    pieces = []
    idx = np.arange(len(lo))
    left, right = lo + size, hi + size + 1
    keep = left < right
    idx, left, right = idx[keep], left[keep], right[keep]
    while len(idx):
        take = (left & 1) == 1
        pieces.append((idx[take], left[take]))
        left = left + take
        take = (right & 1) == 1
        right = right - take
        pieces.append((idx[take], right[take]))
        left, right = left >> 1, right >> 1
        keep = left < right
        idx, left, right = idx[keep], left[keep], right[keep]
    return pieces or [(idx, idx)]


def _best_per_node(node, rank, thread, n_nodes):
    """Per node: the best rank and its thread, and the best rank on another thread and that thread (-1: none)."""
    out = tuple(np.full(n_nodes, -1, dtype=np.int64) for _ in range(4))
    if len(node) == 0:
        return out
    o = np.lexsort((-rank, node))
    node, rank, thread = node[o], rank[o], thread[o]
    head = np.flatnonzero(np.r_[True, node[1:] != node[:-1]])
    group = np.repeat(np.arange(len(head)), np.diff(np.r_[head, len(node)]))
    out[0][node[head]], out[1][node[head]] = rank[head], thread[head]
    other = np.flatnonzero(thread != thread[head][group])
    first = other[np.r_[True, group[other][1:] != group[other][:-1]]] if len(other) else other
    out[2][node[first]], out[3][node[first]] = rank[first], thread[first]
    return out


def _at(summary, v):
    """The summaries of nodes v."""
    return tuple(a[v] for a in summary)


def _merge(a, b):
    """The summary of the union of two summaries' allocations."""
    k1a, t1a, k2a, t2a = a
    k1b, t1b, k2b, t2b = b
    a_wins = k1a >= k1b
    k1, t1 = np.where(a_wins, k1a, k1b), np.where(a_wins, t1a, t1b)
    wk, wt = np.where(a_wins, k2a, k2b), np.where(a_wins, t2a, t2b)  # the winner's best on another thread
    lk1, lt1 = np.where(a_wins, k1b, k1a), np.where(a_wins, t1b, t1a)
    lk2, lt2 = np.where(a_wins, k2b, k2a), np.where(a_wins, t2b, t2a)
    lose_k, lose_t = np.where(lt1 != t1, lk1, lk2), np.where(lt1 != t1, lt1, lt2)
    w = wk >= lose_k
    return k1, t1, np.where(w, wk, lose_k), np.where(w, wt, lose_t)


def _thread(trace: Trace, row: int) -> str:
    """A thread's name as the trace labels it, else its id."""
    key = (int(trace.host.pid[row]), int(trace.host.tid[row]))
    name = trace.thread_names.get(key)
    return name if name else f"thread {key[1]}"

"""Interval arithmetic on numpy arrays: union, difference, and covered length in a window.

An interval set is a pair of float arrays (starts, ends). `union` returns a normalised set:
sorted, disjoint, no empty intervals. The other functions take normalised sets.
"""

from __future__ import annotations

import numpy as np

from gpucheckup.analysis.distinct import unique

Intervals = tuple[np.ndarray, np.ndarray]

EMPTY: Intervals = (np.zeros(0), np.zeros(0))


def union(starts: np.ndarray, ends: np.ndarray) -> Intervals:
    """Merge possibly overlapping intervals into a sorted disjoint set."""
    starts = np.asarray(starts, dtype=np.float64)
    ends = np.asarray(ends, dtype=np.float64)
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    if len(starts) == 0:
        return EMPTY
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(s) - 1)
    return s[first], reach[last]


def total(iv: Intervals) -> float:
    """Summed length of a normalised set."""
    return float(np.sum(iv[1] - iv[0]))


def clip(iv: Intervals, lo: float, hi: float) -> Intervals:
    """The part of a normalised set inside [lo, hi]."""
    s, e = np.maximum(iv[0], lo), np.minimum(iv[1], hi)
    keep = e > s
    return s[keep], e[keep]


def covered(iv: Intervals, t: np.ndarray | float) -> np.ndarray:
    """Length of the normalised set lying before each time t (a non-decreasing function of t)."""
    return Coverage(iv).before(t)


def covered_between(iv: Intervals, lo, hi) -> np.ndarray:
    """Length of the normalised set inside each window [lo, hi]."""
    return Coverage(iv).between(lo, hi)


class Coverage:
    """`covered` and `covered_between` of one normalised set, its running length summed once (for many
    windows asked one at a time)."""

    def __init__(self, iv: Intervals):
        self.s, self.e = iv
        self.length = self.e - self.s
        self.cum = np.concatenate(([0.0], np.cumsum(self.length))) if len(self.s) else None

    def before(self, t: np.ndarray | float) -> np.ndarray:
        """Length of the set lying before each time t."""
        s, length = self.s, self.length
        t = np.asarray(t, dtype=np.float64)
        if self.cum is None:
            return np.zeros_like(t)
        i = np.searchsorted(s, t, side="right")  # intervals starting at or before t
        partial = np.where(i > 0, np.clip(t - s[np.maximum(i - 1, 0)], 0.0, length[np.maximum(i - 1, 0)]), 0.0)
        return self.cum[np.maximum(i - 1, 0)] * (i > 0) + partial

    def between(self, lo, hi) -> np.ndarray:
        """Length of the set inside each window [lo, hi]."""
        return np.maximum(self.before(hi) - self.before(lo), 0.0)


def subtract(a: Intervals, b: Intervals) -> Intervals:
    """The parts of normalised set a not covered by normalised set b."""
    if len(a[0]) == 0 or len(b[0]) == 0:
        return a
    # Boundaries of a and b, then keep the elementary pieces inside a and outside b.
    cuts = unique(np.concatenate([a[0], a[1], b[0], b[1]]))
    lo, hi = cuts[:-1], cuts[1:]
    mid = (lo + hi) / 2
    in_a = _contains(a, mid)
    in_b = _contains(b, mid)
    keep = in_a & ~in_b
    return union(lo[keep], hi[keep])


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """The parts covered by both normalised sets."""
    if len(a[0]) == 0 or len(b[0]) == 0:
        return EMPTY
    return subtract(a, subtract(a, b))


def _contains(iv: Intervals, t: np.ndarray) -> np.ndarray:
    """Whether each time t lies strictly inside an interval of a normalised set."""
    i = np.searchsorted(iv[0], t, side="right") - 1
    ok = i >= 0
    return ok & (t < iv[1][np.maximum(i, 0)])


def gaps(iv: Intervals, lo: float, hi: float) -> Intervals:
    """The uncovered stretches of [lo, hi] (the complement of a normalised set in the window)."""
    s, e = clip(iv, lo, hi)
    starts = np.concatenate(([lo], e))
    ends = np.concatenate((s, [hi]))
    keep = ends > starts
    return starts[keep], ends[keep]


def inside_any(t: np.ndarray, thread: np.ndarray, starts: np.ndarray, ends: np.ndarray,
               threads: np.ndarray) -> np.ndarray:
    """Per point (time t on a thread): whether some interval [start, end] on the same thread holds it. One sort
    and one sorted search per thread that has intervals: a point is inside the union when the latest end among
    the intervals starting at or before it reaches it (no pass over all points per interval)."""
    t = np.asarray(t, dtype=np.float64)
    out = np.zeros(len(t), dtype=bool)
    keep = starts <= ends  # an empty or NaN interval holds no point
    starts, ends, threads = starts[keep], ends[keep], threads[keep]
    if len(starts) == 0 or len(t) == 0:
        return out
    for th in unique(threads).tolist():
        mine = threads == th
        order = np.argsort(starts[mine], kind="stable")
        s, reach = starts[mine][order], np.maximum.accumulate(ends[mine][order])
        at = np.flatnonzero(thread == th)
        last = np.searchsorted(s, t[at], side="right") - 1  # the last interval starting at or before the point
        out[at] = (last >= 0) & (reach[np.maximum(last, 0)] >= t[at])
    return out

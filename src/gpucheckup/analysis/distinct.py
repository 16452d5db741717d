"""Distinct values, medians and percentiles of arrays, as numpy gives them, without importing numpy.ma.

numpy 2.4 imports numpy.ma (~12-16 ms, with inspect and tokenize) on the first call in a process of
`np.unique(a)` with no `return_*` argument (it asks `np.ma.is_masked(a)`; with `return_counts` it takes the
sorting path, which never does), of `np.union1d` and `np.percentile` (which call it), and of `np.median` of
floats (its NaN check asks `np.ma.isMaskedArray`). A check-up never needs numpy.ma: every sorted-unique, union,
whole-array median and single percentile in gpucheckup goes through here, with numpy's own result.
"""

from __future__ import annotations

import numpy as np


def unique(a) -> np.ndarray:
    """The sorted distinct values of a, flattened, in a's dtype, NaNs as one (np.unique(a)'s result)."""
    return np.unique(a, return_counts=True)[0]


def union1d(a, b) -> np.ndarray:
    """The sorted distinct values found in a or b (np.union1d(a, b)'s result)."""
    return unique(np.concatenate((a, b), axis=None))


def median(a) -> np.generic:
    """The median of all of a's values (np.median(a)'s result: the mean of the middle one or two, NaN if any is)."""
    a = np.asanyarray(a)
    if a.size == 0 or a.dtype.kind != "f":  # np.median's NaN check, the one use of numpy.ma, is for floats
        return np.median(a)
    half = a.size // 2
    kth = [half - 1, half, -1] if a.size % 2 == 0 else [half, -1]
    part = np.partition(a, kth, axis=None)
    mid = np.mean(part[half - 1:half + 1] if a.size % 2 == 0 else part[half:half + 1], axis=0)
    return part[-1] if np.isnan(part[-1]) else mid


def percentile(a, q: float) -> np.generic:
    """The q-th percentile of all of a's values, linear between neighbours (np.percentile(a, q)'s result)."""
    a = np.asanyarray(a)
    if a.size == 0 or a.dtype.kind not in "biuf" or type(q) not in (int, float) or not 0 <= q <= 100:
        return np.percentile(a, q)  # (np.percentile's other paths ask np.unique for its partition points)
    arr = a.flatten()
    n = arr.size
    virtual = (n - 1) * np.true_divide(q, 100)
    lo = hi = -1 if virtual >= n - 1 else int(np.floor(virtual))
    hi = hi if lo == -1 else lo + 1
    arr.partition(unique(np.array([0, -1, lo, hi]) % n))
    if arr.dtype.kind == "f" and np.isnan(arr[-1]):
        return arr[-1]
    t = float(virtual - lo)
    a0, b0 = arr[lo], arr[hi]
    diff = b0 - a0  # numpy's linear interpolation, done its way: from the nearer neighbour
    out = np.add(a0, diff * t, out=...)
    np.subtract(b0, diff * (1 - t), out=out, where=t >= 0.5, casting="unsafe", dtype=type(out.dtype))
    return out[()]

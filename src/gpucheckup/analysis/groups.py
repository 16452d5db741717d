"""Rows grouped by a key (a device, a thread, a name) with one stable sort: a mask per key instead costs
keys x rows, which a trace of many devices, threads or names turns quadratic."""

from __future__ import annotations

import numpy as np

from gpucheckup.analysis.distinct import union1d, unique  # np.unique and np.union1d import numpy.ma


def by_key(keys: np.ndarray) -> dict[int, np.ndarray]:
    """The positions of each distinct key, in increasing order, keys in increasing order."""
    keys = np.asarray(keys)
    order = np.argsort(keys, kind="stable")
    k = keys[order]
    cuts = np.flatnonzero(k[1:] != k[:-1]) + 1
    return {int(k[s]): order[s:e] for s, e in zip(np.r_[0, cuts], np.r_[cuts, len(k)]) if e > s}



def pair_ids(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A dense id per distinct (a, b) pair (a thread: pid and tid), ordered as the pairs are; exact for any
    integers. Where both are signed and fit one int64 key without collision (their ranges' product under 2**63),
    each row's key is found by sorted search among the distinct keys (a few threads: a search in a short array,
    linear in the rows), else by a sort of both columns."""
    a, b = np.asarray(a), np.asarray(b)
    if len(a) and a.dtype.kind == "i" and b.dtype.kind == "i":
        a0, b0 = int(a.min()), int(b.min())
        span_b = int(b.max()) - b0 + 1
        if (int(a.max()) - a0 + 1) * span_b < 2**63:
            key = (a.astype(np.int64) - a0) * span_b + (b.astype(np.int64) - b0)  # (a, b) order, no overflow
            return _dense(key)
    order = np.lexsort((b, a))
    ids = np.empty(len(order), dtype=np.int64)
    ids[order] = np.cumsum(np.r_[True, (a[order][1:] != a[order][:-1]) | (b[order][1:] != b[order][:-1])]) - 1
    return ids


def _dense(key: np.ndarray) -> np.ndarray:
    """Each key's rank among the distinct keys: searched among those of a sample, then of the keys it missed."""
    distinct = unique(key[:: max(1, len(key) // 4096)])
    at = np.minimum(np.searchsorted(distinct, key), len(distinct) - 1)
    missed = distinct[at] != key
    if missed.any():
        distinct = union1d(distinct, key[missed])
        at = np.searchsorted(distinct, key)
    return at.astype(np.int64)

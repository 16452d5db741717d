"""Rows grouped by a key (a device, a thread, a name) with one stable sort: a mask per key instead costs
keys x rows, which a trace of many devices, threads or names turns quadratic."""

from __future__ import annotations

import numpy as np


def by_key(keys: np.ndarray) -> dict[int, np.ndarray]:
    """The positions of each distinct key, in increasing order, keys in increasing order."""
    keys = np.asarray(keys)
    order = np.argsort(keys, kind="stable")
    k = keys[order]
    cuts = np.flatnonzero(k[1:] != k[:-1]) + 1
    return {int(k[s]): order[s:e] for s, e in zip(np.r_[0, cuts], np.r_[cuts, len(k)]) if e > s}



def pair_ids(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A dense id per distinct (a, b) pair (a thread: pid and tid), ordered as the pairs are; exact for any
    integers (no packing of both into one that large ids could make collide)."""
    a, b = np.asarray(a), np.asarray(b)
    order = np.lexsort((b, a))
    ids = np.empty(len(order), dtype=np.int64)
    ids[order] = np.cumsum(np.r_[True, (a[order][1:] != a[order][:-1]) | (b[order][1:] != b[order][:-1])]) - 1
    return ids

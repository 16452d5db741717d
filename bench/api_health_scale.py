"""Benchmark: lock contention (api_health.longest_overlapping) against the pairwise definition it replaced.

N slow calls on two threads beside N allocation calls of random length on three threads, random times over
200 x N us (the shape of the 57 MB trace with 12,000 of each that took 1.3 s pairwise). Prints, per N, the
seconds of the segment tree and of the pairwise loop (one mask over the allocations per slow call; skipped
past --pairwise-max), and whether the two agree on every call.

Usage: python bench/api_health_scale.py [--sizes 1000,12000,100000,400000] [--pairwise-max 12000]
"""

from __future__ import annotations

import argparse
import time
import types

import numpy as np

from gpucheckup.analysis.one_trace.host.api_health import longest_overlapping


def pairwise(host, rows, alloc) -> np.ndarray:
    """The old definition, one slow call at a time (a mask over every allocation): the longest allocation
    overlapping it on another thread, the first in `alloc` among equally long ones (tests/test_api_health.py
    holds the segment tree to it)."""
    out = np.full(len(rows), -1, dtype=np.int64)
    for k, r in enumerate(rows):
        other = alloc[(host.start[alloc] < host.end[r]) & (host.end[alloc] > host.start[r])
                      & ((host.tid[alloc] != host.tid[r]) | (host.pid[alloc] != host.pid[r]))]
        if len(other):
            out[k] = other[np.argmax(host.end[other] - host.start[other])]
    return out


def case(n: int, seed: int = 0):
    """Host rows: n slow calls (rows 0..n-1) then n allocations."""
    rng = np.random.default_rng(seed)
    start = rng.uniform(0, 200.0 * n, 2 * n)
    dur = np.r_[rng.integers(60, 400, n), rng.integers(1, 600, n)].astype(float)
    tid = np.r_[1 + np.arange(n) % 2, 1 + np.arange(n) % 3]
    host = types.SimpleNamespace(start=start, end=start + dur, pid=np.ones(2 * n, dtype=np.int64), tid=tid)
    return host, np.arange(n), np.arange(n, 2 * n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,12000,100000,400000")
    ap.add_argument("--pairwise-max", type=int, default=12000)
    args = ap.parse_args()
    print(f"{'N':>8} {'tree s':>8} {'pairwise s':>11} {'overlaps':>9} same")
    for n in (int(x) for x in args.sizes.split(",")):
        host, rows, alloc = case(n)
        t = time.perf_counter()
        got = longest_overlapping(host, rows, alloc)
        tree = time.perf_counter() - t
        if n <= args.pairwise_max:
            t = time.perf_counter()
            ref = pairwise(host, rows, alloc)
            pair, same = f"{time.perf_counter() - t:11.3f}", str(bool(np.array_equal(got, ref)))
        else:
            pair, same = f"{'-':>11}", "-"
        print(f"{n:>8} {tree:8.3f} {pair} {int((got >= 0).sum()):>9} {same}")


if __name__ == "__main__":
    main()

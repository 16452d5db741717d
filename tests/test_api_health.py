"""Lock contention by one segment tree equals the pairwise definition (each slow call against every allocation)."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import REPO, write_trace
from gpucheckup.analysis.one_trace.host import api_health as api_health_module
from gpucheckup.analysis.one_trace.host import host_calls
from gpucheckup.analysis.one_trace.host.api_health import api_health, longest_overlapping
from gpucheckup.analysis.checkup import analyze
from gpucheckup.trace import read_trace

sys.path.insert(0, str(REPO / "bench"))
from api_health_scale import pairwise  # noqa: E402  the old definition, one slow call at a time (one copy)


def by_hand(events, rows, alloc) -> list[int]:
    """The same in plain Python on (start, end, thread) tuples: no numpy, no tie rule borrowed from argmax."""
    out = []
    for r in rows:
        s, e, thread = events[r]
        best = -1
        for a in alloc:
            a_s, a_e, a_thread = events[a]
            if a_s < e and a_e > s and a_thread != thread and (best < 0 or a_e - a_s > events[best][1] - events[best][0]):
                best = a
        out.append(best)
    return out


event = st.tuples(st.integers(0, 12), st.integers(0, 4), st.integers(0, 3))  # start, duration, thread


@settings(max_examples=400, deadline=None, derandomize=True)
@given(st.lists(event, min_size=1, max_size=40), st.randoms(use_true_random=False))
def test_longest_overlapping_equals_a_plain_loop_on_small_inputs(evs, rnd):
    """Small integer times, so that starts, ends and equal durations coincide often."""
    n = len(evs)
    start = np.array([float(s) for s, _, _ in evs])
    end = start + np.array([float(d) for _, d, _ in evs])
    thread = np.array([t for _, _, t in evs])
    host = types.SimpleNamespace(start=start, end=end, pid=thread // 2, tid=thread % 2)
    is_alloc = [rnd.random() < 0.5 for _ in range(n)]
    alloc = np.array([i for i in range(n) if is_alloc[i]], dtype=np.int64)
    rows = np.array([i for i in range(n) if not is_alloc[i] and end[i] > start[i]], dtype=np.int64)  # slow calls last
    events = [(float(start[i]), float(end[i]), int(thread[i])) for i in range(n)]
    got = longest_overlapping(host, rows, alloc)
    assert got.tolist() == by_hand(events, rows.tolist(), alloc.tolist())


@pytest.mark.parametrize("case", ["h200/alloc_churn/trace.json.gz", "h200/item_checks/trace.json.gz",
                                  "h200x2/ddp_slow_input/traces/rank0.json.gz"])
def test_longest_overlapping_equals_the_pairwise_definition_on_real_traces(case):
    """Real times and threads (three in the DDP rank): every host event that lasts against the real allocation
    calls, and against every host event taken as an allocation (thousands of overlaps across threads)."""
    tr = read_trace(REPO / "tests/data" / case)
    host = tr.host
    rows = np.flatnonzero(host.end > host.start)
    for alloc in (host_calls.alloc_rows(tr), np.arange(len(host.start))):
        got = longest_overlapping(host, rows, alloc)
        assert np.array_equal(got, pairwise(host, rows, alloc))
    assert (got >= 0).sum() > 1000  # the comparison is not all -1


def _contention_trace(n: int, seed: int = 0) -> list[dict]:
    """n slow cudaEventRecord calls (the typical one lasts 5 us) on two threads beside n allocation calls of
    random length on three threads, over one step of GPU work."""
    rng = np.random.default_rng(seed)
    span = 200.0 * n
    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": span},
          {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1, "dur": 5,
           "args": {"correlation": 1}},
          {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": span / 2,
           "args": {"correlation": 1, "device": 0, "stream": 7}}]
    for i in range(2 * n + 1):  # the typical cudaEventRecord
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaEventRecord", "pid": 1, "tid": 1 + i % 2,
                   "ts": float(rng.uniform(0, span)), "dur": 5.0})
    for i in range(n):
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaEventRecord", "pid": 1, "tid": 1 + i % 2,
                   "ts": float(rng.uniform(0, span)), "dur": float(rng.integers(60, 400))})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": ["cudaHostAlloc", "cudaMalloc", "cudaFree"][i % 3],
                   "pid": 1, "tid": 1 + i % 3, "ts": float(rng.uniform(0, span)), "dur": float(rng.integers(1, 600))})
    return ev


def test_contention_equals_the_pairwise_definition_on_a_large_trace(tmp_path, monkeypatch):
    """6,000 slow calls beside 6,000 allocations: the whole `cuda_api` result equals the one the pairwise
    definition gives (names, threads, counts, times and order of the contention list)."""
    tr = read_trace(write_trace(tmp_path / "t.json", _contention_trace(6000)))
    launch_rows = analyze(tr).launch_rows
    new = api_health(tr, launch_rows)
    monkeypatch.setattr(api_health_module, "longest_overlapping", pairwise)
    old = api_health(tr, launch_rows)
    assert new.slow_count == 6000
    assert sum(c.count for c in new.contention) > 1000
    assert new == old

"""The input pipeline's figures (analysis/one_trace/host/dataloader.py; docs/metrics.md "dataloader %", "workers to keep
pace"): the worker count against a plain search over worker counts, its cap at the boundary, and the per-step waits
of a small synthetic trace worked out by hand."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from conftest import write_trace
from gpucheckup.analysis.checkup import analyze
from gpucheckup.analysis.one_trace.host.dataloader import workers_to_keep_pace
from gpucheckup.trace import read_trace

SINGLE = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
MULTI = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"


def plain_workers(load_ms: float, step_ms: float) -> int:
    """The fewest workers N of 1..32 whose batches (N per L ms) arrive at least once per R = step - L ms, i.e.
    N x R >= L; 32 when none does; 0 when nothing is loaded."""
    if load_ms <= 0:
        return 0
    rest = step_ms - load_ms
    return next((n for n in range(1, 33) if n * rest >= load_ms), 32)


@settings(max_examples=300, deadline=None)
@given(load=st.integers(-5, 5000), rest=st.integers(-100, 5000))
def test_workers_to_keep_pace_is_the_fewest_that_keep_up(load, rest):
    # whole milliseconds, so that L / R is exact where it is a whole number
    assert workers_to_keep_pace(float(load), float(load + rest)) == plain_workers(load, load + rest)


def test_the_worker_count_at_its_boundaries():
    assert workers_to_keep_pace(0.0, 10.0) == 0  # nothing loaded in the process
    assert workers_to_keep_pace(30.0, 60.0) == 1  # L = R: one worker loads a batch while the rest runs
    assert workers_to_keep_pace(30.0, 59.0) == 2  # L just above R: two
    assert workers_to_keep_pace(1.0, 100.0) == 1  # at least one
    assert workers_to_keep_pace(64.0, 66.0) == 32  # R = L / 32 exactly: 32 workers, the cap
    assert workers_to_keep_pace(62.0, 64.0) == 31  # R = 2, L = 62: 31 keep pace, under the cap
    assert workers_to_keep_pace(64.0, 64.0) == 32  # all loading: the cap


def ev(name, ts, dur, tid=1):
    return {"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": {}}


def kernel(ts, dur, corr):
    return [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts - 10,
             "dur": 5, "args": {"correlation": corr}},
            {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": ts, "dur": dur,
             "args": {"device": 0, "stream": 7, "correlation": corr}}]


def stats(tmp_path, loader):
    # three 10 ms steps; waits in __next__: step 1 [0, 4000] and an overlapping one [2000, 5000] on another thread
    # (their union: 5 ms), step 2 [10000, 11500] (1.5 ms), step 3 none, plus one outside every step [35000, 36000]
    events = [ev("ProfilerStep#1", 0, 10000), ev("ProfilerStep#2", 10000, 10000), ev("ProfilerStep#3", 20000, 10000),
              ev(loader, 0, 4000), ev(loader, 2000, 3000, tid=2), ev(loader, 10000, 1500), ev(loader, 35000, 1000),
              *kernel(6000, 3000, 1), *kernel(16000, 3000, 2), *kernel(26000, 3000, 3)]
    return analyze(read_trace(write_trace(tmp_path / "t.json", events))).dataloader


def test_the_waits_per_step_are_their_union_inside_each_step(tmp_path):
    d = stats(tmp_path, SINGLE)
    assert d.present and d.count == 4 and d.iterators == [SINGLE]
    assert d.per_step_ms == pytest.approx([5.0, 1.5, 0.0])
    assert d.median_ms == pytest.approx(1.5)
    # 6.5 ms of 30 ms of steps: 21.67% of the 10 ms step, 2.167 ms per step
    assert d.ms_per_step == pytest.approx(6.5 / 3) and d.pct_of_step == pytest.approx(650 / 30)
    # L = 2.167 ms, R = 7.833 ms: one in-process worker keeps pace
    assert d.workers_to_keep_pace == 1


def test_a_loader_with_workers_is_not_given_a_worker_count(tmp_path):
    d = stats(tmp_path, MULTI)
    assert d.ms_per_step == pytest.approx(6.5 / 3) and d.workers_to_keep_pace == 0

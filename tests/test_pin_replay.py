"""The replay (whatif/replay.py) on tiny synthetic traces whose replayed step windows are worked out by hand:
unchanged, the replay cuts steps by the rule of steps.py, step ends never going back (a step whose GPU work is
outlasted by the previous step's gets an empty window), and a host call that waits on the GPU moves with it."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import write_trace
from gpucheckup.whatif import replay
from gpucheckup.trace import read_trace


def ev(cat, name, ts, dur, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def launch(t, k_start, k_end, corr):
    return [ev("cuda_runtime", "cudaLaunchKernel", t, 1, correlation=corr),
            {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": k_start, "dur": k_end - k_start,
             "args": {"device": 0, "stream": 7, "correlation": corr}}]


def step(i, start, end):
    return ev("user_annotation", f"ProfilerStep#{i}", start, end - start)


def replayed(tmp_path, events):
    g = replay.build(read_trace(write_trace(tmp_path / "t.json", events)))
    return g, replay.replay(g)


def test_unchanged_replay_keeps_step_ends_monotone(tmp_path):
    # step 1's kernel runs to 2500, through all of step 2 (which launches nothing): windows [0, 2500],
    # [2500, 2500], [2500, 3000], as measured
    events = [step(1, 0, 1000), step(2, 1000, 2000), step(3, 2000, 3000)] + launch(10, 20, 2500, 1)
    _, r = replayed(tmp_path, events)
    assert r.start.tolist() == pytest.approx([0, 2500, 2500])
    assert r.end.tolist() == pytest.approx([2500, 2500, 3000])
    assert r.duration.tolist() == pytest.approx([2500, 0, 500])
    assert r.host_end.tolist() == pytest.approx([1000, 2000, 3000])
    assert r.gpu_end[0] == pytest.approx(2500) and np.isnan(r.gpu_end[1:]).all()
    assert r.median_ms == pytest.approx(0.5)


def test_unchanged_replay_reproduces_gpu_past_the_host(tmp_path):
    # step 1 launches at 5 a kernel running [10, 1300], past its host end 1000; step 2 launches at 1305 one running
    # [1310, 1610], within its host end 2000: windows [0, 1300], [1300, 2000]
    events = [step(1, 0, 1000), step(2, 1000, 2000)] + launch(5, 10, 1300, 1) + launch(1305, 1310, 1610, 2)
    _, r = replayed(tmp_path, events)
    assert sorted(r.op_start.tolist()) == pytest.approx([10, 1310])  # 5 us after each call: the latency held
    assert sorted(r.op_end.tolist()) == pytest.approx([1300, 1610])
    assert r.start.tolist() == pytest.approx([0, 1300]) and r.end.tolist() == pytest.approx([1300, 2000])
    assert r.gpu_end.tolist() == pytest.approx([1300, 1610])

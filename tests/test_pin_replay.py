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


LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def test_dataloader_waits_are_the_annotations_own_times(tmp_path):
    # two steps of 1000 us, each waiting in the DataLoader [10, 810] from its start, then launching at 850 a 95 us
    # kernel: unchanged, each wait replays at its annotation's start and end (the dataloader_workers edit cuts the
    # stretch between those two nodes), and an in-process loader is read as one (its name says SingleProcess)
    events = [step(1, 0, 1000), step(2, 1000, 2000), ev("user_annotation", LOADER, 10, 800),
              ev("user_annotation", LOADER, 1010, 800)] + launch(850, 855, 950, 1) + launch(1850, 1855, 1950, 2)
    g, r = replayed(tmp_path, events)
    assert [r.node_start[s] for s, _, _ in g.loaders] == pytest.approx([10, 1010])
    assert [r.node_start[e] for _, e, _ in g.loaders] == pytest.approx([810, 1810])
    assert [p for _, _, p in g.loaders] == [True, True]
    assert r.duration.tolist() == pytest.approx([1000, 1000])


def test_a_call_on_another_thread_inside_a_long_call_keeps_the_host_where_it_was(tmp_path):
    # thread 1: cudaMalloc [100, 500], then at 900 a launch of a kernel [915, 990]; thread 2 launches at 200 (inside
    # the cudaMalloc) a kernel [215, 300], its call ending at 210. The host chain's frontier after the thread-2 call
    # is still 500 (the latest end so far, not the last node's 210): the launch at 900 stays 400 us after it, its
    # kernel at [915, 990], and the step [0, 1000] as measured
    events = [step(1, 0, 1000), ev("cuda_runtime", "cudaMalloc", 100, 400),
              ev("cuda_runtime", "cudaLaunchKernel", 200, 10, tid=2, correlation=1),
              {"ph": "X", "cat": "kernel", "name": "k2", "pid": 0, "tid": 7, "ts": 215, "dur": 85,
               "args": {"device": 0, "stream": 7, "correlation": 1}},
              ev("cuda_runtime", "cudaLaunchKernel", 900, 10, correlation=2),
              {"ph": "X", "cat": "kernel", "name": "k1", "pid": 0, "tid": 7, "ts": 915, "dur": 75,
               "args": {"device": 0, "stream": 7, "correlation": 2}}]
    _, r = replayed(tmp_path, events)
    assert sorted(r.op_start.tolist()) == pytest.approx([215, 915])
    assert sorted(r.op_end.tolist()) == pytest.approx([300, 990])
    assert r.start.tolist() == pytest.approx([0]) and r.end.tolist() == pytest.approx([1000])


def test_the_typical_launch_cost_is_the_median_of_the_launching_calls_only(tmp_path):
    # launch calls of 4 and 6 us (median 5); a kernel [5, 50] whose launch the trace lacks (correlation 99, launched
    # before the window) and a 100 us cudaMalloc after the last step (the chain's last node) are no launch calls
    events = [step(1, 0, 1000), ev("cuda_runtime", "cudaLaunchKernel", 100, 4, correlation=1),
              ev("cuda_runtime", "cudaLaunchKernel", 300, 6, correlation=2),
              ev("cuda_runtime", "cudaMalloc", 1100, 100)]
    for corr, (ts, dur) in ((99, (5, 45)), (1, (110, 90)), (2, (310, 90))):
        events.append({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": ts, "dur": dur,
                       "args": {"device": 0, "stream": 7, "correlation": corr}})
    g, _ = replayed(tmp_path, events)
    assert replay.typical_launch_us(g) == pytest.approx(5.0)


def test_a_read_inside_an_operator_loses_only_the_operator_dispatch_before_it(tmp_path):
    # step [0, 1000], one thread: aten::mm [0, 100] launches at 50 (call [50, 60]) a kernel [65, 500]; Python [100,
    # 300]; aten::item [300, 600] copies to the host (call [400, 590], the copy [500, 505] queued behind the kernel);
    # the host then works to 1000. The host time before the copy call, from the launch call's end (60) to 400, is
    # 340 us, of which operator dispatch (inside operators that launch GPU work) is mm's [60, 100] and item's [300,
    # 400]: 140 us. Removing the read (remove_syncs inside aten::item) takes out that dispatch and the call: the
    # call starts at 60 + 200 = 260 and costs 0, the host's 410 us after it end the step at 670; the kernel ends at
    # 500, the emptied copy after it: step 670 us
    from gpucheckup.whatif import edits

    events = [step(1, 0, 1000), ev("cpu_op", "aten::mm", 0, 100), ev("cpu_op", "aten::item", 300, 300),
              ev("cuda_runtime", "cudaLaunchKernel", 50, 10, correlation=1),
              ev("cuda_runtime", "cudaMemcpyAsync", 400, 190, correlation=2),
              {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 65, "dur": 435,
               "args": {"device": 0, "stream": 7, "correlation": 1}},
              {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pageable)", "pid": 0, "tid": 7,
               "ts": 500, "dur": 5, "args": {"device": 0, "stream": 7, "correlation": 2, "bytes": 4}}]
    g, r = replayed(tmp_path, events)
    assert r.duration.tolist() == pytest.approx([1000])
    p = edits.predict(g, "remove_syncs", ops=frozenset({"aten::item"}))
    assert p.changed == 1 and p.step_ms_before == pytest.approx(1.0) and p.step_ms_after == pytest.approx(0.67)


def test_host_time_per_step_counts_every_positive_gap(tmp_path):
    # step [0, 1000]: ten 2 us launch calls 0.5 us apart from 0.5 (the last ends at 25), each launching a 1 us kernel;
    # an aten::empty [600, 610] launching nothing. The host time the calibration scales is every positive gap and call:
    # 10 x 0.5 + 10 x 2 + the 975 us to the step's end = the whole 1000 us; 12 host events start in the step (the
    # ProfilerStep range, 10 calls, 1 operator). The profiler's cost: 12 events x 0.70 launch calls of 2 us (the median
    # launch call) = 16.8 us of the 1000: host_scale 0.9832
    events = [step(1, 0, 1000), ev("cpu_op", "aten::empty", 600, 10)]
    for i in range(10):
        events += launch(0.5 + 2.5 * i, 5 + 2.5 * i, 6 + 2.5 * i, i + 1)
        events[-2]["dur"] = 2
    g, _ = replayed(tmp_path, events)
    assert replay.host_per_step(g) == pytest.approx((1000.0, 12.0))
    assert replay.event_scale(g) == pytest.approx(1 - 12 * 0.70 * 2 / 1000)



def test_dispatch_is_the_launching_operators_time_in_each_gap(tmp_path):
    # step [0, 1000], one thread: three operators [100, 200], [300, 400], [500, 600], each launching at its start + 50
    # (a 1 us call) a 10 us kernel; Python between them. Each call's gap runs from the previous node's end: the first
    # [0, 150] holds 50 us of its operator; the second [151, 350] the first operator's tail [151, 200] (49 us) and
    # 50 us of its own; the third [351, 550] likewise 49 + 50
    events = [step(1, 0, 1000)]
    for i, t in enumerate((100, 300, 500)):
        events += [ev("cpu_op", "aten::add", t, 100)] + launch(t + 50, t + 60, t + 70, i + 1)
    g, r = replayed(tmp_path, events)
    calls = [j for j, row in enumerate(g.h_row.tolist()) if row >= 0]
    assert [float(g.h_dispatch[j]) for j in calls] == pytest.approx([50, 99, 99])
    assert r.duration.tolist() == pytest.approx([1000])


def test_a_trace_whose_first_host_event_is_a_launch_call_replays(tmp_path):
    # the launch at 10 is the file's first event (host rows keep file order: row 0); its kernel [20, 1500] runs past
    # the host step [0, 1000]: the unchanged replay gives the step as measured, 1500 us, the kernel linked to its call
    g, r = replayed(tmp_path, launch(10, 20, 1500, 1) + [step(1, 0, 1000)])
    assert g.h_row[g.g_launch[0]] == 0
    assert r.duration.tolist() == pytest.approx([1500])

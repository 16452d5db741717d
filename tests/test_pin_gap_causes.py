"""Why the GPU idled (analysis/one_trace/host/gap_causes.py), on one-step synthetic traces whose single gap is split
by hand per docs/metrics.md: the host's stretch [gap start, launch] by the launching thread's state in priority order
(input, sync, communication, allocation, launch, other host), the launch latency [launch, gap end] as launch,
a gap whose next op was already queued as queued, and a sync that returned inside the gap draining it."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import write_trace
from gpucheckup.analysis.one_trace.host import gap_causes
from gpucheckup.analysis.one_trace import launches, steps, timeline, window
from gpucheckup.trace import read_trace

LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def ev(cat, name, ts, dur, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def kernel(t_launch, start, end, corr, tid=1):
    return [ev("cuda_runtime", "cudaLaunchKernel", t_launch, 5, tid=tid, correlation=corr),
            {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": start, "dur": end - start,
             "args": {"device": 0, "stream": 7, "correlation": corr}}]


def causes(tmp_path, host_events, launch_at=550.0, tid=1):
    """One step [0, 1000]; kernels [0, 100] and [600, 1000]: one gap [100, 600], the second kernel launched at
    `launch_at` on thread `tid`. Returns the gap's time per cause, and the summary."""
    events = [ev("user_annotation", "ProfilerStep#1", 0, 1000)] + kernel(0, 0, 100, 1) + kernel(launch_at, 600, 1000,
                                                                                                 2, tid)
    tr = read_trace(write_trace(tmp_path / "t.json", events + host_events))
    rows = launches.launch_rows(tr)
    st = steps.find_steps(tr, rows)
    tl = timeline.gpu_timeline(tr, st)
    assert list(zip(tl.gaps.start.tolist(), tl.gaps.end.tolist())) == [(100, 600)]
    c = gap_causes.attribute_gaps(tr, st, tl, rows)
    got = {k: v for k, v in zip(gap_causes.CAUSES, c.time[0].tolist()) if v}
    return got, gap_causes.summarize(c, window.traced_window(st, 1)), c


def attributed(tmp_path, events):
    """The trace of `events` read back: its gaps as (start, end), each cause's nonzero time in its first gap, and
    the attribution itself."""
    tr = read_trace(write_trace(tmp_path / "t.json", events))
    rows = launches.launch_rows(tr)
    st = steps.find_steps(tr, rows)
    tl = timeline.gpu_timeline(tr, st)
    c = gap_causes.attribute_gaps(tr, st, tl, rows)
    got = {k: v for k, v in zip(gap_causes.CAUSES, c.time[0].tolist()) if v} if len(c.time) else {}
    return list(zip(tl.gaps.start.tolist(), tl.gaps.end.tolist())), got, c


def test_host_stretch_split_by_the_launching_thread_state(tmp_path):
    # [100, 550]: the loader 150-300, an operator 350-450, nothing else (200 us of Python); [550, 600] latency
    got, summary, c = causes(tmp_path, [ev("user_annotation", LOADER, 150, 150), ev("cpu_op", "aten::mm", 350, 100)])
    assert got == pytest.approx({"input": 150, "launch": 100 + 50, "other_host": 200})
    # one 1 ms step on one device: each cause's us are its per-step us and a tenth of them its percent
    assert summary.per_step_ms["other_host"] == pytest.approx(0.2) and summary.pct_of_step["input"] == pytest.approx(15)
    assert summary.by_cause_ms["launch"] == pytest.approx(0.15)
    assert c.dominant().tolist() == [gap_causes.CAUSES.index("other_host")]
    assert c.thread.tolist() == [[1, 1]] and c.sync_row.tolist() == [-1]


def test_priority_input_over_sync_over_comm_over_alloc_over_launch(tmp_path):
    # nested on thread 1 inside [100, 550]: the loader 100-200 over an operator 100-250; an .item() 250-300 over a
    # memcpy-free operator; a collective 300-350; a cudaMalloc 350-400 inside an operator 350-450
    host = [ev("user_annotation", LOADER, 100, 100), ev("cpu_op", "aten::copy_", 100, 150),
            ev("cpu_op", "aten::item", 250, 50), ev("cpu_op", "c10d::allreduce_", 300, 50),
            ev("cuda_runtime", "cudaMalloc", 350, 50), ev("cpu_op", "aten::empty", 350, 100)]
    got, _, _ = causes(tmp_path, host)
    assert got == pytest.approx({"input": 100, "launch": 50 + 50 + 50, "sync": 50, "communication": 50,
                                 "allocation": 50, "other_host": 100})


def test_other_threads_do_not_explain_the_launching_threads_gap(tmp_path):
    got, _, c = causes(tmp_path, [ev("user_annotation", LOADER, 150, 150, tid=2)])  # a loader on thread 2
    assert got == pytest.approx({"launch": 50, "other_host": 450})
    assert c.thread.tolist() == [[1, 1]]


def test_a_next_op_already_queued_is_not_the_hosts_doing(tmp_path):
    got, _, _ = causes(tmp_path, [ev("user_annotation", LOADER, 150, 150)], launch_at=100.0)  # launched at the start
    assert got == pytest.approx({"queued": 500})
    got, _, _ = causes(tmp_path, [], launch_at=100.5)  # just after it: the host's
    assert got == pytest.approx({"launch": 499.5, "other_host": 0.5})


def test_a_sync_returning_inside_the_gap_drained_it(tmp_path):
    # cudaDeviceSynchronize 20-120 returned inside the gap: its 20 us there are sync, and the launch and other-host
    # time too (the GPU idled because the sync emptied its queue); the loader's time stays input
    host = [ev("cuda_runtime", "cudaDeviceSynchronize", 20, 100), ev("user_annotation", LOADER, 200, 100)]
    got, _, c = causes(tmp_path, host)
    assert got == pytest.approx({"sync": 20 + 330 + 50, "input": 100})
    assert c.sync_row[0] >= 0
    # a sync that returned before the gap (ends at 100, the gap's start: inside) and one at 90 (before: not)
    got, _, _ = causes(tmp_path, [ev("cuda_runtime", "cudaDeviceSynchronize", 20, 70)])
    assert got == pytest.approx({"launch": 50, "other_host": 450})
    got, _, _ = causes(tmp_path, [ev("cuda_runtime", "cudaDeviceSynchronize", 20, 80)])
    assert got == pytest.approx({"sync": 500})


def test_the_last_gap_with_no_next_op_is_split_up_to_the_window_end(tmp_path):
    # one step [0, 1000] (annotated on thread 1); the only kernel [0, 400] is launched from thread 2, which makes
    # thread 2 the training thread; the gap [400, 1000] has no next op: its host stretch runs to the window end and
    # no launch latency follows. Thread 2 waits for data 500-700: input 200, other host 400
    events = [ev("user_annotation", "ProfilerStep#1", 0, 1000)] + kernel(0, 0, 400, 1, tid=2)
    events += [ev("user_annotation", LOADER, 500, 200, tid=2), ev("user_annotation", LOADER, 450, 100, tid=1)]
    tr = read_trace(write_trace(tmp_path / "t.json", events))
    rows = launches.launch_rows(tr)
    st = steps.find_steps(tr, rows)
    tl = timeline.gpu_timeline(tr, st)
    c = gap_causes.attribute_gaps(tr, st, tl, rows)
    assert list(zip(tl.gaps.start.tolist(), tl.gaps.end.tolist())) == [(400, 1000)]
    assert dict(zip(gap_causes.CAUSES, c.time[0].tolist())) == pytest.approx(
        {"input": 200, "sync": 0, "communication": 0, "allocation": 0, "launch": 0, "other_host": 400, "queued": 0})
    assert c.thread.tolist() == [[1, 2]]


def test_without_launch_calls_the_first_host_thread_is_the_training_thread(tmp_path):
    # no CUDA call in the trace (kernels launched before it began): every gap is charged to the first host event's
    # thread, (1, 1) here; its loader wait 500-700 in the gap [400, 1000] is input, another process's is not, nor
    # that of thread 3, whose operator is the trace's last host event
    kern = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 0, "dur": 400,
            "args": {"device": 0, "stream": 7}}
    other = dict(ev("user_annotation", LOADER, 600, 300), pid=2)
    events = [ev("user_annotation", "ProfilerStep#1", 0, 1000), other, kern, ev("user_annotation", LOADER, 500, 200),
              ev("cpu_op", "aten::add", 950, 20, tid=3)]
    tr = read_trace(write_trace(tmp_path / "t.json", events))
    rows = launches.launch_rows(tr)
    st = steps.find_steps(tr, rows)
    c = gap_causes.attribute_gaps(tr, st, timeline.gpu_timeline(tr, st), rows)
    assert c.thread.tolist() == [[1, 1]]
    assert dict(zip(gap_causes.CAUSES, c.time[0].tolist()))["input"] == pytest.approx(200)


def test_no_gaps_no_dominant_cause():
    empty = gap_causes.GapCauses(np.zeros((0, len(gap_causes.CAUSES))), np.zeros((0, 2), dtype=np.int64),
                                 np.zeros(0, dtype=np.int64))
    assert empty.dominant().tolist() == [] and set(empty.by_cause_us().values()) == {0.0}


def test_a_gap_whose_op_was_launched_by_the_traces_first_host_row_is_queued(tmp_path):
    # the second kernel's launch at -10 is the trace's first host event (row 0): launched before the gap [100, 600]
    # began, the op was queued, so the whole gap is `queued` (500 us), not the main thread's host time
    events = (kernel(-10, 600, 1000, 2) + [ev("user_annotation", "ProfilerStep#1", 0, 1000)] + kernel(0, 0, 100, 1))
    tr = read_trace(write_trace(tmp_path / "t.json", events))
    rows = launches.launch_rows(tr)
    assert tr.host.start[0] == min(tr.host.start) and tr.names[tr.host.name[0]] == "cudaLaunchKernel"
    st = steps.find_steps(tr, rows)
    tl = timeline.gpu_timeline(tr, st)
    assert list(zip(tl.gaps.start.tolist(), tl.gaps.end.tolist())) == [(100, 600)]
    c = gap_causes.attribute_gaps(tr, st, tl, rows)
    assert {k: v for k, v in zip(gap_causes.CAUSES, c.time[0].tolist()) if v} == pytest.approx({"queued": 500})


def test_the_training_thread_is_the_one_that_launched_the_most(tmp_path):
    # step [0, 1000]; thread 2 launches the first kernel [0, 100] (the trace's first launch), thread 1 the next two
    # [100, 200] and [200, 300]: thread 1 launched the most, so the last gap [300, 1000], which has no next op, is
    # charged to thread 1's state: its loader wait 500-700 is input (200), the rest other host (500)
    events = [ev("user_annotation", "ProfilerStep#1", 0, 1000)] + kernel(0, 0, 100, 1, tid=2)
    events += kernel(100, 100, 200, 2) + kernel(200, 200, 300, 3) + [ev("user_annotation", LOADER, 500, 200)]
    gaps, got, c = attributed(tmp_path, events)
    assert gaps == [(300, 1000)]
    assert got == pytest.approx({"input": 200, "other_host": 500})
    assert c.thread.tolist() == [[1, 1]]


def test_a_gap_ended_by_the_traces_first_gpu_op_has_its_launch_latency(tmp_path):
    # step [0, 1000]; the trace's only (so first) kernel runs [400, 1000], launched at 300: the gap [0, 400] is the
    # host's until the launch, [0, 300] with nothing open on thread 1 (other host, 300), then the launch's own
    # latency [300, 400] (launch, 100)
    events = [ev("user_annotation", "ProfilerStep#1", 0, 1000)] + kernel(300, 400, 1000, 1)
    gaps, got, _ = attributed(tmp_path, events)
    assert gaps == [(0, 400)]
    assert got == pytest.approx({"other_host": 300, "launch": 100})

"""Step windows (analysis/one_trace/steps.py) and the one window (analysis/one_trace/window.py) on tiny synthetic
traces whose expected windows are worked out by hand from the events, per the definitions in docs/metrics.md: step end =
max(host end, end of the GPU work launched inside the host step), never before the previous step's end;
windows tile [first host start, last step end]."""

from __future__ import annotations

import statistics

import numpy as np
import pytest

from conftest import write_trace
from gpucheckup.analysis.one_trace import launches, steps, window
from gpucheckup.trace import read_trace


def ev(cat, name, ts, dur, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def launch(t, k_start, k_end, corr, device=0):
    """A launch at host time t of a kernel that runs [k_start, k_end] on `device`."""
    return [ev("cuda_runtime", "cudaLaunchKernel", t, 1, correlation=corr),
            {"ph": "X", "cat": "kernel", "name": "k", "pid": device, "tid": 7, "ts": k_start, "dur": k_end - k_start,
             "args": {"device": device, "stream": 7, "correlation": corr}}]


def step(i, start, end, tid=1):
    return ev("user_annotation", f"ProfilerStep#{i}", start, end - start, tid=tid)


def find(tmp_path, events):
    tr = read_trace(write_trace(tmp_path / "t.json", events))
    return steps.find_steps(tr, launches.launch_rows(tr)), tr


def windows(st):
    return [(float(a), float(b)) for a, b in zip(st.start, st.end)]


def test_gpu_work_past_the_host_step_extends_it(tmp_path):
    # step 1's kernel runs to 1500, past its host end 1000: window 1 = [0, 1500], window 2 = [1500, 2000]
    ev_ = [step(1, 0, 1000), step(2, 1000, 2000), step(3, 2000, 3000)]
    ev_ += launch(10, 20, 1500, 1) + launch(1010, 1600, 1700, 2) + launch(2010, 2100, 2200, 3)
    st, _ = find(tmp_path, ev_)
    assert windows(st) == [(0, 1500), (1500, 2000), (2000, 3000)]
    assert st.gpu_start.tolist() == [20, 1600, 2100] and st.gpu_end.tolist() == [1500, 1700, 2200]
    s = steps.summary(st)
    d = [1.5, 0.5, 1.0]
    assert (s.count, s.marked, s.median_ms, s.min_ms, s.max_ms) == (3, True, 1.0, 0.5, 1.5)
    assert s.mean_ms == pytest.approx(1.0)
    assert s.cv_pct == pytest.approx(100 * statistics.pstdev(d) / statistics.mean(d))  # 40.82%
    assert s.per_step_ms == d and s.host_median_ms == 1.0
    assert s.labels == ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"]


def test_a_step_that_ends_before_the_previous_one_gets_an_empty_window(tmp_path):
    # step 1's kernel runs to 2500, past all of step 2 [1000, 2000] (which launches nothing): the step ends are
    # monotone, 2500, 2500, 3000, so window 2 is empty and the windows still tile the time
    ev_ = [step(1, 0, 1000), step(2, 1000, 2000), step(3, 2000, 3000)] + launch(10, 20, 2500, 1)
    st, _ = find(tmp_path, ev_)
    assert windows(st) == [(0, 2500), (2500, 2500), (2500, 3000)]
    assert np.isnan(st.gpu_start[1]) and np.isnan(st.gpu_end[2])
    assert steps.summary(st).per_step_ms == [2.5, 0.0, 0.5]


def test_nested_and_overlapping_profiler_steps(tmp_path):
    # a copy of step 1 nested inside it on another thread is dropped; step 2 starting 100 us before step 1 ends
    # is kept (its window starts where step 1's ends) and the trace says so
    ev_ = [step(1, 0, 1000), step(1, 50, 1000, tid=2), step(1, 60, 900, tid=3), step(2, 900, 2000)]
    st, tr = find(tmp_path, ev_ + launch(10, 20, 100, 1))
    assert st.labels == ["ProfilerStep#1", "ProfilerStep#2"]
    assert windows(st) == [(0, 1000), (1000, 2000)]
    assert any("1 ProfilerStep# annotations overlap" in w for w in tr.warnings)
    st, tr = find(tmp_path, [step(1, 0, 1000), step(2, 1000, 2000)] + launch(10, 20, 100, 1))
    assert not any("overlap" in w for w in tr.warnings)  # touching is not overlapping


def test_an_annotation_ending_half_a_microsecond_later_is_not_nested(tmp_path):
    # [500, 1000.5] ends after step 1 [0, 1000]: it overlaps, so it is a step of its own, from 1000 to 1000.5
    st, tr = find(tmp_path, [step(1, 0, 1000), step(2, 500, 1000.5)] + launch(10, 20, 100, 1))
    assert windows(st) == [(0, 1000), (1000, 1000.5)]
    assert any("1 ProfilerStep# annotations overlap" in w for w in tr.warnings)


def test_launches_between_or_outside_steps_belong_to_none(tmp_path):
    # host steps [0, 1000] and [1100, 2000]; a launch at 1050 (between them) of a kernel running to 5000 and one
    # at -50 before the first step extend nothing; a launch exactly at a host step's end or start counts
    ev_ = [step(1, 0, 1000), step(2, 1100, 2000)]
    ev_ += launch(1050, 1060, 5000, 1) + launch(-50, -40, 1900, 2)
    st, _ = find(tmp_path, ev_)
    assert windows(st) == [(0, 1000), (1000, 2000)] and np.isnan(st.gpu_end).all()
    st, _ = find(tmp_path, [step(1, 0, 1000), step(2, 1100, 2000)] + launch(1000, 1010, 1050, 1)
                 + launch(1100, 1110, 2500, 2))
    assert windows(st) == [(0, 1050), (1050, 2500)]
    assert st.gpu_start.tolist() == [1010, 1110]


def test_no_profiler_step_is_one_window_over_the_trace(tmp_path):
    st, _ = find(tmp_path, [ev("user_annotation", "ProfilerStep#x", 0, 10), ev("cpu_op", "aten::mm", 5, 100)]
                 + launch(200, 300, 900, 1) + launch(400, 950, 1000, 2))
    assert not st.marked and st.labels == ["whole trace"] and st.count == 1
    assert windows(st) == [(0, 1000)]  # every event's span: the unmatched annotation from 0, the last kernel to 1000
    assert (st.gpu_start.tolist(), st.gpu_end.tolist()) == ([300], [1000])


def test_index_of_each_window():
    st = steps.Steps(["a", "b"], np.zeros(2), np.zeros(2), np.zeros(2), np.zeros(2), np.array([0.0, 10.0]),
                     np.array([10.0, 20.0]), True)
    got = st.index_of(np.array([-1.0, 0.0, 5.0, 10.0, 20.0, 20.5]))
    assert got.tolist() == [-1, 0, 0, 1, 1, -1]  # a boundary belongs to the later window; the last end is inside
    assert st.window == (0.0, 20.0) and st.duration.tolist() == [10.0, 10.0]


def test_summary_of_one_step_and_of_zero_length_steps():
    z = steps.Steps(["a"], np.zeros(1), np.zeros(1), np.zeros(1), np.zeros(1), np.zeros(1), np.zeros(1), True)
    assert steps.summary(z).cv_pct == 0.0


# ---- the one window (analysis/one_trace/window.py) ----

def test_traced_window_and_its_normalizers():
    # four windows of 10, 12, 100 (a warm-up outlier) and 11 ms on 2 devices: the step time is the median, 11.5 ms
    ends = np.cumsum([0, 10_000, 12_000, 100_000, 11_000]).astype(float)
    st = steps.Steps(list("abcd"), ends[:-1], ends[1:], ends[:-1], ends[1:], ends[:-1], ends[1:], True)
    w = window.traced_window(st, 2)
    assert (w.step_ms, w.traced_step_ms, w.length_us, w.devices, w.steps) == (11.5, 11.5, 133_000, 2, 4)
    assert w.basis == "median of 4 step windows"
    assert w.share(133_000) == 0.5 and w.share(133_000, per_device=False) == 1.0
    assert w.ms(2 * 13_300) == pytest.approx(1.15)  # 10% of the window on each device: 10% of the step
    assert w.per_step(2 * 13_300) == pytest.approx(1150)
    assert w.pct(2.3) == pytest.approx(20.0)
    u = window.unprofiled(w, 10.0, "a run without the profiler")
    assert u.step_ms == 10.0 and u.traced_step_ms == 11.5 and "without the profiler" in u.basis
    assert u.host_ms(13_300) == pytest.approx(1.0)  # a host time: 10% of the window, of the unprofiled step
    assert u.ms(2 * 13_300) == pytest.approx(1.15)  # a GPU time stays a share of the traced step
    assert u.pct(5.0) == pytest.approx(50.0)
    assert w.to_dict()["length_ms"] == 133.0
    one = window.traced_window(steps.Steps(["whole trace"], *[np.array([0.0, 5e3][i % 2:i % 2 + 1]) for i in
                                                              range(6)], False), 0)
    assert one.devices == 1 and one.basis == "the whole trace (no ProfilerStep markers)" and one.step_ms == 5.0
    empty = window.Window(0.0, "", 0.0, 0.0, 1, 0)
    assert empty.share(5.0) == 0.0 and empty.pct(1.0) == 0.0
    sub_ms = window.Window(0.5, "", 0.5, 1000.0, 1, 2)  # a step under a millisecond still has percents
    assert sub_ms.pct(0.1) == pytest.approx(20.0)


def test_a_step_starting_under_a_microsecond_before_the_previous_end_overlaps(tmp_path):
    # step 2 starts at 999.5, half a microsecond before step 1 ends at 1000: an overlap, and the trace says so (only
    # starts within a nanosecond of the end, float noise, count as touching)
    st, tr = find(tmp_path, [step(1, 0, 1000), step(2, 999.5, 2000)] + launch(10, 20, 100, 1))
    assert windows(st) == [(0, 1000), (1000, 2000)]
    assert any("1 ProfilerStep# annotations overlap" in w for w in tr.warnings)


def test_a_launch_that_is_the_files_first_host_event_extends_its_step(tmp_path):
    # the launch at 10 comes first in the file (host rows keep file order: it is row 0); its kernel runs to 1500,
    # past step 1's host end 1000: window 1 = [0, 1500], window 2 = [1500, 2000]
    st, tr = find(tmp_path, launch(10, 20, 1500, 1) + [step(1, 0, 1000), step(2, 1000, 2000)])
    assert tr.names[tr.host.name[0]] == "cudaLaunchKernel"
    assert windows(st) == [(0, 1500), (1500, 2000)]


def test_the_per_step_times_are_whole_microseconds(tmp_path):
    # windows [0, 1000.4] and [1000.4, 2000]: 1.0004 and 0.9996 ms, written to the microsecond (the trace clock's
    # unit) as 1.0 and 1.0
    st, _ = find(tmp_path, [step(1, 0, 1000.4), step(2, 1000.4, 2000)] + launch(10, 20, 100, 1))
    assert steps.summary(st).per_step_ms == [1.0, 1.0]

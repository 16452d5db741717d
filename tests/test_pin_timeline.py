"""GPU busy and idle gaps (analysis/one_trace/timeline.py) on tiny synthetic traces worked out by hand, and the idle
shape's thresholds (docs/metrics.md) at their boundaries, checked against a second, plain implementation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import write_trace
from gpucheckup.analysis.one_trace import launches, steps, timeline
from gpucheckup.trace import read_trace


def ev(cat, name, ts, dur, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def kernel(start, end, corr, device=0, stream=7, cat="kernel"):
    """A kernel (or copy) launched at its own start time, so that it belongs to the step it runs in."""
    return [ev("cuda_runtime", "cudaLaunchKernel", start, 0.5, correlation=corr),
            {"ph": "X", "cat": cat, "name": "k", "pid": device, "tid": stream, "ts": start, "dur": end - start,
             "args": {"device": device, "stream": stream, "correlation": corr}}]


def build(tmp_path, events):
    tr = read_trace(write_trace(tmp_path / "t.json", events))
    st = steps.find_steps(tr, launches.launch_rows(tr))
    return timeline.gpu_timeline(tr, st), st


def test_two_devices_busy_is_their_mean_per_step_and_overall(tmp_path):
    # steps [0, 1000] and [1000, 2000]; device 0 busy all of step 1 and half of step 2, device 1 a quarter of
    # each: per step (100 + 25) / 2 = 62.5% and (50 + 25) / 2 = 37.5%; overall (75 + 25) / 2 = 50%
    ev_ = [ev("user_annotation", "ProfilerStep#1", 0, 1000), ev("user_annotation", "ProfilerStep#2", 1000, 1000)]
    ev_ += kernel(0, 1000, 1) + kernel(1000, 1500, 2, cat="gpu_memcpy")
    ev_ += kernel(100, 350, 3, device=1, stream=9) + kernel(1500, 1750, 4, device=1, stream=9)
    tl, st = build(tmp_path, ev_)
    assert tl.step_busy_pct.tolist() == pytest.approx([62.5, 37.5])
    assert tl.busy_pct == pytest.approx(50.0)
    assert (tl.busy_us(0), tl.busy_us(1), tl.length) == (1500, 500, 2000)
    assert tl.busy_by_stream == {(0, 7): 1500, (1, 9): 500}
    # device 1's idle: [0, 100], [350, 1000] | [1000, 1500], [1750, 2000] (cut at the step boundary 1000)
    g = tl.gaps
    one = g.device == 1
    assert list(zip(g.start[one].tolist(), g.end[one].tolist())) == [(0, 100), (350, 1000), (1000, 1500),
                                                                      (1750, 2000)]
    assert g.step[one].tolist() == [0, 0, 1, 1]
    assert g.position[one].tolist() == pytest.approx([0.0, 0.35, 0.0, 0.75])
    assert list(zip(g.start[~one].tolist(), g.end[~one].tolist())) == [(1500, 2000)]


def test_busy_is_the_union_of_streams_clipped_to_the_window(tmp_path):
    # two streams overlapping [100, 600] and [400, 900] = 800 us busy; a kernel before the first step and one
    # running past the last step's end count only inside the window [0, 1000]
    ev_ = [ev("user_annotation", "ProfilerStep#1", 0, 1000)]
    ev_ += kernel(100, 600, 1) + kernel(400, 900, 2, stream=8) + kernel(-300, -100, 3) + kernel(950, 1000, 4)
    tl, _ = build(tmp_path, ev_)
    assert tl.busy_us(0) == 850 and tl.busy_pct == pytest.approx(85.0)
    assert tl.busy_by_stream == {(0, 7): 550, (0, 8): 500}
    assert tl.gaps.start.tolist() == [0, 900] and tl.gaps.end.tolist() == [100, 950]


def gaps(rows):
    """Gaps from (device, step, start, end, position) rows."""
    a = np.array(rows, dtype=float).reshape(-1, 5)
    return timeline.Gaps(device=a[:, 0].astype(int), start=a[:, 2], end=a[:, 3], step=a[:, 1].astype(int),
                         position=a[:, 4])


def pattern(rows):
    t = timeline.Timeline(window=(0.0, 1.0), busy={}, busy_by_stream={}, gaps=gaps(rows), step_busy_pct=np.zeros(0))
    return timeline.gap_pattern(t, None)


@pytest.mark.parametrize("pos,early", [(0.10, True), (0.15, False), (0.0, True), (0.5, False)])
def test_step_start_is_the_first_tenth_inclusive(pos, early):
    # one 60 us gap at `pos` and one 40 us gap in the middle of step 0
    p = pattern([(0, 0, 0, 60, pos), (0, 0, 500, 540, 0.5)])
    assert p.idle_at_step_start_pct == pytest.approx(60.0 if early else 0.0)


@pytest.mark.parametrize("sizes,start_pos,shape", [
    ([50, 50], 0.5, "bunched"),  # largest gap 50% of the idle time: bunched (inclusive)
    ([50, 50], 0.0, "bunched at step start"),  # ... and all of it at the step's start
    ([49, 51 / 2, 51 / 2], 0.5, "mixed"),  # 49%: below the bunched threshold
    ([20] + [10] * 8, 0.5, "mixed"),  # 20%: not below the spread threshold
    ([19] + [9] * 9, 0.5, "spread between kernels"),  # 19%
    ([30, 25, 25, 20], 0.5, "mixed"),
])
def test_idle_shape_thresholds(sizes, start_pos, shape):
    rows, t = [], 0.0
    for s in sizes:
        rows.append((0, 0, t, t + s, start_pos))
        t += s + 1
    assert pattern(rows).shape == shape


def test_bunched_at_step_start_needs_half_the_idle_there():
    # largest gap 60 of 100 at 0.05: start share 60% -> at step start; at 0.5 with a 45 us gap early: 45%
    assert pattern([(0, 0, 0, 60, 0.05), (0, 0, 100, 140, 0.5)]).shape == "bunched at step start"
    assert pattern([(0, 0, 0, 50, 0.05), (0, 0, 100, 150, 0.5)]).shape == "bunched at step start"  # 50%
    assert pattern([(0, 0, 0, 45, 0.05), (0, 0, 100, 155, 0.5)]).shape == "bunched"


def test_no_idle_and_gaps_outside_steps():
    assert pattern([]) == timeline.GapPattern(idle_ms=0.0, gap_count=0, idle_at_step_start_pct=0.0,
                                              largest_gap_share_pct=0.0, shape="none")
    # a gap outside every step (-1) counts in the idle time but is nobody's largest or early gap
    p = pattern([(0, -1, 0, 100, 0.0), (0, 0, 200, 300, 0.5)])
    assert (p.idle_ms, p.gap_count, p.largest_gap_share_pct, p.idle_at_step_start_pct) == (0.2, 2, 50, 0)


def reference(rows):
    """docs/metrics.md's idle shape, computed a second way: plain Python over the gap rows."""
    idle = sum(e - s for _, _, s, e, _ in rows)
    early = sum(e - s for _, k, s, e, p in rows if k >= 0 and p <= 0.10)
    longest = {}
    for d, k, s, e, _ in rows:
        if k >= 0:
            longest[(d, k)] = max(longest.get((d, k), 0), e - s)
    return 100 * early / idle, 100 * sum(longest.values()) / idle


row = st.tuples(st.integers(0, 2), st.integers(-1, 3), st.integers(1, 1000), st.sampled_from([0.0, 0.05, 0.1, 0.11,
                                                                                               0.5, 1.0]))


@settings(max_examples=200, deadline=None)
@given(st.lists(row, min_size=1, max_size=30))
def test_idle_shape_matches_a_plain_implementation(items):
    rows, t = [], 0.0
    for d, k, dur, pos in items:
        rows.append((d, k, t, t + dur, pos))
        t += dur + 1
    start_pct, largest_pct = reference(rows)
    p = pattern(rows)
    assert p.idle_at_step_start_pct == pytest.approx(start_pct)
    assert p.largest_gap_share_pct == pytest.approx(largest_pct)
    want = ("bunched at step start" if start_pct >= 50 else "bunched") if largest_pct >= 50 else (
        "spread between kernels" if largest_pct < 20 else "mixed")
    if min(abs(largest_pct - 50), abs(largest_pct - 20), abs(start_pct - 50)) > 1e-6:  # off float ties
        assert p.shape == want


def test_no_gpu_work_is_an_empty_timeline(tmp_path):
    # a CPU-only trace (the check-up refuses it earlier; the timeline itself has nothing to report)
    tl, st = build(tmp_path, [ev("user_annotation", "ProfilerStep#1", 0, 1000), ev("cpu_op", "aten::mm", 10, 100)])
    assert tl.busy == {} and tl.busy_pct == 0.0 and len(tl.gaps) == 0 and tl.busy_by_stream == {}
    assert tl.step_busy_pct.tolist() == [0.0] and tl.window == (0.0, 1000.0)


def test_one_gap_across_a_step_boundary_is_cut_there(tmp_path):
    # steps [0, 1000] and [1000, 2000]; one kernel [0, 500] in step 1: the single gap [500, 2000] is two gaps
    ev_ = [ev("user_annotation", "ProfilerStep#1", 0, 1000), ev("user_annotation", "ProfilerStep#2", 1000, 1000)]
    tl, _ = build(tmp_path, ev_ + kernel(0, 500, 1))
    g = tl.gaps
    assert list(zip(g.start.tolist(), g.end.tolist())) == [(500, 1000), (1000, 2000)]
    assert g.step.tolist() == [0, 1] and g.position.tolist() == pytest.approx([0.5, 0.0])
    assert tl.step_busy_pct.tolist() == pytest.approx([50.0, 0.0])


def test_a_device_busy_all_the_time_has_no_gaps(tmp_path):
    ev_ = [ev("user_annotation", "ProfilerStep#1", 0, 1000), ev("user_annotation", "ProfilerStep#2", 1000, 1000)]
    tl, st = build(tmp_path, ev_ + kernel(0, 1200, 1) + kernel(1200, 2000, 2))
    assert len(tl.gaps) == 0 and tl.busy_pct == pytest.approx(100.0)
    assert tl.step_busy_pct.tolist() == pytest.approx([100.0, 100.0])
    assert timeline.gap_pattern(tl, st).shape == "none"

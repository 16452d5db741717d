"""The cross-rank split (analysis/job/ranks.py) on three hand-built ranks whose every figure is worked out by hand from
docs/metrics.md's definitions: clock offsets from matched calls' ends, transfer = the shortest duration, wait = the
rest, exposed wait = wait with no compute beside it, lateness and the straggler, bus bandwidth."""

from __future__ import annotations

import numpy as np
import pytest

from gpucheckup.analysis.job import ranks
from gpucheckup.analysis.one_trace.gpu.collectives import Calls
from gpucheckup.analysis.one_trace.steps import Steps

LABELS = ["ProfilerStep#1", "ProfilerStep#2"]
# aligned clock, per step s (0 or 1, + 10 ms each): rank 0 arrives at 5000, rank 1 at 5200, rank 2 at 8000 (late);
# the all-reduce of 1 MB ends at 8500 on every rank. Rank 1's clock runs 1000 us ahead.
ARRIVE = {0: 5000.0, 1: 5200.0, 2: 8000.0}
OFFSET = {0: 0.0, 1: 1000.0, 2: 0.0}


def rank_input(r: int, extra_call: bool = False, arrive: dict = ARRIVE) -> ranks.RankInput:
    off = OFFSET[r]
    starts = [arrive[r] + 10_000 * s + off for s in (0, 1)]
    ends = [8500.0 + 10_000 * s + off for s in (0, 1)]
    keys = [("0", "all_reduce", LABELS[s], 0) for s in (0, 1)]
    if extra_call:  # a call only this rank has: unmatched
        keys.append(("0", "broadcast", LABELS[1], 1))
        starts.append(19_000.0 + off)
        ends.append(19_100.0 + off)
    calls = Calls(keys=keys, collective=[k[1] for k in keys], start=np.array(starts), end=np.array(ends),
                  nbytes=np.full(len(keys), 1e6), group_size=np.full(len(keys), 3.0), on_gpu=True)
    w = np.array([0.0, 10_000.0, 20_000.0]) + off
    st = Steps(list(LABELS), w[:-1], w[1:], w[:-1], w[1:], w[:-1], w[1:], True)
    # rank 0 computes [5000, 6000] in step 1 only: 1000 us of its 3000 us wait there is hidden
    computing = (np.array([5000.0]), np.array([6000.0])) if r == 0 else (np.zeros(0), np.zeros(0))
    compute = np.array([1.0, 0.0]) if r == 0 else np.zeros(2)
    return ranks.RankInput(rank=r, steps=st, calls=calls, computing=computing, step_compute_ms=compute,
                           step_idle_ms=np.array([0.5, 0.7]), compute_ms=None, idle_ms=None, activity={})


def test_three_ranks_by_hand():
    a = ranks.analyze_ranks([rank_input(2), rank_input(0, extra_call=True), rank_input(1)])
    assert a.ranks == [0, 1, 2] and a.on_gpu and a.steps == 2
    assert (a.matched, a.unmatched) == (2, 1) and "1 collective calls were not found" in a.notes[0]
    t = {row.rank: row for row in a.table}
    assert [t[r].offset_us for r in (0, 1, 2)] == [0.0, 1000.0, 0.0]
    # durations 3500, 3300, 500: transfer 500 for all, waits 3000, 2800, 0
    assert [t[r].transfer_ms for r in (0, 1, 2)] == pytest.approx([0.5] * 3)
    assert [t[r].wait_ms for r in (0, 1, 2)] == pytest.approx([3.0, 2.8, 0.0])
    # rank 0's exposed wait: 2000 in step 1 (1000 hidden by compute), 3000 in step 2: median 2.5 ms
    assert [t[r].exposed_wait_ms for r in (0, 1, 2)] == pytest.approx([2.5, 2.8, 0.0])
    assert t[0].compute_ms == pytest.approx(0.5) and t[0].idle_ms == pytest.approx(0.6)
    assert [t[r].step_ms for r in (0, 1, 2)] == pytest.approx([10.0] * 3)
    # rank 2 arrives 8000 - median(5000, 5200) = 2900 us late at both calls: 2.9 ms a step, last at every call
    assert t[2].late_ms == pytest.approx(2.9) and t[2].last_pct == 100.0 and t[0].late_ms == 0.0
    # the others' exposed wait it caused: mean(2000, 2800) + mean(3000, 2800) = 5300 us, 2.65 ms a step >= 10% of 10
    assert a.straggler == 2 and a.straggler_late_ms == pytest.approx(2.9) and a.straggler_last_pct == 100.0
    assert a.waited_ms == pytest.approx((2.5 + 2.8) / 2)
    (c,) = a.collectives
    assert (c.name, c.bytes, c.count, c.group_size) == ("all_reduce", 1e6, 2, 3)
    assert c.transfer_ms == pytest.approx(0.5) and c.wait_ms == pytest.approx((3000 + 2800) / 3 / 1000)
    # 1 MB in 0.5 ms = 2 GB/s algorithm bandwidth; an all-reduce's bus factor over 3 ranks is 2 (3 - 1) / 3
    assert c.busbw_gb_s == pytest.approx(2.0 * 4 / 3) and a.busbw_gb_s == pytest.approx(2.0 * 4 / 3)
    assert a.call_waits[0][:2].tolist() == [3000.0, 3000.0] and np.isnan(a.call_waits[0][2])


def test_no_straggler_when_lateness_is_spread_or_small():
    # everyone arrives together (within 40 us, under MIN_LATE_US 50): no one is late, no straggler
    arrive = {0: 8000.0, 1: 8040.0, 2: 8020.0}
    a = ranks.analyze_ranks([rank_input(r, arrive=arrive) for r in range(3)])
    assert a.straggler is None and all(row.late_ms == 0.0 for row in a.table)
    assert [row.wait_ms for row in a.table] == pytest.approx([0.04, 0.0, 0.02])


def test_no_straggler_below_a_tenth_of_the_step():
    # ranks 0 and 1 arrive at 7600 and 7700, rank 2 at 8300 (650 us late at each call); the others wait 700 and
    # 600 us, all of it exposed: 650 us a step caused, under 10% of the 10 ms step
    a = ranks.analyze_ranks([rank_input(r, arrive={0: 7600.0, 1: 7700.0, 2: 8300.0}) for r in range(3)])
    t = {row.rank: row for row in a.table}
    assert t[2].late_ms == pytest.approx(0.65) and t[2].last_pct == 100.0
    assert [t[r].exposed_wait_ms for r in (0, 1)] == pytest.approx([0.7, 0.6])
    assert a.straggler is None and a.straggler_late_ms == 0.0 and a.waited_ms == 0.0


def _taking_turns(r: int, last_at: set[int]) -> ranks.RankInput:
    """Rank r of two equal ranks, 5 steps of 10 ms with 8 all-reduces each (call i of step s at 10000 s + 1000 i
    + 100): the rank that arrives last at a call comes 600 us after the other; every call ends 700 us after the
    later arrival (100 us of transfer)."""
    keys, starts, ends = [], [], []
    for s in range(5):
        for i in range(8):
            t0 = 10_000.0 * s + 1000.0 * i + 100.0
            late = (s * 8 + i) in last_at
            mine_last = late if r == 1 else not late
            keys.append(("0", "all_reduce", f"ProfilerStep#{s}", s * 8 + i))
            starts.append(t0 + (600.0 if mine_last else 0.0))
            ends.append(t0 + 700.0)
    calls = Calls(keys=keys, collective=[k[1] for k in keys], start=np.array(starts), end=np.array(ends),
                  nbytes=np.full(len(keys), 1e6), group_size=np.full(len(keys), 2.0), on_gpu=True)
    w = 10_000.0 * np.arange(6)
    st = Steps([f"ProfilerStep#{s}" for s in range(5)], w[:-1], w[1:], w[:-1], w[1:], w[:-1], w[1:], True)
    return ranks.RankInput(rank=r, steps=st, calls=calls, computing=(np.zeros(0), np.zeros(0)),
                           step_compute_ms=np.zeros(5), step_idle_ms=np.zeros(5), compute_ms=None, idle_ms=None,
                           activity={})


def test_two_equal_ranks_taking_turns_name_no_straggler():
    # rank 1 last at 24 of the 40 calls (60%), rank 0 at 16: each makes the other wait 600 us exposed a time, so
    # rank 1 causes 24 x 600 = 14.4 ms (60% of all, 2.9 ms a step, over a tenth of the 10 ms step): the old rule
    # named it; last at 60% of the calls on two ranks is a coin flip, not a straggler
    turns = set(range(0, 40, 5)) | set(range(1, 40, 5)) | set(range(2, 40, 5))  # 24 calls
    a = ranks.analyze_ranks([_taking_turns(0, turns), _taking_turns(1, turns)])
    t = {row.rank: row for row in a.table}
    assert t[1].last_pct == pytest.approx(60.0) and t[0].last_pct == pytest.approx(40.0)
    assert a.straggler is None
    # lateness per step is the largest in the step (600 us), never the sum over its calls
    assert t[1].late_ms == pytest.approx(0.6) and all(row.late_ms <= row.step_ms for row in a.table)


def test_a_rank_last_at_most_calls_is_the_straggler():
    a = ranks.analyze_ranks([_taking_turns(0, set(range(32))), _taking_turns(1, set(range(32)))])  # 32 of 40: 80%
    # steps 0-3: late 600 us at each of their calls, step 4 on time: 4 x 0.6 ms over 5 steps
    assert a.straggler == 1 and a.straggler_late_ms == pytest.approx(0.6 * 4 / 5)


def test_fewer_than_two_ranks_with_calls():
    assert ranks.analyze_ranks([rank_input(0)]) is None


def test_rank_input_compute_and_idle_per_step_against_the_raw_events():
    """One rank of a real 2-GPU H200 DDP job: per step window, the GPU time of everything but NCCL kernels and the
    idle time, computed here from the raw JSON with a plain interval union."""
    import gzip
    import json
    from pathlib import Path

    import independent as ind
    from gpucheckup.trace import read_trace

    path = Path(__file__).resolve().parent / "data" / "h200x2" / "ddp_healthy" / "traces" / "rank0.json.gz"
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    windows = ind.step_windows(doc)
    ops = [(e["ts"], e["ts"] + e["dur"], "nccl" in e["name"].lower() and e["cat"] == "kernel")
           for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in ind.GPU_CATS]

    def covered(spans, lo, hi):
        return ind.union_length([(max(s, lo), min(e, hi)) for s, e in spans if min(e, hi) > max(s, lo)])

    compute = [covered([(s, e) for s, e, c in ops if not c], lo, hi) / 1e3 for lo, hi in windows]
    idle = [((hi - lo) - covered([(s, e) for s, e, _ in ops], lo, hi)) / 1e3 for lo, hi in windows]
    r = ranks.rank_input(read_trace(path))
    assert r.rank == 0 and r.device == "NVIDIA H200"
    assert r.step_compute_ms.tolist() == pytest.approx(compute, abs=1e-6)
    assert r.step_idle_ms.tolist() == pytest.approx(idle, abs=1e-6)
    # over the whole window, per step: the windows tile it, so the sums of the per-step figures over the steps
    assert r.compute_ms == pytest.approx(sum(compute) / len(windows), abs=1e-6)
    assert r.idle_ms == pytest.approx(sum(idle) / len(windows), abs=1e-6)


def test_last_pct_is_the_exact_share_of_matched_calls():
    # rank 1 last at 13 of the 40 calls: 32.5%, rank 0 at the other 27: 67.5% (not rounded down to a whole percent)
    a = ranks.analyze_ranks([_taking_turns(0, set(range(13))), _taking_turns(1, set(range(13)))])
    t = {row.rank: row for row in a.table}
    assert t[1].last_pct == pytest.approx(32.5) and t[0].last_pct == pytest.approx(67.5)


def test_activity_splits_the_step_threads_time_by_hand(tmp_path):
    """Two 10 ms steps on thread 1: the DataLoader [0, 2000] and [10000, 11000], a cudaDeviceSynchronize
    [5000, 6000], operators [2000, 5000] and [11000, 18000]; a loader on another thread [6000, 9000] is not the
    step thread's. Per step (2 steps): input 3000 us / 2 = 1.5 ms, sync 1000 / 2 = 0.5 ms, outside operators
    [6000, 10000] + [18000, 20000] = 6000 / 2 = 3.0 ms; gpu_compute is the figure given."""
    from conftest import write_trace
    from gpucheckup.analysis.one_trace import launches, steps
    from gpucheckup.trace import read_trace

    loader = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"

    def ev(cat, name, ts, dur, tid=1):
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": {}}

    events = [ev("user_annotation", "ProfilerStep#1", 0, 10000), ev("user_annotation", "ProfilerStep#2", 10000, 10000),
              ev("user_annotation", loader, 0, 2000), ev("user_annotation", loader, 10000, 1000),
              ev("cuda_runtime", "cudaDeviceSynchronize", 5000, 1000), ev("cpu_op", "aten::mm", 2000, 3000),
              ev("cpu_op", "aten::mm", 11000, 7000), ev("user_annotation", loader, 6000, 3000, tid=2)]
    tr = read_trace(write_trace(tmp_path / "t.json", events))
    rows = launches.launch_rows(tr)
    st = steps.find_steps(tr, rows)
    assert st.window == (0, 20000)
    got = ranks.activity(tr, st, rows, 4.25)
    assert got == pytest.approx({"input": 1.5, "sync": 0.5, "outside_ops": 3.0, "gpu_compute": 4.25})
    assert "gpu_compute" not in ranks.activity(tr, st, rows, None)  # a CPU trace has no GPU compute

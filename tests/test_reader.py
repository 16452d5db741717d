"""Reading edge cases on small synthetic traces (the real ones are covered in test_verdicts)."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import trace_path, write_trace
from gpucheckup.analysis.checkup import analyze
from gpucheckup.diagnosis import diagnose
from gpucheckup.trace import read_trace
from gpucheckup.trace.tables import KERNEL, MEMCPY


def test_real_trace_tables():
    tr = read_trace(trace_path("input_bound"))
    assert tr.devices[0].name == "NVIDIA H200" and tr.devices[0].sm_count == 132
    assert tr.base_time_ns == 1790857026000000000
    assert tr.record_shapes
    assert (tr.gpu.kind == KERNEL).sum() == 1800
    assert (tr.gpu.kind == MEMCPY).sum() == 15
    assert np.all(np.diff(tr.gpu.start) >= 0)
    assert tr.thread_names[(449, 491)].endswith("(pt_autograd_0)")


def ev(cat, name, ts, dur, pid=1, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def test_two_devices_and_streams_and_string_ids(tmp_path):
    events = [
        ev("user_annotation", "ProfilerStep#1", 0, 100),
        ev("cuda_runtime", "cudaLaunchKernel", 1, 2, correlation=1),
        ev("kernel", "gemm_a", 10, 40, pid=0, tid=7, device=0, stream=7, correlation=1),
        ev("cuda_runtime", "cudaLaunchKernel", 3, 2, correlation=2),
        ev("kernel", "gemm_b", 30, 40, pid=0, tid=9, device=0, stream=9, correlation=2),
        ev("cuda_runtime", "cudaLaunchKernel", 5, 2, correlation=3),
        ev("kernel", "gemm_c", 10, 20, pid=1, tid=7, device=1, stream=7, correlation=3),
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler",
         "ts": 0, "dur": 100},
    ]
    tr = read_trace(write_trace(tmp_path / "multi.json", events))
    a = analyze(tr)
    # device 0: union of [10,50] and [30,70] = 60 us of 100; device 1: 20 of 100; mean 40%
    assert a.timeline.busy_us(0) == pytest.approx(60)
    assert a.timeline.busy_us(1) == pytest.approx(20)
    assert a.timeline.busy_pct == pytest.approx(40)
    assert a.timeline.busy_by_stream[(0, 9)] == pytest.approx(40)


def test_no_profiler_steps_means_one_window_and_a_note(tmp_path):
    events = [
        ev("cuda_runtime", "cudaLaunchKernel", 0, 2, correlation=1),
        ev("kernel", "k", 10, 30, pid=0, tid=7, device=0, stream=7, correlation=1),
        ev("cpu_op", "aten::mm", 0, 50),
    ]
    a = analyze(read_trace(write_trace(tmp_path / "nosteps.json.gz", events)))
    assert not a.steps.marked and a.steps.count == 1
    assert a.timeline.busy_pct == pytest.approx(100 * 30 / 50)
    d = diagnose(a)
    assert any("no ProfilerStep#" in n for n in d.notes)


def test_integer_microsecond_timestamps(tmp_path):
    events = [
        ev("user_annotation", "ProfilerStep#7", 1000, 100),
        ev("cuda_runtime", "cudaLaunchKernel", 1001, 2, correlation=5),
        ev("kernel", "k", 1010, 50, pid=0, tid=7, device=0, stream=7, correlation=5),
    ]
    a = analyze(read_trace(write_trace(tmp_path / "ints.json", events)))
    assert a.step_summary.median_ms == pytest.approx(0.1)
    assert a.timeline.busy_pct == pytest.approx(50)


def test_rank_from_distributed_info_or_name(tmp_path):
    events = [ev("kernel", "k", 10, 30, pid=0, tid=7, device=0, stream=7)]
    tr = read_trace(write_trace(tmp_path / "a.json", events, distributedInfo={"rank": 3, "world_size": 8}))
    assert (tr.rank, tr.world_size) == (3, 8)
    assert read_trace(write_trace(tmp_path / "worker_rank5.json", events)).rank == 5

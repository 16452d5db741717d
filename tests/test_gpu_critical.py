"""The GPU's time on the critical path (analysis/one_trace/gpu/gpu_critical.py) and the GPU-speed fixes it bounds:
by hand on a small trace, and on real H200 traces of a launch-bound and a GPU-bound loop."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import trace_path, write_trace
from gpucheckup import api
from gpucheckup.analysis.flops.gemm_dtype import plain_fp32_gemms
from gpucheckup.analysis.one_trace.gpu.gpu_critical import critical_us, idle_scale
from gpucheckup.analysis.one_trace.launches import launch_rows
from gpucheckup.trace import read_trace



def _kernel(name: str, ts: float, dur: float, corr: int) -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
            "args": {"correlation": corr, "device": 0, "stream": 7}}


def test_queued_kernels_and_waited_on_ones_count_the_others_do_not(tmp_path):
    # A [0,10] then B 1 us after: A was queued behind -> all 10 us; B [11,20] then 20 us idle before C -> 0, but
    # a sync call [45, 60] overlaps nothing of B; C [40,50] then D 1 us after -> all 10 us; D [51,60], the device's
    # last: only its overlap with the sync, 9 us
    events = [_kernel("A", 0, 10, 1), _kernel("B", 11, 9, 2), _kernel("C", 40, 10, 3), _kernel("D", 51, 9, 4),
              {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 1, "tid": 1, "ts": 45,
               "dur": 15, "args": {"correlation": 9}}]
    t = read_trace(str(write_trace(tmp_path / "t.json", events)))
    order = np.argsort(t.gpu.start)
    names = [t.names[i] for i in t.gpu.name[order]]
    assert names == ["A", "B", "C", "D"]
    assert critical_us(t, order, launch_rows(t)).tolist() == [10.0, 0.0, 10.0, 9.0]
    # without the profiler a 20 us gap that shrinks to a twentieth (1 us) was a queue: B counts too
    assert critical_us(t, order, launch_rows(t), idle_scale=0.05).tolist() == [10.0, 9.0, 10.0, 9.0]
    # a step whose GPU work fills it without the profiler: every op but the device's last is queued
    assert critical_us(t, order, launch_rows(t), idle_scale=0.0).tolist() == [10.0, 9.0, 10.0, 9.0]


def test_idle_scale_is_the_idle_left_without_the_profiler():
    # traced 20 ms with 5 ms of GPU work: 15 ms idle; 11 ms without the profiler: 6 ms idle -> 0.4
    assert idle_scale(20.0, 11.0, 5.0) == pytest.approx(0.4)
    assert idle_scale(20.0, 25.0, 5.0) == 1.0  # not shorter: the gaps as traced
    assert idle_scale(20.0, 4.0, 5.0) == 0.0  # shorter than the GPU's work: no idle left


def _fix(doc, key):
    return next((f for f in doc.fixes if f.key == key), None)


def test_fp32_gemms_of_a_launch_bound_loop_barely_bound_the_step():
    """The bundled launch-bound MLP runs its GEMMs in plain FP32 with the GPU busy about a fifth of the step (with
    Python stacks recorded, a third of that): a faster GEMM only lengthens the idle after it. Before, tf32 came
    first at 13.8% (a replay that kept the stacks' profiler cost out of the host time)."""
    doc = api.analyze(str(trace_path("launch_bound_stacks"))).document
    a_ms = sum(t["total_ms"] for t in plain_fp32_gemms(_analysis(trace_path("launch_bound_stacks")).kernels)) / 30
    tf32 = _fix(doc, "tf32")
    assert tf32 is not None and a_ms > 0.3  # FP32 GEMMs ran: over 0.3 ms of them a step
    assert tf32.saving_ms < 0.05 * doc.step.ms  # under 5% of the step
    assert tf32.predicted.saving_ms <= tf32.saving_ms * (1 + 1e-9)
    assert doc.fixes[0].key != "tf32" and doc.verdict.primary == "launch_bound"


def _analysis(path):
    from gpucheckup.analysis.checkup import analyze

    return analyze(read_trace(str(path)))


def test_fp32_gemms_of_a_gpu_bound_job_stay_on_the_critical_path():
    """The sync example (tests/data/whatif_h200/sync: FP32 GEMMs, GPU busy ~95%) keeps nearly all its FP32 GEMM
    time as tf32's bound: the peak ratio's share of it (H200: 1 - 67/494.7)."""
    from pathlib import Path

    run = next((Path(__file__).parent / "data" / "whatif_h200" / "sync").iterdir())
    a = _analysis(next((run / "traces").glob("*.json*")))
    fp32_ms = a.window.ms(1000 * sum(t["total_ms"] for t in plain_fp32_gemms(a.kernels)))
    doc = api.analyze(str(run)).document
    tf32 = _fix(doc, "tf32")
    assert tf32.saving_ms >= 0.95 * fp32_ms * (1 - 67 / 494.7)
    assert doc.fixes[0].key in ("tf32", "bf16_autocast")


def test_a_trace_with_python_stacks_predicts_what_the_same_loop_without_them_does():
    """The bundled launch-bound MLP captured twice on the H200, without and with `with_stack=True` (3.3k Python
    function events a step more, the step traced at 16.5 and 37.6 ms): the replay's calibration takes the profiler's
    cost out of the host time in both, so the fixes' predicted shares agree. Before, the Python events were charged
    at the operators' cost per event, more than the whole step: the with-stack host was calibrated to nothing and
    the replay was GPU-bound (tf32 first at 13.8%, the fused optimizer 2.2% against 10.2% without stacks)."""
    def shares(case):
        doc = api.analyze(str(trace_path(case))).document
        return {f.key: f.predicted.saving_pct for f in doc.fixes if f.predicted is not None}

    plain, stacks = shares("launch_bound"), shares("launch_bound_stacks")
    for key in ("fused_optimizer", "larger_batch", "cuda_graph", "torch_compile", "tf32"):
        assert abs(stacks[key] - plain[key]) <= 7.0, (key, plain[key], stacks[key])  # percentage points

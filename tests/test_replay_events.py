"""The replay's per-event profiler cost (whatif/replay.py): a trace within MIN_INFLATION_PCT of its unprofiled step
has its host time scaled by 1 - events per step x PROFILER_EVENT_LAUNCHES launch calls / host time per step.
Real H200 run directories of the what-if validation (docs/validation.md section 7); the events and launch calls are
counted here from the raw JSON."""

from __future__ import annotations

import statistics
from functools import lru_cache

import pytest

from conftest import REPO, raw_events
from gpucheckup.checkup import pipeline
from gpucheckup.whatif import replay, edits as whatif
from gpucheckup.analysis.one_trace.profiler_overhead import MIN_INFLATION_PCT
from gpucheckup.diagnosis.fixes import BY_KEY

RUNS = REPO / "tests/data/whatif_h200"
SYNC = {"call2": RUNS / "sync/20261130-171357-python3", "call5": RUNS / "sync_call5/20261130-195046-python3"}
TF32_MEASURED = 64.1  # the sync example's --tf32, `gpucheckup ab` on the H200 (docs/validation.md section 7)
HOST_CATS = {"cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "python_function"}


@lru_cache(maxsize=None)
def _checked(run):
    a = pipeline.check(run).checkups[0].analysis
    g = replay.build(a.trace, a.steps, a.launch_rows)
    return a, g


def _raw_per_step(run) -> tuple[float, float]:
    """(host events per step, median launch call in us) from the raw JSON: events of the host categories that start
    inside each ProfilerStep# (median over the steps); the median duration of the runtime and driver calls whose
    correlation id a kernel, copy or memset carries (every call that launched GPU work)."""
    events = raw_events(next((run / "traces").glob("*.json*")))["traceEvents"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name", "").startswith("ProfilerStep#")]
    host = [e["ts"] for e in events if e.get("cat") in HOST_CATS and e.get("ph") == "X"]
    per_step = statistics.median(sum(1 for t in host if s <= t < end) for s, end in steps)
    on_gpu = {e["args"].get("correlation") for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")}
    launch = statistics.median(e["dur"] for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
                               and e.get("args", {}).get("correlation") in on_gpu)
    return per_step, launch


@pytest.mark.parametrize("call", sorted(SYNC))
def test_gpu_bound_baseline_is_scaled_by_its_events(call):
    """The sync example's baselines are within 5% of their unprofiled step (GPU-bound: 18.7 ms of GEMMs), so the
    step cannot calibrate them; their host time is scaled by the profiler's cost per recorded event instead."""
    a, g = _checked(SYNC[call])
    unprofiled = a.profiler.unprofiled_step_ms
    c = replay.calibrate(g, unprofiled)
    assert 100 * (c.traced_ms / unprofiled - 1) < MIN_INFLATION_PCT and not c.applied
    assert c.how == "per event"
    host_ms, events = replay.host_per_step(g)
    raw_events_per_step, launch = _raw_per_step(SYNC[call])
    assert events == pytest.approx(raw_events_per_step, rel=0.01)
    assert replay.typical_launch_us(g) == pytest.approx(launch, rel=1e-3)  # every launching call, not only kernels
    # the documented cost (docs/metrics.md "Replay"): 0.70 launch calls per event, events and launches from the JSON
    expected = 1 - raw_events_per_step * 0.70 * launch / host_ms
    assert c.host_scale == pytest.approx(expected, rel=0.01)
    assert 0 < c.host_scale < 0.7  # more than 30% of the host time was the profiler's
    assert c.replayed_ms == replay.replay(g).median_ms < c.traced_ms


def test_two_baselines_of_one_job_predict_tf32_alike():
    """Before the per-event cost, the sync example's --tf32 replayed to 64.6% on one baseline and 50.0% on another
    (the slower host's profiled spans set a host floor once the GEMMs were fast); measured 64.1%."""
    pred = {}
    for call, run in SYNC.items():
        a, g = _checked(run)
        before = replay.calibrate(g, a.profiler.unprofiled_step_ms).replayed_ms
        e = BY_KEY["tf32"]
        pred[call] = whatif.predict(g, e.replay, before, **dict(e.replay_params)).saving_pct
    assert abs(pred["call2"] - pred["call5"]) < 7.0, pred
    for p in pred.values():
        assert abs(p - TF32_MEASURED) / TF32_MEASURED < 0.10, pred


def test_constant_lies_among_the_calibrated_traces():
    """PROFILER_EVENT_LAUNCHES against the per-event cost the calibration gives on this repository's calibrated H200
    run directories ((1 - host_scale) x host time / events, in launch calls): 0.62 (launch_bound), 0.97 and 0.91
    (the MoE example's two baselines), with the unprofiled step as the throughput of the steps before the window
    (docs/metrics.md, "The step time"; their median gave 0.62, 0.91 and 0.88)."""
    runs = [REPO / "tests/data/h200/runs/20261129-105942-launch_bound",
            RUNS / "moe/20261130-172136-python3", RUNS / "moe_shapes/20261130-210532-python3"]
    costs = []
    for run in runs:
        a, g = _checked(run)
        c = replay.calibrate(g, a.profiler.unprofiled_step_ms)
        assert c.applied and c.how == "unprofiled step"
        g.host_scale = 1.0
        host_ms, events = replay.host_per_step(g)
        costs.append((1 - c.host_scale) * host_ms / events / replay.typical_launch_us(g))
    assert costs == pytest.approx([0.62, 0.97, 0.91], abs=0.02)
    assert min(costs) <= replay.PROFILER_EVENT_LAUNCHES <= max(costs)


def test_no_unprofiled_step_takes_the_per_event_cost_too():
    """A trace with no unprofiled step: the profiler's per-event cost is there all the same."""
    a, g = _checked(SYNC["call2"])
    with_step = replay.calibrate(g, a.profiler.unprofiled_step_ms).host_scale
    c = replay.calibrate(g, None)
    assert c.how == "per event" and c.host_scale == with_step < 1.0 and c.replayed_ms < c.traced_ms


def test_bare_moe_trace_replays_tf32_as_measured_on_its_example():
    """The bundled moe_seed H200 trace (the MoE example's layer and sizes; no unprofiled step) replayed tf32 to 38.8%
    with its host as traced; with the per-event cost about the 58.1% the example's --tf32 measured."""
    from conftest import DEMO
    from gpucheckup.trace.reader import read_trace
    g = replay.build(read_trace(DEMO / "moe_seed" / "trace.json.gz"))
    c = replay.calibrate(g, None)
    assert c.how == "per event" and 0 < c.host_scale < 1
    e = BY_KEY["tf32"]
    saving = whatif.predict(g, e.replay, c.replayed_ms, **dict(e.replay_params)).saving_pct
    assert abs(saving - 58.1) / 58.1 < 0.10, saving

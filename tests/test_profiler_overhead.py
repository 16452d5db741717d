"""The profiler-overhead correction, on real H200 captures: a bf16 transformer that the profiler
makes look launch-bound, and `gpucheckup run` directories whose steps.csv gives the unprofiled step."""

from __future__ import annotations

import csv
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

import independent as ind
from conftest import raw_events, read_report

DATA = Path(__file__).parent / "data" / "h200"
H200_BF16_PEAK = 989.4  # TFLOP/s, dense, NVIDIA H200 datasheet


def analyze_json(tmp_path, *args) -> dict:
    out = tmp_path / "r.json"
    res = subprocess.run([sys.executable, "-m", "gpucheckup", "analyze", *map(str, args), "--json", str(out),
                          "--quiet"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    return read_report(out)


def test_gpu_bound_job_looks_launch_bound_under_the_profiler_until_corrected(tmp_path):
    run = DATA / "bf16_transformer_run"
    meta = json.loads((run / "meta.json").read_text())
    unprof_ms = meta["step_s_unprofiled"] * 1000
    traced = analyze_json(tmp_path, run)
    assert traced["verdict"]["primary"] == "launch_bound"  # what the trace alone says
    assert traced["profiler"] is None
    fixed = analyze_json(tmp_path, run, "--unprofiled-step-ms", unprof_ms)
    assert fixed["verdict"]["primary"] == "gpu_bound"
    doc = raw_events(run / "traces" / "trace_rank0.json.gz")
    w = ind.step_windows(doc)
    # the GPU's share of the window times the median step window (analysis/one_trace/window.py's one basis)
    gpu_ms = ind.busy_pct(doc, w) / 100 * statistics.median(e - s for s, e in w) / 1000
    p = fixed["profiler"]
    assert p["applied"] and p["gpu_ms_per_step"] == pytest.approx(gpu_ms, rel=1e-6)
    assert p["busy_pct_unprofiled"] == pytest.approx(100 * gpu_ms / unprof_ms, rel=1e-6)
    assert p["busy_pct_unprofiled"] > 80 > traced["gpu"]["busy_pct"]
    # MFU from the agent-style flops.json and the unprofiled step, by hand
    assert fixed["mfu"]["source"] == "agent"
    assert fixed["mfu"]["pct"] == pytest.approx(100 * meta["flops_per_step"] / (unprof_ms / 1000) / 1e12
                                                / H200_BF16_PEAK, rel=1e-6)
    assert any(f["id"] == "profiler_overhead" for f in fixed["verdict"]["findings"])


def unprofiled_ms(steps_csv: Path) -> float:
    """The unprofiled step (docs/metrics.md, "Step history"), recomputed: total time over the plain steps before
    the first instrumented step, from the first of 5 within 20% of their median, when 8 or more and no slower
    than the second half's; else over the second half's (plain: not instrumented, nor 2 steps after one)."""
    rows = [r for r in csv.DictReader(steps_csv.open()) if r["ms"]]
    instrumented = {int(r["step"]) for r in rows if r["phase"]}
    near = {s + k for s in instrumented for k in (1, 2)}
    plain = [(int(r["step"]), float(r["ms"])) for r in rows if r["phase"] == "" and int(r["step"]) not in near]
    late = [ms for _, ms in plain[len(plain) // 2:]]
    pre = [ms for n, ms in plain if n < min(instrumented)]
    if len(pre) >= 8:
        ref = statistics.median(pre)
        ok = [abs(x - ref) <= 0.2 * ref for x in pre]
        start = next((i for i in range(len(pre) - 4) if all(ok[i:i + 5])), None)
        if start is not None and len(pre) - start >= 8 and statistics.mean(pre[start:]) <= statistics.mean(late):
            return statistics.mean(pre[start:])
    return statistics.mean(late)


def test_unprofiled_step_is_before_the_window():
    """launch_bound's run: 27 plain steps of 8.6-11.6 ms before its FLOP-counted and profiled steps, then
    13.3-16.1 ms for 60 steps after the window (Kineto's CUPTI left subscribed, docs/validation.md 6c): the
    unprofiled step is the throughput of steps 2-28, 9.609 ms (their median 9.476 ms), not the second half's."""
    run = next((DATA / "runs").glob("*-launch_bound"))
    from gpucheckup.analysis.run_logs.step_history import step_stats
    from gpucheckup.trace.rundir import read_run
    st = step_stats(next(iter(read_run(run).steps.values())))
    assert st["unprofiled_steps"] == [2, 28] and st["unprofiled_basis"] == "before the window"
    assert st["unprofiled_ms"] == pytest.approx(259.433 / 27) == pytest.approx(unprofiled_ms(run / "steps.csv"))
    assert st["steady_median_ms"] == pytest.approx(11.45)  # the second half, less the 2 steps after the window
    assert st["profiler_overhead_pct"] == pytest.approx(100 * (st["profiled_median_ms"] / 9.476 - 1))  # per step


@pytest.mark.parametrize("case", ["input_bound", "launch_bound"])
def test_real_run_directories(tmp_path, case):
    run = next((DATA / "runs").glob(f"*-{case}"))
    r = analyze_json(tmp_path, run)
    assert r["verdict"]["primary"] == case
    p = r["profiler"]
    assert p["source"].startswith("steps.csv")
    assert "before the window" in p["source"] or case == "input_bound"
    assert p["unprofiled_step_ms"] == pytest.approx(unprofiled_ms(run / "steps.csv"))
    manifest = json.loads((run / "manifest.json").read_text())
    assert r["mfu"]["flops_per_step"] == json.loads((run / "flops.json").read_text())["flops_per_step"]
    assert manifest["exit_code"] == 0
    ids = {f["id"] for f in r["verdict"]["findings"]}
    if case == "input_bound":
        assert "gpu_heartbeat" in ids  # NVML sees the GPU pulse once per batch
    else:
        assert r["kernels"]["small_pct"] > 90


def test_attach_without_agent_gives_the_coarse_verdict(tmp_path):
    run = DATA / "runs" / "20261129-110024-attach-653"
    res = subprocess.run([sys.executable, "-m", "gpucheckup", "analyze", str(run)], capture_output=True, text=True,
                         timeout=120, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr
    assert "GPU idle in 100% of 38 samples while the main thread waits in DataLoader __next__" in res.stdout

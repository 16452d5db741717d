"""The command line end to end, in subprocesses, on real traces."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

from conftest import trace_path, write_trace

REQUIRED_KEYS = [
    "verdict.primary", "verdict.findings", "gpu.busy_pct", "steps.count", "steps.median_ms", "kernels.count",
    "kernels.mean_us", "kernels.small_pct", "kernels.categories", "gaps.by_cause_ms", "dataloader.pct_of_step",
    "sync.count_per_step", "copies.pct_of_gpu_time", "copies.pageable_count",
]


def run_cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "gpucheckup", *args], capture_output=True, text=True,
                          timeout=300, **kw)


def lookup(d, dotted):
    for part in dotted.split("."):
        d = d[part]
    return d


def test_demo_runs_offline_and_writes_json(tmp_path):
    out = tmp_path / "demo.json"
    res = run_cli("demo", "--json", str(out), cwd=tmp_path)  # demo also writes its HTML report in the cwd
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    data = json.loads(out.read_text())
    assert {k: v["verdict"]["primary"] for k, v in data.items()} == {
        "input_bound": "input_bound", "launch_bound": "launch_bound", "moe_seed": "gpu_bound",
        "compute_bound": "gpu_bound"}
    for report in data.values():
        for key in REQUIRED_KEYS:
            lookup(report, key)
        assert "data_movement" in report["kernels"]["categories"]
        for f in report["verdict"]["findings"]:
            assert {"id", "severity", "title", "evidence", "fix"} <= set(f)
    assert "INPUT-BOUND" in res.stdout and "LAUNCH-BOUND" in res.stdout and "GPU-BOUND" in res.stdout


def test_analyze_prints_verdict_evidence_fixes_in_order():
    res = run_cli("analyze", str(trace_path("launch_bound")))
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert out.index("LAUNCH-BOUND") < out.index("small-kernel storm") < out.index("What to try first")


def test_folder_of_rank_traces(tmp_path):
    for rank, case in ((0, "moe_seed"), (1, "launch_bound")):
        shutil.copy(trace_path(case), tmp_path / f"trace_rank{rank}.json.gz")
    out = tmp_path / "ranks.json"
    res = run_cli("analyze", str(tmp_path), "--json", str(out), "--quiet")
    assert res.returncode == 0, res.stderr
    data = json.loads(out.read_text())
    assert [r["rank"] for r in data["ranks"]["table"]] == [0, 1]
    assert [r["verdict"] for r in data["ranks"]["table"]] == ["gpu_bound", "launch_bound"]
    assert data["ranks"]["straggler"] is None  # two unrelated traces: no collective calls to match
    assert any("rank 1 is a straggler" in n for n in data["reports"][0]["notes"])


def test_trace_text_is_printed_literally(tmp_path):
    name = "<img src=x onerror=alert(1)> [bold red]not markup[/bold red]"
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1, "dur": 2,
         "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": 5, "dur": 90,
         "args": {"device": 0, "stream": 7, "correlation": 1}},
    ]
    path = write_trace(tmp_path / "evil.json", events)
    res = run_cli("analyze", str(path), env={"COLUMNS": "300", "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr
    assert "<img src=x onerror=alert(1)> [bold red]not markup[/bold red]" in res.stdout

"""The command line end to end, in subprocesses, on real traces."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from conftest import modules_loaded, trace_path, write_trace, read_report

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
    assert data["kind"] == "cases"
    assert {k: v["verdict"]["primary"] for k, v in zip(data["cases"], data["checkups"])} == {
        "input_bound": "input_bound", "launch_bound": "launch_bound", "moe_seed": "gpu_bound",
        "compute_bound": "gpu_bound"}
    for report in data["checkups"]:
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
    ranks = data["job"]["ranks"]
    assert [r["rank"] for r in ranks["table"]] == [0, 1]
    assert [r["verdict"] for r in ranks["table"]] == ["gpu_bound", "launch_bound"]
    assert ranks["straggler"] is None  # two unrelated traces: no collective calls to match
    assert any("rank 1 is a straggler" in n for n in data["checkups"][0]["notes"])


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


def test_debug_is_taken_before_or_after_the_command():
    from gpucheckup.cli import build_parser

    p = build_parser()
    assert p.parse_args(["analyze", "x.json", "--debug"]).debug is True
    assert p.parse_args(["--debug", "analyze", "x.json"]).debug is True
    assert p.parse_args(["analyze", "x.json"]).debug is False
    assert p.parse_args(["run", "--debug", "--", "python", "train.py", "--debug"]).cmd == [
        "--", "python", "train.py", "--debug"]  # the job's own --debug is the job's


def test_the_command_line_imports_no_analysis_at_start():
    """`gpucheckup --help` and the parsing of every command import the standard library only."""
    code = ("from gpucheckup.cli import build_parser\n"
            "for argv in (['analyze', 'x'], ['demo'], ['run', '--', 'true'], ['attach', '--pid', '1'], ['ncu-cmd', 'x'],"
            " ['ceilings']):\n    build_parser().parse_args(argv)\n")
    heavy = ("numpy", "rich", "msgspec", "torch", "gpucheckup.analysis", "gpucheckup.diagnosis", "gpucheckup.report",
             "gpucheckup.checkup.pipeline", "gpucheckup.trace")
    assert modules_loaded(code, heavy) == []


def test_an_out_of_process_attach_is_judged_when_checked_up(tmp_path):
    """samples.csv holds raw frames; the coarse verdict is made from them and nvml.csv when the run is read.
    12 samples: 8 in DataLoader then 2 in forward while NVML says 0% (a tick every 0.1 s), and 2 more
    in forward 3 s after the last tick (no NVML within 1 s: unknown). So the GPU idles in 10 of 10
    known samples, 8 of them in the DataLoader."""
    run = tmp_path / "attach-1"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"kind": "attach-py-spy", "command": ["gpucheckup", "attach"],
                                                   "started_epoch_s": 1000.0, "captured": {}, "failed": {}}))
    loader = "__next__@/x/torch/utils/data/dataloader.py;<module>@/job/train.py"
    forward = "forward@/x/torch/nn/modules/linear.py;<module>@/job/train.py"
    rows = [(1000 + 0.25 * i, loader if i < 8 else forward) for i in range(10)] + [(1005.0, forward),
                                                                                    (1005.25, forward)]
    (run / "samples.csv").write_text("t_s,main_thread_active,threads,active_threads_elsewhere,main_stack\n" + "".join(
        f"{t},true,3,0,{stack}\n" for t, stack in rows))
    (run / "nvml.csv").write_text("t_s,gpu,util_pct,mem_used_mb,mem_total_mb,power_w,sm_clock_mhz,clock_reasons\n"
                                  + "".join(f"{1000 + 0.1 * i:.1f},0,0,1000,80000,100,1980,0\n" for i in range(21)))
    out = tmp_path / "r.json"
    res = run_cli("analyze", str(run), "--json", str(out), env={**os.environ, "COLUMNS": "200"})
    assert res.returncode == 0, res.stderr
    sentence = "GPU idle in 100% of 10 samples while the main thread waits in DataLoader __next__ (80% of those samples)"
    assert sentence in res.stdout
    coarse = read_report(out)["run_figures"]["coarse"]
    assert coarse["verdict"] == "input_bound" and coarse["samples"] == 12 and coarse["gpu_idle_pct"] == 100
    assert coarse["main_states_pct"] == {"dataloader": 100 * 8 / 12, "forward": 100 * 4 / 12}


def test_the_reader_needs_only_columns_the_writers_write():
    from gpucheckup import layout
    from gpucheckup.trace import rundir

    assert set(rundir.STEP_NEEDED) <= set(layout.STEP_COLUMNS)
    assert set(rundir.NVML_NEEDED) <= set(layout.NVML_COLUMNS)
    assert set(rundir.CPU_NEEDED) <= set(layout.CPU_COLUMNS)
    assert set(rundir.SAMPLE_NEEDED) <= set(layout.SAMPLE_COLUMNS)
    assert set(rundir.MANIFEST_TYPES) <= set(layout.MANIFEST_KEYS)

"""`gpucheckup attach` to a job started under `gpucheckup run` (its agent profiles a window into the job's run
directory, traces/attach/): the check-up stands on the job's own step log, the unprofiled step, as `run`'s does,
not on the profiled steps with a caution that the profiler may have made the verdict.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

RECORDED = Path(__file__).resolve().parent / "data" / "h200" / "runs" / "20261129-105942-launch_bound"
JOBS = Path(__file__).resolve().parent / "jobs"
PY = sys.executable


def plain_steps_before_window(steps_csv: Path) -> list[float]:
    """The job's own step times (ms) of the steps its agent did not instrument, before the first one it did."""
    out = []
    with open(steps_csv, newline="") as f:
        for row in csv.DictReader(f):
            if row["phase"]:
                break
            if row["ms"]:
                out.append(float(row["ms"]))
    return out


def as_attached_while_running(tmp_path: Path) -> tuple[Path, Path]:
    """The H200 launch-bound run as `gpucheckup attach` leaves it while the job still runs: its profiled window in
    traces/attach/ (where the agent writes an attach window), no manifest yet (written when the job ends), the step
    log still being written (steps.csv.part)."""
    run = tmp_path / "run"
    shutil.copytree(RECORDED, run)
    (run / "traces" / "attach").mkdir()
    trace = run / "traces" / "attach" / "20261129-110000-1-main.json.gz"
    (run / "traces" / "trace.json.gz").rename(trace)
    (run / "manifest.json").unlink()
    (run / "steps.csv").rename(run / "steps.csv.part")
    return run, trace


def test_an_attach_window_of_a_gpu_job_stands_on_the_jobs_step_log(tmp_path):
    from conftest import document_of

    from gpucheckup.checkup.pipeline import attach_run_dir, check, check_run
    from gpucheckup.document import trace_part
    from gpucheckup.report.text.lines import profiler_caveat

    run, trace = as_attached_while_running(tmp_path)
    plain = plain_steps_before_window(run / "steps.csv.part")
    alone = check(trace).checkups[0].report  # what attach printed before: the profiled steps, and a caution
    assert profiler_caveat(trace_part(alone)) is not None and alone["window"]["step_ms"] > max(plain)
    assert attach_run_dir(trace) == run
    doc = document_of(check_run(run, trace=trace))
    assert doc["kind"] == "run" and doc["run"]["info"]["traces"] == ["traces/attach/20261129-110000-1-main.json.gz"]
    assert "steps.csv" in doc["step"]["basis"] and "without the profiler" in doc["step"]["basis"]
    assert min(plain) <= doc["step"]["ms"] <= max(plain)  # one of the job's own unprofiled steps, not 23 ms
    report = doc["checkups"][0]
    assert report["profiler"] is not None and profiler_caveat(trace_part({**report, "verdict": doc["verdict"]})) is None


def test_attach_to_a_cpu_job_under_run_reads_its_step_log(tmp_path):
    pytest.importorskip("torch", reason="the capture tests run real torch jobs: pip install torch==2.13.0 (CI does)")
    from test_capture import start, wait_for

    out, ready, stop = tmp_path / "runs", tmp_path / "ready", tmp_path / "stop"
    proc = start("run", "--out", str(out), "--skip", "1000000", "--no-report", "--", PY,
                 str(JOBS / "until_stopped.py"), str(ready), str(stop))
    try:
        wait_for(ready)
        # the unprofiled step needs at least 8 plain steps in the job's log (docs/capture.md): let it write 20
        deadline = time.time() + 90
        while time.time() < deadline:
            logs = list(out.glob("*/steps.csv.part"))
            if logs and len(logs[0].read_text().splitlines()) >= 21:
                break
            time.sleep(0.2)
        res = subprocess.run([PY, "-m", "gpucheckup", "attach", "--pid", str(proc.pid), "--steps", "3", "--json",
                              str(tmp_path / "a.json")], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "COLUMNS": "200"})
    finally:
        stop.write_text("stop")
        proc.communicate(timeout=120)
    assert res.returncode == 0, res.stderr
    trace = Path(re.search(r"trace written: (\S+)", res.stdout).group(1))
    doc = json.loads((tmp_path / "a.json").read_text())
    assert doc["kind"] == "run" and doc["run"]["info"]["traces"] == [f"traces/attach/{trace.name}"]
    assert doc["step"]["basis"].startswith("steps.csv") or "(steps.csv" in doc["step"]["basis"]
    assert "still running" in res.stdout  # checked up while the job ran
    steps = [float(r["ms"]) for r in csv.DictReader(open(trace.parents[2] / "steps.csv")) if r["ms"] and not r["phase"]]
    assert min(steps) <= doc["step"]["ms"] <= max(steps)  # the job's own plain steps

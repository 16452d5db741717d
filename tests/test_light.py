"""The light window (`gpucheckup run --light`): a real CPU torch job whose host phases have known lengths,
checked up from py-spy stacks sampled outside the job; and the pieces it is made of.

The expected shares come from the job's own clock (tests/jobs/light_job.py times each phase with
time.perf_counter), not from gpucheckup's code.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import raw_events, read_report
from gpucheckup.capture.agent.light import LEAD_S, lead_due
from gpucheckup.capture.sampler import find_pyspy
from gpucheckup.capture.sampler import main_thread_changes

JOBS = Path(__file__).resolve().parent / "jobs"
PY = sys.executable
# SKIP: enough warm-up steps (~64 ms each) that py-spy gets its whole lead (LEAD_S) before the window
SKIP, STEPS = 36, 30
RATE_HZ = 200.0
# py-spy samples at random intervals (exponential, mean 1/rate), so a share p of a window of N samples is good to
# about sqrt(p(1-p)/N): 30 steps of ~64 ms at 200 Hz are ~380 samples, a standard error of 2.5 points at p = 0.57;
# 12 points is about 4.7 of them. (At 100 Hz over 14 steps it was 5.2 points: CI once read 13 points off.)
TOLERANCE_PTS = 12.0


def _state_pct(rows: list[dict], state: str) -> float:
    return next((r["pct"] for r in rows if r["state"] == state), 0.0)


@pytest.fixture(scope="module")
def light_run(tmp_path_factory):
    pytest.importorskip("torch", reason="the light window runs a real torch job")
    if find_pyspy() is None:
        pytest.skip("py-spy is not installed")
    tmp = tmp_path_factory.mktemp("light")
    job_report = tmp / "job.json"
    out = tmp / "runs"
    p = subprocess.run([PY, "-m", "gpucheckup", "run", "--light", "--out", str(out), "--skip", str(SKIP),
                        "--steps", str(STEPS), "--sample-hz", str(RATE_HZ), "--json", str(tmp / "checkup.json"), "--",
                        PY, str(JOBS / "light_job.py"), str(SKIP + STEPS + 6), str(job_report)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    run_dir = next(d for d in out.iterdir() if d.is_dir())
    return {"run_dir": run_dir, "stdout": p.stdout, "report": read_report(tmp / "checkup.json"),
            "job": json.loads(job_report.read_text())}


def test_light_window_trace_has_ranges_and_no_operators(light_run):
    events = [e for e in raw_events(light_run["run_dir"] / "traces" / "trace.json.gz")["traceEvents"]
              if e.get("ph") == "X"]
    cats = {e.get("cat") for e in events}
    assert "cpu_op" not in cats  # no operator recorded
    names = [e["name"] for e in events if e.get("cat") == "user_annotation"]
    marks = sorted(int(n.split("#")[1]) for n in names if n.startswith("ProfilerStep#"))
    assert len(marks) == STEPS and marks == list(range(marks[0], marks[0] + STEPS))
    assert sum(n.startswith("enumerate(DataLoader)#") for n in names) >= STEPS - 1
    assert any(n.startswith("Optimizer.step#SGD") for n in names)


def test_light_checkup_host_shares_match_the_jobs_clock(light_run):
    rows = light_run["job"][SKIP:SKIP + STEPS]
    total = sum(r["load_s"] + r["train_s"] + r["python_s"] for r in rows)
    load_pct = 100 * sum(r["load_s"] for r in rows) / total
    python_pct = 100 * sum(r["python_s"] for r in rows) / total
    hs = light_run["report"]["run_figures"]["host_samples"]
    assert hs["source"] == "sampled stacks" and hs["rate_hz"] == RATE_HZ
    assert hs["window_covered_pct"] >= 90.0
    by = hs["window_by_state"]
    assert abs(_state_pct(by, "dataloader") - load_pct) <= TOLERANCE_PTS, (by, load_pct)
    assert abs(_state_pct(by, "python") - python_pct) <= TOLERANCE_PTS, (by, python_pct)
    assert abs(hs["ranges"]["dataloader"]["pct"] - load_pct) <= TOLERANCE_PTS, (hs["ranges"], load_pct)
    assert "gap_by_state" not in hs  # a CPU job: no GPU timeline, so no idle gaps


def test_light_run_directory_and_terminal_say_the_source(light_run):
    run_dir = light_run["run_dir"]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    hs = manifest["captured"]["host_samples"]
    assert hs["status"] == "ok" and hs["processes"]["main"]["status"] == "ok"
    assert any(a["path"] == "host-samples.json" for a in manifest["artefacts"])
    assert manifest["agent_settings"]["main"]["light"] is True
    assert "from sampled stacks" in light_run["stdout"]
    assert "from profiler ranges" in light_run["stdout"]


def test_main_thread_changes_follow_the_main_thread_only():
    def ev(ph, name, tid, ts, filename="f.py"):
        return {"ph": ph, "name": name, "tid": tid, "ts": ts, "args": {"filename": filename}}

    events = [ev("B", "thread (1): MainThread", 7, 0, ""), ev("B", "<module>", 7, 0), ev("B", "load", 7, 0),
              ev("B", "thread (2): worker", 8, 0, ""), ev("B", "run", 8, 0),
              ev("E", "load", 7, 10), ev("B", "step", 7, 10), ev("E", "run", 8, 15)]
    main, threads = main_thread_changes(events)
    assert main == [[0.0, "load@f.py;<module>@f.py"], [10.0, "step@f.py;<module>@f.py"]]
    assert threads == {"7": "MainThread", "8": "worker"}


def test_sampling_starts_ahead_of_the_window_at_the_jobs_pace():
    assert lead_due(19, 20, [])  # the warm-up step comes next
    assert not lead_due(3, 20, [])  # no pace known yet
    assert not lead_due(3, 20, [1000.0 * LEAD_S / 8] * 5)  # 16 steps to go: twice the lead
    assert lead_due(3, 20, [1000.0 * LEAD_S / 16] * 5)


def test_bad_sample_rate_is_one_line_and_no_job(tmp_path):
    p = subprocess.run([PY, "-m", "gpucheckup", "run", "--light", "--sample-hz", "0", "--out", str(tmp_path),
                        "--", PY, "-c", "print('ran')"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "ran" not in p.stdout
    assert p.stderr.strip().count("\n") == 0 and "--sample-hz" in p.stderr


# ---- the GPU path, on light windows captured on the H200 (validation/light_ab.py, 2026-11-30) ----------------
H200_LIGHT = Path(__file__).resolve().parent / "data" / "h200" / "light"


def _checkup(name: str) -> dict:
    from gpucheckup.checkup.pipeline import check_run

    return check_run(H200_LIGHT / name).checkups[0].report


def test_h200_light_input_bound_idle_is_the_dataloader_by_two_sources():
    r = _checkup("input_bound")
    assert r["verdict"]["primary"] == "input_bound"
    assert r["gaps"]["source"].startswith("CUDA runtime calls")
    hs = r["run_figures"]["host_samples"]
    assert hs["gap_covered_pct"] >= 90.0
    sampled = _state_pct(hs["gap_by_state"], "dataloader")
    assert sampled >= 85.0
    # py-spy's samples and the profiler's DataLoader ranges are independent sources on two clocks
    assert abs(sampled - hs["ranges"]["dataloader"]["pct"]) <= 5.0, hs


def test_h200_light_launch_bound_idle_is_the_host_dispatching():
    r = _checkup("launch_bound")
    assert r["verdict"]["primary"] == "launch_bound"
    hs = r["run_figures"]["host_samples"]
    assert hs["gap_covered_pct"] >= 90.0
    dispatching = sum(_state_pct(hs["gap_by_state"], s) for s in ("forward", "backward", "optimizer", "python"))
    assert dispatching >= 95.0 and _state_pct(hs["gap_by_state"], "dataloader") == 0.0


def test_light_syncs_needs_light_and_reaches_the_agent(tmp_path):
    """`--light-syncs` adds CUPTI's synchronization records to a light window: alone it is a one-line error before any
    job runs; with --light the agent's settings get it."""
    from gpucheckup.capture.agent.settings import parse_settings
    from gpucheckup.capture.launcher import agent_environment
    from gpucheckup.capture.options import RunOptions

    p = subprocess.run([PY, "-m", "gpucheckup", "run", "--light-syncs", "--out", str(tmp_path),
                        "--", PY, "-c", "print('ran')"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "ran" not in p.stdout
    assert p.stderr.strip().count("\n") == 0 and "--light-syncs needs --light" in p.stderr
    env = agent_environment(RunOptions(light=True, light_syncs=True))
    assert env["GPUCHECKUP_LIGHT"] == env["GPUCHECKUP_LIGHT_SYNCS"] == "1"
    assert parse_settings(env)[0]["light_syncs"] is True
    assert parse_settings({})[0]["light_syncs"] is False

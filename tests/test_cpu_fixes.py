"""A CPU check-up gets the problem and the fix: real CPU torch jobs (tests/jobs/cpu_causes.py) through `gpucheckup
run`, one with a slow Dataset under num_workers=0, one with Python between operators every step. Each gets a
finding naming its cause and catalogue fixes whose saving is the time the mechanism can give back, checked
against the trace's own events and the job's own clock, not against the code's figures."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

JOBS = Path(__file__).resolve().parent / "jobs"
LOADER_NEXT = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _run(mode: str, tmp_path: Path) -> tuple[dict, float, Path]:
    """The job's check-up document, the figure it printed on its own clock, and its run directory."""
    pytest.importorskip("torch", reason="runs a real torch job")
    out, doc = tmp_path / "runs", tmp_path / "r.json"
    p = subprocess.run([sys.executable, "-m", "gpucheckup", "run", "--out", str(out), "--skip", "3", "--steps", "5",
                        "--json", str(doc), "--", sys.executable, str(JOBS / "cpu_causes.py"), mode, "40"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    own = next(float(x.split()[1]) for x in p.stdout.splitlines() if x.startswith(("wait_ms", "python_ms", "step_ms")))
    (run,) = [d for d in out.iterdir() if d.is_dir()]
    return json.loads(doc.read_text()), own, run


def _trace_events(run: Path) -> list[dict]:
    (trace,) = (run / "traces").glob("*.json.gz")
    with gzip.open(trace, "rt") as f:
        return json.load(f)["traceEvents"]


def test_a_slow_dataset_gets_workers_saving_its_wait_in_next(tmp_path):
    doc, own_wait_ms, run = _run("loader", tmp_path)
    assert doc["verdict"]["primary"] == "cpu_only"  # no device: the verdict stays; the cause is a finding
    finding = next(f for f in doc["verdict"]["findings"] if f["id"] == "input_pipeline")
    assert finding["severity"] == "critical"
    keys = [x["key"] for x in doc["fixes"]]
    assert keys[0] == "dataloader_workers" and "fast_storage" in keys  # not only "Profile later"
    saving = doc["fixes"][0]["saving_ms"]
    # from the trace's own events: the share of the profiled steps spent inside the loader's __next__, of the job's
    # step without the profiler (the run's steps.csv: the document's `step`)
    ev = _trace_events(run)
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("name", "").startswith("ProfilerStep#")]
    waits = [e["dur"] for e in ev if e.get("name") == LOADER_NEXT and any(a <= e["ts"] < b for a, b in steps)]
    share = sum(waits) / sum(b - a for a, b in steps)
    assert saving == pytest.approx(share * doc["step"]["ms"], rel=0.02)
    assert saving < doc["step"]["ms"]  # no fix saves more than the step
    # and the job's own clock: 8 samples x 3 ms of sleep per batch, plus collation
    assert 0.6 * own_wait_ms < saving < 1.4 * own_wait_ms, (saving, own_wait_ms)


def _idle_share(ev: list[dict]) -> float:
    """From the trace's own events: the share of the ProfilerStep windows with no cpu_op open on the thread that
    runs the steps (a sweep over sorted intervals, independent of the package's interval code)."""
    steps = sorted((e["ts"], e["ts"] + e["dur"], e["tid"]) for e in ev if e.get("name", "").startswith("ProfilerStep#"))
    tid = steps[0][2]
    ops = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") == "cpu_op" and e.get("tid") == tid)
    idle = 0.0
    for a, b in [(a, b) for a, b, _ in steps]:
        t = a
        for s0, s1 in ops:
            if s1 <= t or s0 >= b:
                continue
            idle += max(s0 - t, 0.0)
            t = max(t, min(s1, b))
        idle += max(b - t, 0.0)
    return idle / sum(b - a for a, b, _ in steps)


def test_python_between_operators_gets_its_fixes(tmp_path):
    doc, own_python_ms, run = _run("python", tmp_path)
    finding = next(f for f in doc["verdict"]["findings"] if f["id"] == "python_overhead")
    by_key = {x["key"]: x for x in doc["fixes"]}
    assert {"compile_cpu", "python_off_loop"} <= set(by_key)
    assert "input_pipeline" not in [f["id"] for f in doc["verdict"]["findings"]]  # no DataLoader in this job
    saving = by_key["python_off_loop"]["saving_ms"]
    assert saving <= finding["cost_ms_per_step"] + 1e-9
    # from the trace's own events: the share of the step with no operator open (this job has no DataLoader), of the
    # job's step without the profiler
    assert saving == pytest.approx(_idle_share(_trace_events(run)) * doc["step"]["ms"], rel=0.02)
    # the job's own clock: its planted Python loop is part of that time (autograd glue, the optimizer's Python
    # and the profiler's own cost are the rest)
    assert saving > 0.8 * own_python_ms
    assert saving < doc["step"]["ms"]
    assert by_key["python_off_loop"]["predicted"] is None and by_key["python_off_loop"]["predicted_note"]


def test_one_intra_op_thread_on_free_cores_gets_the_threads_fix(tmp_path):
    import os

    k = min(len(os.sched_getaffinity(0)), os.cpu_count() or 1)  # one process: all its usable cores are its share
    if k < 2:
        pytest.skip("one usable core: more intra-op threads have no core to run on")
    doc, _, run = _run("ops", tmp_path)
    finding = next(f for f in doc["verdict"]["findings"] if f["id"] == "few_threads")
    assert doc["run"]["env"]["job"]["main"]["torch"]["intra_op_threads"] == 1  # the job's set_num_threads(1)
    fix = next(x for x in doc["fixes"] if x["key"] == "cpu_threads")
    assert f"torch.set_num_threads({k})" in fix["action"]
    # from the trace's own events: the share of the steps with an operator open on the main thread, of the job's
    # step without the profiler; k threads instead of 1 take at best 1/k of it
    busy = (1 - _idle_share(_trace_events(run))) * doc["step"]["ms"]
    assert fix["saving_ms"] == pytest.approx(busy * (1 - 1 / k), rel=0.02)
    assert finding["cost_ms_per_step"] == pytest.approx(fix["saving_ms"])

"""`gpucheckup run` and `gpucheckup attach` end to end: real torch training jobs in subprocesses (CPU).

Expected figures are derived from what the job does (its step count, its layer sizes, the
--skip/--steps semantics), not from gpucheckup's code.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import raw_events, read_report

pytest.importorskip("torch", reason="the capture tests run real torch jobs: pip install torch==2.13.0 (CI does)")

JOBS = Path(__file__).resolve().parent / "jobs"
PY = sys.executable


def gpucheckup(*args, timeout=240, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "gpucheckup", *args], capture_output=True, text=True, timeout=timeout, **kw)


def start(*args, **kw) -> subprocess.Popen:
    return subprocess.Popen([PY, "-m", "gpucheckup", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **kw)


def the_run_dir(out: Path) -> Path:
    dirs = [d for d in out.iterdir() if d.is_dir()]
    assert len(dirs) == 1, dirs
    return dirs[0]


def wait_for(path: Path, timeout: float = 90) -> None:
    end = time.time() + timeout
    while not path.exists():
        assert time.time() < end, f"{path} did not appear"
        time.sleep(0.1)


def read_steps(path: Path) -> list[dict]:
    lines = path.read_text().splitlines()
    head = lines[0].split(",")
    return [dict(zip(head, line.split(","))) for line in lines[1:]]


def profiler_steps(trace: Path) -> list[int]:
    """ProfilerStep#N numbers in a trace, read with the standard library only."""
    events = raw_events(trace)["traceEvents"]
    return sorted(int(e["name"].split("#")[1]) for e in events
                  if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#"))


def assert_manifest_complete(run_dir: Path) -> dict:
    manifest = json.loads((run_dir / "manifest.json").read_text())
    listed = {a["path"]: a["bytes"] for a in manifest["artefacts"]}
    on_disk = {p.relative_to(run_dir).as_posix(): p.stat().st_size for p in run_dir.rglob("*")
               if p.is_file() and p.name != "manifest.json"}
    assert listed == on_disk
    assert not any(name.endswith((".part", ".tmp")) or "/." in "/" + name for name in on_disk), on_disk
    from gpucheckup import layout

    assert set(manifest) <= set(layout.MANIFEST_KEYS), set(manifest) - set(layout.MANIFEST_KEYS)
    assert [a["path"] for a in manifest["artefacts"] if not any(
        a["path"].startswith(prefix) for prefix, _ in layout.ARTEFACT_WHAT)] == []  # every file said what it holds
    return manifest


def linear_train_flops(batch: int, sizes: list[int]) -> int:
    """FLOPs of one step of a Linear stack: forward 2*B*I*O each; backward 2*B*I*O for the weight
    gradient, plus the same for the input gradient except on the first layer (its input needs none)."""
    total = 0
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        mm = 2 * batch * a * b
        total += mm + mm + (mm if i > 0 else 0)
    return total


def test_run_writes_a_complete_run_directory(tmp_path):
    out = tmp_path / "runs"
    res = gpucheckup("run", "--out", str(out), "--skip", "3", "--steps", "4", "--flops", "--", PY,
                     str(JOBS / "train_mlp.py"), "12")
    assert res.returncode == 0, res.stderr
    assert "trained 12 steps" in res.stdout and "a line on stderr" in res.stderr  # streams pass through
    run_dir = the_run_dir(out)
    manifest = assert_manifest_complete(run_dir)
    for name in ("steps.csv", "env.json", "agent.json", "agent.log", "cpu.csv", "flops.json", "traces/trace.json.gz"):
        assert (run_dir / name).is_file(), name
    assert manifest["exit_code"] == 0 and "nvml" in manifest["failed"]  # no NVML on this machine, and it says so

    rows = read_steps(run_dir / "steps.csv")
    assert [int(r["step"]) for r in rows] == list(range(1, 13))
    # --skip 3 --steps 4 --flops: FLOPs counted on step skip-1, profiler warm-up on step skip, steps 4..7 recorded.
    phases = {int(r["step"]): r["phase"] for r in rows}
    assert [s for s, p in phases.items() if p == "profiled"] == [4, 5, 6, 7]
    assert phases[3] == "profile-warmup" and phases[2] == "flops"
    ends = [float(r["t_end_s"]) for r in rows]
    assert ends == sorted(ends) and manifest["started_epoch_s"] < ends[0] < ends[-1] < manifest["ended_epoch_s"]

    flops = json.loads((run_dir / "flops.json").read_text())
    assert flops["flops_per_step"] == linear_train_flops(16, [32, 64, 64, 8])

    trace = run_dir / "traces" / "trace.json.gz"
    assert profiler_steps(trace) == [1, 2, 3, 4]  # ProfilerStep#i is run step skip+i
    doc = raw_events(trace)
    first = min(e["ts"] for e in doc["traceEvents"] if e.get("name") == "ProfilerStep#1")
    epoch_s = (first + doc["baseTimeNanoseconds"] / 1000) / 1e6
    assert abs(epoch_s - ends[2]) < 0.05  # step 4 starts when step 3 ends: trace and steps.csv share a clock

    report = tmp_path / "run.json"
    res = gpucheckup("analyze", str(run_dir), "--json", str(report))
    assert res.returncode == 0, res.stderr
    assert "CPU-side check-up" in res.stdout and "Whole run" in res.stdout  # a CPU-only trace: its CPU side
    data = read_report(report)
    assert data["verdict"]["primary"] == "cpu_only" and data["cpu"]["ops_count"] > 0
    assert data["step_history"]["step"] == list(range(2, 13))  # step 1 has no previous end to time it from
    assert set(data["nvml"]) == {"t_s", "gpu_util", "power_w", "sm_clock_mhz", "throttled"}
    import torch

    assert data["env"]["torch"]["version"] == torch.__version__
    assert data["env"]["dataloaders"][0]["num_workers"] == 0
    assert data["run_figures"]["steps"]["profiled_steps"] == [4, 7]


def test_trace_reads_back_through_the_reader(tmp_path):
    from gpucheckup.trace import read_trace
    from gpucheckup.trace.tables import USER_ANNOTATION

    out = tmp_path / "runs"
    res = gpucheckup("run", "--out", str(out), "--skip", "2", "--steps", "3", "--no-report", "--", PY,
                     str(JOBS / "train_mlp.py"), "8")
    assert res.returncode == 0, res.stderr
    trace = read_trace(the_run_dir(out) / "traces" / "trace.json.gz")
    steps = [trace.names[n] for c, n in zip(trace.host.cat, trace.host.name) if c == USER_ANNOTATION
             and trace.names[n].startswith("ProfilerStep#")]
    assert sorted(steps) == ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"]
    assert any(n.startswith("aten::addmm") for n in trace.names)
    assert not trace.has_gpu


def test_exit_code_passes_through(tmp_path):
    out = tmp_path / "runs"
    res = gpucheckup("run", "--out", str(out), "--no-report", "--", PY, "-c",
                     "import sys; print('bye'); sys.exit(3)")
    assert res.returncode == 3
    assert "bye" in res.stdout
    manifest = assert_manifest_complete(the_run_dir(out))
    assert manifest["exit_code"] == 3
    assert "agent" in manifest["failed"]  # no torch: no agent activity, and the manifest says so


def test_command_not_found(tmp_path):
    res = gpucheckup("run", "--out", str(tmp_path / "runs"), "--", "no-such-program-xyz")
    assert res.returncode == 127
    assert res.stderr.strip().splitlines() == ["gpucheckup: error: command not found: no-such-program-xyz"]


@pytest.mark.parametrize("how, expect", [("die", -signal.SIGTERM), ("5", 5)])
def test_sigterm_reaches_the_job(tmp_path, how, expect):
    out = tmp_path / "runs"
    marker = tmp_path / "got-sigterm"
    proc = start("run", "--out", str(out), "--no-report", "--", PY, str(JOBS / "sigterm_job.py"), str(marker), how)
    wait_for(Path(str(marker) + ".ready"))
    time.sleep(1.5)  # the agent appends step rows at least once a second
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=120)
    assert proc.returncode == expect
    assert marker.read_text() == f"SIGTERM {int(signal.SIGTERM)}"
    run_dir = the_run_dir(out)
    manifest = assert_manifest_complete(run_dir)
    if how == "die":
        assert manifest["exit_signal"] == "SIGTERM" and manifest["exit_code"] is None
        assert "agent_exit" in manifest["failed"]  # no atexit in a killed job: its partial steps were published
    else:
        assert manifest["exit_code"] == 5
    assert len(read_steps(run_dir / "steps.csv")) >= 3


def test_sigint_from_outside_a_terminal_is_forwarded(tmp_path):
    out = tmp_path / "runs"
    ready, stop = tmp_path / "ready", tmp_path / "stop"
    proc = start("run", "--out", str(out), "--no-report", "--", PY, str(JOBS / "until_stopped.py"), str(ready),
                 str(stop), stdin=subprocess.DEVNULL)
    wait_for(ready)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGINT  # the job died of KeyboardInterrupt, and so did the launcher
    assert "KeyboardInterrupt" in err
    assert json.loads((the_run_dir(out) / "manifest.json").read_text())["exit_signal"] == "SIGINT"


def test_job_without_optimizer_gets_a_time_window(tmp_path):
    from gpucheckup.trace import read_trace

    out = tmp_path / "runs"
    ready, stop = tmp_path / "ready", tmp_path / "stop"
    proc = start("run", "--out", str(out), "--no-report", "--window-start", "1", "--window", "1", "--", PY,
                 str(JOBS / "until_stopped.py"), str(ready), str(stop), "inference")
    run_dir_trace = None
    end = time.time() + 90
    while time.time() < end:
        found = list(out.glob("*/traces/time-window/*-main.json.gz"))
        if found:
            run_dir_trace = found[0]
            break
        time.sleep(0.2)
    stop.write_text("stop")
    proc.communicate(timeout=120)
    assert proc.returncode == 0
    assert run_dir_trace is not None, "no time-window trace"
    trace = read_trace(run_dir_trace)
    assert profiler_steps(run_dir_trace) == []
    assert any(n.startswith("aten::linear") for n in trace.names)  # the main thread's operators are in it
    manifest = assert_manifest_complete(the_run_dir(out))
    caps = manifest["captured"]["processes"]["main"]["captures"]
    assert caps[0]["kind"] == "time" and caps[0]["status"] == "done" and 0.9 <= caps[0]["seconds"] < 10
    assert read_steps(the_run_dir(out) / "steps.csv") == []


def test_broken_setting_is_logged_and_the_job_goes_on(tmp_path):
    out = tmp_path / "runs"
    env = {**os.environ, "GPUCHECKUP_STEPS": "banana"}
    res = gpucheckup("run", "--out", str(out), "--skip", "2", "--no-report", "--", PY, str(JOBS / "train_mlp.py"),
                     "10", env=env)
    assert res.returncode == 0, res.stderr
    assert "trained 10 steps" in res.stdout
    run_dir = the_run_dir(out)
    log = (run_dir / "agent.log").read_text()
    assert "GPUCHECKUP_STEPS='banana'" in log and "ERROR" in log
    assert profiler_steps(run_dir / "traces" / "trace.json.gz") == [1, 2, 3, 4, 5]  # the default, 5 steps
    manifest = assert_manifest_complete(run_dir)
    assert "banana" in manifest["failed"]["agent:main"]


def test_attach_to_a_job_started_under_run(tmp_path):
    out = tmp_path / "runs"
    ready, stop = tmp_path / "ready", tmp_path / "stop"
    proc = start("run", "--out", str(out), "--skip", "1000000", "--no-report", "--", PY,
                 str(JOBS / "until_stopped.py"), str(ready), str(stop))
    try:
        wait_for(ready)
        res = gpucheckup("attach", "--pid", str(proc.pid), "--steps", "3", timeout=120)
        assert res.returncode == 0, res.stderr
        m = re.search(r"trace written: (\S+)", res.stdout)
        assert m, res.stdout
        trace = Path(m.group(1))
        assert trace.parent.name == "attach" and trace.exists()
        assert profiler_steps(trace) == [1, 2, 3]
        assert "CPU-side check-up" in res.stdout
        job_pid = int(ready.read_text())
        res = gpucheckup("attach", "--pid", str(job_pid), "--duration", "0.5", timeout=120)
        assert res.returncode == 0, res.stderr
        assert len(profiler_steps(Path(re.search(r"trace written: (\S+)", res.stdout).group(1)))) >= 1
    finally:
        stop.write_text("stop")
        proc.communicate(timeout=120)
    assert proc.returncode == 0
    manifest = assert_manifest_complete(the_run_dir(out))
    assert len([t for t in manifest["captured"]["traces"] if t.startswith("traces/attach/")]) == 2


def test_attach_time_window_to_a_job_without_optimizer(tmp_path):
    out = tmp_path / "runs"
    ready, stop = tmp_path / "ready", tmp_path / "stop"
    proc = start("run", "--out", str(out), "--window-start", "100000", "--no-report", "--", PY,
                 str(JOBS / "until_stopped.py"), str(ready), str(stop), "inference")
    try:
        wait_for(ready)
        res = gpucheckup("attach", "--pid", str(proc.pid), "--duration", "1", timeout=120)
        assert res.returncode == 0, res.stderr
        trace = Path(re.search(r"trace written: (\S+)", res.stdout).group(1))
        assert any(e.get("name", "").startswith("aten::linear") for e in raw_events(trace)["traceEvents"])
        res = gpucheckup("attach", "--pid", str(proc.pid), "--steps", "2", "--mode", "agent", timeout=120)
        assert res.returncode == 2 and "no optimizer step" in res.stderr
    finally:
        stop.write_text("stop")
        proc.communicate(timeout=120)


def test_attach_out_of_process_with_pyspy(tmp_path):
    from gpucheckup.capture.attach import find_pyspy

    if find_pyspy() is None:
        pytest.fail("py-spy is part of the test extras; install it (pip install -e '.[test]')")
    ready = tmp_path / "ready"
    # one thread for numpy and torch (as tests/test_capture_coarse.py): with torch's own threads contending on a
    # loaded machine the step's backward took half the samples once (56% against the loader's 44%)
    one_thread = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    job = subprocess.Popen([PY, str(JOBS / "slow_loader.py"), "60", str(ready)], env={**os.environ, **one_thread})
    try:
        wait_for(ready)  # past `import torch` and the first step: the job now loads batches
        out = tmp_path / "runs"
        report = tmp_path / "attach.json"
        res = gpucheckup("attach", "--pid", str(job.pid), "--duration", "6", "--rate", "4", "--out", str(out),
                         "--json", str(report), timeout=120)
    finally:
        job.kill()
        job.wait()
    assert res.returncode == 0, res.stderr
    assert "Out-of-process check-up (coarse)" in res.stdout and "without NVML" in res.stdout
    data = read_report(report)
    coarse = data["run_figures"]["coarse"]
    # a CPU job (no CUDA driver in it): its main thread's time is the job's, so the samples name a bound: the
    # loader's or, with torch's threads contending on a loaded machine, the step's own compute (test_capture_coarse)
    assert coarse["verdict"] in ("input_bound", "cpu_only") and coarse["samples"] >= 4
    states = coarse["main_states_pct"]  # 24 random samples: a share is known to about +-10 points, so the test
    assert states.get("dataloader", 0) == max(states.values()) >= 35  # asks that the loader leads, not a share
    run_dir = the_run_dir(out)
    assert_manifest_complete(run_dir)
    assert (run_dir / "samples.csv").read_text().count("dataloader") >= 2


def test_user_sitecustomize_still_runs_and_torch_is_not_imported(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\nos.environ['USER_SITECUSTOMIZE'] = 'ran'\n")
    env = {**os.environ, "PYTHONPATH": str(site)}
    res = gpucheckup("run", "--out", str(tmp_path / "runs"), "--no-report", "--", PY, "-c",
                     "import os, sys; print(os.environ.get('USER_SITECUSTOMIZE'), 'torch' in sys.modules)", env=env)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["ran", "False"]


def test_torchrun_ranks_write_their_own_files(tmp_path):
    out = tmp_path / "runs"
    res = gpucheckup("run", "--out", str(out), "--skip", "2", "--steps", "3", "--no-report", "--", PY, "-m",
                     "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(JOBS / "ranks.py"), "8",
                     timeout=300)
    assert res.returncode == 0, res.stderr
    run_dir = the_run_dir(out)
    assert_manifest_complete(run_dir)
    for r in (0, 1):
        assert len(read_steps(run_dir / f"steps-rank{r}.csv")) == 8
        assert profiler_steps(run_dir / "traces" / f"rank{r}.json.gz") == [1, 2, 3]
    assert not (run_dir / "steps.csv").exists()  # the torchrun launcher itself stays passive
    with gzip.open(run_dir / "traces" / "rank1.json.gz") as f:
        assert b"ProfilerStep#1" in f.read()

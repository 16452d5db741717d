"""`gpucheckup monitor`: NVML faked only at its API boundary (a fake `pynvml` module where the code imports it),
with a planted 2 s utilization heartbeat and a power cap; the recording read back by `gpucheckup analyze`."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
import types

import numpy as np
import pytest

from gpucheckup.analysis.run_logs.live_events import MATCH_PCT, heartbeat_now, throttles_now
from gpucheckup.layout import NVML_COLUMNS
from gpucheckup.cli import main
from conftest import read_report

PERIOD_S = 2.0
BUSY_S = 0.8  # of each period: 40% busy, 60% idle
POWER_CAP = 0x4
SM_CLOCK = 1980


def fake_pynvml(t0: float, job_pid: int, reasons: int = POWER_CAP, init_error: str | None = None):
    """A stand-in for nvidia-ml-py: the calls the samplers make, answering from the clock like a pulsing GPU."""
    nv = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    nv.NVMLError = NVMLError
    nv.NVMLError_NotSupported = type("NVMLError_NotSupported", (NVMLError,), {})
    nv.NVMLError_NoPermission = type("NVMLError_NoPermission", (NVMLError,), {})
    nv.NVML_CLOCK_SM, nv.NVML_TEMPERATURE_GPU = 1, 0
    nv.NVML_PCIE_UTIL_TX_BYTES, nv.NVML_PCIE_UTIL_RX_BYTES = 0, 1
    nv.calls = []

    def init():
        if init_error:
            raise NVMLError(init_error)

    def busy():
        return (time.time() - t0) % PERIOD_S < BUSY_S

    def util(h):
        nv.calls.append("util")
        b = busy()
        return types.SimpleNamespace(gpu=97 if b else 0, memory=40 if b else 0)

    def not_supported(*a):
        raise nv.NVMLError_NotSupported("Not Supported")

    nv.nvmlInit = init
    nv.nvmlShutdown = lambda: None
    nv.nvmlDeviceGetCount = lambda: 2
    nv.nvmlDeviceGetHandleByIndex = lambda i: f"h{i}"
    nv.nvmlDeviceGetUUID = lambda h: f"GPU-{h}"
    nv.nvmlDeviceGetName = lambda h: "NVIDIA H200"
    nv.nvmlDeviceGetUtilizationRates = lambda h: util(h) if h == "h0" else types.SimpleNamespace(gpu=0, memory=0)
    nv.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=30 * 2**30, total=141 * 2**30)
    nv.nvmlDeviceGetPowerUsage = lambda h: 690_000 if h == "h0" and busy() else 120_000
    nv.nvmlDeviceGetClockInfo = lambda h, kind: SM_CLOCK
    nv.nvmlDeviceGetCurrentClocksEventReasons = lambda h: reasons if h == "h0" else 0x1
    nv.nvmlDeviceGetTemperature = lambda h, kind: 61
    nv.nvmlDeviceGetPcieThroughput = lambda h, kind: 1024
    nv.nvmlDeviceGetProcessUtilization = not_supported
    nv.nvmlDeviceGetComputeRunningProcesses = (
        lambda h: [types.SimpleNamespace(pid=job_pid, usedGpuMemory=2**30)] if h == "h0" else [])
    return nv


@pytest.fixture
def job():
    """A real process to watch, with a child (like a DataLoader worker)."""
    p = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                          "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
                          "time.sleep(60)"])
    time.sleep(0.5)
    yield p
    import psutil

    for c in psutil.Process(p.pid).children(recursive=True):
        c.kill()
    p.kill()
    p.wait()


def test_heartbeat_and_power_cap_named_and_recording_read_back(tmp_path, job, monkeypatch, capsys):
    nv = fake_pynvml(time.time(), job.pid)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    rec = tmp_path / "monitor.csv"
    assert main(["monitor", "--pid", str(job.pid), "--interval", "0.1", "--duration", "7.5", "--record", str(rec),
                 "--step-ms", "2000"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert nv.calls, "the fake NVML was never asked"
    # named as it happened, with the period within 10% of the planted 2 s
    m = [float(x) for x in __import__("re").findall(r"HEARTBEAT: utilization swings every ([0-9.]+) s", out)]
    assert m and all(abs(p - PERIOD_S) <= 0.1 * PERIOD_S for p in m), out
    assert "the period matches the step time (2.00 s)" in out
    assert "GPU 0: SW POWER CAP: held under its power limit" in out
    # the job's processes: the main one and its child
    assert f"{job.pid} main" in out and "child" in out
    # only the job's GPU (NVML lists its pid on GPU 0) was sampled and recorded, in nvml.csv's columns
    with open(rec, newline="") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == NVML_COLUMNS
    assert {r["gpu"] for r in rows} == {"0"}
    assert 50 <= len(rows) <= 80  # 7.5 s at 10 Hz, less what a loaded machine delays
    busy = np.array([float(r["util_pct"]) > 0 for r in rows])
    assert 0.25 < busy.mean() < 0.55  # planted: 40% busy

    # read back by analyze, as run telemetry
    js = tmp_path / "r.json"
    assert main(["analyze", str(rec), "--json", str(js)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "GPU utilization comes in pulses" in text and "throttled" in text
    r = read_report(js)
    nvf = r["run_figures"]["nvml"]
    assert nvf["heartbeat"]["heartbeat"] is True
    assert nvf["heartbeat"]["period_s"] == pytest.approx(PERIOD_S, rel=0.1)
    assert nvf["throttle"]["by_reason_pct"] == {"SW power cap": pytest.approx(100.0)}
    assert {f["id"] for f in r["verdict"]["findings"]} >= {"gpu_heartbeat", "throttling"}


def test_without_nvml_one_line_and_the_cpu_side(tmp_path, job, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(time.time(), job.pid, init_error="Driver Not Loaded"))
    rec = tmp_path / "none.csv"
    assert main(["monitor", "--pid", str(job.pid), "--interval", "0.2", "--duration", "1", "--record", str(rec)]) == 0
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if "NVML" in ln and "Driver Not Loaded" in ln]
    assert len(lines) == 1, out
    assert f"{job.pid}" in out and "main" in out and "child" in out
    assert not rec.exists() and "nothing recorded" in out


def test_bad_pid_and_interval(capsys):
    assert main(["monitor", "--pid", "999999999", "--duration", "1"]) == 2
    assert main(["monitor", "--interval", "0", "--duration", "1"]) == 2
    err = capsys.readouterr().err
    assert "--pid 999999999" in err and "--interval must be above 0" in err and "Traceback" not in err


# the pure parts

def test_heartbeat_period_and_step_match():
    t = np.arange(0, 20, 0.1)
    u = np.where(t % 2.5 < 1.0, 90.0, 0.0)
    hb = heartbeat_now(t, u, step_s=2.5)
    assert hb.seen and hb.period_s == pytest.approx(2.5, abs=0.05) and hb.matches_step is True
    hb = heartbeat_now(t, u, step_s=0.25)  # 10 steps per period: something every 10 steps
    assert hb.matches_step is False and hb.steps_per_period == 10 and "every 10 steps" in hb.sentence()
    hb = heartbeat_now(t, u, step_s=0.7)  # 3.6 steps: no step multiple
    assert hb.matches_step is False and hb.steps_per_period is None and "does not match" in hb.sentence()
    assert heartbeat_now(t, u, step_s=2.5 * 1.1).matches_step is True  # 0.25 s off: within 15% of the step
    assert heartbeat_now(t, u, step_s=2.5 * 1.25).matches_step is False  # 0.625 s off: more than 15% of 3.1 s
    assert MATCH_PCT == 15.0
    steady = heartbeat_now(t, np.full_like(t, 95.0))
    assert not steady.seen and steady.matches_step is None


def test_throttle_names_each_bit_of_the_latest_sample():
    rows = [{"gpu": 0, "clock_reasons": 0x4, "t_s": 1}, {"gpu": 0, "clock_reasons": 0x20 | 0x10, "t_s": 2},
            {"gpu": 1, "clock_reasons": 0x1, "t_s": 2}]
    names = [(th.gpu, th.name, th.slows_clocks) for th in throttles_now(rows)]
    assert names == [(0, "sync boost", False), (0, "SW thermal slowdown", True)]  # latest only; idle is no event


# saturated DataLoader workers, named as they are seen: a real torch job

LOADER_JOB = ("import sys; sys.path.insert(0, sys.argv[1]); from loader_factory import make_loader\n"
              "for _ in make_loader(1, False): pass")


def loader_job(spin_ms: float, sleep_ms: float) -> subprocess.Popen:
    """A training loop that only iterates a DataLoader with one worker process (tests/jobs/loader_factory.py):
    each sample costs the worker `spin_ms` of CPU time and `sleep_ms` of waiting (as on remote storage)."""
    import os

    env = {**os.environ, "GPUCHECKUP_TEST_SPIN_MS": str(spin_ms), "GPUCHECKUP_TEST_SLEEP_MS": str(sleep_ms),
           "OMP_NUM_THREADS": "1"}
    jobs = str(__import__("pathlib").Path(__file__).resolve().parent / "jobs")
    return subprocess.Popen([sys.executable, "-c", LOADER_JOB, jobs], env=env)


def monitor_job(job: subprocess.Popen, capsys) -> str:
    import psutil

    try:
        end = time.time() + 60  # past `import torch`: the worker process exists
        while not psutil.Process(job.pid).children() and time.time() < end:
            time.sleep(0.2)
        time.sleep(1.0)
        assert main(["monitor", "--pid", str(job.pid), "--interval", "0.2", "--duration", "6"]) == 0
    finally:
        job.kill()
        job.wait()
    return " ".join(capsys.readouterr().out.split())


def test_saturated_loader_worker_is_named(monkeypatch, capsys):
    pytest.importorskip("torch", reason="a real DataLoader job: pip install torch==2.13.0 (CI does)")
    monkeypatch.setitem(sys.modules, "pynvml", None)  # the CPU side alone, as on a machine without NVML
    # the worker computes 50 ms per sample and never waits: it is busy all the time, the main loop waits for it
    out = monitor_job(loader_job(50, 0), capsys)
    assert "worker" in out  # the DataLoader worker is told from other children
    assert "SATURATED WORKERS: 1 of 1 DataLoader worker processes" in out, out


def test_a_loader_worker_waiting_on_storage_is_not_saturated(monkeypatch, capsys):
    pytest.importorskip("torch", reason="a real DataLoader job: pip install torch==2.13.0 (CI does)")
    monkeypatch.setitem(sys.modules, "pynvml", None)
    # the worker waits 50 ms per sample and computes 1 ms: a core at most 2% busy
    out = monitor_job(loader_job(1, 50), capsys)
    assert "worker" in out and "SATURATED" not in out, out


def test_saturation_needs_a_full_window_of_busy_readings():
    from gpucheckup.analysis.run_logs.live_events import SATURATED_PCT, saturated_workers

    busy = [(t, 95.0) for t in (8.0, 9.0, 10.0)]  # three readings within the last 3 s, each 95% of a core
    assert saturated_workers({1: busy}, {1}, 10.0).saturated == ((1, 95.0),)
    assert saturated_workers({1: busy[1:]}, {1}, 10.0).saturated == ()  # two readings: not yet known
    half = [(t, 40.0) for t in (8.0, 9.0, 10.0)]  # 40%: waits half the time (storage, the network)
    assert saturated_workers({1: half, 2: busy}, {1, 2}, 10.0).saturated == ((2, 95.0),)
    old = [(t, 95.0) for t in (1.0, 2.0, 3.0)] + [(t, 10.0) for t in (8.0, 9.0, 10.0)]  # busy earlier, idle now
    assert saturated_workers({1: old}, {1}, 10.0).saturated == ()
    assert saturated_workers({1: busy}, set(), 10.0).saturated == ()  # not a worker: the main process is not named
    assert SATURATED_PCT == 80.0

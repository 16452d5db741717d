"""Run-level analyses: real H200 NVML samples and traces in a run directory, plus edge cases.

The H200 fixtures' nvml.csv files were sampled at 20 Hz during unprofiled runs of the same jobs
as their traces; they are converted here to the column names `gpucheckup run` writes.
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import fixtures_dir, trace_path, read_report
from gpucheckup.analysis.run_logs import environment, stack_samples, step_history, telemetry
from gpucheckup.capture import agent, control
from gpucheckup.capture.environment import cgroup_quota
from gpucheckup.capture.telemetry import visible_indices
from gpucheckup.diagnosis.coarse import coarse_verdict
from gpucheckup.layout import CPU_COLUMNS, NVML_COLUMNS

H200_MEMORY_MB = 143771  # nvidia-smi in the fixtures' env.txt


def fixture_nvml_rows(case: str) -> list[dict]:
    base = fixtures_dir()
    if base is None or not (base / case / "nvml.csv").exists():
        pytest.skip("H200 fixtures with nvml.csv not available")
    with open(base / case / "nvml.csv") as f:
        return list(csv.DictReader(f))


def write_nvml(path: Path, rows: list[dict], reasons: int | None = None) -> None:
    """The fixture's samples in gpucheckup's nvml.csv columns."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(NVML_COLUMNS)
        for r in rows:
            w.writerow([r["t"], 0, r["gpu_util"], r["mem_util"], r["mem_used_mb"], H200_MEMORY_MB, r["power_w"],
                        r["sm_clock_mhz"], "" if reasons is None else reasons, r["temp_c"], "", "", ""])


def make_run_dir(tmp_path: Path, case: str, reasons: int | None = None, steps_ms: list[float] | None = None) -> Path:
    """A run directory around a real H200 trace and its NVML samples."""
    run = tmp_path / f"run-{case}"
    (run / "traces").mkdir(parents=True)
    shutil.copy(trace_path(case), run / "traces" / "trace.json.gz")
    rows = fixture_nvml_rows(case)
    write_nvml(run / "nvml.csv", rows, reasons)
    t0 = float(rows[0]["t"]) - 1.0
    if steps_ms is not None:
        lines = ["step,t_end_s,ms,phase"] + [f"{i + 1},{t0 + i},{'' if i == 0 else ms},"
                                              for i, ms in enumerate(steps_ms)]
        (run / "steps.csv").write_text("\n".join(lines) + "\n")
    (run / "manifest.json").write_text(json.dumps({"kind": "run", "command": ["python", f"{case}.py"],
                                                   "started_epoch_s": t0, "exit_code": 0, "duration_s": 10.0,
                                                   "captured": {}, "failed": {}}))
    return run


def analyze_json(run: Path, tmp_path: Path) -> dict:
    out = tmp_path / "report.json"
    res = subprocess.run([sys.executable, "-m", "gpucheckup", "analyze", str(run), "--json", str(out)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    return read_report(out)


# ---- NVML on real H200 samples -------------------------------------------------------------------

def test_heartbeat_on_the_input_bound_job():
    rows = fixture_nvml_rows("input_bound")
    util = [float(r["gpu_util"]) for r in rows]
    nv = {c: np.array([float(r[k]) for r in rows]) for c, k in
          (("t_s", "t"), ("util_pct", "gpu_util"), ("mem_used_mb", "mem_used_mb"), ("power_w", "power_w"),
           ("sm_clock_mhz", "sm_clock_mhz"))}
    nv.update(gpu=np.zeros(len(rows)), mem_total_mb=np.full(len(rows), H200_MEMORY_MB),
              clock_reasons=np.full(len(rows), np.nan))
    s = telemetry.nvml_summary(nv)
    # Independently: the threshold is the 5% floor here (p90 of these samples is 8%), so a pulse is a
    # run of samples above 5% and "low" is every sample at or below it (all samples are active: the
    # first and last are above 0).
    assert max(util) == 8.0 and util[0] > 0 and util[-1] > 0
    rising = sum(1 for i, u in enumerate(util) if u > 5 and (i == 0 or util[i - 1] <= 5))
    assert s["heartbeat"]["pulses"] == rising >= 3
    assert s["heartbeat"]["low_pct"] == pytest.approx(100 * sum(u <= 5 for u in util) / len(util))
    assert s["heartbeat"]["heartbeat"]
    assert s["util_mean_pct"] == pytest.approx(sum(util) / len(util))


def test_run_dir_with_a_real_input_bound_trace(tmp_path):
    steps = [300.0] * 30
    data = analyze_json(make_run_dir(tmp_path, "input_bound", steps_ms=steps), tmp_path)
    assert data["verdict"]["primary"] == "input_bound"  # from the trace, as for the trace alone
    ids = [f["id"] for f in data["verdict"]["findings"]]
    assert "gpu_heartbeat" in ids and "input_pipeline" in ids
    assert set(data["nvml"]) == {"t_s", "gpu_util", "power_w", "sm_clock_mhz", "throttled"}
    rows = fixture_nvml_rows("input_bound")
    assert data["nvml"]["gpu_util"] == [float(r["gpu_util"]) for r in rows]
    assert data["nvml"]["t_s"][0] == pytest.approx(1.0, abs=1e-3)  # seconds since the run started
    assert data["step_history"] == {"step": list(range(2, 31)), "time_ms": [300.0] * 29, "profiled": None,
                                    "source": "steps.csv"}
    assert data["run"]["traces"] == ["traces/trace.json.gz"]


def test_compute_bound_run_has_no_heartbeat_and_a_power_cap_is_info(tmp_path):
    data = analyze_json(make_run_dir(tmp_path, "compute_bound", reasons=0x4), tmp_path)
    assert data["verdict"]["primary"] == "gpu_bound"
    found = {f["id"]: f for f in data["verdict"]["findings"]}
    assert "gpu_heartbeat" not in found and "low_gpu_utilization" not in found
    assert found["throttling"]["severity"] == "info" and "SW power cap 100%" in found["throttling"]["evidence"][0]
    assert data["nvml"]["throttled"] == [1] * len(fixture_nvml_rows("compute_bound"))


def test_launch_bound_run_shows_low_utilization(tmp_path):
    data = analyze_json(make_run_dir(tmp_path, "launch_bound"), tmp_path)
    ids = [f["id"] for f in data["verdict"]["findings"]]
    assert data["verdict"]["primary"] == "launch_bound" and "low_gpu_utilization" in ids


def test_series_are_bucketed_above_the_point_limit():
    n = 5000
    nv = {"t_s": np.arange(n) * 0.1, "gpu": np.zeros(n), "util_pct": np.tile([0.0, 100.0], n // 2),
          "power_w": np.full(n, 100.0), "sm_clock_mhz": np.full(n, 1980.0), "mem_used_mb": np.full(n, 1.0),
          "mem_total_mb": np.full(n, 2.0), "clock_reasons": np.where(np.arange(n) == 7, 0x8, 0x1).astype(float)}
    s = telemetry.nvml_plot_series(nv, 0.0, max_points=100)
    assert len(s["t_s"]) == 100 and s["gpu_util"][0] == 50.0
    assert s["throttled"][0] == 1 and sum(s["throttled"]) == 1  # only the bucket holding sample 7 (HW slowdown)


# ---- step history ---------------------------------------------------------------------------------

def test_warmup_and_periodic_slow_steps():
    ms = [float("nan")] + [300.0] * 9 + [100.0] * 190
    for s in range(30, 200, 20):
        ms[s - 1] = 600.0  # a checkpoint every 20 steps
    n = np.arange(1, 201, dtype=float)
    phase = [""] * 200
    for s in (155, 156, 157):
        phase[s - 1] = "profiled"
        ms[s - 1] = 150.0
    st = step_history.step_stats({"step": n, "ms": np.array(ms), "phase": phase})
    assert st["steady_median_ms"] == 100.0
    assert st["warmup_steps"] == 10  # steps 2-10 ran at 300 ms; step 11 starts five steady steps
    assert st["slow"]["count"] == 9 and st["slow"]["period"] == 20
    assert st["slow"]["extra_ms"] == pytest.approx(9 * 500.0)
    assert st["profiled_steps"] == [155, 157] and st["profiler_overhead_pct"] == pytest.approx(50.0)


def test_step_history_series_is_bucketed():
    n = np.arange(1, 20001, dtype=float)
    s = step_history.history_series({"step": n, "ms": np.full(20000, 5.0), "phase": [""] * 20000}, max_points=100)
    assert len(s["step"]) == 100 and set(s["time_ms"]) == {5.0}


# ---- environment ----------------------------------------------------------------------------------

def test_workers_against_usable_cores():
    env = {"cpu": {"count": 16, "affinity": 16, "cgroup_quota_cpus": 4.0},
           "dataloaders": [{"num_workers": 8, "pin_memory": False}],
           "job": {"rank0": {"local_world_size": "2"}, "rank1": {"local_world_size": "2"}}}
    ld = environment.dataloader_load(env)
    assert ld["workers_on_host"] == 16 and ld["usable_cores"] == 4.0 and ld["cores_limited_by"] == "cgroup quota"


def test_cgroup_quota(tmp_path):
    (tmp_path / "cpu.max").write_text("250000 100000\n")
    assert cgroup_quota(tmp_path)[0] == 2.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroup_quota(tmp_path)[0] is None


def test_visible_gpus():
    uuids = ["GPU-aaa", "GPU-bbb", "GPU-ccc"]
    assert visible_indices(None, 3, uuids) == [0, 1, 2]
    assert visible_indices("2,0", 3, uuids) == [0, 2]
    assert visible_indices("GPU-bbb", 3, uuids) == [1]
    assert visible_indices("MIG-xyz", 3, uuids) == [0, 1, 2]


# ---- agent settings and control channel -----------------------------------------------------------

def test_agent_settings_are_checked():
    s, errors = agent.parse_settings({"GPUCHECKUP_STEPS": "banana", "GPUCHECKUP_SKIP": "1",
                                      "GPUCHECKUP_FLOPS": "yes", "GPUCHECKUP_WINDOW_S": "nan"})
    assert s["steps"] == 5 and s["skip"] == 2 and s["flops"] is True and s["window_s"] == 10.0
    assert len(errors) == 3 and any("banana" in e for e in errors)


@pytest.mark.parametrize("line, ok", [
    (b'{"cmd": "status"}', True),
    (b'{"cmd": "profile", "steps": 3}', True),
    (b'{"cmd": "profile", "seconds": 2.5}', True),
    (b'{"cmd": "profile", "steps": 3, "seconds": 1}', False),
    (b'{"cmd": "profile", "steps": 0}', False),
    (b'{"cmd": "profile", "steps": true}', False),
    (b'{"cmd": "exec", "code": "import os"}', False),
    (b'[1, 2]', False),
    (b'\xff\xfe', False),
])
def test_control_requests(line, ok):
    if ok:
        control.parse_request(line)
    else:
        with pytest.raises(ValueError):
            control.parse_request(line)


def test_control_folder_must_be_private(tmp_path, monkeypatch):
    d = tmp_path / "sockets"
    monkeypatch.setattr(control, "socket_dir", lambda: d)
    assert control.private_dir() == d and (d.stat().st_mode & 0o777) == 0o700
    d.chmod(0o755)
    with pytest.raises(OSError, match="open to other users"):
        control.private_dir()


# ---- out-of-process samples -----------------------------------------------------------------------

def frame(name, filename):
    return {"name": name, "filename": filename, "short_filename": filename.rsplit("/", 1)[-1], "line": 1}


def test_stack_states_and_coarse_verdict():
    dl = [frame("__getitem__", "/job/data.py"), frame("_next_data", "/x/torch/utils/data/dataloader.py"),
          frame("<module>", "/job/train.py")]
    sync = [frame("synchronize", "/x/torch/cuda/__init__.py"), frame("<module>", "/job/train.py")]
    fwd = [frame("forward", "/x/torch/nn/modules/linear.py"), frame("<module>", "/job/train.py")]
    assert stack_samples.classify(dl, True) == "dataloader"
    assert stack_samples.classify(sync, False) == "sync"
    assert stack_samples.classify(fwd, True) == "forward"
    assert stack_samples.classify([frame("wait", "/usr/lib/python3/threading.py")], False) == "waiting"
    states = ["dataloader"] * 7 + ["forward"] * 3
    v = coarse_verdict(states, [0.0] * 7 + [90.0] * 3)
    assert v.verdict == "input_bound"
    assert v.sentence == ("GPU idle in 70% of 10 samples while the main thread waits in DataLoader __next__ "
                          "(100% of those samples)")
    assert coarse_verdict(states, [95.0] * 10).verdict == "gpu_bound"
    assert coarse_verdict(states, [None] * 10).verdict == "unknown"


# ---- bad run directories --------------------------------------------------------------------------

def one_line_error(path: Path) -> str:
    res = subprocess.run([sys.executable, "-m", "gpucheckup", "analyze", str(path)], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1
    return lines[0]


def test_corrupt_manifest(tmp_path):
    (tmp_path / "manifest.json").write_text("{not json")
    assert "manifest.json: not readable JSON" in one_line_error(tmp_path)


def test_corrupt_nvml_csv(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"kind": "run"}))
    (tmp_path / "nvml.csv").write_text(",".join(NVML_COLUMNS) + "\n1.0,0,banana\n")
    assert "nvml.csv: line 2, column util_pct: 'banana' is not a number" in one_line_error(tmp_path)


MANIFEST = {"kind": "run", "command": ["python", "train.py"], "started_epoch_s": 1.0, "exit_code": 0,
            "captured": {}, "failed": {}}


@pytest.mark.parametrize("files, message", [
    ({"steps.csv": "step,t_end_s,phase\n1,1.0,\n2,2.0,\n"},
     "steps.csv: no column ms (the header has: step,t_end_s,phase)"),
    ({"steps.csv": "step,t_end_s,ms,phase\n1,1.0,,\n,2.0,5.0,\n"}, "steps.csv: line 3, column step: empty"),
    ({"nvml.csv": "t_s,gpu\n1.0,0\n"},
     "nvml.csv: no column util_pct, mem_used_mb, mem_total_mb, power_w, sm_clock_mhz, clock_reasons"),
    ({"cpu.csv": "t_s,pid,ppid,name,cpu_pct,rss_mb,threads\n1.0,,1,python,5.0,10,1\n"},
     "cpu.csv: line 2, column pid: empty"),
    ({"manifest.json": {**MANIFEST, "failed": "oops"}},
     "manifest.json: field 'failed' should be an object, not a string (\"oops\")"),
    ({"manifest.json": {**MANIFEST, "failed": {"nvml": 3}}}, "manifest.json: failed['nvml'] should be a string"),
    ({"manifest.json": {**MANIFEST, "command": "python train.py"}},
     "manifest.json: field 'command' should be a list"),
    ({"manifest.json": {**MANIFEST, "exit_code": "0"}}, "manifest.json: field 'exit_code' should be a number"),
    ({"env.json": {"cpu": "8 cores"}}, "env.json: field 'cpu' should be an object"),
    ({"env.json": {"dataloaders": ["num_workers=4"]}}, "env.json: dataloaders[0] should be an object"),
    ({"agent.json": {"key": 5}}, "agent.json: field 'key' should be a string"),
    ({"samples.csv": "t_s,threads\n1.0,3\n"}, "samples.csv: no column main_stack"),
])
def test_malformed_run_files_are_a_one_line_error_naming_the_file(tmp_path, files, message):
    files = {"manifest.json": MANIFEST, **files}
    for name, content in files.items():
        (tmp_path / name).write_text(content if isinstance(content, str) else json.dumps(content))
    assert message in one_line_error(tmp_path)


def test_a_sparse_but_well_formed_run_directory_is_checked_up(tmp_path):
    """Null captured/failed, a steps.csv of only the columns the figures use, an nvml.csv with no rows."""
    (tmp_path / "manifest.json").write_text(json.dumps({**MANIFEST, "captured": None, "failed": None}))
    (tmp_path / "steps.csv").write_text("step,ms\n1,\n" + "".join(f"{i},100\n" for i in range(2, 21)))
    (tmp_path / "nvml.csv").write_text(",".join(NVML_COLUMNS) + "\n")
    data = analyze_json(tmp_path, tmp_path)
    assert data["verdict"]["primary"] is None and data["run"]["failed"] == {}
    assert data["step_history"]["step"] == list(range(2, 21)) and data["run_figures"]["steps"]["count"] == 20
    assert data["run_figures"]["steps"]["steady_median_ms"] == 100.0


SHORT_RUN_NOTE = ("no steady-state step figures: the job ran 6 steps and only 5 unprofiled steps were timed (the "
                  "figures need 8); it is too short for a steady-state window: run it for more steps")


def test_a_run_too_short_to_settle_says_so_in_every_report(tmp_path):
    """Six steps written, the first untimed (so five timed), under the eight plain steps the steady-state figures
    need: the trace's report and the document end their notes with that note, built in (not appended afterwards)."""
    report = analyze_json(make_run_dir(tmp_path, "input_bound", steps_ms=[100.0] * 6), tmp_path)
    assert report["notes"][-1] == SHORT_RUN_NOTE and report["notes"].count(SHORT_RUN_NOTE) == 1
    doc = json.loads((tmp_path / "report.json").read_text())
    assert doc["notes"][-1] == SHORT_RUN_NOTE and doc["notes"].count(SHORT_RUN_NOTE) == 1


def test_a_short_run_without_a_trace_notes_it_after_why_there_is_no_timeline(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps(MANIFEST))
    (tmp_path / "steps.csv").write_text("step,ms\n1,\n" + "".join(f"{i},100\n" for i in range(2, 7)))
    (tmp_path / "nvml.csv").write_text(",".join(NVML_COLUMNS) + "\n")
    data = analyze_json(tmp_path, tmp_path)
    assert data["notes"] == ["no GPU timeline: no trace was captured", SHORT_RUN_NOTE]


def test_a_run_whose_two_gpus_never_worked_keeps_the_short_forms_of_its_figures(tmp_path):
    """Two GPUs sampled at 0% utilization for 20 s and no CPU samples: the run's figures keep the short forms the
    analysis writes (a note and no active period, throttling unknown, no memory figures, each GPU's own row, the CPU
    figures only `samples`), through the typed document and back to its JSON."""
    (tmp_path / "manifest.json").write_text(json.dumps(MANIFEST))
    (tmp_path / "steps.csv").write_text("step,ms\n1,\n" + "".join(f"{i},100\n" for i in range(2, 21)))
    rows = [",".join(map(str, (1.0 + t, g, 0, 0, 1000, 143771, 70, 1980, "", 30, "", "", "")))
            for t in range(20) for g in (0, 1)]
    (tmp_path / "nvml.csv").write_text(",".join(NVML_COLUMNS) + "\n" + "\n".join(rows) + "\n")
    (tmp_path / "cpu.csv").write_text(",".join(CPU_COLUMNS) + "\n")
    fig = analyze_json(tmp_path, tmp_path)["run_figures"]
    nv = fig["nvml"]
    assert (nv["samples"], nv["gpus"], nv["util_mean_pct"]) == (20, [0, 1], None)
    assert nv["note"] == "the job's GPUs never showed utilization above 0" and "active_from_epoch_s" not in nv
    assert nv["throttle"] == {"known": False} and nv["memory"] == {}
    assert [(g["gpu"], g["util_mean_pct"], g["memory"]) for g in nv["per_gpu"]] == [(0, None, {}), (1, None, {})]
    assert fig["cpu"] == {"samples": 0}


# ---- fixes of a run with no GPU timeline ----------------------------------------------------------

def test_run_only_fixes_are_ranked_as_in_every_checkup():
    from gpucheckup.diagnosis.findings import Finding, Fix
    from gpucheckup.checkup.run_report import fix_dicts

    def finding(id, severity, *fixes):
        return Finding(id=id, severity=severity, title=id, rule="", cost_ms_per_step=0.0, cost_pct_of_step=0.0,
                       fixes=list(fixes))

    findings = [
        finding("small", "warning", Fix("pin memory", "config", 2.0, key="pin_memory")),
        finding("large", "critical", Fix("pin memory (more)", "config", 9.0, key="pin_memory"),
                Fix("rewrite the loader", "refactor", 50.0)),
        finding("note", "info", Fix("an info finding's fix", "config", 100.0)),
        finding("code", "warning", Fix("fewer syncs", "code", 30.0)),
    ]
    fixes = fix_dicts(findings)
    # one fix per key, with the largest saving; info findings offer none; config first, then code, then refactor
    assert [(f["action"], f["finding"], f["saving_ms"]) for f in fixes] == [
        ("pin memory (more)", "large", 9.0), ("fewer syncs", "code", 30.0), ("rewrite the loader", "large", 50.0)]

"""The coarse check-up of a job attached from outside (py-spy stacks, NVML where there is a GPU): a verdict said
coarse in every output, with its fixes. A real CPU torch job, a real py-spy attach.

The job (tests/jobs/slow_loader.py) does heavy per-sample numpy work in a DataLoader with num_workers=0 and a
64x8 Linear step. Run with one thread for numpy and torch, its own clock puts about 95% of each loop iteration in
the loader (28 ms per batch against 1.5 ms for the step on this machine): the main thread waits in DataLoader
__next__ in most samples, so the check-up must call it input-bound and offer worker processes.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import read_report

JOBS = Path(__file__).resolve().parent / "jobs"
RECORDED = Path(__file__).resolve().parent / "data" / "h200" / "runs"
PY = sys.executable
ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}  # no thread contention


def gpucheckup(*args, timeout=240) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "gpucheckup", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "COLUMNS": "200"})


@pytest.fixture(scope="module")
def attached(tmp_path_factory):
    """One py-spy attach (6 s at 4 per second) to the slow-loader job: its run directory, JSON, HTML, Markdown,
    terminal."""
    pytest.importorskip("torch", reason="the capture tests run real torch jobs: pip install torch==2.13.0 (CI does)")
    from test_capture import the_run_dir, wait_for
    from gpucheckup.capture.attach import find_pyspy

    if find_pyspy() is None:
        pytest.fail("py-spy is part of the test extras; install it (pip install -e '.[test]')")
    tmp = tmp_path_factory.mktemp("coarse")
    ready = tmp / "ready"
    job = subprocess.Popen([PY, str(JOBS / "slow_loader.py"), "90", str(ready)], env={**os.environ, **ONE_THREAD})
    try:
        wait_for(ready)
        res = gpucheckup("attach", "--pid", str(job.pid), "--duration", "6", "--rate", "4", "--out",
                         str(tmp / "runs"), "--json", str(tmp / "a.json"), "--html", str(tmp / "a.html"), "--markdown", str(tmp / "a.md"),
                         timeout=120)
    finally:
        job.kill()
        job.wait()
    assert res.returncode == 0, res.stderr
    return {"run_dir": the_run_dir(tmp / "runs"), "json": tmp / "a.json", "html": tmp / "a.html", "md": tmp / "a.md",
            "out": " ".join(res.stdout.split()), "tmp": tmp}


def test_cpu_job_attached_from_outside_is_input_bound_coarse_with_the_workers_fix(attached):
    doc = json.loads(attached["json"].read_text())
    v = doc["verdict"]
    assert v["primary"] == "input_bound"
    assert v["coarse"] and "py-spy" in v["coarse"] and "without NVML" in v["coarse"]  # what it rests on
    assert "coarse" in v["title"]
    # the fix for a loader in the main process: worker processes, first (configuration only)
    assert doc["fixes"][0]["key"] == "dataloader_workers"
    assert doc["fixes"][0]["saving_ms"] is None and doc["fixes"][0]["predicted_note"].startswith("coarse:")
    finding = next(f for f in v["findings"] if f["id"] == "coarse_input_bound")
    assert finding["cost_pct_of_step"] >= 50  # the job's own clock: ~95% in the loader; 24 samples, +-10 points
    assert doc["run"]["figures"]["coarse"]["main_states_pct"]["dataloader"] == finding["cost_pct_of_step"]
    # the terminal says so
    out = attached["out"]
    assert "INPUT-BOUND (coarse)" in out and "(coarse: sampled stacks)" in out
    assert "Load batches in worker processes" in out
    assert "the verdict is coarse" in out
    # and the Markdown
    md = attached["md"].read_text()
    assert "**Verdict: INPUT-BOUND (coarse)**" in md and "Load batches in worker processes" in md


def test_the_coarse_verdict_reads_coarse_in_the_html(attached):
    from browser import Browser

    with Browser() as b:
        b.open(attached["html"].resolve().as_uri())
        badge = b.evaluate("document.querySelector('.verdict .badge').innerText")
        text = b.evaluate("document.body.innerText")
    assert badge == "INPUT-BOUND (COARSE)"
    assert "Load batches in worker processes" in text and "coarse: no timeline to replay" in text


def recorded_nvml(samples_csv: Path, util: float) -> str:
    """nvml.csv of one GPU sampled every 0.1 s over the samples' span at a fixed utilization (as NvmlSampler writes:
    layout.NVML_COLUMNS), from 1 s before the first sample to 1 s after the last."""
    from gpucheckup.layout import NVML_COLUMNS

    with open(samples_csv, newline="") as f:
        times = [float(r["t_s"]) for r in csv.DictReader(f)]
    rows = [",".join(NVML_COLUMNS)]
    t = times[0] - 1.0
    while t <= times[-1] + 1.0:
        busy = util > 0
        rows.append(f"{t:.3f},0,{util:g},{util / 2:g},30000,143771,{650 if busy else 110},1980,0,55,0,0,")
        t += 0.1
    return "\n".join(rows) + "\n"


def as_gpu_job(run_dir: Path, dest: Path, util: float) -> Path:
    """The attach's run directory as if the job had used a GPU: NVML samples at `util`% recorded beside its stacks
    and the CUDA driver loaded in the job."""
    shutil.copytree(run_dir, dest)
    (dest / "nvml.csv").write_text(recorded_nvml(dest / "samples.csv", util))
    manifest = json.loads((dest / "manifest.json").read_text())
    manifest["captured"]["cuda_driver_loaded"] = True
    manifest["failed"].pop("nvml", None)
    (dest / "manifest.json").write_text(json.dumps(manifest))
    return dest


def test_gpu_idle_in_recorded_nvml_gives_the_same_coarse_verdict_and_fixes(attached, tmp_path):
    idle = as_gpu_job(attached["run_dir"], tmp_path / "idle", 0.0)
    res = gpucheckup("analyze", str(idle), "--json", str(tmp_path / "idle.json"))
    assert res.returncode == 0, res.stderr
    doc = json.loads((tmp_path / "idle.json").read_text())
    v = doc["verdict"]
    assert v["primary"] == "input_bound" and "NVML" in v["coarse"] and "without NVML" not in v["coarse"]
    n = read_report(attached["json"])["run_figures"]["coarse"]["samples"]
    assert f"GPU idle in 100% of {n} samples while the main thread waits in DataLoader __next__" in v["reason"]
    keys = [f["key"] for f in doc["fixes"]]
    assert keys[0] == "dataloader_workers" and "gpu_augment" in keys  # a GPU job may also augment on the GPU
    # the control: the same stacks with a busy GPU are GPU-bound, and no loader fix is offered
    busy = as_gpu_job(attached["run_dir"], tmp_path / "busy", 95.0)
    res = gpucheckup("analyze", str(busy), "--json", str(tmp_path / "busy.json"))
    assert res.returncode == 0, res.stderr
    doc = json.loads((tmp_path / "busy.json").read_text())
    assert doc["verdict"]["primary"] == "gpu_bound" and doc["verdict"]["coarse"]
    assert not any(f["key"] == "dataloader_workers" for f in doc["fixes"])


def test_a_recorded_h200_attach_gets_the_coarse_verdict_and_its_fixes(tmp_path):
    """py-spy stacks and NVML recorded on an H200 by `gpucheckup attach` on an unprepared input-bound job (a
    single-process DataLoader, docs/validation.md case 6): NVML saw the GPU idle while the main thread waited in
    the loader."""
    res = gpucheckup("analyze", str(RECORDED / "20261129-110024-attach-653"), "--json", str(tmp_path / "r.json"))
    assert res.returncode == 0, res.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["verdict"]["primary"] == "input_bound" and "NVML" in doc["verdict"]["coarse"]
    assert "GPU idle in 100% of 38 samples while the main thread waits in DataLoader __next__" in doc["verdict"]["reason"]
    assert [f["key"] for f in doc["fixes"]][:2] == ["dataloader_workers", "gpu_augment"]
    assert "INPUT-BOUND (coarse)" in res.stdout


def test_a_job_with_loader_workers_gets_more_workers_only_where_cores_are_free(tmp_path):
    """Two DataLoader worker processes computing 50 ms per sample, the main loop doing nothing else: the main thread
    waits in the multi-process iterator. More workers help only if the host has a core the two do not take."""
    pytest.importorskip("torch", reason="the capture tests run real torch jobs: pip install torch==2.13.0 (CI does)")
    from test_capture import the_run_dir

    env = {**os.environ, **ONE_THREAD, "GPUCHECKUP_TEST_SPIN_MS": "50"}
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from loader_factory import make_loader\n"
            "for i, _ in enumerate(make_loader(2, False)):\n"
            "    if i == 2: open(sys.argv[2], 'w').close()\n")
    ready = tmp_path / "ready"
    job = subprocess.Popen([PY, "-c", code, str(JOBS), str(ready)], env=env)
    try:
        from test_capture import wait_for

        wait_for(ready)
        res = gpucheckup("attach", "--pid", str(job.pid), "--duration", "4", "--rate", "4", "--out",
                         str(tmp_path / "runs"), "--json", str(tmp_path / "a.json"), timeout=120)
    finally:
        job.kill()
        job.wait()
    assert res.returncode == 0, res.stderr
    doc = json.loads((tmp_path / "a.json").read_text())
    assert doc["verdict"]["primary"] == "input_bound" and doc["verdict"]["coarse"]
    keys = [f["key"] for f in doc["fixes"]]
    assert "dataloader_workers" not in keys  # it already has workers
    usable = json.loads((the_run_dir(tmp_path / "runs") / "env.json").read_text())["cpu"]["usable"]
    if usable > 2:
        assert "more_workers" in keys
    else:  # two workers on every core there is (this 2-core CI machine)
        assert "more_workers" not in keys and keys, keys
        finding = next(f for f in doc["verdict"]["findings"] if f["id"] == "coarse_input_bound")
        assert any("2 worker processes already fill" in e for e in finding["evidence"])

"""`gpucheckup scaling` on real gloo jobs on this CPU: a 1-rank and a 2-rank torchrun run of the same training
script, and what differs between them besides the rank count."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpucheckup.document import SCHEMA_VERSION

JOBS = Path(__file__).resolve().parent / "jobs"
PY = sys.executable


def gpucheckup(*args, env=None, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "gpucheckup", *args], capture_output=True, text=True, timeout=timeout, env=env)


def torchrun(out: Path, nproc: int, batch: int, env: dict) -> tuple[Path, float]:
    """One run directory of ddp_train.py under torchrun, and rank 0's own median step (ms, its perf_counter)."""
    res = gpucheckup("run", "--out", str(out), "--skip", "4", "--steps", "3", "--no-report", "--",
                     PY, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc),
                     str(JOBS / "ddp_train.py"), "--width", "512", "--layers", "4", "--batch", str(batch),
                     "--steps", "24", env=env)
    assert res.returncode == 0, res.stderr
    (run,) = [d for d in out.iterdir() if d.is_dir()]
    own = float(re.search(r"rank 0 median step ([0-9.]+) ms", res.stdout + res.stderr).group(1))
    return run, own


def test_efficiency_above_100_is_flagged_with_the_thread_difference_torchrun_made(tmp_path):
    """torchrun sets OMP_NUM_THREADS=1 in each rank when it starts more than one (its own banner says so), and
    leaves it unset for one. The 1-rank run here also has 32x the batch of each of the 2 ranks, so its step is
    longer than theirs and the efficiency (step_1 / step_2) is well above 100%: impossible for the same work."""
    pytest.importorskip("torch", reason="runs real torch.distributed jobs")
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    run_1, own_1 = torchrun(tmp_path / "one", 1, 1024, env)
    run_2, own_2 = torchrun(tmp_path / "two", 2, 32, env)
    out = tmp_path / "scaling.json"
    res = gpucheckup("scaling", str(run_1), str(run_2), "--json", str(out), env=dict(env, COLUMNS="80"))
    assert res.returncode == 0, res.stderr
    sc = json.loads(out.read_text())
    assert (sc["schema_version"], sc["kind"], sc["n"]) == (SCHEMA_VERSION, "scaling", 2)  # validated by conftest
    assert own_1 > own_2  # the jobs' own clocks: 32x the samples per step take longer
    assert sc["efficiency_pct"] > 100
    diffs = {d["name"]: (d["run_1"], d["run_n"]) for d in sc["env_differences"]}
    assert diffs["OMP_NUM_THREADS"] == ("unset", "1")
    if "torch threads per process" in diffs:  # OMP_NUM_THREADS unset: torch's own default, over one core; else one
        assert diffs["torch threads per process"][1] == "1" and int(diffs["torch threads per process"][0]) > 1
    text = " ".join(res.stdout.split())
    assert "Environment differences" in text and "OMP_NUM_THREADS" in text
    assert "Efficiency above 100%" in text
    assert "OMP_NUM_THREADS unset (1 rank) vs 1 (2 ranks)" in sc["over_100_cause"]
    assert "OMP_NUM_THREADS unset (1 rank) vs 1 (2 ranks)" in text
    assert max(len(line) for line in res.stdout.splitlines()) <= 80

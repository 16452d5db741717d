"""Issue 12, the input and command-line side: short runs, silent skips, `--json -`, CI thresholds, the API.

Real CPU torch jobs (tests/jobs/train_mlp.py) through `gpucheckup run`, in subprocesses.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gpucheckup.analysis import step_history

JOBS = Path(__file__).resolve().parent / "jobs"


def cli(*args, cwd=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "gpucheckup", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


def test_steps_that_never_settle_have_no_warmup_and_no_steady_figures():
    """64 steps alternating 1 and 3 ms never hold 5 in a row within 20% of their median: no warm-up end (it
    used to be the last step, and `--skip 68` was suggested for a 64-step job), no steady figures."""
    n = np.arange(1, 65)
    ms = np.where(n % 2 == 0, 1.0, 3.0)
    ms[0] = np.nan
    st = step_history.step_stats({"step": n, "ms": ms, "phase": [""] * len(n)})
    assert st["settled"] is False
    assert st["warmup_steps"] is None and st["steady_median_ms"] is None and st["cv_pct"] is None
    steady = np.r_[np.full(20, 9.0), np.full(44, 3.0)]
    st = step_history.step_stats({"step": n, "ms": steady, "phase": [""] * len(n)})
    assert st["settled"] is True and st["warmup_steps"] == 20 and st["steady_median_ms"] == 3.0


@pytest.fixture(scope="module")
def short_runs(tmp_path_factory):
    """A 10-step job (fewer steps than the default skip) and a 64-step one, run through `gpucheckup run`."""
    pytest.importorskip("torch", reason="runs a real torch training job")
    out = tmp_path_factory.mktemp("runs")
    runs = {}
    for steps in (10, 64):
        p = cli("run", "--out", out / str(steps), "--json", out / f"{steps}.json", "--",
                sys.executable, JOBS / "train_mlp.py", steps)
        (run_dir,) = (out / str(steps)).iterdir()
        runs[steps] = (p, run_dir, json.loads((out / f"{steps}.json").read_text()))
    return runs


@pytest.mark.parametrize("steps", [10, 64])
def test_short_run_checks_up_without_an_internal_error(short_runs, steps):
    p, run_dir, report = short_runs[steps]
    assert p.returncode == 0, p.stderr[-2000:]
    assert "internal error" not in p.stderr and "Traceback" not in p.stderr
    assert "no check-up" not in p.stderr
    a = cli("analyze", run_dir)
    assert a.returncode == 0, a.stderr[-2000:]
    assert "internal error" not in a.stderr


@pytest.mark.parametrize("steps", [10, 64])
def test_short_run_suggests_no_skip_past_its_end(short_runs, steps):
    """Any `--skip N` the check-up suggests is a step the job reaches; an unsettled run says it is too short."""
    _, _, report = short_runs[steps]
    text = json.dumps(report)
    for n in re.findall(r"--skip (\d+)", text):
        assert int(n) < steps, f"suggests --skip {n} for a {steps}-step job"
    st = report["run_figures"]["steps"]
    if not st["settled"]:
        assert any("too short for a steady-state window" in n for n in report["notes"]), report["notes"]

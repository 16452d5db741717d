"""Run-level analyses of a run directory: step history, NVML telemetry, CPU use, environment."""

from __future__ import annotations

import msgspec
import numpy as np

from gpucheckup.analysis.run_logs import environment, step_history, telemetry
from gpucheckup.trace.rundir import RunDir


class RunAnalysis(msgspec.Struct):
    """The figures of one run directory, each from its own analysis module (None when not captured)."""

    run: RunDir
    steps_key: str | None  # the process whose steps.csv the figures use (main, else the lowest rank)
    steps: dict | None  # step_history.step_stats
    nvml: dict | None  # telemetry.nvml_summary
    cpu: dict | None  # telemetry.cpu_summary
    loaders: dict  # environment.dataloader_load


def steps_key(run: RunDir) -> str | None:
    """The process whose steps speak for the run: `main`, else the lowest rank."""
    if not run.steps:
        return None
    if "main" in run.steps:
        return "main"
    return min(run.steps, key=lambda k: int(k[4:]) if k[4:].isdigit() else 10**9)


def steady_window_s(steps: dict, st: dict | None) -> tuple[float | None, float | None]:
    """The steady state in epoch seconds, from steps*.csv (issue 9): the end of the last warm-up step to the
    end of the last step; (None, None) when warm-up is not known."""
    if not st or not st.get("warmup_steps") or "t_end_s" not in steps:
        return None, None
    n, t = steps["step"], steps["t_end_s"]
    hit = (n == st["warmup_steps"]) & np.isfinite(t)
    return (float(t[hit][0]), float(np.nanmax(t))) if hit.any() else (None, None)


def analyze_run(run: RunDir) -> RunAnalysis:
    """Every run-level analysis the run directory has data for."""
    key = steps_key(run)
    st = step_history.step_stats(run.steps[key]) if key else None
    nv = (telemetry.nvml_summary(run.nvml, *(steady_window_s(run.steps[key], st) if key else (None, None)))
          if run.nvml is not None and len(run.nvml.get("t_s", [])) else None)
    cpu = telemetry.cpu_summary(run.cpu, None) if run.cpu is not None else None  # first row: the command run
    return RunAnalysis(run=run, steps_key=key, steps=st, nvml=nv, cpu=cpu,
                       loaders=environment.dataloader_load(run.env))

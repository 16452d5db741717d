"""The in-job agent: step times for the whole run, one profiled window, FLOPs, DataLoader settings.

It is loaded by the injected `sitecustomize` (or by `sys.remote_exec`) and does nothing until
`torch` has finished importing: `install()` only puts a finder on `sys.meta_path` that wraps the
loading of `torch`. Then, in the process that claims the run directory's key (`main`, or
`rank<R>` under torchrun), it:

- counts steps with the global `torch.optim.optimizer.register_optimizer_step_post_hook`; the
  first optimizer that steps paces the count, so a job with two optimizers counts each
  iteration once. Each step's row (step, end time in Unix seconds, ms since the previous
  step's end, phase) goes to `steps.csv.part` in batches (every FLUSH_ROWS rows or FLUSH_S
  seconds); at exit the complete file is renamed to `steps.csv` (atomic publish). The time
  the agent itself spends in its hook is not counted in any step.
- profiles steps skip+1 .. skip+K with `torch.profiler` (CPU and, where there is a GPU, CUDA
  activities); the profiler warms up during step `skip`. `ProfilerStep#i` in the trace is run
  step skip+i. The trace is exported, gzipped and renamed into `traces/` (atomic).
- with `--flops`, counts one step with `FlopCounterMode` (step skip-1 when skip >= 3, else the
  step after the window) and writes `flops.json` {"flops_per_step", "how", "step"}.
- when no optimizer has stepped `window_start_s` seconds after torch was imported, profiles a
  time window of `window_s` seconds (inference jobs; a training job whose first step comes
  later still gets its step window too) into `traces/time-window/`. The profiler is started and
  stopped on the main thread through a real-time signal handler (a profiler started from
  another thread does not record the main thread's operators).
- serves attach requests on its control socket (see `control.py`).
- records DataLoader `num_workers` / `pin_memory` (a light wrapper on `DataLoader.__init__`).
Every hook catches its own errors and writes them to the agent log; the job carries on.
Standard library only, and imported lazily: the job's start-up must not slow down.

By concern: settings.py (GPUCHECKUP_* variables), core.py (the state machine: activation, the step
hook, windows, attach requests, exit), steplog.py (steps.csv), windows.py (profiler sessions, trace
export, main-thread calls), flops.py (FlopCounterMode), loaders.py (DataLoader settings, torch
versions), server.py (the control socket). File names and columns: gpucheckup/layout.py.
"""

from __future__ import annotations

from gpucheckup.capture.agent.settings import DURATION_MAX_STEPS, LIMITS, SETTINGS, parse_settings, process_key


def install(run_dir: str | None = None, overrides: dict | None = None, run_dir_id: str | None = None) -> None:
    """Arm the agent (core.install): the state machine is imported only where it is armed."""
    from gpucheckup.capture.agent.core import install as arm

    arm(run_dir, overrides, run_dir_id)


def __getattr__(name: str):
    if name == "Agent":  # the command line reads the settings here without loading the agent itself
        from gpucheckup.capture.agent.core import Agent

        return Agent
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Agent", "install", "DURATION_MAX_STEPS", "LIMITS", "SETTINGS", "parse_settings", "process_key"]

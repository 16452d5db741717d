"""The light window inside the job: a recorder of CUDA activities and the cheap ranges only, and the
marks that ask the launcher to sample the job's stacks from outside (capture/sampler.py).

Two backends, chosen when the window starts (`light_recorder`):
- CUPTI's activity API through NVIDIA's `cupti-python` (agent/cupti_window.py): kernels, copies and memsets
  (and host synchronizations where `--light-syncs` asks), no runtime or driver API record, no torch.profiler;
  the cheap ranges from one clock read each. Used where `cupti` imports, libcupti loads and torch sees a GPU.
- Otherwise torch.profiler, as below, with one line in the agent log saying why.

The torch.profiler light window is torch.profiler with the CPU activity restricted to the USER_SCOPE of RecordFunction:
the ranges the job and torch name with `record_function` (ProfilerStep#N, the DataLoader's
`enumerate(DataLoader)#...__next__`, `Optimizer.step#...`, `Optimizer.zero_grad#...`) are recorded; no
operator (aten::) and no autograd node is, so their per-op callbacks never run. Where there is a GPU,
CUDA activities (kernels, copies, memsets, and the CUDA runtime calls CUPTI reports) are recorded as in
the full window. torch.profiler has no argument for the scopes: while a light window starts, the
agent wraps `torch.autograd.profiler._enable_profiler` (which the profiler calls, at the first
recorded step, with every scope) to pass USER_SCOPE only. py-spy takes a moment to attach, so the
agent writes the start mark LEAD_S ahead of the window at the job's recent step pace (lead_due).
Standard library only at import.
"""

from __future__ import annotations

import time

# the launcher's py-spy is asked to start this long before the window: it attaches in ~0.1 s on an idle machine and
# took ~1 s on a 2-core one running a test suite besides (a window then read 62% covered); sampling is nonblocking,
# so the lead costs the job next to nothing
LEAD_S = 2.0


def recent_step_s(recent_ms) -> float:
    """The job's pace: the median of its recent steps (ms), in seconds; 0 without any."""
    recent = sorted(recent_ms)
    return recent[len(recent) // 2] / 1000.0 if recent else 0.0


def lead_due(n: int, skip: int, recent_ms: list[float]) -> bool:
    """Whether, after step n, the window (warm-up at step `skip`) is less than LEAD_S away at the recent pace."""
    if n >= skip - 1:
        return True
    typical_s = recent_step_s(recent_ms)
    return typical_s > 0 and (skip - 1 - n) * typical_s <= LEAD_S


BACKEND_TORCH = "torch.profiler (CUDA activities, user scopes)"


def counters_span_s(counter_steps: int, record_steps: int, recent_ms) -> float:
    """The seconds the counters are expected to run (their sampling interval's basis): the warm-up step, the counter
    steps, the records' two warm-up steps (the fewest the GPU's marker and the host's pace leave:
    agent/cupti_window.py) and the record steps, at the median of the recent steps; 0 without counters."""
    if not counter_steps:
        return 0.0
    return (1 + counter_steps + 2 + record_steps) * recent_step_s(recent_ms)


def light_recorder(torch, prof, log, syncs: bool = False, counter_steps: int = 0, expected_s: float = 0.0,
                   follows_warmup: bool = False, pace_s: float = 0.0):
    """(recorder, scopes) of a light window: a CuptiWindow (with CUPTI's synchronization records when `syncs`, and
    `counter_steps` counter steps before its records, the counters sampling about expected_s seconds; its records'
    warm-up as long as the GPU's queue needs where the agent follows it, `follows_warmup`, at the pace `pace_s`) and
    its host ranges where cupti-python works and torch sees a GPU, else the torch.profiler `prof` with UserScopes;
    `log` gets one line saying which and why."""
    reason = None
    try:
        if not torch.cuda.is_available():
            reason = "no CUDA device"
        else:
            from gpucheckup.capture.agent.cupti_window import CuptiWindow, load_cupti

            window = CuptiWindow(torch, load_cupti(), log, syncs=syncs, counter_steps=counter_steps,
                                 expected_s=expected_s, follows_warmup=follows_warmup, pace_s=pace_s)
            what = "kernels, copies, memsets, synchronizations" if syncs else "kernels, copies, memsets"
            log(f"light window: {window.backend} ({what}; no runtime calls)")
            return window, window.host_scopes()
    except Exception as e:  # noqa: BLE001 - ImportError, libcupti not found, CUPTI's own errors
        reason = f"cupti-python is not usable ({type(e).__name__}: {str(e)[:200]})"
    log(f"light window: {BACKEND_TORCH}, the fallback: {reason}")
    return prof, UserScopes(torch)


class UserScopes:
    """While on: torch.autograd.profiler enables RecordFunction callbacks for USER_SCOPE only."""

    def __init__(self, torch):
        import torch.autograd.profiler as ap
        from torch._C._profiler import RecordScope

        self.module = ap
        self.original = ap._enable_profiler
        self.scopes = {RecordScope.USER_SCOPE}
        self.backend = BACKEND_TORCH

    def on(self) -> None:
        original, scopes = self.original, self.scopes

        def enable_user_scope_only(config, activities, _scopes=None):
            return original(config, activities, scopes)

        self.module._enable_profiler = enable_user_scope_only

    def off(self) -> None:
        self.module._enable_profiler = self.original


def mark(rd, name: str, pid: int) -> None:
    """Write the mark `name` ({pid} {unix time}) atomically through the run directory's descriptor
    (safe_dir.RunDirectory): the launcher's sampler polls for it."""
    rd.write_atomic(name, f"{pid} {time.time():.6f}\n".encode())

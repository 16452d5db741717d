"""Findings of a CPU-side check-up (a trace without device activity: analysis/one_trace/host/cpu_profile.py).

Each finding costs ms per step of the span (CpuProfile.per_step) and offers the catalogue's fixes
(diagnosis/fixes.py) whose precondition holds on the profile, each saving at most that cost:
- input_pipeline: the main thread waits in DataLoader __next__ at least DATALOADER_HIGH_PCT of the
  span; cost: that wait per step (the most that more workers, or faster storage, can give back).
- python_overhead: the main thread runs Python with no operator open, outside the DataLoader, at
  least PYTHON_HIGH_PCT of the span; cost: that time per step.
- few_threads (a run directory, where the job's threads and cores are known:
  analysis/run_logs/environment.thread_budget): the processes run fewer intra-op threads than the usable
  cores per process, and the operators keep the main thread busy at least THREADS_BUSY_PCT of the span;
  cost: what k threads instead of t could take off the operators' time, busy x (1 - t / k).
The larger of them is critical; a CPU-side check-up's verdict stays `cpu_only` (no device to bound).
"""

from __future__ import annotations

from gpucheckup.analysis.one_trace.host.cpu_profile import DATALOADER_HIGH_PCT, PYTHON_HIGH_PCT, CpuProfile
from gpucheckup.analysis.run_logs.environment import ThreadBudget
from gpucheckup.diagnosis.findings import Finding
from gpucheckup.diagnosis.fixes import offer

THREADS_BUSY_PCT = 20.0  # operators' share of the main thread below which their threads are not what bounds the step
# Why a CPU-side fix has no replayed saving: its figure is its bound.
NOT_REPLAYED_CPU = ("not replayed: the replay models a GPU timeline; the saving shown is the bound the CPU-side "
                    "check-up measures")


def input_pipeline(p: CpuProfile) -> Finding | None:
    """The training loop waits for its DataLoader >= DATALOADER_HIGH_PCT of the span."""
    if p.dataloader_pct < DATALOADER_HIGH_PCT:
        return None
    cost = p.per_step(p.dataloader_ms)
    kinds = ", ".join(n.split("#", 1)[-1] for n in p.loader_iterators) or "DataLoader"
    return Finding(
        id="input_pipeline", severity="warning", title="The training loop waits for its DataLoader",
        rule=f"DataLoader wait >= {DATALOADER_HIGH_PCT:g}% of the main thread's span (CPU-side check-up)",
        cost_ms_per_step=cost, cost_pct_of_step=p.dataloader_pct,
        evidence=[f"the main thread waits in DataLoader __next__ {p.dataloader_pct:.1f}% of the span "
                  f"({cost:.3f} ms per step){_over(p)}", f"iterator: {kinds}"],
        fixes=offer(p, "dataloader_workers", "more_workers", "fast_storage", cap_ms=cost))


def python_overhead(p: CpuProfile) -> Finding | None:
    """Python with no operator open, outside the DataLoader, >= PYTHON_HIGH_PCT of the span."""
    pct = 100 * p.python_outside_loader_ms / p.span_ms if p.span_ms > 0 else 0.0
    if pct < PYTHON_HIGH_PCT:
        return None
    cost = p.per_step(p.python_outside_loader_ms)
    return Finding(
        id="python_overhead", severity="warning", title="The training loop runs Python between operators",
        rule=f"Python between operators, outside the DataLoader, >= {PYTHON_HIGH_PCT:g}% of the main thread's span "
             "(CPU-side check-up)",
        cost_ms_per_step=cost, cost_pct_of_step=pct,
        evidence=[f"the main thread has no operator open, outside the DataLoader, {pct:.1f}% of the span "
                  f"({cost:.3f} ms per step){_over(p)}",
                  f"operators keep it busy {p.main_thread.busy_pct:.1f}% of the span"],
        fixes=offer(p, "compile_cpu", "python_off_loop", cap_ms=cost))


def few_threads(p: CpuProfile, budget: ThreadBudget | None) -> Finding | None:
    """Fewer intra-op threads than usable cores per process, with operators >= THREADS_BUSY_PCT of the span."""
    if budget is None or p.main_thread.busy_pct < THREADS_BUSY_PCT:
        return None
    fixes = offer(budget, "cpu_threads")
    if not fixes:
        return None
    cost = fixes[0].saving_ms
    t, k = budget.threads, budget.cores_per_process
    return Finding(
        id="few_threads", severity="warning",
        title=f"Operators run on {t} thread{'s' if t > 1 else ''} while {k} cores per process are usable",
        rule=f"intra-op threads < usable cores / processes, operators >= {THREADS_BUSY_PCT:g}% of the main thread's "
             "span (CPU-side check-up of a run directory)",
        cost_ms_per_step=cost, cost_pct_of_step=100 * cost / max(p.per_step(p.span_ms), 1e-9),
        evidence=[f"torch.get_num_threads() = {t} in the job; {k} usable cores per process on this host",
                  f"operators keep the main thread busy {p.main_thread.busy_pct:.1f}% of the span "
                  f"({budget.busy_ms_per_step:.3f} ms per step{_over(p)})"],
        fixes=fixes)


CPU_RULES = (input_pipeline, python_overhead)


def cpu_findings(p: CpuProfile, budget: ThreadBudget | None = None) -> list[Finding]:
    """Every CPU-side rule that fires (few_threads with a run's thread budget), the costliest first and critical."""
    found = [rule(p) for rule in CPU_RULES] + [few_threads(p, budget)]
    out = sorted((f for f in found if f is not None), key=lambda f: -f.cost_ms_per_step)
    if out:
        out[0].severity = "critical"
    return out


def _over(p: CpuProfile) -> str:
    """What 'per step' is over (CpuProfile.per_step)."""
    if p.step_ms:
        return f", its share of the job's {p.step_ms:.2f} ms step without the profiler"
    return f", over {p.steps} ProfilerStep windows" if p.steps else ", the whole span taken as one step"

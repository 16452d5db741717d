"""Correct the trace's host-side figures for the profiler's own overhead.

torch.profiler slows the host: +33% to +69% step time on a launch-bound job on the H200, 1-2% on
GPU-bound ones (docs/validation.md). The GPU's kernels run at the same speed, so a job that is
GPU-bound without the profiler can look launch-bound in its trace. When the step time without
the profiler is known (the run directory's steps.csv steady median, or --unprofiled-step-ms):

- inflation % = traced step / unprofiled step - 1, the traced step being the window's step time
  (the median step window, analysis/window.py), as every per-step figure is.
- GPU work per step = GPU busy time of the analysis window through the window's normalizer
  (its share of the window x the traced step; the profiler does not slow kernels).
- unprofiled busy % = GPU work per step / unprofiled step (capped at 100).
- host idle factor = (unprofiled step - GPU work) / (traced step - GPU work), clipped to [0, 1]:
  the idle time left without the profiler over the idle time in the trace. Each gap cause's
  per-step time is multiplied by it, so the causes keep their proportions and shrink to the
  idle time the job really has.
The correction applies when the inflation is at least MIN_INFLATION_PCT (5%); below that the
trace is taken as it is. Everything else (kernels, copies, syncs counts) stays as traced.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpucheckup.analysis.gap_causes import GapSummary

MIN_INFLATION_PCT = 5.0


@dataclass
class ProfilerCorrection:
    """The figures of the profiler-overhead correction (the report's `profiler`)."""

    source: str
    traced_step_ms: float
    unprofiled_step_ms: float
    inflation_pct: float
    gpu_ms_per_step: float
    busy_pct_unprofiled: float | None
    host_idle_factor: float
    applied: bool


def correction(traced_step_ms: float, gpu_ms_per_step: float, unprofiled_step_ms: float,
               source: str) -> ProfilerCorrection:
    """The figures of the profiler-overhead correction (see the module docstring)."""
    inflation = 100 * (traced_step_ms / unprofiled_step_ms - 1) if unprofiled_step_ms > 0 else 0.0
    traced_idle = max(traced_step_ms - gpu_ms_per_step, 0.0)
    real_idle = max(unprofiled_step_ms - gpu_ms_per_step, 0.0)
    factor = min(max(real_idle / traced_idle, 0.0), 1.0) if traced_idle > 0 else 1.0
    return ProfilerCorrection(
        source=source,
        traced_step_ms=traced_step_ms,
        unprofiled_step_ms=unprofiled_step_ms,
        inflation_pct=inflation,
        gpu_ms_per_step=gpu_ms_per_step,
        busy_pct_unprofiled=min(100 * gpu_ms_per_step / unprofiled_step_ms, 100.0) if unprofiled_step_ms else None,
        host_idle_factor=factor,
        applied=inflation >= MIN_INFLATION_PCT,
    )


def corrected_gaps(gaps: GapSummary, corr: ProfilerCorrection) -> GapSummary:
    """Gap causes scaled to the idle time the job has without the profiler."""
    f = corr.host_idle_factor
    step = corr.unprofiled_step_ms
    per_step = {c: v * f for c, v in gaps.per_step_ms.items()}
    return replace(gaps, per_step_ms=per_step, pct_of_step={c: 100 * v / step for c, v in per_step.items()},
                   traced={"per_step_ms": gaps.per_step_ms, "pct_of_step": gaps.pct_of_step})

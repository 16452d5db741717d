"""Scaling efficiency between a 1-GPU run and an N-GPU run of the same job, and where the difference goes.

Definitions (also in docs/metrics.md), for data parallelism with the same batch per GPU:
- throughput = N x batch / step time, so efficiency = N-GPU throughput / (N x 1-GPU throughput)
  = step time on 1 GPU / step time on N GPUs (each the median of the run's unprofiled
  steady-state steps from steps*.csv, else the traces' median step).
- the extra time per step (step_N - step_1) is split, from the N-GPU run's ranks (means over
  ranks): `waiting` (exposed wait: for another rank, analysis/job/ranks.py), `transfer` (exposed
  communication kernel time less that wait), `compute` (non-communication GPU time per step,
  N-GPU less 1-GPU), and `other` (the rest: host work, idle GPU, profiler noise). The parts come
  from the profiled window and the step times from unprofiled steps, so `other` also holds their
  difference; it can be negative.
Under EFFICIENCY_LOW_PCT (80%) the mission says: look at communication.
"""

from __future__ import annotations

from dataclasses import dataclass, field

EFFICIENCY_LOW_PCT = 80.0


@dataclass
class Scaling:
    """Scaling efficiency and the split of the extra step time."""

    n: int
    step_1_ms: float
    step_n_ms: float
    efficiency_pct: float
    extra_ms: float
    parts_ms: dict[str, float] = field(default_factory=dict)
    step_from: str = ""

    @property
    def low(self) -> bool:
        return self.efficiency_pct < EFFICIENCY_LOW_PCT


def scaling(n: int, step_1_ms: float, step_n_ms: float, compute_1_ms: float | None, compute_n_ms: float | None,
            exposed_comm_n_ms: float, exposed_wait_n_ms: float, step_from: str = "") -> Scaling:
    """Efficiency of the N-GPU run against the 1-GPU run, and the extra time per step by part."""
    extra = step_n_ms - step_1_ms
    parts = {"waiting": exposed_wait_n_ms, "transfer": max(exposed_comm_n_ms - exposed_wait_n_ms, 0.0)}
    if compute_1_ms is not None and compute_n_ms is not None:
        parts["compute"] = compute_n_ms - compute_1_ms
    parts["other"] = extra - sum(parts.values())
    return Scaling(n=n, step_1_ms=step_1_ms, step_n_ms=step_n_ms, efficiency_pct=100 * step_1_ms / step_n_ms,
                   extra_ms=extra, parts_ms=parts, step_from=step_from)

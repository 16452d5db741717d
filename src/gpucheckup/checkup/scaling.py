"""`gpucheckup scaling`: a 1-GPU run and an N-GPU run of the same job checked up, their step times and GPU compute
read, and the efficiency with the split of the extra time computed (analysis/job/scaling.py); the view is
report/text/scaling_text.py's."""

from __future__ import annotations

from pathlib import Path

import msgspec
import numpy as np

from gpucheckup.analysis.job.ranks import rank_input
from gpucheckup.analysis.job.scaling import Scaling, scaling
from gpucheckup.checkup.pipeline import Checkups, check_run
from gpucheckup.errors import CheckupError


class ScalingRuns(msgspec.Struct):
    """The scaling of two runs, and what the view says beside it."""

    scaling: Scaling
    step_from: str  # how the step times were taken
    both_envs: bool  # both runs recorded their environment (env.json)


def scaling_of(run_1: Path, run_n: Path) -> ScalingRuns:
    """Check up both runs and compare them; CheckupError unless they are a 1-GPU and an N-GPU run."""
    r1, rn = check_run(run_1), check_run(run_n)
    n, n1 = _ranks(rn, 0), _ranks(r1, 1)
    if n1 != 1 or n < 2:
        raise CheckupError(f"scaling needs a 1-GPU run and an N-GPU run; got {n1} and {n} ranks")
    s1, c1, how = step_and_compute(r1)
    sn, cn, _ = step_and_compute(rn)
    comm = (float(np.mean([c.analysis.communication.exposed_ms_per_step for c in rn.checkups]))
            if rn.checkups else 0.0)
    wait = float(np.mean([r.exposed_wait_ms for r in rn.job.analysis.table])) if rn.job else 0.0
    sc = scaling(n, s1, sn, c1, cn, comm, wait, how, r1.run.run.env, rn.run.run.env)
    return ScalingRuns(sc, how, bool(r1.run.run.env and rn.run.run.env))


def _ranks(res: Checkups, least: int) -> int:
    """A run's rank count: its matched ranks, else its traces or step logs (at least `least`)."""
    if res.job:
        return len(res.job.analysis.ranks)
    return max(len(res.checkups), len(res.run.run.steps), least)


def step_and_compute(res: Checkups) -> tuple[float, float | None, str]:
    """A run's step time (ms), its mean GPU compute per step over its ranks (ms; None without a GPU trace) and how
    the step was taken: the unprofiled steps' total time over their count, else the second half's median for steps
    that never settled, else the slowest rank's traced step."""
    st = res.run.analysis.steps or {}
    step = st.get("unprofiled_ms")  # the job without the profiler (steps after a window can run slower)
    how = f"total time over the unprofiled steps, {st.get('unprofiled_basis')} (steps*.csv)"
    if not step and st.get("late_median_ms"):  # steps that never settled: the second half's median
        step, how = st["late_median_ms"], "median of the second half of the unprofiled steps (steps*.csv)"
    if not step and res.checkups:  # each rank's window step (analysis/step_basis.py); the slowest sets the pace
        step, how = max(c.analysis.window.step_ms for c in res.checkups), "the slowest rank's traced step"
    if not step:
        raise CheckupError(f"{res.path}: no step times (no steps*.csv and no GPU trace)")
    comp = [rank_input(c.analysis.trace, i).compute_ms for i, c in enumerate(res.checkups)]
    comp = [c for c in comp if c is not None]
    return step, (float(np.mean(comp)) if comp else None), how

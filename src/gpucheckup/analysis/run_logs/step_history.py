"""Step times over the whole run (`steps.csv`), not only the profiled window.

Definitions (docs/capture.md):
- step time: the `ms` column, wall time from the end of the previous optimizer step to the end
  of this one (the agent's own hook time excluded); step 1 has none.
- plain steps: steps the agent did not instrument (empty `phase`), less the AFTER_WINDOW (2)
  steps after each instrumented run of steps: the profiler's stop, its trace's export and the
  agent's own work land in them (on two H200s: 8.3 then 47.6 ms after a window among 24 ms steps).
  The profiler's warm-up step, a light window's counter steps (`counters`), the profiled steps and the FLOP-counted
  step are left out of every figure below except `profiled_median_ms`.
- steady median: median of the plain steps in the second half of the run.
- warm-up: the steps before the first plain step from which WARMUP_RUN (5) consecutive plain
  steps all lie within WARMUP_TOL_PCT (20%) of the steady median; for steps that alternate
  (a DataLoader's workers out of phase with the GPU: fast and slow steps in turn, no five alike),
  from the first step from which WARMUP_RUN windows in a row, each the mean of 2 x WARMUP_RUN
  steps, lie within WARMUP_TOL_PCT of the second half's mean. A run with neither never settled
  (too short, or too irregular, for a steady state): `settled` is False and every steady-state
  figure below is None (so no --skip past the job's end is suggested).
- steady step (`steady_ms`): the throughput basis of the plain steps after warm-up: their total
  time over their count (analysis/step_basis.py), so fast and slow steps in turn give the job's
  real rate where a median would pick one of the two.
- stability: coefficient of variation (std / mean) of the plain steps after warm-up.
- slow steps: plain steps after warm-up longer than SLOW_FACTOR (2) x the steady median; their
  time beyond the median as a share of all plain post-warm-up time; `period` = the most common
  gap (in steps) between consecutive slow steps when at least half the gaps are within one
  step of it (a checkpoint, evaluation or logging every N steps).
- unprofiled step (`unprofiled_ms`, the basis of the profiler-overhead correction and of the
  replay's calibration): the throughput basis (total time over steps) of the plain steps before the run's first instrumented step
  (FLOP-counted, profiler warm-up or profiled), after their own warm-up (the WARMUP_RUN rule
  against those steps: a first step pays one-time costs, the CUDA context's
  libraries, the allocator's first blocks, the optimizer's state, autotuning and compilation),
  when at least MIN_PLAIN of them remain and their throughput is at most the second half's; else the
  second half's steps. A profiled window leaves the steps after it slower:
  Kineto keeps CUPTI subscribed after a full window (+44.7% step time after it on the H200's
  launch-bound job, -2.2% with TEARDOWN_CUPTI=1; docs/validation.md 6c), so steps after a window
  are not the job without the profiler. Both effects only add time (the residue to the steps after
  the window, a warm-up that outlasts the first steps to those before it: the input example's 702
  ms before its window against 420 ms later on the H200), so of the two the faster is taken.
  `unprofiled_steps`: the
  first and last step it took, `unprofiled_basis`: "before the window" or "second half".
- profiler overhead: median profiled step / median of the unprofiled step's steps - 1, in percent
  (like with like: a per-step inflation; a checkpoint every N steps is in the rate, not in a
  window of a few profiled steps).
Figures need at least MIN_PLAIN (8) plain steps (the fewest a median stands on when a few steps
are slow for reasons of their own: a checkpoint, the garbage collector); with fewer they are None.
"""

from __future__ import annotations

import numpy as np

from gpucheckup.analysis.distinct import median
from gpucheckup.analysis.step_basis import throughput_ms

WARMUP_RUN = 5
WARMUP_TOL_PCT = 20.0
SLOW_FACTOR = 2.0
MIN_PLAIN = 8
AFTER_WINDOW = 2
MAX_POINTS = 5000


def step_stats(steps: dict) -> dict:
    """The whole-run step figures of one process's steps.csv."""
    n = np.asarray(steps["step"])
    ms = np.asarray(steps["ms"])
    phase = np.asarray(steps.get("phase") or [""] * len(n), dtype=object)
    has = np.isfinite(ms)
    instrumented = has & (phase != "")
    after = np.isin(n, (n[phase != ""][:, None] + np.arange(1, AFTER_WINDOW + 1)).ravel())
    plain = has & (phase == "") & ~after
    prof = has & (phase == "profiled")
    out = {
        "count": int(len(n)),
        "last_step": int(n.max()) if len(n) else 0,
        "plain_count": int(plain.sum()),
        "profiled_steps": [int(n[prof].min()), int(n[prof].max())] if prof.any() else None,
        "profiled_median_ms": float(median(ms[prof])) if prof.any() else None,
        "instrumented_steps": {p: [int(x) for x in n[has & (phase == p)]]
                               for p in ("profile-warmup", "counters", "flops") if (phase == p).any()},
        "total_s": float(np.nansum(ms) / 1000),
        "late_median_ms": None,
        "settled": False, "steady_median_ms": None, "steady_ms": None, "warmup_steps": None, "cv_pct": None,
        "slow": None,
        "profiler_overhead_pct": None,
        "unprofiled_ms": None, "unprofiled_steps": None, "unprofiled_basis": None,
    }
    if plain.sum() < MIN_PLAIN:
        return out
    pn, pms = n[plain], ms[plain]
    steady = float(median(pms[len(pms) // 2:]))
    out["late_median_ms"] = steady  # the second half's median: a step time even when the run never settles
    late = throughput_ms(pms[len(pms) // 2:])
    first = settled_from(pms, steady)
    if first is None:
        first = settled_on_average(pms, late)
    if first is None:
        return out
    out["settled"], out["steady_median_ms"] = True, steady
    out["warmup_steps"] = int(pn[first]) - 1
    after_n, after = pn[first:], pms[first:]
    out["steady_ms"] = throughput_ms(after)
    out["cv_pct"] = float(100 * np.std(after) / np.mean(after)) if len(after) > 1 and np.mean(after) > 0 else None
    out["slow"] = slow_steps(after_n, after, steady)
    first_instr = int(n[instrumented].min()) if instrumented.any() else None
    basis = before_window(pn, pms, first_instr)
    if basis is not None and throughput_ms(basis[1]) <= late:
        out["unprofiled_basis"] = "before the window"
    else:
        basis = (pn[len(pn) // 2:], pms[len(pms) // 2:])
        out["unprofiled_basis"] = "second half"
    out["unprofiled_ms"] = throughput_ms(basis[1])
    out["unprofiled_steps"] = [int(basis[0][0]), int(basis[0][-1])]
    per_step = float(median(basis[1]))  # like with like: a per-step inflation, where unprofiled_ms is a rate
    if out["profiled_median_ms"] is not None and per_step > 0:
        out["profiler_overhead_pct"] = 100 * (out["profiled_median_ms"] / per_step - 1)
    return out


def before_window(n: np.ndarray, ms: np.ndarray, first_instrumented: int | None):
    """(steps, ms) of the plain steps before the first instrumented step after their own warm-up (the warm-up
    rule against those steps), or None when there is no such step or fewer than MIN_PLAIN remain."""
    if first_instrumented is None:
        return None
    pre = n < first_instrumented
    n, ms = n[pre], ms[pre]
    if len(ms) < MIN_PLAIN:
        return None
    first = settled_from(ms, float(median(ms)))
    if first is None:
        first = settled_on_average(ms, throughput_ms(ms))
    if first is None or len(ms) - first < MIN_PLAIN:
        return None
    return n[first:], ms[first:]


def settled_from(ms: np.ndarray, ref: float) -> int | None:
    """The index of the first of WARMUP_RUN steps in a row within WARMUP_TOL_PCT of ref (the end of the warm-up);
    None when the steps never settle so."""
    inside = np.abs(ms - ref) <= WARMUP_TOL_PCT / 100 * ref
    run = np.convolve(inside.astype(int), np.ones(WARMUP_RUN, dtype=int), mode="valid") == WARMUP_RUN
    return int(np.argmax(run)) if run.any() else None


def settled_on_average(ms: np.ndarray, ref: float) -> int | None:
    """The index of the first of WARMUP_RUN windows in a row, each the mean of 2 x WARMUP_RUN steps, within
    WARMUP_TOL_PCT of ref (steps that alternate settle so); None when none do."""
    k = 2 * WARMUP_RUN
    if len(ms) < k + WARMUP_RUN - 1:
        return None
    means = np.convolve(ms, np.ones(k) / k, mode="valid")
    return settled_from(means, ref)


def slow_steps(n: np.ndarray, ms: np.ndarray, steady: float) -> dict:
    """Steps over SLOW_FACTOR x the steady median: how many, what they cost, and whether they recur every N steps."""
    slow = ms > SLOW_FACTOR * steady
    extra = float(np.sum(ms[slow] - steady))
    total = float(np.sum(ms))
    steps = n[slow].astype(int)
    period = None
    if len(steps) >= 3:
        gaps = np.diff(steps)
        vals, counts = np.unique(gaps, return_counts=True)
        mode = int(vals[np.argmax(counts)])
        if np.sum(np.abs(gaps - mode) <= 1) >= len(gaps) / 2 and mode > 1:
            period = mode
    return {
        "count": int(slow.sum()),
        "steps": [int(x) for x in steps[:50]],
        "extra_ms": extra,
        "extra_pct": 100 * extra / total if total > 0 else 0.0,
        "median_slow_ms": float(median(ms[slow])) if slow.any() else None,
        "period": period,
    }


def history_series(steps: dict, max_points: int = MAX_POINTS) -> dict:
    """{"step": [...], "time_ms": [...]} of every timed step; above max_points, the median of equal step buckets."""
    n = np.asarray(steps["step"])
    ms = np.asarray(steps["ms"])
    ok = np.isfinite(ms)
    n, ms = n[ok], ms[ok]
    if len(n) > max_points:
        edges = np.linspace(0, len(n), max_points + 1).astype(int)
        n = np.array([median(n[a:b]) for a, b in zip(edges[:-1], edges[1:])])
        ms = np.array([median(ms[a:b]) for a, b in zip(edges[:-1], edges[1:])])
    return {"step": [int(x) for x in n], "time_ms": [round(float(x), 3) for x in ms]}

"""From a DataLoader-only benchmark to advice: how many workers, and is the loader the bottleneck.

Definitions (docs/metrics.md, "DataLoader benchmark"):
- rate(w): batches/s with w workers (the faster pin_memory setting when both were measured).
  One batch feeds one training step, so batches/s is the steps/s the loader can feed.
- what the workers wait on: at the measured setting with the fewest workers (1 or more) whose CPU
  time was read, the workers' CPU share = (their CPU seconds + their seconds ready to run but waiting
  for a core, where Linux says) over the timed batches / (wall seconds x min(workers, usable cores)):
  how much of the cores they could use they kept busy or wanted. A worker that computes on a host
  busy with other work waits for a core, not for data: counted with the CPU time it stays CPU-bound
  (a spinning worker on a shared core read 40-60% CPU alone, "IO"). Under
  IO_SHARE (0.5) the loader waits on IO (disk, network, a remote store, a sleep), not on CPU:
  a waiting worker holds no core, so more workers than cores still add batches; else it is
  CPU-bound. Unknown when no CPU time was read.
- worker cap: for a CPU-bound loader (or an unknown one) floor(usable cores), usable cores being
  the smallest of CPU count, affinity and cgroup quota (analysis/run_logs/environment.py): a worker
  that computes needs a core, and past the cap workers take turns on the same cores and add
  memory, not speed. For a loader that waits on IO, floor(usable cores / one worker's CPU share)
  (at least the cores): the workers the cores can carry while each is on CPU that share of its
  time. Advice never names more workers than the cap; rows above it are measured but flagged.
- knee: the fewest workers (within the cap) whose rate is within FLAT_PCT (10%) of the best
  rate within the cap: beyond it more workers buy less than the noise of such a measurement.
  So the advice follows the measured curve: a rate that keeps rising sets the knee further out.
- the GPU's need: 1000 / step_ms where step_ms is the GPU's step time without waiting for data
  (step_without_data; from a CPU check-up, the training step's time without waiting for
  data). The loader is the bottleneck when even the best rate within the cap is below the need;
  otherwise the fewest workers whose rate is at least HEADROOM (1.1) x the need suffice: the 10%
  margin absorbs per-batch jitter that prefetching (prefetch_factor batches per worker) cannot hide.
- recommended workers: those that suffice when the GPU's step time is known, else the knee;
  never 0 when a setting with workers was measured (MIN one worker): with num_workers=0 the
  training process builds each batch between steps, so loading adds to the step time instead of
  overlapping the GPU's work. "Suffice" and "bottleneck" use settings with workers for the same reason.
Needs no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# LoaderAdvice: the advice as the dataloader document holds it, built here (one type, its fields in one place)
from gpucheckup.document import (
    CpuFigures,
    CpuReport,
    Gaps,
    LoaderAdvice,
    Profiler,
    StepStats,
    TraceReport,
    Window,
)

FLAT_PCT = 10.0
HEADROOM = 1.1
IO_SHARE = 0.5


@dataclass(frozen=True)
class Rate:
    """One measured setting, as the advice reads it."""

    workers: int
    pin_memory: bool
    batches_per_s: float
    worker_uss_mb: float | None = None  # mean over the workers: what one more worker costs
    worker_cpu_per_s: float | None = None  # the workers' CPU seconds per wall second over the timed batches
    worker_runq_per_s: float | None = None  # their seconds waiting for a core per wall second (None: unknown)


def best_per_workers(rates: list[Rate]) -> dict[int, Rate]:
    """The faster pin_memory setting for each worker count."""
    out: dict[int, Rate] = {}
    for r in rates:
        if r.workers not in out or r.batches_per_s > out[r.workers].batches_per_s:
            out[r.workers] = r
    return dict(sorted(out.items()))


def worker_cap(usable_cores: float | None, per_worker_share: float | None = None) -> int | None:
    """The most workers advice may name (module docstring): floor(usable cores), at least 1, or for a loader that
    waits on IO the workers the cores carry at each worker's CPU share; None when the cores are unknown."""
    if usable_cores is None:
        return None
    cap = max(1, math.floor(usable_cores))
    if per_worker_share is not None and per_worker_share < IO_SHARE:
        cap = max(cap, math.floor(usable_cores / max(per_worker_share, 1e-3)))
    return cap


def waits_on(per: dict[int, Rate], usable_cores: float | None) -> tuple[str | None, float | None, int | None]:
    """Whether the loader waits on "io" or computes ("cpu"), the workers' CPU share it was read from and the setting
    (module docstring); (None, None, None) when no setting with workers has its CPU time."""
    known = [r for w, r in per.items() if w >= 1 and r.worker_cpu_per_s is not None]
    if not known:
        return None, None, None
    r = min(known, key=lambda x: x.workers)
    usable = min(r.workers, usable_cores) if usable_cores else r.workers
    share = (r.worker_cpu_per_s + (r.worker_runq_per_s or 0.0)) / usable
    return ("io" if share < IO_SHARE else "cpu"), share, r.workers


def advise(rates: list[Rate], usable_cores: float | None, limited_by: str, gpu_step_ms: float | None = None,
           gpu_source: str = "") -> LoaderAdvice:
    """Advice from the measured rates, the cores the job has and (when known) the GPU's step time."""
    if not rates:
        raise ValueError("no measured settings")
    per = best_per_workers(rates)
    kind, share, at = waits_on(per, usable_cores)
    per_worker = None
    if kind == "io":  # one worker's share of a core: the workers' CPU per wall second over the workers
        per_worker = per[at].worker_cpu_per_s / at
    cap = worker_cap(usable_cores, per_worker)
    allowed = {w: r for w, r in per.items() if cap is None or w <= cap} or {min(per): per[min(per)]}
    best = max(allowed.values(), key=lambda r: r.batches_per_s)
    knee = min(w for w, r in allowed.items() if r.batches_per_s >= (1 - FLAT_PCT / 100) * best.batches_per_s)
    # num_workers=0 builds each batch in the training process, between steps: its time adds to the step
    pool = {w: r for w, r in allowed.items() if w >= 1} or allowed
    pool_best = max(pool.values(), key=lambda r: r.batches_per_s)
    pool_knee = min(w for w, r in pool.items() if r.batches_per_s >= (1 - FLAT_PCT / 100) * pool_best.batches_per_s)
    need = 1000.0 / gpu_step_ms if gpu_step_ms and gpu_step_ms > 0 else None
    suffice = None
    bottleneck = None
    if need is not None:
        ok = [w for w, r in pool.items() if r.batches_per_s >= HEADROOM * need]
        suffice = min(ok) if ok else None
        bottleneck = pool_best.batches_per_s < need
    rec = suffice if suffice is not None else (pool_best.workers if need is not None else pool_knee)
    pin = _pin_choice(rates, rec)
    adv = LoaderAdvice(usable_cores=usable_cores, limited_by=limited_by, worker_cap=cap, best_workers=best.workers,
                       best_batches_per_s=best.batches_per_s, knee_workers=knee,
                       feed_workers=pool_best.workers, feed_batches_per_s=pool_best.batches_per_s,
                       gpu_step_ms=gpu_step_ms,
                       gpu_steps_per_s=need, gpu_source=gpu_source, bottleneck=bottleneck, suffice_workers=suffice,
                       recommended_workers=rec, recommended_pin_memory=pin,
                       over_cap=[w for w in per if cap is not None and w > cap], waits_on=kind,
                       worker_cpu_share=share, share_at_workers=at, sentences=[])
    adv.sentences = _sentences(adv, per)
    return adv


def _pin_choice(rates: list[Rate], workers: int) -> bool | None:
    """pin_memory=True unless it made the loader more than FLAT_PCT slower; None when True was not measured."""
    at = {r.pin_memory: r.batches_per_s for r in rates if r.workers == workers}
    if True not in at:
        return None
    if False not in at:
        return True
    return at[True] >= (1 - FLAT_PCT / 100) * at[False]


def _sentences(a: LoaderAdvice, per: dict[int, Rate]) -> list[str]:
    out = []
    cores = (f"{a.usable_cores:g} usable core{'' if a.usable_cores == 1 else 's'} (limited by {a.limited_by})"
             if a.usable_cores is not None else "usable cores unknown")
    if a.waits_on == "io":
        out.append(f"{cores}; the workers were on or waiting for a CPU {a.worker_cpu_share:.0%} of the time of the cores "
                   "they could use "
                   f"(at {_workers(a.share_at_workers)}): the loader waits on IO (disk, network, a remote store), "
                   "not on CPU, and a waiting worker holds no core, so workers beyond the cores still add batches: "
                   f"advice names at most {_workers(a.worker_cap)} (the cores over one worker's CPU share)")
    elif a.waits_on == "cpu":
        out.append(f"{cores}; the workers were on or waiting for a CPU {a.worker_cpu_share:.0%} of the time of the cores "
                   "they could use "
                   f"(at {_workers(a.share_at_workers)}): the loader computes, and workers beyond the cores take "
                   f"turns on them: advice names at most {_workers(a.worker_cap)}")
    else:
        out.append(f"{cores}: advice names at most {_workers(a.worker_cap)}" if a.worker_cap is not None else cores)
    if a.over_cap:
        over = ", ".join(map(str, a.over_cap))
        out.append(f"num_workers {over} exceed the usable cores: the workers share cores and add memory "
                   "(measured, never recommended)")
    curve = ", ".join(f"{r.batches_per_s:.1f} at {w}" for w, r in per.items())
    out.append(f"measured batches/s by workers: {curve}; the best advice may name is {a.best_batches_per_s:.1f} with "
               f"{_workers(a.best_workers)}, and more workers stop paying at {_workers(a.knee_workers)} (the fewest "
               f"within {FLAT_PCT:g}% of that best)")
    below = [w for w in per if w < a.knee_workers]
    if a.knee_workers == max(per) and below and per[a.knee_workers].batches_per_s > (
            1 + FLAT_PCT / 100) * per[max(below)].batches_per_s:
        out.append(f"the rate was still rising at the most workers measured ({a.knee_workers}): measure more "
                   f"(--workers {','.join(map(str, list(per) + [2 * a.knee_workers]))}) to find where it flattens")
    if a.gpu_steps_per_s is not None:
        who = "the training step" if "CPU run: " in a.gpu_source else "the GPU"
        gpu = (f"{who} takes {a.gpu_step_ms:.1f} ms per step without waiting for data ({a.gpu_steps_per_s:.1f} "
               f"steps/s, {a.gpu_source})")
        if a.bottleneck:
            out.append(f"the loader feeds {a.feed_batches_per_s:.1f} steps/s, {gpu}: the loader IS the bottleneck "
                       f"even with {_workers(a.feed_workers)}: make each batch cheaper (decode/augment on the GPU, "
                       "cache preprocessed samples, faster storage) rather than adding workers")
        elif a.suffice_workers is not None:
            rate = per[a.suffice_workers].batches_per_s
            out.append(f"the loader feeds {rate:.1f} steps/s with {_workers(a.suffice_workers)}, {gpu}: the loader "
                       f"is not the bottleneck; num_workers={a.suffice_workers} suffices "
                       f"(>= {HEADROOM:g}x the step's rate)")
        else:
            out.append(f"the loader feeds {a.feed_batches_per_s:.1f} steps/s at best, {gpu}: just enough, with less "
                       f"than the {HEADROOM:g}x margin: use {_workers(a.feed_workers)} and expect short stalls")
    rec = f"recommended: num_workers={a.recommended_workers}"
    if a.recommended_pin_memory is not None:
        rec += f", pin_memory={a.recommended_pin_memory}"
    uss = per[a.recommended_workers].worker_uss_mb if a.recommended_workers in per else None
    if uss and a.recommended_workers:
        rec += f" (about {uss * a.recommended_workers:.0f} MB of worker-private memory)"
    out.append(rec)
    return out


def _workers(n: int) -> str:
    return "1 worker" if n == 1 else f"{n} workers"


def step_without_data(part: TraceReport | CpuReport, run_steps: StepStats | None = None) -> tuple[float, str]:
    """The step time without waiting for data, in ms, from one check-up of a document, and how it was derived: on a
    GPU the check-up's step time (gpu_step); in a CPU check-up the run's unprofiled step (`run_steps`: the run's step
    figures) else the profiled step, minus the main thread's DataLoader time per profiled step. ValueError when it
    has neither."""
    if isinstance(part, CpuReport):
        if not part.cpu.step_median_ms:
            raise ValueError("the check-up has no step time")
        return _cpu_step(part.cpu, run_steps)
    return gpu_step(part.window, part.profiler, part.gaps)


def gpu_step(window: Window, profiler: Profiler | None, gaps: Gaps) -> tuple[float, str]:
    """A GPU check-up's step without waiting for data: its step (the unprofiled one when the profiler correction
    applied, else the window's `step_ms`) minus the input idle per step; ValueError without a step."""
    if profiler is not None and profiler.applied and profiler.unprofiled_step_ms:
        step, how = float(profiler.unprofiled_step_ms), "unprofiled step"
    elif window.step_ms:
        step, how = float(window.step_ms), f"step ({window.basis})"
    else:
        raise ValueError("the check-up has no step time")
    wait = float(gaps.per_step_ms.get("input") or 0.0)
    return step - wait, f"{how} {step:.1f} ms minus {wait:.1f} ms waiting for data"


def _cpu_step(cpu: CpuFigures, steps: StepStats | None) -> tuple[float, str]:
    """A CPU check-up's step without waiting for data (step_without_data)."""
    if steps is not None and steps.unprofiled_ms:
        step, how = float(steps.unprofiled_ms), "unprofiled step (steps.csv)"
    elif steps is not None and steps.late_median_ms:
        step, how = float(steps.late_median_ms), "median of the later unprofiled steps (steps.csv)"
    else:
        step, how = float(cpu.step_median_ms), "profiled step"
    n = cpu.steps or 0
    wait = float(cpu.dataloader_ms or 0.0) / n if n else 0.0
    return step - wait, f"CPU run: {how} {step:.1f} ms minus {wait:.1f} ms waiting for data"

"""From a DataLoader-only benchmark to advice: how many workers, and is the loader the bottleneck.

Definitions (docs/metrics.md, "DataLoader benchmark"):
- rate(w): batches/s with w workers (the faster pin_memory setting when both were measured).
  One batch feeds one training step, so batches/s is the steps/s the loader can feed.
- worker cap: floor(usable cores), usable cores being the smallest of CPU count, affinity and
  cgroup quota (analysis/run_logs/environment.py). A worker is a process that needs a core while it
  builds a batch: past the cap they take turns on the same cores and add memory, not speed.
  Advice never names more workers than the cap; rows above it are measured but flagged.
- knee: the fewest workers (within the cap) whose rate is within FLAT_PCT (10%) of the best
  rate within the cap: beyond it more workers buy less than the noise of such a measurement.
- the GPU's need: 1000 / step_ms where step_ms is the GPU's step time without waiting for data
  (gpu_step_from_report). The loader is the bottleneck when even the best rate within the cap
  is below the need; otherwise the fewest workers whose rate is at least HEADROOM (1.1) x the
  need suffice: the 10% margin absorbs per-batch jitter that prefetching (prefetch_factor
  batches per worker) cannot hide.
- recommended workers: those that suffice when the GPU's step time is known, else the knee;
  never 0 when a setting with workers was measured (MIN one worker): with num_workers=0 the
  training process builds each batch between steps, so loading adds to the step time instead of
  overlapping the GPU's work. "Suffice" and "bottleneck" use settings with workers for the same reason.
Needs no torch.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

FLAT_PCT = 10.0
HEADROOM = 1.1


@dataclass(frozen=True)
class Rate:
    """One measured setting, as the advice reads it."""

    workers: int
    pin_memory: bool
    batches_per_s: float
    worker_uss_mb: float | None = None  # mean over the workers: what one more worker costs


@dataclass
class LoaderAdvice:
    """The figures and the sentences a user acts on."""

    usable_cores: float | None
    limited_by: str
    worker_cap: int | None
    best_workers: int
    best_batches_per_s: float
    knee_workers: int
    feed_workers: int  # the best setting with workers (num_workers >= 1 when measured): what runs beside the GPU
    feed_batches_per_s: float
    gpu_step_ms: float | None
    gpu_steps_per_s: float | None
    gpu_source: str
    bottleneck: bool | None  # None when the GPU's step time is unknown
    suffice_workers: int | None
    recommended_workers: int
    recommended_pin_memory: bool | None
    over_cap: list[int] = field(default_factory=list)  # measured worker counts above the cap
    sentences: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def best_per_workers(rates: list[Rate]) -> dict[int, Rate]:
    """The faster pin_memory setting for each worker count."""
    out: dict[int, Rate] = {}
    for r in rates:
        if r.workers not in out or r.batches_per_s > out[r.workers].batches_per_s:
            out[r.workers] = r
    return dict(sorted(out.items()))


def worker_cap(usable_cores: float | None) -> int | None:
    """The most workers advice may name: floor(usable cores), at least 1; None when unknown."""
    return None if usable_cores is None else max(1, math.floor(usable_cores))


def advise(rates: list[Rate], usable_cores: float | None, limited_by: str, gpu_step_ms: float | None = None,
           gpu_source: str = "") -> LoaderAdvice:
    """Advice from the measured rates, the cores the job has and (when known) the GPU's step time."""
    if not rates:
        raise ValueError("no measured settings")
    per = best_per_workers(rates)
    cap = worker_cap(usable_cores)
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
                       over_cap=[w for w in per if cap is not None and w > cap])
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
    out.append(f"{cores}: advice names at most {_workers(a.worker_cap)}" if a.worker_cap is not None else cores)
    if a.over_cap:
        over = ", ".join(map(str, a.over_cap))
        out.append(f"num_workers {over} exceed the usable cores: the workers share cores and add memory "
                   "(measured, never recommended)")
    out.append(f"the loader alone delivers at best {a.best_batches_per_s:.1f} batches/s with "
               f"{_workers(a.best_workers)} (within the cores); it flattens at {_workers(a.knee_workers)} "
               f"(within {FLAT_PCT:g}% of the best)")
    if a.gpu_steps_per_s is not None:
        gpu = f"the GPU takes {a.gpu_step_ms:.1f} ms per step ({a.gpu_steps_per_s:.1f} steps/s, {a.gpu_source})"
        if a.bottleneck:
            out.append(f"the loader feeds {a.feed_batches_per_s:.1f} steps/s, {gpu}: the loader IS the bottleneck "
                       f"even with {_workers(a.feed_workers)}: make each batch cheaper (decode/augment on the GPU, "
                       "cache preprocessed samples, faster storage) rather than adding workers")
        elif a.suffice_workers is not None:
            rate = per[a.suffice_workers].batches_per_s
            out.append(f"the loader feeds {rate:.1f} steps/s with {_workers(a.suffice_workers)}, {gpu}: the loader "
                       f"is not the bottleneck; num_workers={a.suffice_workers} suffices "
                       f"(>= {HEADROOM:g}x the GPU's rate)")
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


def gpu_step_from_report(report: dict) -> tuple[float, str]:
    """The GPU's step time without waiting for data, in ms, from a check-up report dict, and how it was derived:
    the report's step time (`window.step_ms`: without the profiler when that correction applied) minus the
    input idle per step."""
    prof = report.get("profiler") or {}
    window = report.get("window") or {}
    gaps = report.get("gaps") or {}
    if prof.get("applied") and prof.get("unprofiled_step_ms"):
        step, how = float(prof["unprofiled_step_ms"]), "unprofiled step"
    elif window.get("step_ms"):
        step, how = float(window["step_ms"]), f"step ({window.get('basis', 'the report basis')})"
    else:
        raise ValueError("the check-up has no step time")
    wait = float((gaps.get("per_step_ms") or {}).get("input") or 0.0)
    return step - wait, f"{how} {step:.1f} ms minus {wait:.1f} ms waiting for data"

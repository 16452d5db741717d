"""NVML telemetry over the whole run (`nvml.csv`), and the CPU use of the job's processes (`cpu.csv`).

Definitions (docs/capture.md):
- the job's GPUs: those whose utilization rose above 0 or whose used memory grew by at least
  JOB_MEMORY_MB (256 MB) during the run. The run's series, per sample time, is their mean
  utilization and SM clock, summed power and memory, and "throttled" when any of them is.
- active period: from the first to the last sample with utilization > 0 (start-up such as
  `import torch`, and shutdown, are left out).
- util_mean_pct: mean NVML utilization over the active period. NVML utilization is the share
  of the driver's sample period in which any kernel ran: 100% can still mean a few busy SMs.
- heartbeat: utilization comes in pulses. With L = max(HEARTBEAT_FLOOR_PCT (5%), p90 / 2), a
  pulse is a run of samples above L. Heartbeat when there are at least HEARTBEAT_PULSES (3)
  pulses and at least HEARTBEAT_LOW_PCT (30%) of active samples are at or below L; `period_s`
  is the median time between pulse starts.
- throttled sample: clock-event reasons other than idle (0x1), application clock setting
  (0x2), sync boost (0x10) and display clock (0x100): SW power cap (0x4), HW slowdown (0x8),
  SW thermal (0x20), HW thermal (0x40), HW power brake (0x80); `throttled_pct` is their share
  of active samples, by reason too.
- memory growth: median used memory over the last tenth of the active period minus that over
  its first tenth (MB, and percent of total memory).
- steady state (many GPUs, issue 9): when the run's steps*.csv say where warm-up ends, every
  figure above is taken from the end of the warm-up step to the end of the last step (model
  build, NCCL set-up, the first steps and shutdown left out), given at least MIN_STEADY_SAMPLES samples there; `window` says which.
- per GPU: the same utilization, throttle and memory figures for each of the job's GPUs
  (`per_gpu`), so one slow or throttled GPU of several shows.
- CPU: per process, the median of its `cpu_pct` samples (100 = one core); `main` is the
  job's own process (the command gpucheckup started), `others` all its descendants together.
"""

from __future__ import annotations

import numpy as np

from gpucheckup.analysis.distinct import median, percentile, unique

JOB_MEMORY_MB = 256
HEARTBEAT_FLOOR_PCT = 5.0
HEARTBEAT_PULSES = 3
HEARTBEAT_LOW_PCT = 30.0
MEMORY_TENTHS = 10  # memory growth compares the first and last 1/MEMORY_TENTHS of the active samples
THROTTLE_BITS = {0x4: "SW power cap", 0x8: "HW slowdown", 0x20: "SW thermal slowdown", 0x40: "HW thermal slowdown",
                 0x80: "HW power brake"}
THROTTLE_MASK = sum(THROTTLE_BITS)
MAX_POINTS = 2000
MIN_STEADY_SAMPLES = 10


def gpu_series(nvml: dict) -> dict:
    """Per sample time: the job's GPUs' mean utilization and SM clock, summed power and memory, any throttle."""
    t, gpu = nvml["t_s"], nvml["gpu"]
    ids = sorted({int(g) for g in gpu[np.isfinite(gpu)]})
    used = []
    for g in ids:
        m = gpu == g
        util, mem = nvml["util_pct"][m], nvml["mem_used_mb"][m]
        grew = np.nanmax(mem) - np.nanmin(mem) >= JOB_MEMORY_MB if np.isfinite(mem).any() else False
        if np.nanmax(util, initial=0) > 0 or grew:
            used.append(g)
    sel = np.isin(gpu, used) if used else np.isfinite(gpu)
    times, inv = np.unique(t[sel], return_inverse=True)

    def agg(col, how):  # over each tick's finite values, by bincount (a mask per tick is quadratic in ticks)
        v = nvml[col][sel]
        fin = np.isfinite(v)
        n = np.bincount(inv[fin], minlength=len(times))
        if how is np.max:
            out = np.full(len(times), -np.inf)
            np.maximum.at(out, inv[fin], v[fin])
        else:
            out = np.bincount(inv[fin], weights=v[fin], minlength=len(times))
            out = out / np.maximum(n, 1) if how is np.mean else out
        return np.where(n > 0, out, np.nan)

    reasons = nvml["clock_reasons"][sel]
    throttled = np.zeros(len(times), dtype=bool)
    reason_any = np.zeros(len(times), dtype=np.int64)
    ok = (reasons >= 0) & (reasons < 2.0 ** 63)  # a bit mask: NaN, negative or past int64 is not one (unknown)
    bits = np.where(ok, reasons, 0).astype(np.int64)
    np.bitwise_or.at(reason_any, inv, bits)
    throttled = (reason_any & THROTTLE_MASK) != 0
    return {
        "gpus": used or ids,
        "t_s": times,
        "util": agg("util_pct", np.mean),
        "sm_clock": agg("sm_clock_mhz", np.mean),
        "power": agg("power_w", np.sum),
        "mem_used": agg("mem_used_mb", np.sum),
        "mem_total": agg("mem_total_mb", np.sum),
        "reasons": reason_any,
        "reasons_known": np.bincount(inv[ok], minlength=len(times)) > 0,
        "throttled": throttled,
    }


def active_span(util: np.ndarray) -> tuple[int, int]:
    """Indices [first, last] of the samples with utilization > 0, or (0, -1) when there are none."""
    idx = np.flatnonzero(np.nan_to_num(util) > 0)
    return (int(idx[0]), int(idx[-1])) if len(idx) else (0, -1)


def heartbeat(t: np.ndarray, util: np.ndarray) -> dict:
    """Pulses of utilization: count, low share, period, the threshold used."""
    u = np.nan_to_num(util)
    if len(u) == 0:
        return {"heartbeat": False, "pulses": 0, "low_pct": 0.0, "period_s": None, "threshold_pct": None}
    level = max(HEARTBEAT_FLOOR_PCT, float(percentile(u, 90)) / 2)
    high = u > level
    starts = np.flatnonzero(high & ~np.concatenate(([False], high[:-1])))
    low_pct = 100 * float(np.mean(~high))
    period = float(median(np.diff(t[starts]))) if len(starts) >= 2 else None
    return {
        "heartbeat": bool(len(starts) >= HEARTBEAT_PULSES and low_pct >= HEARTBEAT_LOW_PCT),
        "pulses": int(len(starts)),
        "low_pct": low_pct,
        "period_s": period,
        "threshold_pct": level,
    }


def throttling(s: dict, a: int, b: int) -> dict:
    """Share of active samples with a throttle reason, overall and by reason."""
    r = s["reasons"][a:b + 1]
    known = s["reasons_known"][a:b + 1]
    n = int(known.sum())
    if n == 0:
        return {"known": False, "throttled_pct": None, "by_reason_pct": {}}
    r = r[known]
    by = {name: 100 * float(np.mean((r & bit) != 0)) for bit, name in THROTTLE_BITS.items() if ((r & bit) != 0).any()}
    return {"known": True, "throttled_pct": 100 * float(np.mean((r & THROTTLE_MASK) != 0)), "by_reason_pct": by}


def memory_growth(mem: np.ndarray, total: np.ndarray) -> dict:
    """Used memory at the start and end of the active period, and the growth between them."""
    m = mem[np.isfinite(mem)]
    if len(m) < 10:
        return {"start_mb": None, "end_mb": None, "growth_mb": None, "growth_pct_of_total": None, "peak_mb": None}
    k = max(len(m) // MEMORY_TENTHS, 1)
    start, end = float(median(m[:k])), float(median(m[-k:]))
    tot = float(np.nanmax(total)) if np.isfinite(total).any() else None
    return {"start_mb": start, "end_mb": end, "growth_mb": end - start,
            "growth_pct_of_total": 100 * (end - start) / tot if tot else None, "peak_mb": float(m.max()),
            "total_mb": tot}


def since(nvml: dict, start_s: float | None, end_s: float | None = None) -> tuple[dict, bool]:
    """The NVML rows in [start_s, end_s], when at least MIN_STEADY_SAMPLES sample times remain; else all rows."""
    if start_s is None:
        return nvml, False
    keep = (nvml["t_s"] >= start_s) & (nvml["t_s"] <= (end_s if end_s is not None else np.inf))
    if len(unique(nvml["t_s"][keep])) < MIN_STEADY_SAMPLES:
        return nvml, False
    return {k: (v[keep] if isinstance(v, np.ndarray) else [x for x, m in zip(v, keep) if m]) for k, v in nvml.items()}, True


def nvml_summary(nvml: dict, start_s: float | None = None, end_s: float | None = None) -> dict:
    """The run's NVML figures (see the module docstring), over the steady state [start_s, end_s] when given."""
    nvml, steady = since(nvml, start_s, end_s)
    out = _summary(nvml)
    out["window"] = "steady state (after warm-up)" if steady else "whole run"
    gpus = out["gpus"]
    if len(gpus) > 1:
        out["per_gpu"] = [{"gpu": g, **{k: v for k, v in _summary(_one_gpu(nvml, g)).items()
                                        if k in ("util_mean_pct", "throttle", "memory", "sm_clock_median_mhz")}}
                          for g in gpus]
    return out


def _one_gpu(nvml: dict, g: int) -> dict:
    m = nvml["gpu"] == g
    return {k: (v[m] if isinstance(v, np.ndarray) else [x for x, k2 in zip(v, m) if k2]) for k, v in nvml.items()}


def _summary(nvml: dict) -> dict:
    s = gpu_series(nvml)
    a, b = active_span(s["util"])
    out = {"samples": int(len(s["t_s"])), "gpus": s["gpus"], "active_s": 0.0, "util_mean_pct": None,
           "heartbeat": heartbeat(np.zeros(0), np.zeros(0)), "throttle": {"known": False}, "memory": {},
           "power_mean_w": None, "sm_clock_median_mhz": None}
    if b < a:
        out["note"] = "the job's GPUs never showed utilization above 0"
        return out
    t, u = s["t_s"][a:b + 1], s["util"][a:b + 1]
    out.update({
        "active_s": float(t[-1] - t[0]),
        "active_from_epoch_s": float(t[0]),
        "util_mean_pct": float(np.nanmean(u)),
        "heartbeat": heartbeat(t, u),
        "throttle": throttling(s, a, b),
        "memory": memory_growth(s["mem_used"][a:b + 1], s["mem_total"][a:b + 1]),
        "power_mean_w": _nanmean(s["power"][a:b + 1]),
        "sm_clock_median_mhz": _nanmedian(s["sm_clock"][a:b + 1]),
    })
    return out


def nvml_plot_series(nvml: dict, t0: float, max_points: int = MAX_POINTS) -> dict:
    """The report's `nvml` shape: seconds since t0, utilization, power, SM clock, throttled (0/1).
    Above max_points samples, equal time buckets: means, and throttled when any sample was."""
    s = gpu_series(nvml)
    t = s["t_s"] - t0
    cols = [s["util"], s["power"], s["sm_clock"], s["throttled"].astype(float)]
    if len(t) > max_points:
        edges = np.linspace(0, len(t), max_points + 1).astype(int)
        pairs = list(zip(edges[:-1], edges[1:]))
        t = np.array([t[i:j].mean() for i, j in pairs])
        cols = [np.array([_bucket_mean(c[i:j]) if k < 3 else float(c[i:j].max()) for i, j in pairs])
                for k, c in enumerate(cols)]
    return {
        "t_s": [round(float(x), 3) for x in t],
        "gpu_util": _list(cols[0]),
        "power_w": _list(cols[1]),
        "sm_clock_mhz": _list(cols[2]),
        "throttled": [int(x) if np.isfinite(x) else 0 for x in cols[3]],
    }


def cpu_summary(cpu: dict, root_pid: int | None) -> dict:
    """Median CPU use of the job's own process and of its descendants (DataLoader workers, ranks)."""
    pid = cpu["pid"]
    if len(pid) == 0:
        return {"samples": 0}
    root = root_pid if root_pid is not None else int(pid[0])
    t, pct = cpu["t_s"], cpu["cpu_pct"]
    main = (pid == root) & np.isfinite(pct)
    others = (pid != root) & np.isfinite(pct)
    per_tick = {}
    for ti, p in zip(t[others], pct[others]):
        per_tick[ti] = per_tick.get(ti, 0.0) + p
    procs_per_tick = np.unique(t, return_counts=True)[1]
    return {
        "samples": int(len(unique(t))),
        "main_pid": root,
        "main_median_pct": _nanmedian(pct[main]),
        "others_median_pct": float(median(list(per_tick.values()))) if per_tick else 0.0,
        "max_processes": int(procs_per_tick.max()),
    }


def _nanmean(x) -> float | None:
    x = np.asarray(x, dtype=float)
    return float(np.nanmean(x)) if np.isfinite(x).any() else None


def _bucket_mean(x) -> float:
    return float(np.nanmean(x)) if np.isfinite(x).any() else float("nan")


def _nanmedian(x) -> float | None:
    x = np.asarray(x, dtype=float)
    return float(np.nanmedian(x)) if np.isfinite(x).any() else None


def _list(x: np.ndarray) -> list:
    return [round(float(v), 2) if v is not None and np.isfinite(v) else None for v in x]

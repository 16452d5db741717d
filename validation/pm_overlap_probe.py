"""PM sampling and kernel records over the same steps: does PM's busy share match the kernels', sample by sample?
One GPU, one process (issue 26, docs/validation.md 6k).

  python3 validation/pm_overlap_probe.py OUT.json

1. Metric sets: the largest of SETS CUPTI configures in one pass (every refusal kept).
2. Overlap: on four loops of known shape (pm_sampling_probe.loops, plus `mixed`: the launch loop with one 4096^3 bf16
   GEMM a step), one window with PM sampling started first and the agent's CuptiWindow inside it over the same STEPS
   steps (CUPTI not detached). Per PM sample [start, end): the kernels' union inside it as a share of its length
   against each PM metric's active over elapsed cycles; per window the shares over the whole bracket, the mean
   absolute difference per sample and the correlation; the first samples as decoded.
3. Launch counters: the chip's PM base metrics (all names kept) whose names speak of launches, CTAs or grids, each
   tried beside the cycle pair over LAUNCHES one-block kernels (torch.Tensor.add_ on a 1-element tensor): its sum
   against the launches made.
4. Order: PM started, a CuptiWindow opened and closed *with* its detach (cuptiFinalize) inside the PM window, steps
   after it, PM stopped: are there samples after the detach, and does PM enable again afterwards?
Samples and records share CUPTI's clock (ns since the epoch); every difference is taken from the bracket's start, as
int64, before any float. Writes OUT.json; prints one line per stage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pm_sampling_probe import loaded_libs, loops, stage
from pm_window import (
    HW_BUFFER,
    INTERVAL_NS,
    MAX_SAMPLES,
    base_metrics,
    fit_host_struct,
    preload_nvperf,
)

STEPS = int(os.environ.get("OVERLAP_STEPS", "60"))
SETS = (
    ("gr__cycles_active.avg", "gr__cycles_elapsed.max", "sm__cycles_active.max", "sm__cycles_active.avg",
     "sm__cycles_elapsed.max", "gr__compute_cycles_active.avg"),
    ("gr__cycles_active.avg", "gr__cycles_elapsed.max", "sm__cycles_active.max", "sm__cycles_elapsed.max"),
    ("gr__cycles_active.avg", "gr__cycles_elapsed.max"),
)
ELAPSED = {"gr": "gr__cycles_elapsed.max", "sm": "sm__cycles_elapsed.max"}


def configure(c) -> tuple[list[str], dict]:
    """The largest of SETS CUPTI configures; (metrics, refusals)."""
    from cupti import pm_sampling

    refused = {}
    for metrics in SETS:
        try:
            c.configure(metrics=list(metrics), hardware_buffer_size=HW_BUFFER, sampling_interval=INTERVAL_NS,
                        trigger_mode=pm_sampling.TriggerMode.GPU_TIME_INTERVAL)
            return list(metrics), refused
        except Exception as e:  # noqa: BLE001 - the next, smaller set
            refused[",".join(metrics)] = f"{type(e).__name__}: {e}"[:300]
    raise RuntimeError(f"no metric set configured: {refused}")


def busy_before(starts: np.ndarray, ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Busy time before each t, for disjoint sorted intervals [starts, ends) (ns, int64)."""
    cum = np.concatenate(([0], np.cumsum(ends - starts)))
    i = np.searchsorted(starts, t, side="right")  # intervals starting at or before t
    inside = np.clip(t - starts[np.maximum(i - 1, 0)], 0, None)
    part = np.where(i > 0, np.minimum(inside, (ends - starts)[np.maximum(i - 1, 0)]), 0)
    return cum[np.maximum(i - 1, 0)] * (i > 0) + part


def union_ns(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals [s, e) as disjoint sorted intervals (int64)."""
    o = np.argsort(s, kind="stable")
    s, e = s[o], e[o]
    reach = np.maximum.accumulate(e)
    new = np.ones(len(s), bool)
    new[1:] = s[1:] > reach[:-1]
    idx = np.flatnonzero(new)
    return s[idx], reach[np.append(idx[1:] - 1, len(s) - 1)]


def compare(series: list[tuple], metrics: list[str], kern: list, c0: int, c1: int) -> dict:
    """Per-sample and whole-bracket shares: kernels' union against each PM metric's active over elapsed cycles.
    series: (start_ns, end_ns, *metric values) per PM sample; kern: CuptiWindow's kernel records; [c0, c1] the bracket
    (CUPTI's clock)."""
    samples = series
    ss = np.array([s[0] for s in series], dtype=np.int64) - c0
    se = np.array([s[1] for s in series], dtype=np.int64) - c0
    vals = np.array([s[2:] for s in series], dtype=np.float64).reshape(len(series), len(metrics))
    ks = np.array([r[1] for r in kern], dtype=np.int64) - c0
    ke = np.array([r[2] for r in kern], dtype=np.int64) - c0
    us, ue = union_ns(ks, ke)
    span = c1 - c0
    inb = (ss >= 0) & (se <= span)  # samples inside the bracket
    dur = (se - ss).astype(np.float64)
    kfrac = (busy_before(us, ue, se) - busy_before(us, ue, ss)) / np.where(dur > 0, dur, 1)
    out = {"samples": len(samples), "in_bracket": int(inb.sum()), "bracket_ms": round(span / 1e6, 3),
           "sample_us_median": round(float(np.median(dur[inb])) / 1e3, 2) if inb.any() else None,
           "kernels": len(kern),
           "kernel_busy_pct": round(100.0 * float((np.minimum(ue, span) - np.maximum(us, 0)).clip(0).sum()) / span, 2),
           "kernel_busy_in_samples_pct": round(100.0 * float((kfrac[inb] * dur[inb]).sum() / dur[inb].sum()), 2)
           if inb.any() else None,
           "first": [[int(ss[i]), int(se[i]), *[round(float(v), 1) for v in vals[i]]] for i in range(min(3, len(ss)))],
           "metrics": {}}
    for j, name in enumerate(metrics):
        el = ELAPSED.get(name.split("__")[0])
        if name == el or el not in metrics:
            continue
        num, den = vals[inb, j], vals[inb, metrics.index(el)]
        share = num / np.where(den > 0, den, 1)
        fig = {"busy_pct": round(100.0 * float(num.sum() / den.sum()), 2) if den.sum() else None,
               "mean_abs_diff_pts": round(100.0 * float(np.mean(np.abs(share - kfrac[inb]))), 2)}
        if share.std() > 0 and kfrac[inb].std() > 0:
            fig["corr"] = round(float(np.corrcoef(share, kfrac[inb])[0, 1]), 3)
        out["metrics"][name] = fig
    return out


LAUNCHES = 2000
WORDS = ("launch", "cta", "grid", "kernel", "dispatch")


def launch_counters(torch, names: list[str]) -> dict:
    """Each launch-like base metric (as `.sum`) beside the cycle pair over LAUNCHES tiny kernels: its sum. A fresh
    collector per metric: reconfiguring a collector that has sampled failed (ERROR_UNKNOWN, H200, 2026-12-03)."""
    from cupti import pm_sampling

    x = torch.zeros(1, device="cuda")
    out = {}
    cands = [n for n in names if "." not in n and any(w in n.lower() for w in WORDS)][:12]
    for name in cands:
        metric = name + ".sum"
        print(f"launch counter: {metric}", flush=True)
        c = pm_sampling.Collector(device_index=0)
        c.enable()
        try:
            c.configure(metrics=["gr__cycles_active.avg", "gr__cycles_elapsed.max", metric],
                        hardware_buffer_size=HW_BUFFER, sampling_interval=INTERVAL_NS,
                        trigger_mode=pm_sampling.TriggerMode.GPU_TIME_INTERVAL)
        except Exception as e:  # noqa: BLE001 - the next candidate
            out[metric] = f"{type(e).__name__}: {e}"[:160]
            c.disable()
            continue
        torch.cuda.synchronize()
        c.start()
        for _ in range(LAUNCHES):
            x.add_(1.0)
        torch.cuda.synchronize()
        c.stop()
        try:
            samples = list(c.decode(max_samples=MAX_SAMPLES))
            out[metric] = {"sum": round(sum(s.metric_values[2] for s in samples), 1), "samples": len(samples),
                           "launches": LAUNCHES}
        finally:
            c.disable()
    return out


def overlap(c, metrics, cw, cu, torch, step, n: int) -> dict:
    """One window: PM started, kernel records over the same n steps (CUPTI left attached), PM stopped; compared."""
    w = cw.CuptiWindow(torch, cu)
    w._detach = lambda: None  # keep CUPTI attached: PM would not initialize after a detach
    torch.cuda.synchronize()
    c.start()
    w.start()
    c0 = cu.get_timestamp()
    for _ in range(n):
        step()
    torch.cuda.synchronize()
    c1 = cu.get_timestamp()
    w.stop()
    c.stop()
    series = [(x.start_timestamp, x.end_timestamp, *x.metric_values) for x in c.decode(max_samples=MAX_SAMPLES)]
    return compare(series, metrics, [r for r in w.records if r[0] == "kernel"], c0, c1)


def detach_inside(c, cw, cu, torch, step, n: int) -> dict:
    """PM running across a CuptiWindow that detaches CUPTI: samples after the detach? PM enabled again after?"""
    torch.cuda.synchronize()
    c.start()
    w = cw.CuptiWindow(torch, cu)
    w.start()
    for _ in range(n):
        step()
    w.stop()  # synchronizes, flushes, detaches (cuptiFinalize)
    t_detach = time.time_ns()
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    torch.cuda.synchronize()
    after_ms = (time.perf_counter() - t0) * 1e3
    out = {"detached": w.detached, "steps_after_ms": round(after_ms, 2)}
    try:
        c.stop()
        data = c.decode(max_samples=MAX_SAMPLES)
        ts = [(data[i].start_timestamp, data[i].end_timestamp) for i in range(len(data))] if len(data) else []
        out["samples"] = len(ts)
        if ts:
            out["span_ms"] = round((ts[-1][1] - ts[1][0]) / 1e6, 2) if len(ts) > 1 else None
            out["wall_since_detach_ms"] = round((time.time_ns() - t_detach) / 1e6, 2)
    except Exception as e:  # noqa: BLE001 - what the detach did to the running collector
        out["stop_or_decode"] = f"{type(e).__name__}: {e}"[:300]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    a = ap.parse_args()
    import torch

    from gpucheckup.capture.agent import cupti_window as cw

    res: dict = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0), "nvperf": preload_nvperf()}
    cu = cw.load_cupti()
    from cupti import pm_sampling

    c = pm_sampling.Collector(device_index=0)
    c.enable()
    res["chip"] = c._chip_name
    res["host_struct"] = fit_host_struct(c._chip_name)
    metrics, res["refused"] = configure(c)
    res["metrics"] = metrics
    print(f"metrics: {metrics}; refused: {list(res['refused'])}", flush=True)
    steps = loops(torch)
    mlp_step, a4 = steps["launch"], torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)

    def mixed():
        mlp_step()
        torch.mm(a4, a4)

    steps["mixed"] = mixed
    for step in steps.values():
        for _ in range(10):
            step()
    def save():
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)

    for name, step in steps.items():
        stage(res, f"overlap_{name}", lambda step=step: overlap(c, metrics, cw, cu, torch, step, STEPS))
    save()  # after every stage from here: a crash in CUPTI keeps what came before
    names: list[str] = []
    try:
        names = base_metrics(c._chip_name)
    except Exception as e:  # noqa: BLE001
        res["base_metrics_error"] = repr(e)
    res["base_metrics"] = names
    save()
    c.disable()
    stage(res, "launch_counters", lambda: launch_counters(torch, names))
    save()
    c = pm_sampling.Collector(device_index=0)
    c.enable()
    configure(c)
    stage(res, "detach_inside", lambda: detach_inside(c, cw, cu, torch, steps["launch"], 30))
    try:
        c.disable()
    except Exception as e:  # noqa: BLE001
        res["disable"] = repr(e)

    def enable_again():
        c2 = pm_sampling.Collector(device_index=0)
        c2.enable()
        c2.disable()
        return {"enabled": True}

    stage(res, "enable_after_detach", enable_again)
    res["libs"] = loaded_libs()
    save()


if __name__ == "__main__":
    main()

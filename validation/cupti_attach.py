"""Which part of the CUPTI light window costs a launch-bound job its host time, configuration by configuration.

validation/light_paired.py (2026-12-01) found the shipped window costing the launch-bound MLP +31% of its step in one
process (about 7 us per launch), where 6c's paired windows had found +9.7% and about 1 us per tiny op: 6c left CUPTI
attached between two of every three windows, the shipped window detaches it (cuptiFinalize) at every stop, so each
window attaches CUPTI afresh, as the one window of a job always does. Each configuration runs in its own process
(CUPTI's state must not leak), MLP steps and three single ops, in phases: plain, window, plain, window, ...
Configurations:
  fresh     the window as shipped on 2026-12-01's first calls (CuptiWindow with synchronizations: kernels, copies,
            memsets, synchronizations; detached at stop)
  keep      the same, never detached: the first window attaches CUPTI, the later ones re-enable an attached CUPTI
  kern      kernels only (CONCURRENT_KERNEL), detached at stop
  prealloc  fresh, with CUPTI's device buffers and profiling semaphore pools pre-allocated at enable
            (ATTR_*_PRE_ALLOCATE)
  kineto    torch.profiler with CUDA activities only (Kineto's own CUPTI use), for reference
Per phase: the MLP's per-step times (steps between two synchronizes; a window's first step, its warm-up, not timed),
then host us per op of `x.add_(1)`, of a 64x512x512 `torch.mm` (cuBLAS) and of `layer_norm`, each timed over N_OP ops.
Usage: python3 validation/cupti_attach.py OUT.json [--configs fresh,keep,...] [--windows 4]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

CONFIGS = ("fresh", "keep", "kern", "prealloc", "kineto")
PLAIN_STEPS, WINDOW_STEPS, N_OP = 40, 100, 300


def set_attr(cupti, name: str, value: int) -> str:
    """Set one size_t activity attribute; what it was and is now."""
    import ctypes

    attr = getattr(cupti.ActivityAttribute, name)
    size, old = ctypes.c_size_t(8), ctypes.c_uint64(0)
    cupti.activity_get_attribute(attr, ctypes.addressof(size), ctypes.addressof(old))
    new = ctypes.c_uint64(value)
    cupti.activity_set_attribute(attr, ctypes.addressof(size), ctypes.addressof(new))
    now = ctypes.c_uint64(0)
    cupti.activity_get_attribute(attr, ctypes.addressof(size), ctypes.addressof(now))
    return f"{name}: {old.value} -> {now.value}"


def child(config: str, windows: int) -> dict:
    import torch

    from cupti_cost import jobs

    from gpucheckup.capture.agent import cupti_window as cw

    step = jobs(torch)["mlp"]
    dev = torch.device("cuda")
    x = torch.zeros(256, device=dev)
    a, b = torch.randn(64, 512, device=dev), torch.randn(512, 512, device=dev)
    h = torch.randn(64, 512, device=dev)
    ops = {"add": lambda: x.add_(1.0), "mm": lambda: torch.mm(a, b),
           "ln": lambda: torch.nn.functional.layer_norm(h, (512,))}
    log: list[str] = []
    cupti = None
    if config != "kineto":
        cupti = cw.load_cupti()
        if config == "kern":
            cw.ACTIVITIES = ("CONCURRENT_KERNEL",)
        if config == "keep":
            cw.CuptiWindow._detach = lambda self: None
    for _ in range(10):
        step()

    def per_step(n, win):
        torch.cuda.synchronize()
        out, t = [], time.perf_counter()
        for _ in range(n):
            step()
            if win is not None:
                win.step()
            now = time.perf_counter()
            out.append((now - t) * 1000.0)
            t = now
        torch.cuda.synchronize()
        return out

    def op_us():
        fig = {}
        for name, fn in ops.items():
            for _ in range(20):
                fn()
            torch.cuda.synchronize()
            t0 = time.perf_counter_ns()
            for _ in range(N_OP):
                fn()
            fig[name] = (time.perf_counter_ns() - t0) / N_OP / 1000.0
            torch.cuda.synchronize()
        return fig

    phases = []
    for i in range(windows):
        phases.append({"kind": "plain", "steps_ms": per_step(PLAIN_STEPS, None), "op_us": op_us()})
        win = None
        if config == "kineto":
            from torch.profiler import ProfilerActivity, profile

            prof = profile(activities=[ProfilerActivity.CUDA])
            prof.start()
        else:
            if config == "prealloc":
                for name, v in (("ATTR_DEVICE_BUFFER_PRE_ALLOCATE_VALUE", 4),
                                ("ATTR_PROFILING_SEMAPHORE_PRE_ALLOCATE_VALUE", 4)):
                    try:
                        log.append(set_attr(cupti, name, v))
                    except Exception as e:  # noqa: BLE001 - an attribute this CUPTI refuses: say so
                        log.append(f"{name}: {type(e).__name__}: {e}")
            win = cw.CuptiWindow(torch, cupti, log.append, syncs=True)
            win.host.on()
            win.start()
        step()
        if win is not None:
            win.step()
        ms = per_step(WINDOW_STEPS, win)
        fig = op_us()
        if config == "kineto":
            prof.stop()
        else:
            win.stop()
            win.host.off()
        phases.append({"kind": "window", "steps_ms": ms, "op_us": fig,
                       "records": None if win is None else win.summary()["records"]})
    phases.append({"kind": "plain", "steps_ms": per_step(PLAIN_STEPS, None), "op_us": op_us()})
    return {"config": config, "phases": phases, "log": log}


def summarize(r: dict) -> dict:
    """Per window: its median step (and of steps 1-10, 11-40, 41-100) and op costs against the mean of its two plain
    neighbours."""
    ph = r["phases"]
    out = []
    for i in range(1, len(ph) - 1, 2):
        w, p0, p1 = ph[i], ph[i - 1], ph[i + 1]
        plain = (statistics.median(p0["steps_ms"]) + statistics.median(p1["steps_ms"])) / 2
        s = w["steps_ms"]
        row = {"window": i // 2 + 1, "plain_ms": round(plain, 3),
               "pct": round(100 * (statistics.median(s) / plain - 1), 1),
               "pct_1_10": round(100 * (statistics.median(s[:10]) / plain - 1), 1),
               "pct_11_40": round(100 * (statistics.median(s[10:40]) / plain - 1), 1),
               "pct_41_100": round(100 * (statistics.median(s[40:]) / plain - 1), 1)}
        for op in w["op_us"]:
            row[f"{op}_us_plus"] = round(w["op_us"][op] - (p0["op_us"][op] + p1["op_us"][op]) / 2, 2)
            row[f"{op}_us_plain"] = round((p0["op_us"][op] + p1["op_us"][op]) / 2, 2)
        out.append(row)
    return {"config": r["config"], "windows": out, "log": r["log"][:6]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--configs", default=",".join(CONFIGS))
    p.add_argument("--windows", type=int, default=4)
    p.add_argument("--child")
    a = p.parse_args()
    if a.child:
        with open(a.out, "w") as f:
            json.dump(child(a.child, a.windows), f)
        return
    results = []
    for config in a.configs.split(","):
        part = f"{a.out}.{config}"
        proc = subprocess.run([sys.executable, __file__, part, "--child", config, "--windows", str(a.windows)],
                              capture_output=True, text=True, timeout=200)
        try:
            with open(part) as f:
                r = json.load(f)
            s = summarize(r)
            results.append({"raw": r, "summary": s})
            print(config, json.dumps(s["windows"]), s["log"])
        except (OSError, ValueError) as e:
            results.append({"config": config, "error": f"{type(e).__name__}: {e}", "stderr": proc.stderr[-2000:]})
            print(config, "FAILED", proc.stderr[-600:])
        with open(a.out, "w") as f:
            json.dump(results, f)


if __name__ == "__main__":
    main()

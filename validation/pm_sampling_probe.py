"""Can CUPTI's PM sampling stand in for kernel records in the light window? One GPU, one process (issue 26, 6j).

  python3 validation/pm_sampling_probe.py OUT.json [--cycles 12]

1. Facts: torch, the GPU, cupti-python, the libcupti and nvperf libraries loaded, the chip's name, the metric set
   PM sampling accepted (pm_window.METRIC_SETS) and the chip's base metrics named `*cycles_active*`/`*cycles_elapsed*`.
2. Busy share, PM counters against kernel records, on three loops of known shape (STEPS steps each, synchronized):
   `launch` a 24-layer 256-wide MLP, batch 64, foreach Adam (the GPU starved between small kernels); `gpu` bf16
   8192^3 GEMMs (the GPU never idle); `sleep` the launch loop with SLEEP_S of host sleep after each step (idle known
   from the host). Kernel busy = the union of the window's kernel records over its CUPTI-clock bracket (agent's
   CuptiWindow); PM busy = active over elapsed cycles of its samples (pm_window.PmWindow).
3. Cost on the launch loop: cycles of phases plain / pm (rotated), then plain / cupti, PHASE_STEPS steps each, the
   block of steps synchronized at both ends; each phase's change against its cycle's plain phase (light_paired.summary).
   PM first and apart: after a CUPTI window detaches (cuptiFinalize) CUPTI's profiler would not initialize again on
   the H200 (2026-12-02); the last stage checks that again after the kernel-record windows.
Every stage that fails writes its error and the next one runs. Writes OUT.json; prints one line per stage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from light_paired import summary
from pm_window import PmWindow, base_metrics, preload_nvperf

from gpucheckup.analysis.intervals import clip, total, union

STEPS = 60
PHASE_STEPS = 40
SLEEP_S = 0.004


def loaded_libs() -> list[str]:
    """The CUPTI and nvperf libraries mapped into this process."""
    with open("/proc/self/maps") as f:
        return sorted({line.split()[-1] for line in f if "libcupti" in line or "libnvperf" in line})


def loops(torch):
    """name -> step function, for the three loops of known shape."""
    dev = "cuda"
    mlp = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(24)]).to(dev)
    opt = torch.optim.Adam(mlp.parameters(), foreach=True)
    x = torch.randn(64, 256, device=dev)
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)

    def launch():
        opt.zero_grad(set_to_none=True)
        mlp(x).square().mean().backward()
        opt.step()

    def gpu():
        for _ in range(4):
            torch.mm(a, a)

    def sleep():
        launch()
        torch.cuda.synchronize()
        time.sleep(SLEEP_S)

    return {"launch": launch, "gpu": gpu, "sleep": sleep}


def kernel_busy(cu, cw, torch, step, n: int) -> dict:
    """The union of kernel records over the window's CUPTI-clock bracket, % (the agent's CuptiWindow)."""
    w = cw.CuptiWindow(torch, cu)
    torch.cuda.synchronize()
    w.start()
    t0 = cu.get_timestamp()
    for _ in range(n):
        step()
    torch.cuda.synchronize()
    t1 = cu.get_timestamp()
    w.stop()
    kern = [r for r in w.records if r[0] == "kernel"]
    # from the bracket's start: CUPTI's ns since the epoch exceed float64's exact integers
    busy = total(clip(union([r[1] - t0 for r in kern], [r[2] - t0 for r in kern]), 0, t1 - t0))
    return {"kernels": len(kern), "span_ms": round((t1 - t0) / 1e6, 3),
            "busy_pct": round(100.0 * busy / (t1 - t0), 2), "detached": w.detached}


def pm_busy(pm: PmWindow, torch, step, n: int, cu=None) -> dict:
    """PM sampling's busy share over n steps (enabled and torn down around them)."""
    pm.enable()
    try:
        torch.cuda.synchronize()
        c0 = cu.get_timestamp() if cu else None
        pm.start()
        for _ in range(n):
            step()
        torch.cuda.synchronize()
        pm.stop()
        c1 = cu.get_timestamp() if cu else None
        out = pm.collect()
        out["cupti_bracket_ns"] = [c0, c1]
        return out
    finally:
        pm.disable()


def timed_block(torch, step, n: int) -> float:
    """ms per step over n steps, synchronized at both ends."""
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1000.0


def cost_cycles(torch, cu, cw, pm: PmWindow, step, cycles: int, modes: tuple[str, ...]) -> dict:
    """Phases of modes (plain first), rotated each cycle (light_paired's cycles); each against its cycle's plain."""
    rows = []
    for c in range(cycles):
        k = c % len(modes)
        row = []
        for mode in modes[k:] + modes[:k]:
            fig = {"mode": mode}
            if mode == "pm":
                pm.enable()
                pm.start()
            elif mode == "cupti":
                w = cw.CuptiWindow(torch, cu)
                w.start()
            step()  # the untimed warm-up step after start(), as the light window's (plain too)
            fig["block_ms"] = fig["median_ms"] = timed_block(torch, step, PHASE_STEPS)  # the block only: no step ends
            if mode == "pm":
                pm.stop()
                fig["pm_samples"] = pm.collect()["samples"]
                pm.disable()
            elif mode == "cupti":
                w.stop()
            row.append(fig)
        rows.append(row)
    return {"cycles": rows, "summary": summary(rows, modes)}


def stage(res: dict, name: str, fn) -> None:
    """Run one stage; its result or its error under res[name]; one line printed."""
    t = time.time()
    try:
        res[name] = fn()
    except BaseException as e:  # noqa: BLE001 - the next stage still runs
        res[name] = {"error": f"{type(e).__name__}: {e}"[:500], "trace": traceback.format_exc()[-2000:]}
    print(f"{name} ({time.time() - t:.1f} s): {json.dumps(res[name])[:600]}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--cycles", type=int, default=12)
    a = ap.parse_args()
    import torch

    from gpucheckup.capture.agent import cupti_window as cw

    res: dict = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0)}
    res["nvperf_preloaded"] = preload_nvperf()
    cu = cw.load_cupti()  # torch's libcupti first (cupti_window.preload_libcupti), then cupti-python's bindings
    try:
        from importlib.metadata import version

        res["cupti_python"] = version("cupti-python")
    except Exception as e:  # noqa: BLE001
        res["cupti_python"] = repr(e)
    pm = PmWindow(log=print)

    def facts():
        chip = pm.enable()
        pm.disable()
        out = {"chip": chip, "metric_set": list(pm.metrics), "refused": pm.tried, "host_struct": pm.host_struct,
               "libs": loaded_libs()}
        names = base_metrics(chip)
        out["base_metrics"] = len(names)
        out["cycles_metrics"] = sorted(n for n in names if "cycles_active" in n or "cycles_elapsed" in n)[:60]
        return out

    def pm_after_detach():
        pm.enable()
        pm.disable()
        return {"enabled": True}

    stage(res, "facts", facts)
    steps = loops(torch)
    for step in steps.values():
        for _ in range(10):
            step()
    for name, step in steps.items():  # every PM stage before the first detaching CUPTI window
        stage(res, f"busy_{name}_pm", lambda step=step: pm_busy(pm, torch, step, STEPS, cu))
    stage(res, "cost_launch_pm", lambda: cost_cycles(torch, cu, cw, pm, steps["launch"], a.cycles, ("plain", "pm")))
    for name, step in steps.items():
        stage(res, f"busy_{name}_kernels", lambda step=step: kernel_busy(cu, cw, torch, step, STEPS))
    stage(res, "cost_launch_cupti",
          lambda: cost_cycles(torch, cu, cw, pm, steps["launch"], a.cycles, ("plain", "cupti")))
    stage(res, "pm_after_detach", pm_after_detach)
    res["libs_after"] = loaded_libs()
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()

"""Does a CUPTI light window leave a cost behind after `cupti.finalize()`? Fresh processes, each timed pristine first.

docs/validation.md 6e: whole runs read the window at +13 to +20% where the paired cycles of light_paired.py read +3 to
+9%, and the steps after the window ran slower than those before it. If detaching leaves part of the cost behind, the
paired cycles' plain phases (each after an earlier window's detach) carry it too. Here each process (a fresh one, so
CUPTI was never loaded before its first phase) runs the launch-bound MLP through the phases
  pristine (cupti-python not even imported), window 1 (the agent's CuptiWindow as shipped, detached at stop),
  after 1, window 2, after 2
each STEPS steps between two synchronizes (a window's warm-up step untimed), and reports each phase's ms per step.
Per process: after 1 / pristine (the residue), window 1 / pristine (the first window's cost against a process that
never had CUPTI), window 2 / after 1 (what the paired cycles measure). Medians over the processes with quartiles;
processes alternate with a control run that loads nothing and times the same five phases (the host's own drift
across the phases).
Usage (device machine; PYTHONPATH with gpucheckup's src and cupti-python):
  python3 validation/cupti_residue.py OUT.json [--processes 12] [--deadline-s 240]
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

PHASES = ("pristine", "window1", "after1", "window2", "after2")
STEPS = 60


def child(control: bool) -> dict:
    import torch

    from cupti_cost import jobs

    step = jobs(torch)["mlp"]
    for _ in range(15):
        step()

    def timed(win=None) -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(STEPS):
            step()
            if win is not None:
                win.step()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / STEPS * 1000.0

    out = {"control": control, "ms": {}}
    out["ms"]["pristine"] = timed()
    for i in (1, 2):
        if control:
            step()
            out["ms"][f"window{i}"] = timed()
        else:
            from gpucheckup.capture.agent import cupti_window as cw

            win = cw.CuptiWindow(torch, cw.load_cupti())
            win.host.on()
            win.start()
            step()
            win.step()
            out["ms"][f"window{i}"] = timed(win)
            win.stop()
            win.host.off()
            out[f"detached{i}"] = win.detached
        out["ms"][f"after{i}"] = timed()
    return out


def q(v: list[float]) -> dict | None:
    v = sorted(v)
    return {"median": round(statistics.median(v), 2), "q1": round(v[len(v) // 4], 2),
            "q3": round(v[(3 * len(v)) // 4], 2), "n": len(v)} if v else None


def summary(runs: list[dict]) -> dict:
    out = {}
    for control in (False, True):
        ms = [r["ms"] for r in runs if r["control"] is control]
        out["control" if control else "cupti"] = {
            "after1_vs_pristine_pct": q([100 * (m["after1"] / m["pristine"] - 1) for m in ms]),
            "window1_vs_pristine_pct": q([100 * (m["window1"] / m["pristine"] - 1) for m in ms]),
            "window2_vs_after1_pct": q([100 * (m["window2"] / m["after1"] - 1) for m in ms]),
            "after2_vs_pristine_pct": q([100 * (m["after2"] / m["pristine"] - 1) for m in ms])}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--processes", type=int, default=12)
    p.add_argument("--deadline-s", type=float, default=240.0)
    p.add_argument("--child", choices=("cupti", "control"))
    a = p.parse_args()
    if a.child:
        with open(a.out, "w") as f:
            json.dump(child(a.child == "control"), f)
        return
    runs, errors = [], []
    end = time.monotonic() + a.deadline_s
    for i in range(a.processes):
        if time.monotonic() > end:
            break
        kind = "control" if i % 2 else "cupti"
        part = f"{a.out}.{i}"
        proc = subprocess.run([sys.executable, __file__, part, "--child", kind], capture_output=True, text=True,
                              timeout=max(end - time.monotonic(), 30))
        try:
            with open(part) as f:
                runs.append(json.load(f))
        except (OSError, ValueError) as e:
            errors.append(f"process {i} ({kind}): {type(e).__name__}: {proc.stderr[-300:]}")
        with open(a.out, "w") as f:
            json.dump({"runs": runs, "errors": errors, "summary": summary(runs)}, f)
    print(json.dumps(summary(runs), indent=1), errors)


if __name__ == "__main__":
    main()

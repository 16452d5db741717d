"""Predicted against measured savings on a GPU: the table of issue 10 (run it on the H200).

For every example pathology (src/gpucheckup/examples/): capture its baseline with `gpucheckup run`
(agent, profiled window after warm-up, steps.csv for the unprofiled step time), predict each fix's
saving from the trace (analysis/whatif.py, calibrated on the unprofiled step), then apply the fix
with its flag and measure it with `gpucheckup ab` (separate processes, interleaved, 3 rounds, 20
warm-up steps dropped, 100 measured). Writes OUT/whatif_h200.json and OUT/whatif_h200.md: per fix
the predicted and measured saving and their ratio, per example whether the predicted order of the
fixes matches the measured one, and whether the check-up's verdict names the bottleneck whose fix
saved the most.

    python validation/whatif_h200.py OUT_DIR [--only launch,sync] [--rounds 3]

Targets (issue 10): configuration fixes within 25% of the measured saving, code changes within 50%.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from gpucheckup.analysis import replay, whatif
from gpucheckup.analysis.step_history import step_stats
from gpucheckup.trace import rundir
from gpucheckup.trace.reader import read_trace

PY = [sys.executable, "-m"]
# (example, extra baseline args, [(flag args, fix key, transform params, kind)])
CASES = [
    ("launch", [], [(["--fused"], "fused_optimizer", {}, "configuration"),
                    (["--cuda-graphs"], "cuda_graphs", {}, "code"),
                    (["--compile"], "torch_compile", {}, "code")]),
    ("sync", [], [(["--no-sync"], "remove_syncs", {}, "code")]),
    ("copies", [], [(["--pin-memory"], "pin_memory", {}, "configuration")]),
    ("input", [], [(["--workers", "4"], "dataloader_workers", {"workers": 4}, "configuration"),
                   (["--pin-memory"], "pin_memory", {}, "configuration")]),
    ("moe", [], [(["--capacity", "1.25"], "remove_syncs", {}, "code"),
                 (["--tf32"], "tf32", {}, "configuration"),
                 (["--compile"], "torch_compile", {}, "code")]),
]
COMM = ("comm", [], [(["--ddp"], "comm_overlap", {}, "code")])  # needs 2+ GPUs: run under torchrun
TARGET = {"configuration": 25.0, "code": 50.0}  # percent error allowed between predicted and measured saving
# The verdict a fix addresses: which bottleneck its saving speaks for.
BOTTLENECK = {"remove_syncs": "sync_bound", "fused_optimizer": "launch_bound", "cuda_graphs": "launch_bound",
              "torch_compile": "launch_bound", "pin_memory": "copy_bound", "dataloader_workers": "input_bound",
              "tf32": "gpu_bound", "comm_overlap": "communication_bound", "larger_batch": "launch_bound"}


def command(example: str, args: list[str], gpus: int) -> list[str]:
    base = [f"gpucheckup.examples.{example}", *args]
    if example == "comm":
        return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(gpus), "-m", *base]
    return PY + base


def baseline(out: Path, example: str, args: list[str], gpus: int) -> tuple[Path, dict]:
    """Capture the baseline with `gpucheckup run`; its run directory and check-up JSON."""
    where = out / "runs" / example
    report = out / f"{example}-checkup.json"
    subprocess.run(PY + ["gpucheckup", "run", "--out", str(where), "--json", str(report), "--no-report", "--",
                         *command(example, args, gpus)], check=True)
    run_dir = sorted(where.iterdir())[-1]
    return run_dir, json.loads(report.read_text())


def unprofiled_ms(run_dir: Path) -> float | None:
    run = rundir.read_run(run_dir)
    steps = run.steps.get("main") or run.steps.get("rank0")
    return step_stats(steps).get("steady_median_ms") if steps else None


def measure(out: Path, example: str, args: list[str], flag: list[str], rounds: int, gpus: int) -> dict:
    """`gpucheckup ab` of the baseline against the fix; its JSON."""
    res = out / f"{example}-{'_'.join(a.strip('-') for a in flag)}-ab.json"
    subprocess.run(PY + ["gpucheckup", "ab", "--rounds", str(rounds), "--json", str(res), "--",
                         *command(example, args, gpus), "--", *command(example, args + flag, gpus)], check=True)
    return json.loads(res.read_text())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--only", help="comma-separated examples")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--gpus", type=int, default=0, help="GPUs for the comm example (0: skip it)")
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    cases = CASES + ([COMM] if a.gpus >= 2 else [])
    if a.only:
        cases = [c for c in cases if c[0] in a.only.split(",")]
    rows, per_example = [], []
    for example, args, fixes in cases:
        t0 = time.time()
        run_dir, report = baseline(a.out, example, args, a.gpus)
        trace = read_trace(rundir.read_run(run_dir).traces[0])
        g = replay.build(trace)
        cal = replay.calibrate(g, unprofiled_ms(run_dir))
        before = replay.replay(g).median_ms
        ex_rows = []
        for flag, key, params, kind in fixes:
            pred = whatif.predict(g, key, before, **params)
            ab = measure(a.out, example, args, flag, a.rounds, a.gpus)
            measured_pct = -ab["change_pct"]
            row = {"example": example, "flag": " ".join(flag), "fix": key, "kind": kind,
                   "predicted_saving_pct": pred.saving_pct, "measured_saving_pct": measured_pct,
                   "measured_verdict": ab["verdict"], "transform": pred.transform,
                   "error_pct": (100 * abs(pred.saving_pct - measured_pct) / abs(measured_pct)
                                 if measured_pct else None)}
            row["within_target"] = row["error_pct"] is not None and row["error_pct"] <= TARGET[kind]
            ex_rows.append(row)
            print(json.dumps(row), flush=True)
        by_pred = [r["fix"] for r in sorted(ex_rows, key=lambda r: -r["predicted_saving_pct"])]
        by_meas = [r["fix"] for r in sorted(ex_rows, key=lambda r: -r["measured_saving_pct"])]
        best = by_meas[0]
        per_example.append({"example": example, "verdict": report.get("verdict", {}).get("primary"),
                            "host_scale": cal.host_scale, "order_matches": by_pred == by_meas,
                            "verdict_names_best": report.get("verdict", {}).get("primary") == BOTTLENECK[best],
                            "best_measured_fix": best, "minutes": (time.time() - t0) / 60})
        rows += ex_rows
    (a.out / "whatif_h200.json").write_text(json.dumps({"fixes": rows, "examples": per_example}, indent=1))
    md = ["| example | fix (flag) | predicted saving | measured saving | error | target met |",
          "| --- | --- | ---: | ---: | ---: | :---: |"]
    for r in rows:
        err = f"{r['error_pct']:.0f}%" if r["error_pct"] is not None else "-"
        md.append(f"| {r['example']} | {r['fix']} (`{r['flag']}`) | {r['predicted_saving_pct']:.1f}% | "
                  f"{r['measured_saving_pct']:.1f}% ({r['measured_verdict']}) | {err} | "
                  f"{'yes' if r['within_target'] else 'no'} |")
    md += ["", "| example | verdict | best measured fix | predicted order matches | verdict names it |",
           "| --- | --- | --- | :---: | :---: |"]
    for e in per_example:
        md.append(f"| {e['example']} | {e['verdict']} | {e['best_measured_fix']} | "
                  f"{'yes' if e['order_matches'] else 'no'} | {'yes' if e['verdict_names_best'] else 'no'} |")
    (a.out / "whatif_h200.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()

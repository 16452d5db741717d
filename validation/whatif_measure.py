"""The measured half of issue 10's table: each example's baseline captured, each fix measured with `ab`.

Run on the GPU (one device call per group of examples); the predictions are computed afterwards,
off the machine, from the baseline run directories this writes (validation/whatif_h200.py
predict OUT), so the prediction code can change without measuring again.

For every example in CASES: `gpucheckup run --skip S --steps K [its RUN_OPTIONS] -- python -m gpucheckup.examples.X`
(the baseline: agent, profiled window after warm-up, steps.csv for the unprofiled step time), then
for each fix of whatif_h200.py's CASES `gpucheckup ab --rounds R -- BASE -- BASE FLAG` (separate processes, interleaved).
Writes OUT/runs/EXAMPLE/<run dir>, OUT/EXAMPLE-FLAG-ab.json and OUT/measured.json (one row per
fix: example, flag, fix key, kind, measured saving %, ab's verdict and medians).

    python validation/whatif_measure.py OUT [--only launch,sync] [--rounds 3] [--capture launch:--compile]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from whatif_h200 import CASES as FIXES  # noqa: E402 - this folder's sibling: the one list of fixes and flags
from whatif_h200 import RUN_OPTIONS  # noqa: E402

GC = [sys.executable, "-m", "gpucheckup"]
# example -> (steps per process, ab warm-up, ab measured, window skip, window steps); the fixes measured are
# whatif_h200.py's (flag, catalogue fix key, edit parameters, kind), its baselines' run options too
CASES = {
    "launch": (120, 20, 100, 40, 10),
    "sync": (120, 20, 100, 40, 10),
    "copies": (60, 10, 50, 20, 5),
    "input": (40, 10, 30, 12, 5),
    "moe": (60, 10, 50, 20, 5),
}
FIXES_OF = {example: [(flag, key, kind) for flag, key, _params, kind in fixes] for example, _args, fixes in FIXES}


def example_cmd(example: str, steps: int, flag: list[str]) -> list[str]:
    """The example's command line with its step count and a fix's flag."""
    return [sys.executable, "-m", f"gpucheckup.examples.{example}", "--steps", str(steps), *flag]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--only", help="comma-separated examples (default: all)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--fixes", help="comma-separated flags to measure (default: every fix of the examples)")
    p.add_argument("--no-baseline", action="store_true", help="measure the fixes only (the baseline was captured before)")
    p.add_argument("--capture", default="", help="also capture runs WITH these flags, e.g. 'launch:--compile,"
                   "launch:--cuda-graphs' (a trace of the fixed job, to see what the fix costs per call)")
    p.add_argument("--small", action="store_true", help="CPU-sized problems, 2 rounds of few steps (a dry run)")
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    names = a.only.split(",") if a.only else list(CASES)
    rows = []
    for example in names:
        steps, warm, meas, skip, window = CASES[example]
        fixes = FIXES_OF[example]
        if a.small:
            steps, warm, meas, skip, window = 12, 2, 10, 4, 3
        t0 = time.time()
        where = a.out / "runs" / example
        where.parent.mkdir(parents=True, exist_ok=True)  # run --out makes one folder, not those above it
        if a.fixes:
            fixes = [f for f in fixes if f[0][0] in a.fixes.split(",")]
        if not a.no_baseline:
            subprocess.run(GC + ["run", "--out", str(where), "--skip", str(skip), "--steps", str(window), "--no-report",
                                 *RUN_OPTIONS.get(example, []), "--", *example_cmd(example, steps, [])], check=False)
            print(f"{example}: baseline captured in {time.time() - t0:.0f} s", flush=True)
        for spec in filter(None, a.capture.split(",")):
            name, flag = spec.split(":", 1)
            if name != example:
                continue
            t1 = time.time()
            subprocess.run(GC + ["run", "--out", str(a.out / "runs" / f"{example}{flag.replace('-', '_')}"), "--skip",
                                 str(skip), "--steps", str(window), "--no-report", "--",
                                 *example_cmd(example, steps, flag.split())], check=False)
            print(f"{example} {flag}: captured in {time.time() - t1:.0f} s", flush=True)
        for flag, key, kind in fixes:
            t1 = time.time()
            res = a.out / f"{example}-{'_'.join(f.strip('-') for f in flag)}-ab.json"
            proc = subprocess.run(GC + ["ab", "--rounds", str(a.rounds), "--warmup", str(warm), "--measure", str(meas),
                                        "--json", str(res), "--", *example_cmd(example, steps, []),
                                        "--", *example_cmd(example, steps, flag)], check=False)
            ab = json.loads(res.read_text()) if res.exists() else {}
            row = {"example": example, "flag": " ".join(flag), "fix": key, "kind": kind, "ab_rc": proc.returncode,
                   "measured_saving_pct": -ab["change_pct"] if "change_pct" in ab else None,
                   "measured_verdict": ab.get("verdict"), "ab": ab, "seconds": round(time.time() - t1)}
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "ab"}), flush=True)
            (a.out / "measured.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

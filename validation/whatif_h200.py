"""Predicted against measured savings on a GPU: the table of issue 10 (run it on the H200).

For every example pathology (src/gpucheckup/examples/): capture its baseline with `gpucheckup run`
(agent, profiled window after warm-up, steps.csv for the unprofiled step time), predict each fix's
saving from the trace (whatif/edits.py, calibrated on the unprofiled step), then apply the fix
with its flag and measure it with `gpucheckup ab` (separate processes, interleaved, 3 rounds, 20
warm-up steps dropped, 100 measured). Writes OUT/whatif_h200.json and OUT/whatif_h200.md: per fix
the predicted and measured saving and their ratio, per example whether the predicted order of the
fixes matches the measured one, and whether the check-up's verdict names the bottleneck whose fix
saved the most.

    python validation/whatif_h200.py OUT_DIR [--only launch,sync] [--rounds 3]
    python validation/whatif_h200.py predict OUT_DIR [--measured OUT_DIR/measured.json] [--to DIR]

`predict` recomputes the predictions (and the check-up's verdict) from the baseline run
directories under OUT_DIR/**/runs/<example>/ (the latest by name; give one call's folder, OUT/call1, to predict from
the baselines captured with its measurements) with the code as it is now, without a GPU, and joins them
with the measured savings (`measured.json`: this script's whatif_h200.json, or rows with example,
flag or fix, and measured_saving_pct) when there are some.

Targets (issue 10): configuration fixes within 25% of the measured saving, code changes within 50%.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from gpucheckup.checkup import pipeline
from gpucheckup.whatif import replay, edits as whatif
from gpucheckup.diagnosis.fixes import BY_KEY
from gpucheckup.document import decode, flat_report
from gpucheckup.trace import rundir

PY = [sys.executable, "-m"]
# the MoE example's --capacity F bound at its defaults (examples/moe.py: F x tokens x topk / experts, tokens 8192,
# topk 2, experts 8): the static_shapes edit pads the work the data sized to the flag's own bound
MOE_CAPACITY_1_25 = max(1, int(1.25 * 8192 * 2 / 8))
# gpucheckup run options per example: static_shapes finds the work the data sized from the operators' shapes
RUN_OPTIONS = {"moe": ["--record-shapes"]}
# (example, extra baseline args, [(flag args, catalogue fix key, edit parameters, kind)]); each fix is predicted by
# its catalogue entry's edit (diagnosis/fixes.py `replay`), with these parameters on top (the flag's settings)
CASES = [
    ("launch", [], [(["--fused"], "fused_optimizer", {}, "configuration"),
                    # foreach=True: a dozen launches per parameter list, not one; the fused edit is its bound
                    (["--foreach"], "fused_optimizer", {}, "configuration"),
                    (["--cuda-graphs"], "cuda_graph", {}, "code"),
                    (["--compile"], "torch_compile", {}, "code")]),
    ("sync", [], [(["--no-sync"], "no_host_reads", {}, "code"),
                  (["--tf32"], "tf32", {}, "configuration"),
                  (["--bf16"], "bf16_autocast", {}, "code")]),
    ("copies", [], [(["--pin-memory"], "pin_memory", {}, "configuration")]),
    ("input", [], [(["--workers", "4"], "dataloader_workers", {"workers": 4}, "configuration"),
                   (["--pin-memory"], "pin_memory", {}, "configuration")]),
    ("moe", [], [(["--capacity", "1.25"], "static_shapes", {"bound": MOE_CAPACITY_1_25}, "code"),
                 (["--tf32"], "tf32", {}, "configuration"),
                 (["--compile"], "torch_compile", {}, "code")]),
]
COMM = ("comm", [], [(["--ddp"], "overlap_comm", {}, "code")])  # needs 2+ GPUs: run under torchrun
TARGET = {"configuration": 25.0, "code": 50.0}  # percent error allowed between predicted and measured saving


def command(example: str, args: list[str], gpus: int) -> list[str]:
    base = [f"gpucheckup.examples.{example}", *args]
    if example == "comm":
        return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(gpus), "-m", *base]
    return PY + base


def baseline(out: Path, example: str, args: list[str], gpus: int) -> tuple[Path, dict]:
    """Capture the baseline with `gpucheckup run`; its run directory and check-up JSON."""
    where = out / "runs" / example
    where.parent.mkdir(parents=True, exist_ok=True)  # run --out makes one folder, not those above it
    report = out / f"{example}-checkup.json"
    subprocess.run(PY + ["gpucheckup", "run", "--out", str(where), "--json", str(report), "--no-report",
                         *RUN_OPTIONS.get(example, []), "--",
                         *command(example, args, gpus)], check=True)
    run_dir = sorted(where.iterdir())[-1]
    return run_dir, flat_report(decode(report.read_bytes()))  # the run's first check-up, with its run keys


def run_dirs(where: Path) -> list[Path]:
    """The gpucheckup run directories under a folder (the folder itself when it is one), oldest first."""
    if rundir.is_run_dir(where):
        return [where]
    children = sorted(p for p in where.iterdir() if rundir.is_run_dir(p))  # links to run directories too
    return children or sorted(p.parent for p in where.rglob("manifest.json") if rundir.is_run_dir(p.parent))


def predict_example(run_dir: Path, fixes: list) -> tuple[dict, dict]:
    """Check up a baseline run directory as `gpucheckup analyze` would (its verdict from the replayed savings);
    then each measured fix's prediction from its catalogue edit with the flag's parameters, on the same graph,
    calibrated on the run's unprofiled steps. Returns the example's figures and {flag: prediction row}."""
    checkups = pipeline.check(run_dir)
    if not checkups.checkups:
        raise SystemExit(f"{run_dir}: no GPU trace to check up (the baseline captured no GPU timeline)")
    c = checkups.checkups[0]
    a = c.analysis
    g = replay.build(a.trace, a.steps, a.launch_rows)
    cal = replay.calibrate(g, a.profiler.unprofiled_step_ms if a.profiler else None)
    before = replay.replay(g).median_ms
    out = {}
    for flag, key, params, kind in fixes:
        e = BY_KEY[key]
        pred = whatif.predict(g, e.replay, before, **{**dict(e.replay_params), **params})
        offered = next((f for f in c.report["fixes"] if f["key"] == key), None)
        out[" ".join(flag)] = {"fix": key, "kind": kind, "edit": e.replay.__name__, "bottleneck": e.bottleneck,
                               "predicted_saving_pct": pred.saving_pct, "predicted_step_ms": pred.step_ms_after,
                               "replayed_step_ms": before, "transform": pred.transform,
                               "offered": offered is not None}
    ex = {"verdict": c.diagnosis.primary, "reason": c.diagnosis.reason, "host_scale": cal.host_scale,
          "host_scale_from": cal.how, "unprofiled_from": a.profiler.source if a.profiler else None,
          "step_ms": a.window.step_ms, "traced_step_ms": a.window.traced_step_ms,
          "unprofiled_step_ms": a.profiler.unprofiled_step_ms if a.profiler else None,
          "run_dir": str(run_dir)}
    return ex, out


def judge(example: str, ex: dict, preds: dict, measured: dict) -> tuple[list[dict], dict]:
    """Rows of predicted against measured saving (measured: {flag or fix key: saving %}) and the example's
    order and verdict checks."""
    rows = []
    for flag, p in preds.items():
        m = measured.get(flag, measured.get(p["fix"]))
        row = {"example": example, "flag": flag, **p, "measured_saving_pct": m}
        row["error_pct"] = (100 * abs(p["predicted_saving_pct"] - m) / abs(m) if m else None)
        row["within_target"] = row["error_pct"] is not None and row["error_pct"] <= TARGET[p["kind"]]
        rows.append(row)
    timed = [r for r in rows if r["measured_saving_pct"] is not None]
    by_pred = [r["fix"] for r in sorted(timed, key=lambda r: -r["predicted_saving_pct"])]
    by_meas = [r["fix"] for r in sorted(timed, key=lambda r: -r["measured_saving_pct"])]
    best = by_meas[0] if by_meas else None
    summary = {"example": example, **ex, "order_predicted": by_pred, "order_measured": by_meas,
               "order_matches": by_pred == by_meas if timed else None, "best_measured_fix": best,
               "verdict_names_best": ex["verdict"] == BY_KEY[best].bottleneck if best else None}
    return rows, summary


def write_tables(out: Path, rows: list[dict], per_example: list[dict]) -> str:
    """whatif_h200.json and whatif_h200.md under out; the Markdown text."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "whatif_h200.json").write_text(json.dumps({"fixes": rows, "examples": per_example}, indent=1))
    md = ["| example | fix (flag) | edit | predicted saving | measured saving | error | target | met |",
          "| --- | --- | --- | ---: | ---: | ---: | ---: | :---: |"]
    for r in rows:
        err = f"{r['error_pct']:.0f}%" if r["error_pct"] is not None else "-"
        meas = f"{r['measured_saving_pct']:.1f}%" if r["measured_saving_pct"] is not None else "not measured"
        md.append(f"| {r['example']} | {r['fix']} (`{r['flag']}`) | {r['edit']} | {r['predicted_saving_pct']:.1f}% | "
                  f"{meas} | {err} | {TARGET[r['kind']]:.0f}% | {'yes' if r['within_target'] else 'no'} |")
    md += ["", "| example | verdict | best measured fix (its bottleneck) | predicted order | measured order | "
           "order matches | verdict names it |", "| --- | --- | --- | --- | --- | :---: | :---: |"]
    yn = {True: "yes", False: "no", None: "-"}
    for e in per_example:
        best = f"{e['best_measured_fix']} ({BY_KEY[e['best_measured_fix']].bottleneck})" if e["best_measured_fix"] else "-"
        md.append(f"| {e['example']} | {e['verdict']} | {best} | {', '.join(e['order_predicted'])} | "
                  f"{', '.join(e['order_measured'])} | {yn[e['order_matches']]} | {yn[e['verdict_names_best']]} |")
    text = "\n".join(md) + "\n"
    (out / "whatif_h200.md").write_text(text)
    return text


def read_measured(path: Path | None) -> dict[str, dict]:
    """{example: {flag or fix key: measured saving %}} from measured.json (this script's own JSON, or rows)."""
    if path is None or not path.exists():
        return {}
    d = json.loads(path.read_text())
    rows = d.get("fixes", d) if isinstance(d, dict) else d
    out: dict[str, dict] = {}
    if isinstance(rows, dict):  # {example: {flag: pct}}
        return {k: dict(v) for k, v in rows.items()}
    for r in rows:
        pct = r.get("measured_saving_pct")
        if pct is None and r.get("change_pct") is not None:
            pct = -r["change_pct"]
        for k in (r.get("flag"), r.get("fix")):
            if k:
                out.setdefault(r["example"], {})[k] = pct
    return out


def predict_main(argv: list[str]) -> None:
    """The `predict` step: predictions from stored baselines, joined with the measured savings."""
    p = argparse.ArgumentParser(description="predictions from baseline run directories (no GPU)")
    p.add_argument("out", type=Path, help="the folder with runs/<example>/ baselines")
    p.add_argument("--measured", type=Path, help="measured savings (default OUT/measured.json)")
    p.add_argument("--to", type=Path, help="where to write whatif_h200.json/.md (default OUT)")
    p.add_argument("--only", help="comma-separated examples")
    a = p.parse_args(argv)
    measured = read_measured(a.measured or a.out / "measured.json")
    rows, per_example = [], []
    for example, _args, fixes in CASES + [COMM]:
        if a.only and example not in a.only.split(","):
            continue
        dirs = sorted((d for w in a.out.glob(f"**/runs/{example}") for d in run_dirs(w)), key=lambda d: d.name)
        if not dirs:
            print(f"{example}: no baseline run directory under {a.out}/**/runs/{example}", file=sys.stderr)
            continue
        ex, preds = predict_example(dirs[-1], fixes)
        r, summary = judge(example, ex, preds, measured.get(example, {}))
        rows += r
        per_example.append(summary)
    print(write_tables(a.to or a.out, rows, per_example))


def measure(out: Path, example: str, args: list[str], flag: list[str], rounds: int, gpus: int) -> dict:
    """`gpucheckup ab` of the baseline against the fix; its JSON."""
    res = out / f"{example}-{'_'.join(a.strip('-') for a in flag)}-ab.json"
    subprocess.run(PY + ["gpucheckup", "ab", "--rounds", str(rounds), "--json", str(res), "--",
                         *command(example, args, gpus), "--", *command(example, args + flag, gpus)], check=True)
    return json.loads(res.read_text())


def main() -> None:
    if sys.argv[1:2] == ["predict"]:
        predict_main(sys.argv[2:])
        return
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
        run_dir, _report = baseline(a.out, example, args, a.gpus)
        ex, preds = predict_example(run_dir, fixes)
        measured = {}
        for flag, _key, _params, _kind in fixes:
            ab = measure(a.out, example, args, flag, a.rounds, a.gpus)
            measured[" ".join(flag)] = -ab["change_pct"]
            preds[" ".join(flag)]["measured_verdict"] = ab["verdict"]
            print(json.dumps({"example": example, **preds[" ".join(flag)], "measured_saving_pct": -ab["change_pct"]}),
                  flush=True)
        r, summary = judge(example, ex, preds, measured)
        summary["minutes"] = (time.time() - t0) / 60
        rows += r
        per_example.append(summary)
    print(write_tables(a.out, rows, per_example))


if __name__ == "__main__":
    main()

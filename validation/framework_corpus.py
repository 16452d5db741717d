"""The framework corpus (issue 23): real framework loops checked up, each fix applied and measured.

`measure` runs on the GPU machine. For every job: its baseline captured with `gpucheckup run` (the agent, a full
profiled window after warm-up, steps.csv for the unprofiled step time), then each fix applied by the job's own flag
(validation/common.py: the change a user would make in the code or the framework's arguments) and measured with
`gpucheckup ab` (A = the job as it is, B = with the flag; separate processes, A and B in turn, warm-up steps
dropped). The worker count of `dataloader_workers` is the one the baseline's check-up advises
(`checkups[].dataloader.workers_to_keep_pace`), read on the machine before the fix is measured. Writes
OUT/runs/JOB-*/ (the run directories), OUT/ab/JOB-FIX.json and OUT/measured.json.

With `--pairs JOB:FIX,...` `measure` captures no baseline: it measures those fixes again with `ab` (more rounds,
another machine), the worker count as MEASURED's row of that fix says; the rows say their rounds.

`report` runs anywhere, with the code as it is: it checks up each baseline run directory again, joins each fix's
prediction (the ranked fix's replayed `predicted.saving_pct`, else its bound `saving_ms` as a share of the step)
with the measurement, and writes the table (Markdown) and the per-job checks: the verdict names the bottleneck of
the biggest measured saving (the fix's finding is the verdict's, or the verdict is gpu_bound and the fix a GPU-bound
one), or of a fix not resolved below it (its measured interval reaches that saving); no prediction above its bound;
configuration fixes within 25% and code changes within 50% of the measured saving (relative to it; a measured
"same", no difference, is met by a prediction under 5% of the step).

`try` runs on the GPU machine too (issue 24): each job's configuration fixes applied by the agent with
`gpucheckup try --no-predict` (no code change; the same rounds, warm-up and measured steps as the hand-edited `ab`,
the worker count the same as that `ab`'s flag, read from MEASURED), one `try` per job, writing OUT/try/JOB.json.
`try-report` joins each trial with the hand-edited `ab` of the same fix (MEASURED: a measured.json) and says
whether they agree: the two intervals overlap.

    python validation/framework_corpus.py measure OUT [--only hf,lightning] [--rounds 2] [--deadline-s 540]
    python validation/framework_corpus.py measure OUT --pairs hf:no_host_reads,sync:no_host_reads --rounds 4 \
        --measured tests/data/h200/corpus/measured.json   # again, ab only, the same flags (workers as measured)
    python validation/framework_corpus.py report OUT [OUT2 ...] [--md FILE]
    python validation/framework_corpus.py try OUT --measured tests/data/h200/corpus/measured.json [--only ...]
    python validation/framework_corpus.py try-report OUT --measured tests/data/h200/corpus/measured.json [--md FILE]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
GC = [sys.executable, "-m", "gpucheckup"]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "1", "--master_port", "29533"]
TARGET_PCT = {"config": 25.0, "code": 50.0, "refactor": 50.0}
NO_DIFFERENCE_PCT = 5.0  # a prediction under this share of the step meets a measured "no difference"


@dataclass(frozen=True)
class Job:
    """One corpus job: its script and base flags, its steps per process, the window and ab's warm-up/measured steps,
    and the fixes measured: (catalogue key, the flags that apply it, its tier)."""

    script: str
    base: tuple[str, ...]
    steps: int
    skip: int
    window: int
    warmup: int
    measure: int
    fixes: tuple[tuple[str, tuple[str, ...], str], ...]
    torchrun: bool = False
    batch: int = 0  # the script's default batch ({batch2} in a fix's flags: BATCH_FACTOR times it)


FUSED = ("fused_optimizer", ("--fused", "1"), "config")
WORKERS = ("dataloader_workers", ("--workers", "{workers}"), "config")
GRAPHS = ("cuda_graph", ("--compile", "reduce-overhead"), "code")
COMPILE = ("torch_compile", ("--compile", "default"), "code")
BF16 = ("bf16_autocast", ("--bf16", "1"), "code")
# A larger batch, as the larger_batch edit models it (whatif/edits.py: per-sample work x 2): measured per sample, B's
# step over BATCH_FACTOR against A's (ab compares step times)
BATCH_FACTOR = 2
LARGER = ("larger_batch", ("--batch", "{batch2}"), "code")
JOBS = {
    "hf": Job("train_hf_trainer.py", (), 160, 60, 10, 30, 100, (
        ("no_host_reads", ("--nan-filter", "0"), "config"), ("tf32", ("--tf32", "1"), "config"), GRAPHS, COMPILE,
        LARGER, BF16), batch=8),
    "lightning": Job("train_lightning.py", (), 200, 80, 10, 40, 120, (FUSED, WORKERS, COMPILE, GRAPHS, LARGER, BF16),
                     batch=64),
    "timm": Job("train_timm_amp.py", (), 200, 80, 10, 40, 120, (
        FUSED, GRAPHS, ("cudnn_benchmark", ("--cudnn-benchmark", "1"), "config"), COMPILE, LARGER), batch=16),
    "input": Job("train_input_bound.py", (), 40, 16, 5, 8, 24, (WORKERS, ("pin_memory", ("--pin", "1"), "config"))),
    "accelerate": Job("train_accelerate.py", (), 200, 80, 10, 40, 120, (FUSED, COMPILE, GRAPHS, LARGER), batch=16),
    "amp": Job("train_amp_scaler.py", (), 200, 80, 10, 40, 120, (
        ("no_host_reads", ("--log-every", "100"), "config"), FUSED, GRAPHS, COMPILE, LARGER), torchrun=True, batch=256),
    "compiled": Job("train_launch_bound.py", ("--compile", "default"), 200, 80, 10, 40, 120, (FUSED, GRAPHS)),
    "forloop": Job("train_launch_bound.py", ("--foreach", "0"), 200, 80, 10, 30, 120, (
        FUSED, COMPILE, GRAPHS, LARGER, BF16), batch=64),
    "sync": Job("train_sync_bound.py", (), 150, 60, 10, 20, 100, (("no_host_reads", ("--reads", "0"), "config"), FUSED,
                                                                   GRAPHS, COMPILE, LARGER), batch=512),
    "gpu": Job("train_gpu_bound.py", ("--batch", "16"), 90, 40, 6, 20, 50, (COMPILE,)),
}


def command(job: Job, flags: tuple[str, ...] = ()) -> list[str]:
    """The job's command line, with a fix's flags after its own."""
    head = TORCHRUN if job.torchrun else [sys.executable]
    return [*head, str(HERE / job.script), "--steps", str(job.steps), *job.base, *flags]


def advised_workers(run_dir: Path) -> int:
    """The DataLoader workers the baseline's check-up advises (8 where it names none)."""
    out = subprocess.run(GC + ["analyze", str(run_dir), "--json", "-"], capture_output=True, text=True)
    try:
        loaders = [c.get("dataloader") or {} for c in json.loads(out.stdout)["checkups"]]
        return max(int(dl.get("workers_to_keep_pace") or 0) for dl in loaders) or 8
    except (ValueError, KeyError, TypeError):
        return 8


def ab_row(out: Path, name: str, key: str, flags: tuple[str, ...], tier: str, rounds: int) -> dict:
    """Measure one fix of one job with ab (A the job as written, B with the fix's flags): its measured.json row. A
    larger batch is measured per sample: B's step time over BATCH_FACTOR against A's (`per_sample`)."""
    job = JOBS[name]
    res = out / "ab" / f"{name}-{key}.json"
    t1 = time.time()
    proc = subprocess.run(GC + ["ab", "--rounds", str(rounds), "--warmup", str(job.warmup), "--measure",
                                str(job.measure), "--json", str(res), "--", *command(job), "--",
                                *command(job, flags)], check=False)
    ab = json.loads(res.read_text()) if res.exists() else {}
    per = BATCH_FACTOR if key == "larger_batch" else 1
    row = {"job": name, "fix": key, "flags": " ".join(flags), "tier": tier, "ab_rc": proc.returncode,
           "measured_saving_pct": saving_pct(ab["change_pct"], per) if "change_pct" in ab else None,
           "interval_pct": sorted(saving_pct(x, per) for x in ab["interval_pct"]) if ab.get("interval_pct") else None,
           "verdict": ab.get("verdict"), "a_ms": (ab.get("a") or {}).get("median_ms"),
           "b_ms": (ab.get("b") or {}).get("median_ms"), "rounds": rounds, "seconds": round(time.time() - t1)}
    if per != 1:  # ab's verdict is about step times; per sample, the interval decides
        lo, hi = row["interval_pct"] or (0.0, 0.0)
        row.update(per_sample=per, verdict="faster" if lo > 0 else "slower" if hi < 0 else "same")
    return row


def saving_pct(change_pct: float, per: int = 1) -> float:
    """The saving per sample, % (positive is faster), of a B whose step changed by change_pct % against A's and does
    `per` times A's samples."""
    return 100.0 - (100.0 + change_pct) / per


def remeasure(out: Path, pairs: list[str], measured: list[dict], rounds: int, deadline: float) -> None:
    """Measure JOB:FIX pairs again with ab only (no baseline), the flags as MEASURED's rows or the job's own."""
    rows = []
    (out / "ab").mkdir(parents=True, exist_ok=True)
    for pair in pairs:
        name, key = pair.split(":")
        if time.time() > deadline:
            print(f"{pair}: skipped (deadline)", flush=True)
            continue
        tier, flags = next((t, fl) for k, fl, t in JOBS[name].fixes if k == key)
        old = next((m for m in measured if m["job"] == name and m["fix"] == key), None)
        flags = tuple(old["flags"].split()) if old else tuple(
            f.replace("{workers}", "8").replace("{batch2}", str(BATCH_FACTOR * JOBS[name].batch)) for f in flags)
        rows.append(ab_row(out, name, key, flags, tier, rounds))
        print(json.dumps(rows[-1]), flush=True)
        (out / "measured.json").write_text(json.dumps(rows, indent=1))


def measure(out: Path, names: list[str], rounds: int, deadline: float) -> None:
    """Capture each job's baseline and measure its fixes with ab, until the deadline."""
    rows = []
    (out / "ab").mkdir(parents=True, exist_ok=True)
    for name in names:
        job = JOBS[name]
        if time.time() > deadline:
            print(f"{name}: skipped (deadline)", flush=True)
            continue
        t0 = time.time()
        subprocess.run(GC + ["run", "--out", str(out / "runs"), "--name", name, "--skip", str(job.skip), "--steps",
                             str(job.window), "--no-report", "--", *command(job)], check=False)
        runs = sorted((out / "runs").glob(f"*-{name}"))
        print(f"{name}: baseline captured in {time.time() - t0:.0f} s ({runs[-1].name if runs else 'none'})",
              flush=True)
        workers = advised_workers(runs[-1]) if runs and any("{workers}" in f for _, fl, _ in job.fixes for f in fl) else 0
        for key, flags, tier in job.fixes:
            if time.time() > deadline:
                print(f"{name} {key}: skipped (deadline)", flush=True)
                continue
            flags = tuple(f.replace("{workers}", str(workers)).replace("{batch2}", str(BATCH_FACTOR * job.batch))
                          for f in flags)
            row = ab_row(out, name, key, flags, tier, rounds)
            rows.append(row)
            print(json.dumps(row), flush=True)
            (out / "measured.json").write_text(json.dumps(rows, indent=1))


# the trial that applies a catalogue fix, as `gpucheckup try` names it ({workers}: the hand-edited ab's count)
TRIALS = {"fused_optimizer": "fused_optimizer", "dataloader_workers": "dataloader_workers={workers}",
          "pin_memory": "pin_memory", "tf32": "tf32", "cudnn_benchmark": "cudnn_benchmark"}


def trials_of(name: str, measured: list[dict]) -> list[tuple[str, str]]:
    """The job's configuration fixes the agent can apply: (catalogue key, trial), workers as the ab measured."""
    flags = {m["fix"]: m["flags"] for m in measured if m["job"] == name}
    workers = flags.get("dataloader_workers", "--workers 8").split()[-1]
    return [(key, TRIALS[key].replace("{workers}", workers)) for key, _, tier in JOBS[name].fixes
            if key in TRIALS and tier == "config"]


def try_jobs(out: Path, names: list[str], measured: list[dict], rounds: int, deadline: float) -> None:
    """One `gpucheckup try` per job with its configuration fixes, ab's steps, no prediction (no base check-up)."""
    (out / "try").mkdir(parents=True, exist_ok=True)
    for name in names:
        job, trials = JOBS[name], trials_of(name, measured)
        if not trials or time.time() > deadline:
            print(f"{name}: skipped ({'no trial' if not trials else 'deadline'})", flush=True)
            continue
        t0 = time.time()
        res = out / "try" / f"{name}.json"
        proc = subprocess.run(GC + ["try", ",".join(t for _, t in trials), "--no-predict", "--rounds", str(rounds),
                                    "--warmup", str(job.warmup), "--measure", str(job.measure), "--out",
                                    str(out / "try_runs"), "--json", str(res), "--", *command(job)], check=False)
        print(f"{name}: try rc {proc.returncode} in {time.time() - t0:.0f} s", flush=True)


AGREE = {None: "n/a", True: "yes", False: "**no**"}


def try_report(out: Path, measured: list[dict], md: Path | None) -> None:
    """Each trial beside the hand-edited ab of the same fix: do their intervals overlap?"""
    lines = ["| job | fix | try: applied, how | try: measured (interval), verdict | ab: measured (interval), verdict "
             "| agree |", "| --- | --- | --- | --- | --- | --- |"]
    agree = total = 0
    for name in JOBS:
        res = out / "try" / f"{name}.json"
        if not res.exists():
            continue
        doc = json.loads(res.read_text())
        by_trial = {t["fix"]: t for t in doc["fixes"]}
        for key, trial in trials_of(name, measured):
            t = by_trial.get(trial)
            m = next((r for r in measured if r["job"] == name and r["fix"] == key), None)
            if t is None or m is None:
                continue
            ti, mi = t.get("interval_pct"), m.get("interval_pct")
            ok = None if not (t["applied"] and ti and mi) else (ti[0] <= mi[1] and mi[0] <= ti[1])
            if ok is not None:
                total += 1
                agree += ok
            tm = "-" if t["measured_saving_pct"] is None else (
                f"{t['measured_saving_pct']:.1f}% ({ti[0]:.1f}..{ti[1]:.1f}), {t['verdict']}" if ti else
                f"{t['measured_saving_pct']:.1f}%, {t['verdict']}")
            mm = f"{m['measured_saving_pct']:.1f}% ({mi[0]:.1f}..{mi[1]:.1f}), {m['verdict']}" if mi else "-"
            how = t["how"].replace("|", "/")[:160]
            lines.append(f"| {name} | `{trial}` | {'yes' if t['applied'] else 'no'}: {how} | {tm} | {mm} "
                         f"| {AGREE[ok]} |")
    text = "\n".join(lines + ["", f"intervals overlap on {agree} of {total} applied trials"]) + "\n"
    print(text)
    if md:
        md.write_text(text)


def predictions(run_dir: Path) -> dict:
    """The baseline's check-up: its verdict, step and each ranked fix's prediction, bound and finding."""
    import gpucheckup
    from gpucheckup.diagnosis import VERDICT_FINDING, rules
    from gpucheckup.diagnosis.fixes import BY_KEY

    doc = gpucheckup.analyze(str(run_dir)).document
    step = doc.step.ms if doc.step else None
    fixes = {}
    for f in doc.fixes:
        replayed = f.predicted.saving_pct if f.predicted and f.predicted.saving_pct is not None else None
        slower = re.search(r"replayed ([0-9.]+)% slower", f.predicted_note or "")
        replayed = -float(slower.group(1)) if slower else replayed  # the saving is shown as none: the note says it
        bound = 100 * f.saving_ms / step if f.saving_ms is not None and step else None
        fixes.setdefault(f.key, {"predicted_pct": replayed if replayed is not None else bound,
                                 "replayed": replayed is not None, "bound_pct": bound, "finding": f.finding,
                                 "ceiling": bool(BY_KEY[f.key].ceiling) if f.key in BY_KEY else False,
                                 "note": f.predicted_note,
                                 "upper_bound": "upper bound" in (f.predicted_note or "")})
    primary = doc.verdict.primary
    return {"verdict": primary, "lead": VERDICT_FINDING.get(primary), "step_ms": step, "fixes": fixes,
            "gpu_fixes": set(rules.GPU_BOUND_FIXES), "framework": framework(run_dir)}


def framework(run_dir: Path) -> str | None:
    """The framework the run's agent saw (agent.json), if it wrote one."""
    for p in run_dir.rglob("agent.json"):
        try:
            return json.loads(p.read_text()).get("framework")
        except (OSError, ValueError):
            return None
    return None


def judge(pred: dict, m: dict) -> dict:
    """One (job, fix) row: predicted against measured, within its tier's target or not."""
    p = pred["fixes"].get(m["fix"])
    got = m["measured_saving_pct"]
    row = {**m, "offered": p is not None, "predicted_pct": p and p["predicted_pct"], "replayed": p and p["replayed"],
           "bound_pct": p and p["bound_pct"]}
    if p is None or p["predicted_pct"] is None or got is None:
        row["within"] = None
    elif p["upper_bound"]:  # a bound, not an estimate: met when the measurement does not exceed it
        row["within"] = m["interval_pct"] is not None and m["interval_pct"][0] <= p["predicted_pct"]
    elif m["verdict"] == "same":
        row["within"] = p["predicted_pct"] < NO_DIFFERENCE_PCT or (
            m["interval_pct"] is not None and m["interval_pct"][0] <= p["predicted_pct"] <= m["interval_pct"][1])
    else:  # faster or slower: within the tier's share of the measured change, on the same side of 0
        row["within"] = (got > 0) == (p["predicted_pct"] > 0) and (
            abs(p["predicted_pct"] - got) <= TARGET_PCT[m["tier"]] / 100 * abs(got))
    # above the bound of its mechanism: the fix's bound where it is its mechanism's whole time on the critical path
    # (the catalogue's `ceiling`); other fixes' bounds are their finding's size, which a replay may pass
    row["above_bound"] = bool(p and p["replayed"] and p["ceiling"] and p["bound_pct"] is not None
                              and p["predicted_pct"] > p["bound_pct"] + 1e-6)
    return row


def report(outs: list[Path], md: Path | None) -> None:
    """Join the baselines' predictions with the measurements and print the tables."""
    from gpucheckup.diagnosis.fixes import BY_KEY

    measured = [r for out in outs if (out / "measured.json").exists()
                for r in json.loads((out / "measured.json").read_text())]
    lines = ["| job | framework | verdict | fix | tier | predicted | measured (interval), ab | within target |",
             "| --- | --- | --- | --- | --- | ---: | --- | --- |"]
    checks = []
    for name in JOBS:
        runs = sorted(r for out in outs for r in (out / "runs").glob(f"*-{name}") if r.is_dir())
        rows = [m for m in measured if m["job"] == name]
        if not runs or not rows:
            continue
        pred = predictions(runs[-1])
        judged = [judge(pred, m) for m in rows]
        for r in judged:
            pp = "not offered" if not r["offered"] else (
                "-" if r["predicted_pct"] is None else f"{r['predicted_pct']:.1f}%" + ("" if r["replayed"] else " (bound)"))
            iv = r["interval_pct"]
            mm = "-" if r["measured_saving_pct"] is None else (
                f"{r['measured_saving_pct']:.1f}% ({iv[0]:.1f}..{iv[1]:.1f}), {r['verdict']}" if iv else
                f"{r['measured_saving_pct']:.1f}%, {r['verdict']}")
            ok = {None: "n/a", True: "yes", False: "**no**"}[r["within"]]
            lines.append(f"| {name} | {pred['framework'] or 'plain'} | {pred['verdict']} | `{r['fix']}` "
                         f"(`{r['flags']}`) | {r['tier']} | {pp} | {mm} | {ok} |")
        faster = [r for r in judged if r["verdict"] == "faster"]
        # the verdict names a bottleneck: the fixes that remove one (a larger batch amortizes every per-step cost and
        # torch.compile cuts launches and kernel time alike: they name none, diagnosis/verdict.py), and on a
        # GPU-bound job the fixes that make its kernels faster
        one = [r for r in faster if BY_KEY[r["fix"]].bottleneck or (pred["verdict"] == "gpu_bound"
                                                                      and r["fix"] in pred["gpu_fixes"])]
        best = max(one, key=lambda r: r["measured_saving_pct"], default=None)
        top = max(faster, key=lambda r: r["measured_saving_pct"], default=None)

        def names(r):
            return ((pred["fixes"].get(r["fix"]) or {}).get("finding") == pred["lead"]
                    or (pred["verdict"] == "gpu_bound" and r["fix"] in pred["gpu_fixes"]))

        # a fix whose interval reaches the biggest saving is not resolved below it: naming its bottleneck is no miss
        tied = [r for r in one if best is not None and r is not best and r["interval_pct"]
                and r["interval_pct"][1] >= best["measured_saving_pct"] and names(r)]
        named = None if best is None else names(best)
        said = {None: "", True: ": the verdict names it", False: ": **the verdict names another**"}[named]
        if named is False and tied:
            t = tied[0]
            said = (f": the verdict names `{t['fix']}`'s, {t['measured_saving_pct']:.1f}% ({t['interval_pct'][0]:.1f}.."
                    f"{t['interval_pct'][1]:.1f}): not resolved below it")
        checks.append(f"- {name}: verdict `{pred['verdict']}`; biggest measured saving of a fix of one bottleneck "
                      + ("none faster" if best is None else f"`{best['fix']}` {best['measured_saving_pct']:.1f}%")
                      + said
                      + (f" (biggest of all: `{top['fix']}` {top['measured_saving_pct']:.1f}%, which names none)"
                         if top is not None and top is not best else "")
                      + ("; above its bound: " + ", ".join(r["fix"] for r in judged if r["above_bound"])
                         if any(r["above_bound"] for r in judged) else ""))
    text = "\n".join(lines + [""] + checks) + "\n"
    print(text)
    if md:
        md.write_text(text)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=["measure", "report", "try", "try-report"])
    p.add_argument("out", type=Path, nargs="+")
    p.add_argument("--only", help="comma-separated jobs (default: all)")
    p.add_argument("--pairs", help="measure: comma-separated JOB:FIX to measure again, ab only (no baseline)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--deadline-s", type=float, default=540.0)
    p.add_argument("--md", type=Path)
    p.add_argument("--measured", type=Path, help="the hand-edited ab's measured.json (try, try-report)")
    a = p.parse_args()
    measured = json.loads(a.measured.read_text()) if a.measured else []
    if a.what == "try":
        a.out[0].mkdir(parents=True, exist_ok=True)
        try_jobs(a.out[0], a.only.split(",") if a.only else list(JOBS), measured, a.rounds, time.time() + a.deadline_s)
    elif a.what == "try-report":
        try_report(a.out[0], measured, a.md)
    elif a.what == "measure" and a.pairs:
        a.out[0].mkdir(parents=True, exist_ok=True)
        remeasure(a.out[0], a.pairs.split(","), measured, a.rounds, time.time() + a.deadline_s)
    elif a.what == "measure":
        a.out[0].mkdir(parents=True, exist_ok=True)
        measure(a.out[0], a.only.split(",") if a.only else list(JOBS), a.rounds, time.time() + a.deadline_s)
    else:
        report(a.out, a.md)


if __name__ == "__main__":
    main()

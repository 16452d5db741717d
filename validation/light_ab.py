"""The light window's cost and verdicts on the H200: plain vs full window vs light window, interleaved.

For each workload (launch-, sync-, input-, GPU-bound, MoE), ROUNDS rounds; in each round the three modes run
in a fresh process each, their order rotated every round:
- plain: `python3 validation/train_X.py` (the job's own per-step wall times, validation/common.py)
- full:  `gpucheckup run --skip S --steps K --no-report -- python3 ...` (the default window: CPU ops + CUDA)
- light: the same with `--light`, torch.profiler backend (CUDA activities and user ranges; py-spy stacks
  sampled outside the job): the job's PYTHONPATH has no cupti-python, so the agent falls back (agent/light.py)
- cupti: `--light` with cupti-python on the job's PYTHONPATH (--cupti-site): CUPTI's activity API, kernels,
  copies and memsets only (agent/cupti_window.py), over every step of the window (GPUCHECKUP_LIGHT_COUNTER_STEPS=0)
- counters: `--light` as shipped: the counter steps first (the GPU's activity counters, no kernel records; needs
  cupti-python 13.3+ in --cupti-site), then the record steps (agent/pm_counters.py)
- nospy: cupti with no py-spy on the launcher's PATH (no host sampling: the in-job recorder's cost alone)
- attached, kern: cupti with a variant of the recorder (validation/light_variant.py): CUPTI left attached after
  the window (the backend before docs/validation.md 6c; the H200 call of 6c ran it as `cupti`, and the detach as a
  variant `fin`), or kernels only (no MEMCPY, MEMSET), or `null`: everything but CUPTI (never loaded, nothing
  recorded), the control of the in-run measure, or `shared`: CUPTI's per-thread activity buffers flipped from
  their default
- full_td: full with TEARDOWN_CUPTI=1 in the job's environment (Kineto calls cuptiFinalize when its window stops)
Step time inside a window: the median of steps.csv's `profiled` rows; plain: the median step after warm-up. Each
captured run also gives its steps before the window (skip/2 .. skip-1: py-spy already sampling in the light modes)
and after it (from skip+K+AFTER_GAP: the trace written, py-spy stopped), so the in-run cost (window / before) and
the recovery (after / before) come from one process.
Then every captured run is checked up (`gpucheckup analyze RUN --json`) for its verdict, gap-cause source and
the light window's sampled host states, until the deadline.
Usage (device machine, repo root, PYTHONPATH with gpucheckup, py-spy on PATH):
  python3 validation/light_ab.py OUT [--rounds N] [--deadline-s S] [--jobs launch,gpu,...] [--modes plain,light,cupti]
      [--plan 'launch:plain,cupti,nospy;gpu:plain,cupti'] [--cupti-site DIR]
Writes OUT/light_ab.json (every figure) and OUT/light_ab.md (the tables; a counter window's own figures, `window_figures`,
in the second: record against counter steps, whole window, the records' warm-up steps, the stop's pause).
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gpucheckup.document import decode, flat_report

HERE = Path(__file__).resolve().parent
PY = sys.executable
JOBS = {  # name: (script, extra args, skip, window steps, expected verdict unprofiled)
    "launch": ("train_launch_bound.py", ["--steps", "220"], 80, 30, "launch_bound"),
    "sync": ("train_sync_bound.py", ["--steps", "160"], 60, 30, "sync_bound"),
    "input": ("train_input_bound.py", ["--steps", "45"], 20, 10, "input_bound"),
    "gpu": ("train_gpu_bound.py", ["--steps", "130"], 60, 30, "gpu_bound"),
    "moe": ("train_moe.py", ["--steps", "90"], 40, 20, None),
    # the bf16 transformer at twice the batch: twice the GPU work for the same launches (host slack)
    "gpu16": ("train_gpu_bound.py", ["--steps", "130", "--batch", "16"], 60, 30, "gpu_bound"),
    # framework loops (docs/validation.md 6f): HF Trainer on a tiny GPT-2, a Lightning MLP, timm ResNet-18 with AMP
    "hf": ("train_hf_trainer.py", ["--steps", "170"], 70, 30, "launch_bound"),
    "lightning": ("train_lightning.py", ["--steps", "330"], 140, 40, "launch_bound"),
    "timm": ("train_timm_amp.py", ["--steps", "330"], 140, 40, "launch_bound"),
    # accelerate's Accelerator on a bf16 transformer LM (docs/validation.md 6o)
    "accelerate": ("train_accelerate.py", ["--steps", "250"], 100, 30, "launch_bound"),
}
VARIANTS = ("attached", "kern", "null", "shared")  # run through validation/light_variant.py
CUPTI_MODES = ("cupti", "counters", "nospy", *VARIANTS)  # the CUPTI backend: cupti-python on the job's PYTHONPATH
MODES = ("plain", "full", "full_td", "light", *CUPTI_MODES)
AFTER_GAP = 4  # steps after the window's last one left out of "after": the export step and py-spy's stop
CUPTI_SITE = [""]  # the folder holding cupti-python (set by --cupti-site)
WINDOW_STEPS = [0]  # --window-steps: the window's (record) steps for every job, in place of JOBS' (0: JOBS')


def job_env(mode: str) -> dict:
    """The job's environment: cupti-python on PYTHONPATH for the CUPTI modes only; no py-spy on PATH for nospy;
    TEARDOWN_CUPTI=1 for full_td only."""
    env = dict(os.environ)
    parts = [x for x in env.get("PYTHONPATH", "").split(os.pathsep) if x and x != CUPTI_SITE[0]]
    if mode in CUPTI_MODES and CUPTI_SITE[0]:
        parts.insert(0, CUPTI_SITE[0])
    env["PYTHONPATH"] = os.pathsep.join(parts)
    if mode == "nospy":
        env["PATH"] = os.pathsep.join(x for x in env.get("PATH", "").split(os.pathsep)
                                      if x and not os.path.exists(os.path.join(x, "py-spy")))
    env.pop("TEARDOWN_CUPTI", None)
    env.pop("GPUCHECKUP_LIGHT_COUNTER_STEPS", None)
    if mode in CUPTI_MODES and mode != "counters":
        env["GPUCHECKUP_LIGHT_COUNTER_STEPS"] = "0"  # records over every step: the window before the counter steps
    if mode == "full_td":
        env["TEARDOWN_CUPTI"] = "1"
    return env


def backend_of(run_dir: Path) -> dict:
    """Which light backend ran (agent.json's capture, the agent log's line) and the CUPTI trace's own summary."""
    out = {}
    try:
        info = json.loads((run_dir / "agent.json").read_text())
        caps = info.get("captures") or []
        out["light_backend"] = caps[0].get("light_backend") if caps else None
        out["agent_errors"] = info.get("errors")
    except (OSError, ValueError):
        pass
    try:
        out["light_log"] = [ln.split(": ", 1)[-1] for ln in (run_dir / "agent.log").read_text().splitlines()
                            if "light window:" in ln]
    except OSError:
        pass
    out["host_samples"] = sorted(p.name for p in run_dir.glob("host-samples*.json"))
    tr = run_dir / "traces" / "trace.json.gz"
    if tr.exists():
        try:
            d = json.loads(gzip.decompress(tr.read_bytes()))
            out["trace_mb"] = round(tr.stat().st_size / 1e6, 2)
            out["gpucheckup_light"] = d.get("gpucheckup_light")
        except (OSError, ValueError) as e:
            out["trace_error"] = str(e)
    return out


def run_once(job: str, mode: str, work: Path, r: int, timeout_s: float = 240.0) -> dict:
    script, extra, skip, steps_k, _ = JOBS[job]
    steps_k = WINDOW_STEPS[0] or steps_k
    rep = work / f"{job}-{mode}-{r}.json"
    cmd = [PY, str(HERE / script), *extra, "--report", str(rep)]
    if mode in VARIANTS:
        cmd = [PY, str(HERE / "light_variant.py"), mode, *cmd[1:]]
    row = {"job": job, "mode": mode, "round": r}
    if mode != "plain":
        out = work / "runs" / f"{job}-{mode}-{r}"
        out.parent.mkdir(parents=True, exist_ok=True)  # run --out makes one folder, not those above it
        light = mode == "light" or mode in CUPTI_MODES
        cmd = [PY, "-m", "gpucheckup", "run", "--out", str(out), "--skip", str(skip), "--steps", str(steps_k),
               "--no-report", *(["--light"] if light else []), "--", *cmd]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=job_env(mode))
    row["wall_s"] = round(time.time() - t0, 2)
    row["rc"] = p.returncode
    if p.returncode:
        row["stderr"] = p.stderr[-800:]
    try:
        d = json.loads(rep.read_text())
        row["plain_median_ms"] = d["median_ms_after_warmup"]
    except (OSError, ValueError, KeyError) as e:
        row["error"] = f"no job report: {e}"
    if mode != "plain":
        dirs = sorted(out.glob("*"))
        if dirs:
            row["run_dir"] = str(dirs[-1])
            rows = list(csv.DictReader(open(dirs[-1] / "steps.csv")))
            prof = [float(x["ms"]) for x in rows if x["phase"] == "profiled" and x["ms"]]
            plain = [float(x["ms"]) for x in rows[skip // 2:] if x["phase"] == "" and x["ms"]]
            row["window_median_ms"] = statistics.median(prof) if prof else None
            row["same_run_unprofiled_median_ms"] = statistics.median(plain) if plain else None
            row["window_ms"] = prof
            steps = [(int(x["step"]), float(x["ms"])) for x in rows if x["phase"] == "" and x["ms"]]
            before = [ms for n, ms in steps if skip // 2 <= n < skip]
            last = max((int(x["step"]) for x in rows if x["phase"]), default=skip + steps_k)
            after = [ms for n, ms in steps if n >= last + AFTER_GAP]
            counted = [float(x["ms"]) for x in rows if x["phase"] == "counters" and x["ms"]]
            row["counter_ms"] = counted
            row["counter_median_ms"] = statistics.median(counted) if counted else None
            row["before_window_median_ms"] = statistics.median(before) if before else None
            row["after_window_median_ms"] = statistics.median(after) if after else None
            row["before_ms"], row["after_ms"] = before, after
            row["window_figures"] = window_figures(rows, before)
            row["phases"] = {}
            for x in rows:
                row["phases"][x["phase"]] = row["phases"].get(x["phase"], 0) + 1
            if light:
                row.update(backend_of(dirs[-1]))
    return row


def window_figures(rows: list[dict], before: list[float]) -> dict | None:
    """A counter window's figures from its steps.csv rows (docs/validation.md 6m): record steps against the same
    window's counter steps (all and one by one), the whole window (counter and record steps) against the steps before
    it (median and mean), the records' warm-up steps and their time, and the pause at the window's stop (the time
    between the last record step's end and the next step's start)."""
    counted = [float(x["ms"]) for x in rows if x["phase"] == "counters" and x["ms"]]
    recorded = [float(x["ms"]) for x in rows if x["phase"] == "profiled" and x["ms"]]
    if not counted or not recorded:
        return None
    c, b = statistics.median(counted), statistics.median(before) if before else None
    last = max(i for i, x in enumerate(rows) if x["phase"] == "profiled")
    warm = [float(x["ms"]) for x in rows[:last] if x["phase"] == "profile-warmup" and x["ms"]]
    nxt = rows[last + 1] if last + 1 < len(rows) else None
    pause = None
    if nxt and nxt["ms"]:
        pause = round((float(nxt["t_end_s"]) - float(rows[last]["t_end_s"])) * 1000 - float(nxt["ms"]), 1)
    whole = counted + recorded
    return {"records_vs_counters_pct": pct(statistics.median(recorded), c),
            "record_steps_vs_counters_pct": [pct(x, c) for x in recorded],
            "counters_vs_before_pct": pct(c, b), "whole_median_vs_before_pct": pct(statistics.median(whole), b),
            "whole_mean_vs_before_pct": pct(statistics.mean(whole), b),
            "records_warmup_steps": max(len(warm) - 1, 0), "records_warmup_ms": warm[1:], "stop_pause_ms": pause}


def counters_table(rows: list[dict]) -> str:
    """Per workload, the counter windows' figures (window_figures): medians over runs."""
    out = ["| workload | runs | counters / before | records / counters | whole window / before (median, mean) "
           "| records' warm-up steps | stop pause ms |", "| --- | --- | --- | --- | --- | --- | --- |"]

    def med(xs):
        xs = [x for x in xs if x is not None]
        return statistics.median(xs) if xs else None

    def fmt(x, unit="%"):
        return "-" if x is None else f"{x:+.1f}{unit}" if unit == "%" else f"{x:.0f}"

    for job in JOBS:
        figs = [r["window_figures"] for r in rows if r["job"] == job and r.get("window_figures")]
        if not figs:
            continue
        g = {k: med([f[k] for f in figs]) for k in ("counters_vs_before_pct", "records_vs_counters_pct",
                                                   "whole_median_vs_before_pct", "whole_mean_vs_before_pct",
                                                   "stop_pause_ms")}
        warm = "/".join(str(f["records_warmup_steps"]) for f in figs)
        out.append(f"| {job} | {len(figs)} | {fmt(g['counters_vs_before_pct'])} | {fmt(g['records_vs_counters_pct'])} | "
                   f"{fmt(g['whole_median_vs_before_pct'])}, {fmt(g['whole_mean_vs_before_pct'])} | {warm} | "
                   f"{fmt(g['stop_pause_ms'], 'ms')} |")
    return "\n".join(out)


def check(row: dict) -> None:
    """The verdict and the light window's figures of a captured run."""
    js = Path(row["run_dir"]) / "checkup.json"
    p = subprocess.run([PY, "-m", "gpucheckup", "analyze", row["run_dir"], "--json", str(js), "--quiet"],
                       capture_output=True, text=True, timeout=200)
    if p.returncode:
        row["verdict_error"] = p.stderr[-500:]
        return
    r = flat_report(decode(js.read_bytes()))
    row["verdict"] = r["verdict"]["primary"]
    row["scores"] = r["verdict"].get("scores")
    row["busy_pct"] = (r.get("gpu") or {}).get("busy_pct")
    row["gaps_source"] = (r.get("gaps") or {}).get("source")
    row["gaps_pct_of_step"] = (r.get("gaps") or {}).get("pct_of_step")
    row["host_samples"] = (r.get("run_figures") or {}).get("host_samples")
    row["counters"] = r.get("counters")  # the light window's counter steps (analysis/one_trace/counter_steps.py)
    # "What to try first": each fix's key, its replayed saving % (None: not replayed) and its bound, in ms
    row["fixes"] = [(f["key"], round(f["predicted"]["saving_pct"], 1) if f.get("predicted") else None,
                     round(f["saving_ms"] or 0.0, 2)) for f in r.get("fixes") or []]


def pct(a, b):
    return None if a is None or b in (None, 0) else 100.0 * (a / b - 1.0)


def table(rows: list[dict]) -> str:
    """Per workload and mode: window step time (median, runs), against plain, in-run (window / before it), after the
    window against before it, verdicts."""
    out = ["| workload | mode | before ms median (runs) | window ms median (runs) | vs plain median | in-run median (runs) "
           "| after/before median (runs) | verdicts | expected |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]

    def fmt(x):
        return "-" if x is None else f"{x:+.1f}%"

    def runs(xs):
        return f"{fmt(statistics.median(xs)) if xs else '-'} ({', '.join(f'{x:+.1f}' for x in xs)})"

    for job in JOBS:
        by = {m: [r for r in rows if r["job"] == job and r["mode"] == m] for m in MODES}
        if not any(by.values()):
            continue
        pl = [r["plain_median_ms"] for r in by["plain"] if r.get("plain_median_ms")]
        p_med = statistics.median(pl) if pl else None
        if pl:
            out.append(f"| {job} | plain | | {p_med:.2f} ({', '.join(f'{x:.2f}' for x in pl)}) | | | | | "
                       f"{JOBS[job][4] or '-'} |")
        for m in MODES[1:]:
            v = [r["window_median_ms"] for r in by[m] if r.get("window_median_ms")]
            if not v:
                continue
            same = [pct(r.get("window_median_ms"), r.get("before_window_median_ms")) for r in by[m]]
            after = [pct(r.get("after_window_median_ms"), r.get("before_window_median_ms")) for r in by[m]]
            med = statistics.median(v)
            b = [r["before_window_median_ms"] for r in by[m] if r.get("before_window_median_ms")]
            b_txt = f"{statistics.median(b):.2f} ({', '.join(f'{x:.2f}' for x in b)})" if b else "-"
            verdicts = "/".join(str(r.get("verdict")) for r in by[m] if "verdict" in r) or "-"
            out.append(f"| {job} | {m} | {b_txt} | {med:.2f} ({', '.join(f'{x:.2f}' for x in v)}) | {fmt(pct(med, p_med))} | "
                       f"{runs([x for x in same if x is not None])} | {runs([x for x in after if x is not None])} | "
                       f"{verdicts} | {JOBS[job][4] or '-'} |")
    return "\n".join(out)


def recheck(src: Path, root: Path, out: Path) -> None:
    """Check up again every run of a light_ab.json whose run directory is now under `root`."""
    rows = json.loads(src.read_text())
    out.mkdir(parents=True, exist_ok=True)
    for row in rows:
        if not row.get("run_dir"):
            continue
        rd = Path(row["run_dir"])
        moved = root / rd.parent.name / rd.name
        if not moved.is_dir():
            row["verdict_error"] = f"not brought back: {moved}"
            continue
        row["run_dir"] = str(moved)
        try:
            check(row)
        except Exception as e:  # noqa: BLE001
            row["verdict_error"] = f"{type(e).__name__}: {e}"
        print(row["job"], row["mode"], row["round"], row.get("verdict"), row.get("gaps_source"), flush=True)
        print("   fixes:", row.get("fixes", [])[:4], flush=True)
    (out / "light_ab.json").write_text(json.dumps(rows, indent=1))
    (out / "light_ab.md").write_text(table(rows) + "\n")
    print(table(rows))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--deadline-s", type=float, default=540.0)
    ap.add_argument("--jobs", default=",".join(JOBS))
    ap.add_argument("--work", type=Path, default=Path("/tmp/light_ab"))
    ap.add_argument("--modes", default="plain,full,light")
    ap.add_argument("--plan", default="", help="modes by job, overriding --jobs and --modes: "
                    "'launch:plain,cupti,full;gpu:plain,cupti'")
    ap.add_argument("--run-s", type=float, default=20.0, help="no run is started with less than this left")
    ap.add_argument("--window-steps", type=int, default=0, help="the window's steps (--steps) for every job, in place "
                    "of each job's own (e.g. 5, gpucheckup run's default)")
    ap.add_argument("--cupti-site", default="", help="folder holding cupti-python, put on the cupti mode's PYTHONPATH")
    ap.add_argument("--check-budget-s", type=float, default=150.0, help="time kept at the end for the check-ups")
    ap.add_argument("--check-workers", type=int, default=6, help="check-ups run at once, after the last run")
    ap.add_argument("--recheck", type=Path, help="check up the runs of this light_ab.json again (here, not on the "
                    "device), their run directories moved under --runs-root; writes OUT/light_ab.json and .md")
    ap.add_argument("--runs-root", type=Path, help="where the runs of --recheck now are (their job-mode-round folders)")
    a = ap.parse_args()
    if a.recheck:
        recheck(a.recheck, a.runs_root, a.out)
        return
    CUPTI_SITE[0] = a.cupti_site
    WINDOW_STEPS[0] = a.window_steps
    plan = {job: tuple(a.modes.split(",")) for job in a.jobs.split(",")}
    if a.plan:  # a job named twice ("gpu16:cupti;gpu16:counters") runs every mode given for it, in order
        plan = {}
        for job, ms in (part.split(":", 1) for part in a.plan.split(";")):
            plan[job] = plan.get(job, ()) + tuple(m for m in ms.split(",") if m not in plan.get(job, ()))
    bad = [f"{j}:{m}" for j, ms in plan.items() for m in ms if j not in JOBS or m not in MODES]
    if bad:
        sys.exit(f"light_ab: unknown job or mode: {', '.join(bad)}")
    t_end = time.time() + a.deadline_s
    a.out.mkdir(parents=True, exist_ok=True)
    a.work.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []

    def save():
        (a.out / "light_ab.json").write_text(json.dumps(rows, indent=1))
        (a.out / "light_ab.md").write_text(table(rows) + "\n\n" + counters_table(rows) + "\n")

    for r in range(a.rounds):
        for job, modes in plan.items():
            order = modes[r % len(modes):] + modes[: r % len(modes)]
            for m in order:
                left = t_end - a.check_budget_s - time.time()  # keep time for the check-ups
                if left < a.run_s:
                    break
                try:
                    row = run_once(job, m, a.work, r, timeout_s=min(240.0, left + 30.0))
                except Exception as e:  # noqa: BLE001
                    row = {"job": job, "mode": m, "round": r, "error": f"{type(e).__name__}: {e}"}
                rows.append(row)
                print(json.dumps({k: v for k, v in row.items()
                                  if k not in ("stderr", "window_ms", "before_ms", "after_ms")}), flush=True)
            save()
    first = {"counters": 0, "cupti": 1, "full": 2}

    def check_one(row):
        if time.time() > t_end:
            return
        try:
            check(row)
        except Exception as e:  # noqa: BLE001
            row["verdict_error"] = f"{type(e).__name__}: {e}"
        print(row["job"], row["mode"], row["round"], row.get("verdict"), row.get("gaps_source"),
              json.dumps(row.get("host_samples"))[:400], flush=True)

    todo = sorted((x for x in rows if x.get("run_dir")), key=lambda x: (x["round"], first.get(x["mode"], 3)))
    with ThreadPoolExecutor(max_workers=a.check_workers) as pool:  # the runs are done: the host's cores are free
        list(pool.map(check_one, todo))
    save()
    print(table(rows))
    print(counters_table(rows))


if __name__ == "__main__":
    main()

"""The H200 validation of `gpucheckup run` / `gpucheckup attach` and the overhead measurement.

Run by validation/h200_capture.sh (which sets up the paths); writes to OUT:
  summary.md       the checks (expected vs got) and the overhead table, ready for docs/validation.md
  summary.json     the same, with every figure
  overhead.csv     one row per overhead run (job, mode, round, medians)
  runs.tar.gz      the run directories of the checks (gzipped traces, CSV, JSON)
  oh_runs.tar.gz   the overhead runs' directories without traces (manifest, steps.csv, nvml.csv, agent.json)
  logs.tar.gz      stdout/stderr of every command
  env.txt          nvidia-smi, versions
Phases (each logged, none stops the others):
  1. gpucheckup run -- python3 validation/train_input_bound.py    expect input_bound
  2. gpucheckup run -- python3 validation/train_launch_bound.py   expect launch_bound
  3. attach --steps 5 and --duration 0.5 to a launch-bound job started under gpucheckup run (expect
     launch_bound), then SIGTERM to gpucheckup run: the job must die of it and so must the launcher
  4. attach --mode py-spy to plain input- and launch-bound jobs: coarse verdicts input_bound, launch_bound
  5. overhead: ROUNDS interleaved rounds of {plain, always_on, profiled} per job; the job's own per-step
     wall times (validation/common.py), medians -> table
`--smoke` runs everything tiny (for a CPU machine: the checks then fail for want of a GPU).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
GC = [PY, "-m", "gpucheckup"]
IB = str(REPO / "validation" / "train_input_bound.py")
LB = str(REPO / "validation" / "train_launch_bound.py")
MAX_TAR_BYTES = 15_500_000


class Validation:
    def __init__(self, out: Path, work: Path, smoke: bool, budget_s: float):
        self.out, self.work, self.smoke, self.budget_s = out, work, smoke, budget_s
        self.logs = work / "logs"
        self.runs = work / "runs"
        self.oh_runs = work / "oh_runs"
        for d in (self.logs, self.runs, self.oh_runs, out):
            d.mkdir(parents=True, exist_ok=True)
        self.t0 = time.time()
        self.checks: list[dict] = []
        self.overhead: list[dict] = []
        self.notes: list[str] = []
        self.ib_args = ["--batch", "4", "--size", "64", "--aug-passes", "1"] if smoke else []
        self.lb_args = ["--d", "64", "--blocks", "4"] if smoke else []

    def elapsed(self) -> float:
        return time.time() - self.t0

    # ---- helpers ---------------------------------------------------------------------------------
    def run(self, name: str, cmd: list[str], timeout: float) -> tuple[int | None, float]:
        t = time.time()
        with open(self.logs / f"{name}.out", "w") as o, open(self.logs / f"{name}.err", "w") as e:
            o.write("$ " + " ".join(cmd) + "\n")
            o.flush()
            try:
                rc = subprocess.run(cmd, stdout=o, stderr=e, timeout=timeout, cwd=REPO).returncode
            except subprocess.TimeoutExpired:
                rc = None
                e.write(f"\n[validation] timed out after {timeout} s\n")
        return rc, time.time() - t

    def start(self, name: str, cmd: list[str]) -> subprocess.Popen:
        o = open(self.logs / f"{name}.out", "w")
        o.write("$ " + " ".join(cmd) + "\n")
        o.flush()
        return subprocess.Popen(cmd, stdout=o, stderr=open(self.logs / f"{name}.err", "w"), cwd=REPO)

    def check(self, name: str, expected, got, **figures) -> None:
        ok = got == expected
        self.checks.append({"check": name, "expected": expected, "got": got, "pass": ok, **figures})
        print(f"[{self.elapsed():6.1f} s] {'PASS' if ok else 'FAIL'} {name}: expected {expected}, got {got}",
              flush=True)

    @staticmethod
    def load(path: Path) -> dict | None:
        """A JSON file; a check-up document as its first check-up's report, with its run's run-level keys."""
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        if isinstance(doc, dict) and "schema_version" in doc:
            from gpucheckup.document import decode, flat_report

            return flat_report(decode(path.read_bytes()))
        return doc

    # ---- phases 1-2 ------------------------------------------------------------------------------
    def run_check(self, name: str, script: str, expected: str, run_args: list[str], job_args: list[str]) -> None:
        report = self.work / f"{name}.json"
        rc, secs = self.run(name, GC + ["run", "--out", str(self.runs), "--name", name, *run_args,
                                        "--json", str(report), "--", PY, script, *job_args], timeout=240)
        data = self.load(report) or {}
        if "reports" in data:
            data = data["reports"][0]
        v = (data.get("verdict") or {}).get("primary")
        fig = (data.get("run_figures") or {})
        steps = fig.get("steps") or {}
        nv = fig.get("nvml") or {}
        self.check(f"gpucheckup run {Path(script).name}: verdict", expected, v, exit_code=rc, seconds=round(secs, 1),
                   busy_pct=(data.get("gpu") or {}).get("busy_pct"),
                   step_median_ms=(data.get("steps") or {}).get("median_ms"),
                   findings=[f["id"] for f in (data.get("verdict") or {}).get("findings", [])],
                   run_steps=steps.get("count"), profiled_steps=steps.get("profiled_steps"),
                   steady_median_ms=steps.get("steady_median_ms"),
                   profiler_overhead_pct=steps.get("profiler_overhead_pct"),
                   nvml_util_mean_pct=nv.get("util_mean_pct"), nvml_heartbeat=(nv.get("heartbeat") or {}).get(
                       "heartbeat"), flops_per_step=(fig.get("flops") or {}).get("flops_per_step"),
                   no_gpu_timeline=(data.get("run") or {}).get("no_gpu_timeline"))

    # ---- phase 3 ---------------------------------------------------------------------------------
    def attach_agent(self) -> None:
        from gpucheckup.capture.attach import find_agent

        p = self.start("attach_job", GC + ["run", "--out", str(self.runs), "--name", "attach_agent", "--skip",
                                           "1000000", "--no-report", "--", PY, LB, "--seconds", "90", *self.lb_args])
        agent = None
        end = time.time() + 90
        while time.time() < end and p.poll() is None:
            agent = find_agent(p.pid)
            if agent:
                break
            time.sleep(0.5)
        if agent is None:
            self.check("attach: agent found under gpucheckup run", True, False)
            p.kill()
            return
        time.sleep(5)  # past the job's warm-up
        for name, extra in (("attach_steps", ["--steps", "5"]), ("attach_duration", ["--duration", "0.5"])):
            report = self.work / f"{name}.json"
            rc, secs = self.run(name, GC + ["attach", "--pid", str(p.pid), *extra, "--json", str(report)],
                                timeout=120)
            data = self.load(report) or {}
            self.check(f"gpucheckup attach {' '.join(extra)} (agent): verdict", "launch_bound",
                       (data.get("verdict") or {}).get("primary"), exit_code=rc, seconds=round(secs, 1),
                       busy_pct=(data.get("gpu") or {}).get("busy_pct"),
                       steps_in_trace=(data.get("steps") or {}).get("count"))
        p.send_signal(signal.SIGTERM)
        try:
            rc = p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = None
        self.check("SIGTERM to gpucheckup run: the job and the launcher die of it", -signal.SIGTERM, rc)

    # ---- phase 4 ---------------------------------------------------------------------------------
    def attach_pyspy(self, name: str, script: str, expected: str, job_args: list[str]) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUCHECKUP_")}
        o = open(self.logs / f"{name}_job.out", "w")
        job = subprocess.Popen([PY, script, "--seconds", "60", *job_args], stdout=o, stderr=subprocess.STDOUT,
                               cwd=REPO, env=env)
        time.sleep(8 if self.smoke else 15)  # past import torch, CUDA start-up and warm-up
        report = self.work / f"{name}.json"
        rc, secs = self.run(name, GC + ["attach", "--pid", str(job.pid), "--mode", "py-spy", "--duration", "10",
                                        "--rate", "4", "--out", str(self.runs), "--json", str(report)], timeout=120)
        job.terminate()
        try:
            job.wait(timeout=30)
        except subprocess.TimeoutExpired:
            job.kill()
        coarse = ((self.load(report) or {}).get("run_figures") or {}).get("coarse") or {}
        self.check(f"gpucheckup attach --mode py-spy {Path(script).name}: coarse verdict", expected,
                   coarse.get("verdict"), exit_code=rc, sentence=coarse.get("sentence"),
                   main_states_pct=coarse.get("main_states_pct"), samples=coarse.get("samples"))

    # ---- phase 5 ---------------------------------------------------------------------------------
    def overhead_job(self, job: str, script: str, job_args: list[str], rounds: int, skip: int, steps: int,
                     deadline_s: float) -> None:
        for r in range(rounds):
            for mode in ("plain", "always_on", "profiled"):
                if self.elapsed() > deadline_s:
                    self.notes.append(f"overhead {job}: stopped before round {r + 1} {mode} (time budget)")
                    return
                rep = self.work / f"oh_{job}_{mode}_{r}.json"
                name = f"oh_{job}_{mode}_{r}"
                job_cmd = [PY, script, *job_args, "--report", str(rep)]
                if mode == "plain":
                    cmd = job_cmd
                else:
                    window = ["--skip", "1000000"] if mode == "always_on" else ["--skip", str(skip), "--steps",
                                                                                 str(steps)]
                    cmd = GC + ["run", "--out", str(self.oh_runs), "--name", name, *window, "--no-report", "--",
                                *job_cmd]
                rc, secs = self.run(name, cmd, timeout=180)
                self.overhead.append(self.overhead_row(job, mode, r, rc, secs, rep, name))
                print(f"[{self.elapsed():6.1f} s] overhead {job} {mode} round {r + 1}: "
                      f"{self.overhead[-1].get('median_ms')} ms", flush=True)

    def overhead_row(self, job, mode, r, rc, secs, rep: Path, name: str) -> dict:
        row = {"job": job, "mode": mode, "round": r + 1, "exit_code": rc, "seconds": round(secs, 1)}
        data = self.load(rep)
        if not data:
            return row
        ms = data["step_ms"]  # ms[i] is step i+2
        w = data["warmup"]
        row["median_ms"] = statistics.median(ms[w:]) if len(ms) > w else None
        row["block_ms_per_step"] = data["block_ms_per_step"]
        run_dirs = sorted(self.oh_runs.glob(f"*-{name}"))
        if mode != "plain" and run_dirs:
            rd = run_dirs[-1]
            phases = {}
            try:
                with open(rd / "steps.csv") as f:
                    for rec in csv.DictReader(f):
                        phases[int(rec["step"])] = rec["phase"]
                        if rec["phase"] == "" and rec["ms"]:
                            row.setdefault("_agent_ms", []).append(float(rec["ms"]))
            except OSError:
                pass
            agent_ms = row.pop("_agent_ms", [])
            row["agent_median_ms"] = statistics.median(agent_ms[w:]) if len(agent_ms) > w else None
            if mode == "profiled":
                prof = [ms[s - 2] for s, p in phases.items() if p == "profiled" and 2 <= s <= len(ms) + 1]
                rest = [ms[s - 2] for s, p in phases.items() if p == "" and s - 2 >= w and s - 2 < len(ms)]
                row["window_median_ms"] = statistics.median(prof) if prof else None
                row["median_ms"] = statistics.median(rest) if rest else row["median_ms"]
                agent = self.load(rd / "agent.json") or {}
                caps = agent.get("captures") or []
                row["export_s"] = caps[0].get("export_s") if caps else None
        return row

    def overhead_table(self) -> list[dict]:
        out = []
        for job in sorted({r["job"] for r in self.overhead}):
            def med(mode, key):
                vals = [r[key] for r in self.overhead if r["job"] == job and r["mode"] == mode and r.get(key)]
                return statistics.median(vals) if vals else None

            plain = med("plain", "median_ms")
            rows = [("plain", plain), ("always_on", med("always_on", "median_ms")),
                    ("profiled: steps outside the window", med("profiled", "median_ms")),
                    ("profiled: steps inside the window", med("profiled", "window_median_ms"))]
            for label, value in rows:
                out.append({"job": job, "what": label, "median_step_ms": value,
                            "vs_plain_pct": None if value is None or not plain else 100 * (value / plain - 1),
                            "rounds": len([r for r in self.overhead if r["job"] == job and r.get("median_ms")]) // 3})
            out.append({"job": job, "what": "synchronized block ms/step: plain -> always_on",
                        "median_step_ms": med("always_on", "block_ms_per_step"),
                        "vs_plain_pct": None if not med("plain", "block_ms_per_step") or not med(
                            "always_on", "block_ms_per_step") else
                        100 * (med("always_on", "block_ms_per_step") / med("plain", "block_ms_per_step") - 1)})
            out.append({"job": job, "what": "trace export (s, once per window)", "median_step_ms": med(
                "profiled", "export_s"), "vs_plain_pct": None})
        return out

    # ---- outputs ---------------------------------------------------------------------------------
    def environment(self) -> str:
        parts = [f"date: {time.strftime('%Y-%m-%d %H:%M:%S %z')}", f"host: {platform.node()}",
                 f"python: {sys.version.split()[0]}"]
        for cmd in (["nvidia-smi"], ["nvidia-smi", "topo", "-m"],
                    [PY, "-c", "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, "
                               "'cudnn', torch.backends.cudnn.version())"],
                    ["py-spy", "--version"], [PY, "-c", "import pynvml, psutil, msgspec, rich, numpy; "
                                                        "print('pynvml/psutil/msgspec/rich/numpy present')"]):
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
                parts.append("$ " + " ".join(cmd) + "\n" + r.stdout + r.stderr)
            except (OSError, subprocess.TimeoutExpired) as e:
                parts.append("$ " + " ".join(cmd) + f"\n{e}")
        return "\n".join(parts)

    def write(self) -> None:
        table = self.overhead_table()
        summary = {"elapsed_s": round(self.elapsed(), 1), "checks": self.checks, "overhead_table": table,
                   "overhead_runs": self.overhead, "notes": self.notes, "smoke": self.smoke}
        (self.out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
        cols = ["job", "mode", "round", "exit_code", "seconds", "median_ms", "block_ms_per_step", "agent_median_ms",
                "window_median_ms", "export_s"]
        with open(self.out / "overhead.csv", "w", newline="") as f:
            w = csv.DictWriter(f, cols, extrasaction="ignore")
            w.writeheader()
            w.writerows(self.overhead)
        md = [f"# gpucheckup H200 capture validation ({time.strftime('%Y-%m-%d')}, {self.elapsed():.0f} s)", "",
              "| check | expected | got | pass | figures |", "| --- | --- | --- | --- | --- |"]
        for c in self.checks:
            figs = ", ".join(f"{k}={_short(v)}" for k, v in c.items() if k not in ("check", "expected", "got", "pass")
                             and v is not None)
            md.append(f"| {c['check']} | {c['expected']} | {c['got']} | {'yes' if c['pass'] else 'NO'} | {figs} |")
        md += ["", "## Overhead (median step time, the job's own clock; median over rounds)", "",
               "| job | what | median step ms | vs plain |", "| --- | --- | --- | --- |"]
        for t in table:
            v, p = t["median_step_ms"], t["vs_plain_pct"]
            md.append(f"| {t['job']} | {t['what']} | {'' if v is None else f'{v:.3f}'} | "
                      f"{'' if p is None else f'{p:+.1f}%'} |")
        md += [""] + [f"- note: {n}" for n in self.notes]
        (self.out / "summary.md").write_text("\n".join(md) + "\n")
        (self.out / "env.txt").write_text(self.environment())
        self.tar("logs.tar.gz", self.logs, lambda p: True)
        self.tar("oh_runs.tar.gz", self.oh_runs, lambda p: "traces" not in p.parts)
        self.tar("runs.tar.gz", self.runs, lambda p: True)
        if (self.out / "runs.tar.gz").stat().st_size > MAX_TAR_BYTES:
            self.notes.append("runs.tar.gz over 15.5 MB: attach traces left out")
            self.tar("runs.tar.gz", self.runs, lambda p: "attach" not in p.parts)
        if (self.out / "runs.tar.gz").stat().st_size > MAX_TAR_BYTES:
            self.tar("runs.tar.gz", self.runs, lambda p: "traces" not in p.parts)
            (self.out / "summary.md").open("a").write("- note: runs.tar.gz holds no traces (over 15.5 MB)\n")

    def tar(self, name: str, folder: Path, keep) -> None:
        with tarfile.open(self.out / name, "w:gz") as t:
            for p in sorted(folder.rglob("*")):
                rel = p.relative_to(folder)
                if p.is_file() and keep(rel):
                    t.add(p, arcname=str(Path(folder.name) / rel))


def _short(v) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_short(x)}" for k, x in list(v.items())[:4]) + "}"
    s = str(v)
    return (s[:90] + "...") if len(s) > 90 else s.replace("|", "/")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--work", type=Path, default=Path("/tmp/gpucheckup-h200-validation"))
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--budget", type=float, default=420.0, help="stop starting overhead runs after this many seconds")
    args = ap.parse_args()
    v = Validation(args.out, args.work, args.smoke, args.budget)
    ib, lb = v.ib_args, v.lb_args
    phases = [
        lambda: v.run_check("input_bound", IB, "input_bound", ["--skip", "10", "--steps", "5", "--flops"],
                            ["--steps", "16" if v.smoke else "30", *ib]),
        lambda: v.run_check("launch_bound", LB, "launch_bound", ["--skip", "30", "--steps", "5", "--flops"],
                            ["--steps", "60" if v.smoke else "200", *lb]),
        v.attach_agent,
        lambda: v.attach_pyspy("pyspy_input_bound", IB, "input_bound", ib),
        lambda: v.attach_pyspy("pyspy_launch_bound", LB, "launch_bound", lb),
        lambda: v.overhead_job("launch_bound", LB, ["--steps", "60" if v.smoke else "200", *lb], args.rounds,
                               skip=30, steps=20, deadline_s=args.budget - 15),
        lambda: v.overhead_job("input_bound", IB, ["--steps", "8" if v.smoke else "24", *ib], args.rounds,
                               skip=10, steps=5, deadline_s=args.budget - 25),
    ]
    stopping = []

    def on_term(signum, frame):
        stopping.append(signum)
        raise TimeoutError(f"signal {signum}: stopping, writing what there is")

    signal.signal(signal.SIGTERM, on_term)
    for phase in phases:
        if stopping:
            break
        try:
            phase()
        except Exception as e:  # noqa: BLE001 - one broken phase must not lose the others
            v.notes.append(f"phase failed: {type(e).__name__}: {e}")
            print(f"[{v.elapsed():6.1f} s] phase failed: {type(e).__name__}: {e}", flush=True)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    v.write()
    print((args.out / "summary.md").read_text())
    return 0 if all(c["pass"] for c in v.checks) else 1


if __name__ == "__main__":
    sys.exit(main())

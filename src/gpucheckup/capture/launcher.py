"""`gpucheckup run [options] -- CMD ...`: run a job with the agent injected, sample telemetry, check it up.

What it does, in order:
1. creates the run directory `<out>/<YYYYmmdd-HHMMSS>-<name>/`;
2. starts CMD with this package's `capture/inject` folder first on PYTHONPATH (the injected
   `sitecustomize` arms the agent and then runs the job's own sitecustomize), the agent's
   settings in GPUCHECKUP_* variables (only those given as options; others already in the
   environment pass through), and standard streams inherited, so output passes through unchanged;
3. samples NVML (10 Hz) and the CPU use of the job's processes (1 Hz) in threads of this process;
4. forwards SIGTERM, SIGHUP, SIGUSR1, SIGUSR2 to the job, and SIGINT / SIGQUIT too unless they
   came from the terminal (then the job, in the same foreground process group, got them already);
5. when the job ends: publishes leftover partial files, writes env.json and manifest.json
   (every artefact listed), prints the check-up of the run directory;
6. exits with the job's exit code; when the job was killed by a signal, kills itself with the
   same signal (128 + N for signals that would dump core).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from gpucheckup import __version__
from gpucheckup.atomic import write_json_atomic
from gpucheckup.capture import environment
from gpucheckup.capture.agent import ENV_RUN_DIR, SETTINGS
from gpucheckup.capture.telemetry import CpuSampler, NvmlSampler
from gpucheckup.errors import CheckupError

FORWARDED = ("SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGINT", "SIGQUIT")
TERMINAL_SIGNALS = ("SIGINT", "SIGQUIT")  # the terminal sends these to the whole foreground group
CORE_SIGNALS = ("SIGQUIT", "SIGILL", "SIGABRT", "SIGFPE", "SIGSEGV", "SIGBUS", "SIGSYS", "SIGTRAP", "SIGXCPU",
                "SIGXFSZ")
ARTEFACT_WHAT = [  # (name prefix, description), first match wins
    ("manifest.json", "this manifest"),
    ("traces/attach/", "trace captured by gpucheckup attach (gzipped Kineto JSON)"),
    ("traces/time-window/", "time window profiled because no optimizer stepped (gzipped Kineto JSON)"),
    ("traces/", "profiled window of the job (gzipped Kineto JSON, one per rank)"),
    ("steps", "wall time of every optimizer step of the whole run (CSV)"),
    ("nvml.csv", "NVML GPU telemetry at 10 Hz, sampled outside the job (CSV)"),
    ("cpu.csv", "CPU use of the job's processes, 1 Hz (CSV)"),
    ("env.json", "environment: GPUs, driver, CUDA/cuDNN/NCCL/torch versions, topology, CPU budget, variables"),
    ("agent-bootstrap.log", "errors arming the agent"),
    ("agent", "the in-job agent's log (.log) and account of what it saw and did (.json)"),
    ("flops", "FLOPs of one training step counted by FlopCounterMode (JSON)"),
]


def add_parser(sub) -> None:
    """The `run` subcommand."""
    p = sub.add_parser(
        "run", help="run a training job with no code change and check it up (gpucheckup run -- python train.py)",
        description="Run CMD with the gpucheckup agent injected: step times for the whole run, a profiled "
                    "window after warm-up, NVML telemetry, the environment; then print the check-up. "
                    "Exit code and signals pass through.")
    p.add_argument("--out", type=Path, default=Path("gpucheckup-runs"), help="parent folder of run directories")
    p.add_argument("--name", help="run name (default: the script's name)")
    p.add_argument("--skip", type=int, help=f"steps before the profiled window (default {SETTINGS['skip'][1]})")
    p.add_argument("--steps", type=int, help=f"steps to profile (default {SETTINGS['steps'][1]})")
    p.add_argument("--record-shapes", action="store_true", help="record operator input shapes")
    p.add_argument("--with-stack", action="store_true", help="record Python stacks (large traces)")
    p.add_argument("--flops", action="store_true", help="count one step's FLOPs with FlopCounterMode (flops.json)")
    p.add_argument("--window-start", type=float, metavar="S",
                   help=f"no optimizer step after S seconds: profile a time window (default "
                        f"{SETTINGS['window_start_s'][1]:g})")
    p.add_argument("--window", type=float, metavar="S",
                   help=f"length of that time window (default {SETTINGS['window_s'][1]:g})")
    p.add_argument("--nvml-hz", type=float, default=10.0, help="NVML sampling rate (default 10)")
    p.add_argument("--no-nvml", action="store_true", help="do not sample NVML")
    p.add_argument("--no-report", action="store_true", help="do not print the check-up at the end")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the check-up as JSON")
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD", help="the job's command line")
    p.set_defaults(func=cmd_run)


def agent_environment(args) -> dict[str, str]:
    """GPUCHECKUP_* variables for the options given on the command line."""
    given = {"skip": args.skip, "steps": args.steps, "window_start_s": args.window_start, "window_s": args.window,
             "record_shapes": args.record_shapes or None, "with_stack": args.with_stack or None,
             "flops": args.flops or None}
    out = {}
    for name, value in given.items():
        if value is None:
            continue
        var = SETTINGS[name][0]
        out[var] = ("1" if value else "0") if isinstance(value, bool) else str(value)
    return out


def run_name(cmd: list[str]) -> str:
    """A short name for the run: the Python script's stem, else the program's name."""
    for a in cmd:
        if a.endswith(".py"):
            return Path(a).stem
    return Path(cmd[0]).name or "job"


def make_run_dir(out: Path, name: str) -> Path:
    """A new, empty run directory."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:60] or "job"
    for i in range(1, 1000):
        d = out / f"{stamp}-{safe}{'' if i == 1 else f'-{i}'}"
        try:
            d.mkdir(parents=True)
            return d.resolve()
        except FileExistsError:
            continue
        except OSError as e:
            raise CheckupError(f"cannot create the run directory in {out}: {e.strerror}") from None
    raise CheckupError(f"cannot create a run directory in {out}")


def inject_dir() -> Path:
    """The folder holding the injected sitecustomize.py."""
    return Path(__file__).resolve().parent / "inject"


def cmd_run(args, console) -> int:
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise CheckupError("no command to run: gpucheckup run [options] -- python train.py ...")
    for name in ("skip", "steps"):
        v = getattr(args, name)
        if v is not None and v < (2 if name == "skip" else 1):
            raise CheckupError(f"--{name} must be at least {2 if name == 'skip' else 1}")
    run_dir = make_run_dir(args.out, args.name or run_name(cmd))
    env = os.environ.copy()
    env["PYTHONPATH"] = os.pathsep.join([str(inject_dir())] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env[ENV_RUN_DIR] = str(run_dir)
    env.update(agent_environment(args))
    started = time.time()
    forwarder = SignalForwarder()  # before the job starts: no signal may fall between the two
    try:
        child = subprocess.Popen(cmd, env=env)
    except (FileNotFoundError, PermissionError) as e:
        forwarder.restore()
        code, why = (127, "command not found") if isinstance(e, FileNotFoundError) else (126, "permission denied")
        return _not_started(run_dir, cmd, started, code, f"{why}: {cmd[0]}")
    forwarder.attach(child)
    cpu = CpuSampler(run_dir, child.pid)
    nvml = NvmlSampler(run_dir, args.nvml_hz, lambda: cpu.pids)
    if args.no_nvml:
        nvml.status = "off (--no-nvml)"
    elif nvml.open():
        nvml.start()
    if cpu.open():
        cpu.start()
    host_env = {}
    try:
        host_env = environment.collect_host(env)
    except Exception as e:  # noqa: BLE001 - the run goes on
        host_env = {"error": f"{type(e).__name__}: {e}"}
    rc = child.wait()
    ended = time.time()
    forwarder.restore()
    status = exit_status(rc)
    try:
        finish_run_dir(run_dir, cmd, args, rc, started, ended, host_env, nvml, cpu)
    except Exception as e:  # noqa: BLE001 - the job's exit status comes first
        _say(f"gpucheckup: could not finish the run directory {run_dir}: {type(e).__name__}: {e}")
    _report(run_dir, args, console)
    return _pass_through(rc, status)


def _not_started(run_dir: Path, cmd, started, code: int, why: str) -> int:
    manifest = {"gpucheckup_version": __version__, "kind": "run", "command": cmd, "cwd": os.getcwd(),
                "run_dir": str(run_dir), "started_epoch_s": started, "exit_code": code,
                "failed": {"job": why}, "artefacts": []}
    write_json_atomic(run_dir / "manifest.json", manifest)
    _say(f"gpucheckup: error: {why}")
    return code


class SignalForwarder:
    """Forward signals sent to the launcher on to the job (held until the job has started)."""

    def __init__(self):
        self.child: subprocess.Popen | None = None
        self.held: list[int] = []
        self.previous = {}
        for name in FORWARDED:
            sig = getattr(signal, name, None)
            if sig is not None:
                self.previous[sig] = signal.signal(sig, self._forward)

    def attach(self, child: subprocess.Popen) -> None:
        self.child = child
        for signum in self.held:
            self._send(signum)

    def _forward(self, signum, frame) -> None:
        if signal.Signals(signum).name in TERMINAL_SIGNALS and _terminal_sent_to_group():
            return
        if self.child is None:
            self.held.append(signum)
        else:
            self._send(signum)

    def _send(self, signum: int) -> None:
        try:
            os.kill(self.child.pid, signum)
        except ProcessLookupError:
            pass

    def restore(self) -> None:
        for sig, old in self.previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)


def _terminal_sent_to_group() -> bool:
    """Whether we run in the terminal's foreground process group (so a Ctrl-C reached the job too)."""
    for fd in (0, 1, 2):
        try:
            if os.isatty(fd):
                return os.tcgetpgrp(fd) == os.getpgrp()
        except OSError:
            continue
    return False


def exit_status(rc: int) -> dict:
    """The job's exit as the manifest states it."""
    if rc >= 0:
        return {"exit_code": rc, "exit_signal": None}
    try:
        name = signal.Signals(-rc).name
    except ValueError:
        name = f"signal {-rc}"
    return {"exit_code": None, "exit_signal": name}


def _pass_through(rc: int, status: dict) -> int:
    """Our exit code, or death by the job's signal."""
    if rc >= 0:
        return rc
    sig = -rc
    if status["exit_signal"] in CORE_SIGNALS:
        return 128 + sig
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
    time.sleep(1)
    return 128 + sig


def finish_run_dir(run_dir: Path, cmd, args, rc, started, ended, host_env, nvml, cpu) -> dict:
    """Stop the samplers, publish leftovers, write env.json and manifest.json."""
    failed: dict[str, str] = {}
    nvml.close()
    cpu.close()
    if nvml.status != "ok":
        failed["nvml"] = nvml.status
    if cpu.status != "ok":
        failed["cpu"] = cpu.status
    recovered = publish_leftovers(run_dir)
    if recovered:
        failed["agent_exit"] = (f"the job did not exit cleanly; partial files published as they were: "
                                f"{', '.join(recovered)}")
    agents = read_agents(run_dir)
    env = environment.merge_agents(host_env, agents)
    write_json_atomic(run_dir / "env.json", env)
    captured, more_failed = capture_status(run_dir, agents, args)
    failed.update(more_failed)
    captured["nvml"] = nvml.summary()
    captured["cpu"] = cpu.summary()
    manifest = {
        "gpucheckup_version": __version__,
        "kind": "run",
        "command": cmd,
        "cwd": os.getcwd(),
        "run_dir": str(run_dir),
        "started_epoch_s": started,
        "ended_epoch_s": ended,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "duration_s": round(ended - started, 3),
        **exit_status(rc),
        "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                    if k not in ("func", "cmd")},
        "agent_settings": {k: a.get("settings") for k, a in agents.items()},
        "captured": captured,
        "failed": failed,
        "versions": {
            "gpucheckup": __version__,
            "python_launcher": sys.version.split()[0],
            "torch": (env.get("torch") or {}).get("version"),
            "cuda_runtime": (env.get("torch") or {}).get("cuda"),
            "driver": env.get("driver"),
            "cuda_driver": env.get("cuda_driver"),
        },
    }
    manifest["artefacts"] = list_artefacts(run_dir)
    write_json_atomic(run_dir / "manifest.json", manifest)
    return manifest


def publish_leftovers(run_dir: Path) -> list[str]:
    """Partial step files of a job that died are renamed into place; temporary files are removed."""
    recovered = []
    for part in sorted(run_dir.glob("*.csv.part")):
        final = part.with_name(part.name[: -len(".part")])
        if not final.exists():
            os.replace(part, final)
            recovered.append(final.name)
        else:
            part.unlink()
    shutil.rmtree(run_dir / ".claims", ignore_errors=True)
    for tmp in list(run_dir.rglob(".*")):
        if tmp.is_file():
            tmp.unlink(missing_ok=True)
    return recovered


def read_agents(run_dir: Path) -> dict[str, dict]:
    """Each agent's account (agent.json / agent-rank<R>.json), by process key."""
    import json

    out = {}
    for p in sorted(run_dir.glob("agent*.json")):
        try:
            a = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        out[a.get("key") or p.stem] = a
    return out


def capture_status(run_dir: Path, agents: dict[str, dict], args) -> tuple[dict, dict]:
    """What was captured, and what failed, from the files and the agents' accounts."""
    captured: dict = {"traces": sorted(str(p.relative_to(run_dir)) for p in (run_dir / "traces").rglob("*.json.gz"))
                      if (run_dir / "traces").is_dir() else []}
    failed: dict[str, str] = {}
    captured["steps"] = {p.name: _count_rows(p) for p in sorted(run_dir.glob("steps*.csv"))}
    captured["flops"] = sorted(p.name for p in run_dir.glob("flops*.json"))
    captured["processes"] = {}
    if not agents:
        failed["agent"] = ("no agent reported: the job never imported torch, or is not a Python job, or the agent "
                           "could not start (see agent-bootstrap.log)")
    for key, a in agents.items():
        caps = a.get("captures") or []
        captured["processes"][key] = {"pid": a.get("pid"), "steps": a.get("steps"), "captures": caps,
                                      "time_windows": a.get("time_windows"), "control": a.get("control")}
        if not any(c.get("status") == "done" and not c.get("attach") for c in caps):
            s = a.get("settings") or {}
            why = [c.get("status") for c in caps if not c.get("attach")]
            failed[f"trace:{key}"] = why[0] if why else (
                f"no profiled window: the job ran {a.get('steps')} optimizer steps, the window needed "
                f"{s.get('skip', 0) + s.get('steps', 0)} (use --skip/--steps), and no time window ran")
        if a.get("error_count"):
            failed[f"agent:{key}"] = (f"{a['error_count']} agent errors, the job went on (see "
                                      f"{(a.get('files') or {}).get('log', 'agent.log')}): "
                                      + "; ".join(a.get("errors") or [])[:300])
        fl = a.get("flops")
        if args.flops and isinstance(fl, dict) and "status" in fl:
            failed[f"flops:{key}"] = fl["status"]
    return captured, failed


def _count_rows(path: Path) -> int:
    with open(path, "rb") as f:
        return max(sum(1 for line in f if line.strip()) - 1, 0)


def list_artefacts(run_dir: Path) -> list[dict]:
    """Every file in the run directory (the manifest excepted), with its size and what it holds."""
    out = []
    for p in sorted(run_dir.rglob("*")):
        if not p.is_file() or p.name == "manifest.json":
            continue
        rel = p.relative_to(run_dir).as_posix()
        what = next((w for prefix, w in ARTEFACT_WHAT if rel.startswith(prefix)), "file left by the job or agent")
        out.append({"path": rel, "bytes": p.stat().st_size, "what": what})
    return out


def _report(run_dir: Path, args, console) -> None:
    """Print (and write) the check-up of the run; a failure here never changes the exit status."""
    if args.no_report and not args.json:
        return
    try:
        from gpucheckup.run_checkup import check_run, emit_run

        emit_run(check_run(run_dir), console, quiet=args.no_report, json_path=args.json)
    except CheckupError as e:
        _say(f"gpucheckup: no check-up of {run_dir}: {e}")
    except Exception as e:  # noqa: BLE001
        _say(f"gpucheckup: no check-up of {run_dir}: internal error {type(e).__name__}: {e}")
    console.print(f"run directory: {run_dir}", style="dim", markup=False, highlight=False, soft_wrap=True)


def _say(line: str) -> None:
    sys.stderr.write(" ".join(line.split()) + "\n")

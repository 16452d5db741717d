"""`gpucheckup run [options] -- CMD ...`: run a job with the agent injected, sample telemetry, write its run directory.

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
   (every artefact listed), and returns the run directory and the job's status (the command
   line then checks the run directory up);
6. `pass_through` exits with the job's exit code; when the job was killed by a signal, kills this
   process with the same signal (128 + N for signals that would dump core, and where that signal
   cannot end it).

Every option is checked before the job starts (a bad one is a one-line error, exit 2, and no job).
Once the job has started, nothing the launcher does can lose it: whatever fails in telemetry,
the environment probes or the run directory, the launcher still waits for the job,
writes the manifest (the failure under `failed.launcher`) and passes its exit status through.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from gpucheckup import __version__, layout
from gpucheckup.atomic import write_json_atomic
from gpucheckup.capture import environment
from gpucheckup.capture.agent.settings import SETTINGS
from gpucheckup.capture.options import RunOptions
from gpucheckup.capture.sampler import HostSampler
from gpucheckup.capture.telemetry import CpuSampler, NvmlSampler
from gpucheckup.errors import CheckupError, say

FORWARDED = ("SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGINT", "SIGQUIT")
TERMINAL_SIGNALS = ("SIGINT", "SIGQUIT")  # the terminal sends these to the whole foreground group
UNCATCHABLE = ("SIGKILL", "SIGSTOP")  # their disposition cannot be changed (signal.signal raises)
CORE_SIGNALS = ("SIGQUIT", "SIGILL", "SIGABRT", "SIGFPE", "SIGSEGV", "SIGBUS", "SIGSYS", "SIGTRAP", "SIGXCPU",
                "SIGXFSZ")


@dataclass
class Job:
    """A finished job: its run directory and its status as Popen gives it (negative: killed by that signal;
    126/127 when it could not start)."""

    run_dir: Path
    returncode: int
    started: bool


def agent_environment(args: RunOptions) -> dict[str, str]:
    """GPUCHECKUP_* variables for the options given on the command line."""
    given = {"skip": args.skip, "steps": args.steps, "window_start_s": args.window_start, "window_s": args.window,
             "record_shapes": args.record_shapes or None, "with_stack": args.with_stack or None,
             "flops": args.flops or None, "light": args.light or None}
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


def run_job(cmd: list[str], args: RunOptions) -> Job:
    """Run the job with the agent injected and telemetry sampled; its run directory and status.
    CheckupError (and no job) for a bad option or an empty command."""
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise CheckupError("no command to run: gpucheckup run [options] -- python train.py ...")
    args.check()
    run_dir = make_run_dir(args.out, args.name or run_name(cmd))
    env = os.environ.copy()
    env["PYTHONPATH"] = os.pathsep.join([str(inject_dir())] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env[layout.ENV_RUN_DIR] = str(run_dir)
    env.update(agent_environment(args))
    started = time.time()
    forwarder = SignalForwarder()  # before the job starts: no signal may fall between the two
    try:
        child = subprocess.Popen(cmd, env=env)
    except OSError as e:
        forwarder.restore()
        if isinstance(e, FileNotFoundError):
            code, why = 127, "command not found"
        else:  # as a shell says it: 126 for a command found but not runnable
            code, why = 126, "permission denied" if isinstance(e, PermissionError) else (e.strerror or str(e)).lower()
        return Job(run_dir, _not_started(run_dir, cmd, started, code, f"{why}: {cmd[0]}"), started=False)
    # From here on the job runs: whatever fails below, wait for it, write the manifest, pass its status on.
    problems: list[str] = []
    nvml = cpu = host = None
    host_env: dict = {}
    rc = None
    try:
        forwarder.attach(child)
        cpu = CpuSampler(run_dir, child.pid)
        nvml = NvmlSampler(run_dir, args.nvml_hz, lambda: cpu.pids)
        if args.no_nvml:
            nvml.status = "off (--no-nvml)"
        else:
            start_sampler(nvml, problems)
        start_sampler(cpu, problems)
        if args.light:  # py-spy stacks of the light window, from outside the job (capture/sampler.py)
            host = HostSampler(run_dir, args.sample_hz)
            start_sampler(host, problems)
        host_env = _guard(problems, "collecting the environment", lambda: environment.collect_host(env)) or {}
        rc = child.wait()
    except Exception as e:  # noqa: BLE001 - the job and its exit status come first
        problems.append(f"watching the job: {type(e).__name__}: {e}")
    finally:
        if rc is None:  # the launcher failed on the way: the job still runs; wait for it before anything else
            rc = _wait_anyway(child)
        ended = time.time()
        forwarder.restore()
        finish_or_fallback(run_dir, cmd, args, rc, started, ended, host_env, nvml, cpu, problems, host)
    return Job(run_dir, rc, started=True)


def start_sampler(sampler, problems: list[str]) -> None:
    """Open and start a telemetry sampler; its status says why when it cannot sample, `problems` when it broke."""
    try:
        if sampler.open():
            sampler.start()
    except Exception as e:  # noqa: BLE001 - telemetry must never cost the job
        sampler.status = f"failed to start: {type(e).__name__}: {e}"
        problems.append(f"starting {sampler.name}: {type(e).__name__}: {e}")


def _guard(problems: list[str], what: str, fn):
    """fn(), or None with the failure added to `problems`: nothing the launcher does may lose the job."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - the job and its exit status come first
        problems.append(f"{what}: {type(e).__name__}: {e}")
        return None


def _wait_anyway(child: subprocess.Popen) -> int:
    """The job's return code, waiting through interruptions of the launcher itself."""
    while True:
        try:
            return child.wait()
        except KeyboardInterrupt:  # the job got the terminal's Ctrl-C too; it decides when it ends
            continue


def finish_or_fallback(run_dir: Path, cmd, args, rc, started, ended, host_env, nvml, cpu, problems,
                       host=None) -> None:
    """Write the run directory's manifest; should that fail, a minimal one that says why."""
    try:
        finish_run_dir(run_dir, cmd, args, rc, started, ended, host_env, nvml, cpu, problems, host)
        if problems:
            say(f"gpucheckup: the job went on, but the launcher failed at: {'; '.join(problems)} "
                 f"(in {run_dir / layout.MANIFEST}, failed.launcher)")
        return
    except Exception as e:  # noqa: BLE001 - the job's exit status comes first
        problems.append(f"writing the manifest: {type(e).__name__}: {e}")
    say(f"gpucheckup: could not finish the run directory {run_dir}: {problems[-1]}")
    for sampler in (nvml, cpu, host):
        if sampler is not None:
            _guard(problems, f"stopping {sampler.name}", sampler.close)
    _guard(problems, "publishing partial files", lambda: publish_leftovers(run_dir))
    try:
        write_json_atomic(run_dir / layout.MANIFEST, {
            "gpucheckup_version": __version__, "kind": layout.KIND_RUN, "command": cmd, "cwd": os.getcwd(),
            "run_dir": str(run_dir), "started_epoch_s": started, "ended_epoch_s": ended,
            "duration_s": round(ended - started, 3), **exit_status(rc), "captured": {},
            "failed": {"launcher": "; ".join(problems)}, "artefacts": _guard([], "", lambda: list_artefacts(run_dir))
            or []})
    except Exception as e:  # noqa: BLE001
        say(f"gpucheckup: no manifest in {run_dir}: {type(e).__name__}: {e}")


def _not_started(run_dir: Path, cmd, started, code: int, why: str) -> int:
    manifest = {"gpucheckup_version": __version__, "kind": layout.KIND_RUN, "command": cmd, "cwd": os.getcwd(),
                "run_dir": str(run_dir), "started_epoch_s": started, "exit_code": code,
                "failed": {"job": why}, "artefacts": []}
    write_json_atomic(run_dir / layout.MANIFEST, manifest)
    say(f"gpucheckup: error: {why}")
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


def pass_through(rc: int) -> int:
    """Our exit code, or death by the job's signal (128 + N where the signal cannot end us as it ended the job)."""
    if rc >= 0:
        return rc
    sig = -rc
    name = exit_status(rc)["exit_signal"]
    if name in CORE_SIGNALS or name == "SIGSTOP":  # SIGSTOP would stop us, not end us
        return 128 + sig
    sys.stdout.flush()
    sys.stderr.flush()
    if name not in UNCATCHABLE:  # SIGKILL needs no reset (and signal.signal refuses it)
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            return 128 + sig
    try:
        os.kill(os.getpid(), sig)
    except OSError:
        return 128 + sig
    time.sleep(1)  # a signal whose default is to be ignored (SIGCHLD, SIGWINCH, SIGURG) lands here
    return 128 + sig


def finish_run_dir(run_dir: Path, cmd, args: RunOptions, rc, started, ended, host_env, nvml, cpu,
                   problems: list[str] | None = None, host=None) -> dict:
    """Stop the samplers, publish leftovers, write env.json and manifest.json. A step that fails is
    stated under failed.launcher (with anything in `problems`) and the others still run."""
    problems = [] if problems is None else problems
    failed: dict[str, str] = {}
    samplers = ((nvml, "nvml"), (cpu, "cpu")) + (((host, "host_samples"),) if host is not None else ())
    for sampler, key in samplers:
        if sampler is None:
            continue
        _guard(problems, f"stopping {sampler.name}", sampler.close)
        if sampler.status != "ok":
            failed[key] = sampler.status
    recovered = _guard(problems, "publishing partial files", lambda: publish_leftovers(run_dir)) or []
    if recovered:
        failed["agent_exit"] = (f"the job did not exit cleanly; partial files published as they were: "
                                f"{', '.join(recovered)}")
    agents = _guard(problems, "reading the agents' accounts", lambda: read_agents(run_dir)) or {}
    env = _guard(problems, "merging the environment", lambda: environment.merge_agents(host_env, agents)) or host_env
    _guard(problems, "writing env.json", lambda: write_json_atomic(run_dir / layout.ENV, env))
    captured, more_failed = _guard(problems, "reading what was captured",
                                   lambda: capture_status(run_dir, agents, args)) or ({}, {})
    failed.update(more_failed)
    for sampler, key in samplers:
        captured[key] = _guard(problems, f"summing up {key}", sampler.summary) if sampler else {"status": "not started"}
    if problems:
        failed["launcher"] = "; ".join(problems)
    manifest = {
        "gpucheckup_version": __version__,
        "kind": layout.KIND_RUN,
        "command": cmd,
        "cwd": os.getcwd(),
        "run_dir": str(run_dir),
        "started_epoch_s": started,
        "ended_epoch_s": ended,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "duration_s": round(ended - started, 3),
        **exit_status(rc),
        "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(args).items()},
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
    return write_manifest(run_dir, manifest)


def write_manifest(run_dir: Path, manifest: dict, **updates) -> dict:
    """The manifest with `updates` and every file now in the run directory listed, written atomically."""
    manifest = {**manifest, **updates}
    manifest["artefacts"] = list_artefacts(run_dir)
    write_json_atomic(run_dir / layout.MANIFEST, manifest)
    return manifest


def publish_leftovers(run_dir: Path) -> list[str]:
    """Partial step files of a job that died are renamed into place; temporary files are removed."""
    recovered = []
    for part in sorted(run_dir.glob(f"*.csv{layout.PART}")):
        final = part.with_name(part.name[: -len(layout.PART)])
        if not final.exists():
            os.replace(part, final)
            recovered.append(final.name)
        else:
            part.unlink()
    shutil.rmtree(run_dir / layout.CLAIMS, ignore_errors=True)
    for tmp in list(run_dir.rglob(".*")):
        if tmp.is_file():
            tmp.unlink(missing_ok=True)
    return recovered


def read_agents(run_dir: Path) -> dict[str, dict]:
    """Each agent's account (agent.json / agent-rank<R>.json), by process key."""
    import json

    out = {}
    for p in sorted(run_dir.glob(layout.AGENT_GLOB)):
        try:
            a = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        out[a.get("key") or p.stem] = a
    return out


def capture_status(run_dir: Path, agents: dict[str, dict], args: RunOptions) -> tuple[dict, dict]:
    """What was captured, and what failed, from the files and the agents' accounts."""
    traces = run_dir / layout.TRACES
    captured: dict = {"traces": sorted(str(p.relative_to(run_dir)) for p in traces.rglob("*.json.gz"))
                      if traces.is_dir() else []}
    failed: dict[str, str] = {}
    captured["steps"] = {p.name: _count_rows(p) for p in sorted(run_dir.glob(layout.STEPS_GLOB))}
    captured["flops"] = sorted(p.name for p in run_dir.glob(layout.FLOPS_GLOB))
    captured["processes"] = {}
    if not agents:
        failed["agent"] = ("no agent reported: the job never imported torch, or is not a Python job, or the agent "
                           f"could not start (see {layout.BOOTSTRAP_LOG})")
    for key, a in agents.items():
        caps = a.get("captures") or []
        captured["processes"][key] = {"pid": a.get("pid"), "steps": a.get("steps"), "captures": caps,
                                      "time_windows": a.get("time_windows"), "control": a.get("control")}
        if not any(c.get("status") == "done" and not c.get("attach") for c in caps):
            s = a.get("settings") or {}
            why = [c.get("status") for c in caps if not c.get("attach")]
            failed[f"trace:{key}"] = str(why[0]) if why else (
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
        if not p.is_file() or p.name == layout.MANIFEST:
            continue
        rel = p.relative_to(run_dir).as_posix()
        what = next((w for prefix, w in layout.ARTEFACT_WHAT if rel.startswith(prefix)), "file left by the job or agent")
        out.append({"path": rel, "bytes": p.stat().st_size, "what": what})
    return out

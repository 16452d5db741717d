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
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from gpucheckup import __version__, layout
from gpucheckup.capture import control, environment, safe_dir
from gpucheckup.capture.agent.settings import SETTINGS
from gpucheckup.capture.options import RunOptions
from gpucheckup.capture.sampler import HostSampler
from gpucheckup.capture.telemetry import CpuSampler, NvmlSampler
from gpucheckup.atomic import NotWritten
from gpucheckup.errors import CheckupError, say

RESERVE_BYTES = 256 * 1024  # held in the run directory during the run, freed for the manifest (a full disk)
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
             "flops": args.flops or None, "light": args.light or None,
             "light_syncs": args.light_syncs or None, "light_counter_steps": args.counter_steps,
             "max_steps": args.max_steps}
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


def make_run_dir(out: Path, name: str) -> safe_dir.RunDirectory:
    """A new, empty run directory (mode 0700, in an `out` folder no other user controls: safe_dir.py).
    CheckupError, one line, when `out` is unsafe (exit 2); NotWritten naming `out` when the folder cannot be made,
    its parent missing included: only `out` itself is made, never the folders above it (exit 4)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:60] or "job"
    try:
        return safe_dir.create(out, f"{stamp}-{safe}")
    except safe_dir.UnsafeFolder as e:
        raise CheckupError(f"refusing --out {out}: {e}") from None
    except safe_dir.NoParent as e:
        raise NotWritten(f"{out}: not made: {e.strerror} (--out makes one folder, not the folders above it)") from None
    except OSError as e:
        raise NotWritten(f"{out}: no run directory made: {safe_dir.cause(e)}") from None


def as_run_dir(run_dir) -> safe_dir.RunDirectory:
    """A RunDirectory for a run directory given as one, or as a path (a folder the caller trusts: opened without
    following a link, its mode not checked)."""
    if isinstance(run_dir, safe_dir.RunDirectory):
        return run_dir
    return safe_dir.RunDirectory.existing(str(run_dir), private=False)


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
    rd = make_run_dir(args.out, args.name or run_name(cmd))
    run_dir = Path(rd.path)
    try:
        rd.reserve(RESERVE_BYTES)
    except OSError as e:
        rd.close()
        raise CheckupError(f"cannot write in the run directory {rd.path}: {safe_dir.cause(e)}") from None
    env = _job_environment(rd, args)
    started = time.time()
    forwarder = SignalForwarder()  # before the job starts: no signal may fall between the two
    try:
        child = subprocess.Popen(cmd, env=env)
    except OSError as e:
        forwarder.restore()
        code, why = _not_runnable(e)
        return Job(run_dir, _not_started(rd, cmd, started, code, f"{why}: {cmd[0]}"), started=False)
    # From here on the job runs: whatever fails below, wait for it, write the manifest, pass its status on.
    problems: list[str] = []
    nvml = cpu = host = None
    host_env: dict = {}
    rc = None
    try:
        forwarder.attach(child)
        cpu = CpuSampler(rd, child.pid)
        nvml = NvmlSampler(rd, args.nvml_hz, lambda: cpu.pids)
        if args.no_nvml:
            nvml.status = "off (--no-nvml)"
        else:
            start_sampler(nvml, problems)
        start_sampler(cpu, problems)
        if args.light:  # py-spy stacks of the light window, from outside the job (capture/sampler.py)
            host = HostSampler(rd, args.sample_hz)
            start_sampler(host, problems)
        host_env = _guard(problems, "collecting the environment", lambda: environment.collect_host(env)) or {}
        rc = child.wait()
    except Exception as e:  # noqa: BLE001 - the job and its exit status come first
        problems.append(f"watching the job: {safe_dir.cause(e)}")
    finally:
        if rc is None:  # the launcher failed on the way: the job still runs; wait for it before anything else
            rc = _wait_anyway(child)
        ended = time.time()
        forwarder.restore()
        _remove_sockets(child.pid, cpu)
        finish_or_fallback(rd, cmd, args, rc, started, ended, host_env, nvml, cpu, problems, host)
        run_dir = _where_now(rd, run_dir)
        rd.close()
    return Job(run_dir, rc, started=True)


def _job_environment(rd: safe_dir.RunDirectory, args: RunOptions) -> dict[str, str]:
    """The job's environment: ours, with the agent's folder first on PYTHONPATH, the run directory and the
    launcher named, and the agent's settings."""
    env = os.environ.copy()
    env["PYTHONPATH"] = os.pathsep.join([str(inject_dir())] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env[layout.ENV_RUN_DIR] = rd.path
    env[layout.ENV_RUN_DIR_ID] = rd.id
    env[layout.ENV_LAUNCHER_PID] = str(os.getpid())
    env.update(agent_environment(args))
    return env


def _not_runnable(e: OSError) -> tuple[int, str]:
    """A command that could not start, as a shell says it: 127 not found, 126 found but not runnable."""
    if isinstance(e, FileNotFoundError):
        return 127, "command not found"
    return 126, "permission denied" if isinstance(e, PermissionError) else (e.strerror or str(e)).lower()


def _where_now(rd: safe_dir.RunDirectory, run_dir: Path) -> Path:
    """The run directory's path, or where the folder we made and wrote is now when its path was replaced
    (the check-up reads what we wrote, never what a link points to)."""
    try:
        if rd.replaced() is None:
            return run_dir
        return Path(os.readlink(f"/proc/self/fd/{rd.fd}"))
    except OSError:
        return run_dir


def _remove_sockets(pid: int, cpu) -> None:
    """Control sockets the job's processes left behind (killed by a signal: no exit handler ran)."""
    pids = {pid} | set(getattr(cpu, "pids", None) or [])
    for p in pids:
        try:
            os.kill(p, 0)
            continue  # still alive (a process the job left running): its socket is still in use
        except ProcessLookupError:
            pass
        except OSError:
            continue
        try:
            os.unlink(control.socket_path(p))
        except OSError:
            pass


def start_sampler(sampler, problems: list[str]) -> None:
    """Open and start a telemetry sampler; its status says why when it cannot sample, `problems` when it broke."""
    try:
        if sampler.open():
            sampler.start()
    except Exception as e:  # noqa: BLE001 - telemetry must never cost the job
        sampler.status = f"failed to start: {safe_dir.cause(e)}"
        problems.append(f"starting {sampler.name}: {safe_dir.cause(e)}")


def _guard(problems: list[str], what: str, fn):
    """fn(), or None with the failure added to `problems`: nothing the launcher does may lose the job."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - the job and its exit status come first
        problems.append(f"{what}: {safe_dir.cause(e)}")
        return None


def _wait_anyway(child: subprocess.Popen) -> int:
    """The job's return code, waiting through interruptions of the launcher itself."""
    while True:
        try:
            return child.wait()
        except KeyboardInterrupt:  # the job got the terminal's Ctrl-C too; it decides when it ends
            continue


def finish_or_fallback(rd: safe_dir.RunDirectory, cmd, args, rc, started, ended, host_env, nvml, cpu,
                       problems, host=None) -> None:
    """Write the run directory's manifest; should that fail, a minimal one that says why."""
    try:
        finish_run_dir(rd, cmd, args, rc, started, ended, host_env, nvml, cpu, problems, host)
        if problems:
            say(f"gpucheckup: the job went on, but the launcher failed at: {'; '.join(problems)} "
                 f"(in {rd.path}/{layout.MANIFEST}, failed.launcher)")
        return
    except Exception as e:  # noqa: BLE001 - the job's exit status comes first
        problems.append(f"writing the manifest: {safe_dir.cause(e)}")
    say(f"gpucheckup: could not finish the run directory {rd.path}: {problems[-1]}")
    _guard(problems, "freeing the reserved space", rd.release)
    for sampler in (nvml, cpu, host):
        if sampler is not None:
            _guard(problems, f"stopping {sampler.name}", sampler.close)
    _guard(problems, "publishing partial files", lambda: publish_leftovers(rd))
    try:
        rd.write_json(layout.MANIFEST, {
            "gpucheckup_version": __version__, "kind": layout.KIND_RUN, "command": cmd, "cwd": os.getcwd(),
            "run_dir": rd.path, "started_epoch_s": started, "ended_epoch_s": ended,
            "duration_s": round(ended - started, 3), **exit_status(rc), "captured": {},
            "failed": {"launcher": "; ".join(problems)}, "artefacts": _guard([], "", lambda: list_artefacts(rd))
            or []})
    except Exception as e:  # noqa: BLE001
        say(f"gpucheckup: no manifest in {rd.path}: {safe_dir.cause(e)}")


def _not_started(rd: safe_dir.RunDirectory, cmd, started, code: int, why: str) -> int:
    manifest = {"gpucheckup_version": __version__, "kind": layout.KIND_RUN, "command": cmd, "cwd": os.getcwd(),
                "run_dir": rd.path, "started_epoch_s": started, "exit_code": code,
                "failed": {"job": why}, "artefacts": []}
    rd.release()
    rd.write_json(layout.MANIFEST, manifest)
    rd.close()
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


def finish_run_dir(rd: safe_dir.RunDirectory, cmd, args: RunOptions, rc, started, ended, host_env, nvml, cpu,
                   problems: list[str] | None = None, host=None) -> dict:
    """Stop the samplers, publish leftovers, write env.json and manifest.json. A step that fails is
    stated under failed.launcher (with anything in `problems`) and the others still run."""
    problems = [] if problems is None else problems
    failed: dict[str, str] = {}
    disk = _check_run_dir(rd, problems, failed)
    samplers = ((nvml, "nvml"), (cpu, "cpu")) + (((host, "host_samples"),) if host is not None else ())
    for sampler, key in samplers:
        if sampler is None:
            continue
        _guard(problems, f"stopping {sampler.name}", sampler.close)
        if sampler.status != "ok":
            failed[key] = sampler.status
    agents = _guard(problems, "reading the agents' accounts", lambda: read_agents(rd)) or {}
    recovered = _guard(problems, "publishing partial files", lambda: publish_leftovers(rd)) or []
    if recovered:
        failed.update(_leftovers_said(recovered, agents, disk, rc))
    env = _guard(problems, "merging the environment", lambda: environment.merge_agents(host_env, agents)) or host_env
    _guard(problems, "writing env.json", lambda: rd.write_json(layout.ENV, env))
    captured, more_failed = _guard(problems, "reading what was captured",
                                   lambda: capture_status(rd, agents, args)) or ({}, {})
    failed.update(more_failed)
    for k, v in list(failed.items()):
        if disk and k.startswith("trace:") and v.startswith("unknown:"):  # the evidence for the account's silence
            failed[k] = f"ENOSPC (the run directory's file system was full at the job's end): {v}"
    for sampler, key in samplers:
        captured[key] = _guard(problems, f"summing up {key}", sampler.summary) if sampler else {"status": "not started"}
    if problems:
        failed["launcher"] = "; ".join(problems)
    return write_manifest(rd, _manifest(rd, cmd, args, rc, started, ended, env, agents, captured, failed))


def _check_run_dir(rd: safe_dir.RunDirectory, problems: list[str], failed: dict[str, str]) -> str | None:
    """The run directory as the job left it: its free space (returned, said under failed.disk), the reserve
    freed, and whether someone replaced it while the job ran (said under failed.run_dir)."""
    disk = _guard(problems, "checking free space", lambda: disk_full(rd))
    if disk:
        failed["disk"] = disk
    _guard(problems, "freeing the reserved space", rd.release)
    replaced = _guard(problems, "checking the run directory", rd.replaced)
    if replaced:  # only its owner can do this (safe_dir.check_out): said, and the files stay where they were
        failed["run_dir"] = (f"{rd.path} was replaced by {replaced} while the job ran; nothing was written through "
                             "it: the files written are in the folder the launcher made, wherever it was moved")
        say(f"gpucheckup: {failed['run_dir']}")
    return disk


def _leftovers_said(recovered: list[str], agents: dict, disk: str | None, rc) -> dict[str, str]:
    """Why partial files were left for the launcher to publish, by what the job's end tells."""
    files = ", ".join(recovered)
    execd = [k for k, a in agents.items() if (a.get("state") or {}).get("exec_pending")]
    if execd:
        return {"agent_exit": f"the job's process ({', '.join(execd)}) exec'd a program that did not re-arm the agent "
                              f"(not Python, or it never imported torch); steps counted until the exec were "
                              f"published: {files}"}
    if disk:  # the writes that would have finished them failed: the job's exit says nothing here
        return {"partial_files": f"ENOSPC (the run directory's file system was full, failed.disk): partial files "
                                 f"published as they were: {files}"}
    if rc == 0:
        return {"agent_exit": f"the job exited 0, but files were left unfinished (its process ended without the "
                              f"agent's exit handler, e.g. os._exit); published as they were: {files}"}
    return {"agent_exit": f"the job did not exit cleanly; partial files published as they were: {files}"}


def _manifest(rd: safe_dir.RunDirectory, cmd, args: RunOptions, rc, started, ended, env: dict, agents: dict,
              captured: dict, failed: dict) -> dict:
    """manifest.json's content: the command, its times and exit, the options, what was captured and failed."""
    return {
        "gpucheckup_version": __version__,
        "kind": layout.KIND_RUN,
        "command": cmd,
        "cwd": os.getcwd(),
        "run_dir": rd.path,
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


DISK_LOW_BYTES = 1 << 20  # under this much free space at the job's end, the file system is said to be full


def disk_full(rd: safe_dir.RunDirectory) -> str | None:
    """ENOSPC stated when the run directory's file system is (nearly) full at the job's end."""
    st = os.fstatvfs(rd.fd)
    free = st.f_bavail * st.f_frsize
    if free >= DISK_LOW_BYTES:
        return None
    return (f"ENOSPC: the run directory's file system has {free} bytes free at the job's end "
            f"(under {DISK_LOW_BYTES} bytes): files the agent and the launcher wrote may be missing or stale")


def write_manifest(run_dir, manifest: dict, **updates) -> dict:
    """The manifest with `updates` and every file now in the run directory listed, written atomically."""
    rd = as_run_dir(run_dir)
    try:
        manifest = {**manifest, **updates}
        manifest["artefacts"] = list_artefacts(rd)
        rd.write_json(layout.MANIFEST, manifest)
    finally:
        if rd is not run_dir:
            rd.close()
    return manifest


def publish_leftovers(rd: safe_dir.RunDirectory) -> list[str]:
    """Partial step files of a job that died are renamed into place; temporary files are removed."""
    recovered = []
    names = [n for n, _ in rd.files()]
    for part in sorted(n for n in names if "/" not in n and n.endswith(".csv" + layout.PART)):
        final = part[: -len(layout.PART)]
        if final not in names:
            rd.replace(part, final)
            recovered.append(final)
        else:
            rd.unlink(part)
    rd.remove_tree(layout.CLAIMS)
    for name in names:
        if os.path.basename(name).startswith(".") and rd.exists(name):
            rd.unlink(name)
    return recovered


def read_agents(run_dir) -> dict[str, dict]:
    """Each agent's account (agent.json / agent-rank<R>.json), by process key."""
    import fnmatch
    import json

    rd = as_run_dir(run_dir)
    out = {}
    try:
        for name, _ in rd.files():
            if "/" in name or not fnmatch.fnmatch(name, layout.AGENT_GLOB):
                continue
            try:
                a = json.loads(rd.read_text(name))
            except (OSError, ValueError):
                continue
            if isinstance(a, dict):
                out[a.get("key") or name.rsplit(".", 1)[0]] = a
    finally:
        if rd is not run_dir:
            rd.close()
    return out


def capture_status(rd: safe_dir.RunDirectory, agents: dict[str, dict], args: RunOptions) -> tuple[dict, dict]:
    """What was captured, and what failed, from the files and the agents' accounts."""
    import fnmatch

    names = [n for n, _ in rd.files()]
    captured: dict = {"traces": sorted(n for n in names if n.startswith(layout.TRACES + "/")
                                       and n.endswith(".json.gz"))}
    failed: dict[str, str] = {}
    steps = {n: _count_rows(rd, n) for n in names if "/" not in n and fnmatch.fnmatch(n, layout.STEPS_GLOB)}
    captured["steps"] = steps
    captured["flops"] = sorted(n for n in names if "/" not in n and fnmatch.fnmatch(n, layout.FLOPS_GLOB))
    captured["processes"] = {}
    if not agents:
        failed["agent"] = ("no agent reported: the job never imported torch, or is not a Python job, or the agent "
                           f"could not start (see {layout.BOOTSTRAP_LOG})")
    for key, a in agents.items():
        caps = a.get("captures") or []
        captured["processes"][key] = {"pid": a.get("pid"), "steps": a.get("steps"), "captures": caps,
                                      "time_windows": a.get("time_windows"), "control": a.get("control"),
                                      "execs": a.get("execs", 0)}
        rows = steps.get(layout.steps_file(key))
        stale = isinstance(a.get("steps"), int) and rows is not None and rows > a["steps"]
        faults = a.get("faults") or []
        if not any(c.get("status") == "done" and not c.get("attach") for c in caps):
            s = a.get("settings") or {}
            why = [c.get("status") for c in caps if not c.get("attach")]
            if why:
                failed[f"trace:{key}"] = str(why[0])
            elif faults:
                failed[f"trace:{key}"] = f"no trace: the agent's writes failed: {faults[-1]}"
            elif stale:
                failed[f"trace:{key}"] = (f"unknown: the agent's account ({a.get('files', {}).get('info')}) stops at "
                                          f"step {a['steps']} but its steps file has {rows} rows: it could not be "
                                          "written again (see agent.log, and failed.disk)")
            else:
                failed[f"trace:{key}"] = (
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


def _count_rows(rd: safe_dir.RunDirectory, name: str) -> int:
    return max(sum(1 for line in rd.read_text(name).splitlines() if line.strip()) - 1, 0)


def list_artefacts(run_dir) -> list[dict]:
    """Every file in the run directory (the manifest excepted), with its size and what it holds."""
    rd = as_run_dir(run_dir)
    try:
        return rd.artefacts()
    finally:
        if rd is not run_dir:
            rd.close()

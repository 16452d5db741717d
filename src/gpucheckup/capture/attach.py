"""`gpucheckup attach --pid PID (--duration S | --steps K)`: check up a job that is already running.

Three ways in, tried in this order (or forced with --mode):
1. agent: the job runs the gpucheckup agent (started under `gpucheckup run`, or with the agent
   in its environment). PID may be the job or `gpucheckup run` itself: its descendants are
   searched for an agent's control socket. The agent profiles K steps (or S seconds) and
   writes the trace into the job's run directory (`traces/attach/`); it is checked up here.
2. inject: Python 3.14+ on both sides: `sys.remote_exec` loads the agent into the job (settings
   passed directly, the job's environment untouched), then as in 1, into a run directory
   `<out>/<stamp>-attach-<pid>/` whose manifest is written again once the capture is over.
3. py-spy: out-of-process. `py-spy dump --nonblocking` of every thread of the job and its
   children (idle ones too), a few times a second, with NVML sampled beside it. Non-blocking
   dumps do not pause the job, so NVML sees it undisturbed; `--native` adds native frames
   (py-spy must pause the job for those; it falls back to Python frames where it cannot). The result is
   a coarse verdict (analysis/stack_samples.py) and a run directory `<out>/<stamp>-attach-<pid>/`
   holding samples.csv, stacks.txt, nvml.csv, env.json, attach.json and manifest.json.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from gpucheckup import __version__
from gpucheckup.atomic import write_atomic, write_json_atomic
from gpucheckup.capture import control, environment
from gpucheckup.capture.launcher import make_run_dir, read_agents, write_manifest
from gpucheckup.capture.telemetry import NvmlSampler
from gpucheckup.errors import CheckupError

DEFAULT_DURATION_S = 20.0  # py-spy sampling
DEFAULT_STEPS = 5  # agent: as `gpucheckup run`; a job that steps no optimizer gets DEFAULT_WINDOW_S instead
DEFAULT_WINDOW_S = 5.0
STATUS_TIMEOUT_S = 5.0
INJECT_WAIT_S = 20.0
PYSPY_TIMEOUT_S = 10.0
RATE_MAX = 20.0  # each py-spy dump is a process start and a walk of every thread: more would load the host


def add_parser(sub) -> None:
    """The `attach` subcommand."""
    p = sub.add_parser("attach", help="check up a running job (gpucheckup attach --pid N --duration 20)",
                       description="Check up a running job without restarting it: through its gpucheckup agent, "
                                   "by injecting the agent (Python 3.14+), or out of process with py-spy and NVML.")
    p.add_argument("--pid", type=int, required=True, help="the job's process id (or gpucheckup run's)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--duration", type=float, metavar="S",
                   help=f"seconds to capture (py-spy default {DEFAULT_DURATION_S:g}; with the agent a window in "
                        "seconds stops after at most 100 steps)")
    g.add_argument("--steps", type=int, metavar="K",
                   help=f"optimizer steps to profile (needs the agent; its default {DEFAULT_STEPS})")
    p.add_argument("--mode", choices=("auto", "agent", "inject", "py-spy"), default="auto",
                   help="how to get in (default: the first that works, in that order)")
    p.add_argument("--out", type=Path, default=Path("gpucheckup-runs"),
                   help="parent folder of the run directory (py-spy and inject modes)")
    p.add_argument("--rate", type=float, default=4.0,
                   help=f"py-spy dumps per second, 0.1 to {RATE_MAX:g} (default 4)")
    p.add_argument("--native", action="store_true",
                   help="py-spy: native frames too (pauses the job for each dump, which biases NVML toward idle)")
    p.add_argument("--timeout", type=float, default=900.0, help="give up after this many seconds (default 900)")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the check-up as JSON")
    p.add_argument("--quiet", action="store_true", help="no terminal report (with --json)")
    p.set_defaults(func=cmd_attach)


def cmd_attach(args, console) -> int:
    pid = args.pid
    _check_process(pid)
    if args.steps is not None and not 1 <= args.steps <= control.STEPS_MAX:
        raise CheckupError(f"--steps must be from 1 to {control.STEPS_MAX}")
    if args.duration is not None and not 0.1 <= args.duration <= control.SECONDS_MAX:
        raise CheckupError(f"--duration must be from 0.1 to {control.SECONDS_MAX:g} seconds")
    if not 0.1 <= args.rate <= RATE_MAX:  # also refuses nan
        raise CheckupError(f"--rate must be from 0.1 to {RATE_MAX:g} dumps per second, got {args.rate:g}")
    if not 0 < args.timeout < float("inf"):
        raise CheckupError(f"--timeout must be a number of seconds above 0, got {args.timeout:g}")
    if args.mode in ("auto", "agent"):
        agent_pid = find_agent(pid)
        if agent_pid is not None:
            return attach_agent(agent_pid, args, console)
        if args.mode == "agent":
            raise CheckupError(f"no gpucheckup agent answers in process {pid} or its children "
                               "(start the job under `gpucheckup run`, or use --mode py-spy)")
    if args.mode in ("auto", "inject"):
        injected = inject_agent(pid, args, console)
        if injected is not None:
            run_dir, manifest = injected
            try:
                return attach_agent(pid, args, console)
            finally:
                finish_inject_manifest(run_dir, manifest)
        if args.mode == "inject":
            raise CheckupError("cannot inject the agent: sys.remote_exec needs Python 3.14+ in gpucheckup and the job")
    return attach_pyspy(pid, args, console)


def _check_process(pid: int) -> None:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        raise CheckupError(f"no process {pid}") from None
    except PermissionError:
        raise CheckupError(f"process {pid} belongs to another user: attach as that user") from None


def descendants(pid: int) -> list[int]:
    """The process and all its descendants, parents first (psutil, else /proc)."""
    try:
        import psutil

        p = psutil.Process(pid)
        return [pid] + [c.pid for c in p.children(recursive=True)]
    except ImportError:
        pass
    except Exception:  # noqa: BLE001 - psutil.Error: the process went away
        return [pid]
    children: dict[int, list[int]] = {}
    for d in Path("/proc").glob("[0-9]*"):
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop(0)
        out.append(p)
        todo += sorted(children.get(p, []))
    return out


def find_agent(pid: int) -> int | None:
    """The first process among pid and its descendants whose agent answers on its control socket."""
    for p in descendants(pid):
        if not control.socket_path(p).exists():
            continue
        try:
            answers = control.request(p, {"cmd": "status"}, STATUS_TIMEOUT_S)
        except OSError:
            continue
        if answers and answers[0].get("ok"):
            return p
    return None


def attach_agent(agent_pid: int, args, console) -> int:
    """Ask the job's agent for a window, then check up the trace it wrote."""
    from gpucheckup.checkup import check_path

    if args.duration is not None:
        req = {"cmd": "profile", "seconds": args.duration}
    else:  # --steps K, or by default the same window as `gpucheckup run`
        req = {"cmd": "profile", "steps": args.steps or DEFAULT_STEPS}
    last = _ask(agent_pid, req, args, console)
    if args.steps is None and args.duration is None and not last.get("ok") and "no optimizer step" in str(
            last.get("error")):
        last = _ask(agent_pid, {"cmd": "profile", "seconds": DEFAULT_WINDOW_S}, args, console)
    if not last.get("ok") or "trace" not in last:
        raise CheckupError(f"the agent in process {agent_pid}: {last.get('error', 'no trace')}")
    trace = Path(last["trace"])
    console.print(f"trace written: {trace}", markup=False, highlight=False, soft_wrap=True)
    try:
        results = check_path(trace)
    except CheckupError as e:
        if "CPU-only" not in str(e):
            raise
        console.print("no GPU timeline: the trace holds CPU activity only (no kernels, copies or memsets); "
                      "open it in Perfetto (ui.perfetto.dev) to look at the host side", markup=False)
        return 0
    from gpucheckup.cli import _emit

    _emit(results, args, console)
    return 0


def _ask(agent_pid: int, req: dict, args, console) -> dict:
    """One profile request to the agent; its final answer."""
    what = f"{req['steps']} steps" if "steps" in req else f"{req['seconds']:g} s"
    console.print(f"gpucheckup attach: asking the agent in process {agent_pid} to profile {what}",
                  style="dim", markup=False)
    try:
        answers = control.request(agent_pid, req, args.timeout)
    except OSError as e:
        raise CheckupError(f"the agent in process {agent_pid} did not answer: {e}") from None
    if not answers:
        raise CheckupError(f"the agent in process {agent_pid} closed the connection without an answer")
    return answers[-1]


def inject_agent(pid: int, args, console) -> tuple[Path, dict] | None:
    """Load the agent into a Python 3.14+ job with sys.remote_exec; once its socket answers, the run
    directory it writes to and the manifest written there (None when it could not be loaded)."""
    remote_exec = getattr(sys, "remote_exec", None)
    if remote_exec is None:
        return None
    run_dir = make_run_dir(args.out, f"attach-{pid}")
    root = str(Path(__file__).resolve().parents[2])
    overrides = {"skip": 10**9, "window_start_s": 1e7}
    script = (f"import sys\nsys.path.insert(0, {root!r})\ntry:\n    from gpucheckup.capture import agent\n"
              f"finally:\n    sys.path.remove({root!r})\nagent.install({str(run_dir)!r}, {overrides!r})\n")
    tmp = Path(tempfile.mkdtemp(prefix="gpucheckup-inject-"))  # mode 0700
    path = tmp / "inject.py"
    path.write_text(script)
    try:
        remote_exec(pid, str(path))
    except Exception as e:  # noqa: BLE001 - other Python version, permissions: fall back to py-spy
        console.print(f"gpucheckup attach: sys.remote_exec failed ({e}); sampling from outside instead",
                      style="dim", markup=False)
        shutil.rmtree(run_dir, ignore_errors=True)
        return None
    deadline = time.time() + INJECT_WAIT_S
    while time.time() < deadline:
        if find_agent(pid) == pid:
            shutil.rmtree(tmp, ignore_errors=True)
            manifest = write_manifest(run_dir, {
                "gpucheckup_version": __version__, "kind": "attach-inject",
                "command": ["gpucheckup", "attach", "--pid", str(pid)], "pid": pid, "run_dir": str(run_dir),
                "started_epoch_s": time.time(), "exit_code": None, "exit_signal": None, "captured": {},
                "failed": {}})
            return run_dir, manifest
        time.sleep(0.5)
    shutil.rmtree(tmp, ignore_errors=True)
    write_manifest(run_dir, {"gpucheckup_version": __version__, "kind": "attach-inject", "pid": pid,
                             "run_dir": str(run_dir), "started_epoch_s": time.time(), "captured": {},
                             "failed": {"agent": f"the injected agent did not answer within {INJECT_WAIT_S:g} s"}})
    console.print(f"gpucheckup attach: the injected agent did not answer within {INJECT_WAIT_S:g} s; "
                  "sampling from outside instead", style="dim", markup=False)
    return None


def finish_inject_manifest(run_dir: Path, manifest: dict) -> dict | None:
    """Write the inject run directory's manifest again after the capture: its traces/attach/ files, the
    agent's account and log are listed. The agent stays in the job; what it writes later is newer."""
    try:
        traces = sorted(p.relative_to(run_dir).as_posix() for p in (run_dir / "traces" / "attach").glob("*.json*"))
        agents = read_agents(run_dir)
        processes = {k: {"pid": a.get("pid"), "captures": a.get("captures")} for k, a in agents.items()}
        ended = time.time()
        return write_manifest(
            run_dir, manifest, ended_epoch_s=ended, duration_s=round(ended - manifest["started_epoch_s"], 3),
            captured={"traces": traces, "processes": processes},
            failed={} if traces else {"trace": "the injected agent wrote no trace (see agent.log)"})
    except Exception as e:  # noqa: BLE001 - the check-up already ran; say why the manifest is stale
        sys.stderr.write(f"gpucheckup attach: could not rewrite {run_dir / 'manifest.json'}: "
                         f"{type(e).__name__}: {e}\n")
        return None


def find_pyspy() -> str | None:
    """py-spy on PATH or beside this Python."""
    found = shutil.which("py-spy")
    if found:
        return found
    cand = Path(sys.executable).parent / "py-spy"
    return str(cand) if cand.exists() else None


def attach_pyspy(pid: int, args, console) -> int:
    """Sample the job from outside: py-spy stacks and NVML, a coarse verdict, a run directory."""
    from gpucheckup.analysis import stack_samples
    from gpucheckup.run_checkup import check_run, emit_run

    exe = find_pyspy()
    if exe is None:
        raise CheckupError(f"no gpucheckup agent in process {pid} and py-spy is not installed "
                           "(pip install py-spy), or start the job under `gpucheckup run`")
    duration = args.duration or DEFAULT_DURATION_S
    if args.steps is not None:
        console.print(f"gpucheckup attach: --steps needs the agent; sampling for {duration:g} s instead",
                      style="dim", markup=False)
    run_dir = make_run_dir(args.out, f"attach-{pid}")
    started = time.time()
    console.print(f"gpucheckup attach: sampling process {pid} from outside for {duration:g} s "
                  f"(py-spy, {args.rate:g} per second, with NVML)", style="dim", markup=False)
    pids = {"now": [pid]}
    nvml = NvmlSampler(run_dir, 10.0, lambda: pids["now"])
    if nvml.open():
        nvml.start()
    try:
        host_env = environment.collect_host()
    except Exception as e:  # noqa: BLE001
        host_env = {"error": f"{type(e).__name__}: {e}"}
    samples, info = sample_stacks(exe, pid, duration, args.rate, native=args.native, pids=pids)
    nvml.close()
    failed = {}
    if nvml.status != "ok":
        failed["nvml"] = nvml.status
    if info.get("error"):
        failed["py-spy"] = info["error"]
    util = _nearest_util(run_dir / "nvml.csv", [s["t_s"] for s in samples]) if nvml.status == "ok" else \
        [None] * len(samples)
    for s, u in zip(samples, util):
        s["gpu_util"] = u
    verdict = stack_samples.coarse_verdict([s["main_state"] for s in samples], util)
    _write_samples(run_dir, samples)
    write_json_atomic(run_dir / "attach.json", {**verdict, "pid": pid, "duration_s": duration, "rate_hz": args.rate,
                                                "native": info.get("native"), "py_spy": exe})
    write_json_atomic(run_dir / "env.json", host_env)
    manifest = {
        "gpucheckup_version": __version__, "kind": "attach-py-spy", "command": ["gpucheckup", "attach", "--pid",
                                                                                  str(pid)],
        "pid": pid, "run_dir": str(run_dir), "started_epoch_s": started, "duration_s": round(time.time() - started, 3),
        "exit_code": None, "exit_signal": None,
        "captured": {"samples": len(samples), "native": info.get("native"), "nvml": nvml.summary()},
        "failed": failed,
    }
    write_manifest(run_dir, manifest)
    console.print(f"coarse verdict: {verdict['verdict']} - {verdict['sentence']}", markup=False, highlight=False)
    emit_run(check_run(run_dir), console, quiet=args.quiet, json_path=args.json)
    console.print(f"run directory: {run_dir}", style="dim", markup=False, highlight=False, soft_wrap=True)
    return 0


def sample_stacks(exe: str, pid: int, duration: float, rate: float, native: bool, pids: dict):
    """Repeated `py-spy dump --json` of the job and its children: one classified sample per dump."""
    from gpucheckup.analysis.stack_samples import classify, top_frame

    samples, info = [], {"native": native}
    period = 1.0 / max(rate, 0.1)
    end = time.time() + duration
    failures = 0
    while time.time() < end:
        t = time.time()
        cmd = [exe, "dump", "--pid", str(pid), "--json", "--subprocesses"] + (["--native"] if native else
                                                                               ["--nonblocking"])
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=PYSPY_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            res = None
        if res is None or res.returncode != 0:
            err = "py-spy timed out" if res is None else (res.stderr.strip().splitlines() or ["?"])[-1]
            if native:  # native unwinding is not always possible: fall back to Python frames
                native = False
                info["native"] = False
                info["native_error"] = err
                continue
            failures += 1
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                info["error"] = f"process {pid} ended after {len(samples)} samples"
                break
            if failures >= 5:
                info["error"] = f"py-spy dump failed 5 times: {err}"
                break
            time.sleep(period)
            continue
        try:
            threads = json.loads(res.stdout)
        except ValueError:
            continue
        pids["now"] = sorted({th.get("pid", pid) for th in threads} | {pid})
        main = next((th for th in threads if th.get("pid") == pid and th.get("thread_name") == "MainThread"), None)
        main = main or next((th for th in threads if th.get("os_thread_id") == pid), None)
        frames = main.get("frames", []) if main else []
        state = classify(frames, bool(main and main.get("active"))) if main else "unknown"
        samples.append({
            "t_s": t,
            "main_state": state,
            "main_frame": top_frame(frames).replace(",", " "),
            "main_thread_active": str(bool(main and main.get("active"))).lower(),
            "threads": len(threads),
            "active_threads_elsewhere": sum(1 for th in threads if th.get("pid") != pid and th.get("active")),
            "stack": ";".join(f"{f.get('name')}" for f in reversed(frames)),
        })
        time.sleep(max(0.0, period - (time.time() - t)))
    return samples, info


def _nearest_util(nvml_csv: Path, times: list[float]) -> list[float | None]:
    """For each time, the job's GPUs' NVML utilization in the nearest sample (within 1 s)."""
    import numpy as np

    from gpucheckup.analysis.telemetry import gpu_series
    from gpucheckup.trace.rundir import read_csv

    if not nvml_csv.exists():
        return [None] * len(times)
    s = gpu_series(read_csv(nvml_csv))
    t, u = s["t_s"], s["util"]
    out = []
    for x in times:
        if len(t) == 0:
            out.append(None)
            continue
        i = int(np.clip(np.searchsorted(t, x), 1, len(t) - 1)) if len(t) > 1 else 0
        j = i if len(t) == 1 or abs(t[i] - x) < abs(t[i - 1] - x) else i - 1
        out.append(float(u[j]) if abs(t[j] - x) <= 1.0 and np.isfinite(u[j]) else None)
    return out


def _write_samples(run_dir: Path, samples: list[dict]) -> None:
    cols = ["t_s", "gpu_util", "main_state", "main_frame", "main_thread_active", "threads", "active_threads_elsewhere"]
    lines = [",".join(cols)]
    for s in samples:
        lines.append(",".join("" if s.get(c) is None else (f"{s[c]:.6f}" if isinstance(s[c], float) else str(s[c]))
                              for c in cols))
    write_atomic(run_dir / "samples.csv", ("\n".join(lines) + "\n").encode())
    stacks = Counter(s["stack"] for s in samples if s["stack"])
    write_atomic(run_dir / "stacks.txt", "".join(f"{k} {v}\n" for k, v in stacks.most_common()).encode())

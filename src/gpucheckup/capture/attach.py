"""`gpucheckup attach --pid PID (--duration S | --steps K)`: capture a job that is already running.

Three ways in, tried in this order (or forced with --mode):
1. agent: the job runs the gpucheckup agent (started under `gpucheckup run`, or with the agent
   in its environment). PID may be the job or `gpucheckup run` itself: its descendants are
   searched for an agent's control socket. The agent profiles K steps (or S seconds) and
   writes the trace into the job's run directory (`traces/attach/`).
2. inject: Python 3.14+ on both sides: `sys.remote_exec` loads the agent into the job (settings
   passed directly, the job's environment untouched), then as in 1, into a run directory
   `<out>/<stamp>-attach-<pid>/` whose manifest is written again once the capture is over.
3. py-spy: out-of-process. `py-spy dump --nonblocking` of every thread of the job and its
   children (idle ones too), a few times a second, with NVML sampled beside it. Non-blocking
   dumps do not pause the job, so NVML sees it undisturbed; `--native` adds native frames
   (py-spy must pause the job for those; it falls back to Python frames where it cannot). The result is
   a run directory `<out>/<stamp>-attach-<pid>/` holding samples.csv (the main thread's raw frames per
   dump), stacks.txt, nvml.csv, env.json, attach.json and manifest.json; its coarse verdict is made
   when it is checked up (diagnosis/coarse.py), never here.
`capture` returns what was captured (a trace, a run directory); the command line checks it up.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from gpucheckup import __version__, layout
from gpucheckup.capture import control, environment
from gpucheckup.capture.launcher import make_run_dir, read_agents, write_manifest
from gpucheckup.capture.options import DEFAULT_DURATION_S, DEFAULT_STEPS, DEFAULT_WINDOW_S, AttachOptions
from gpucheckup.capture.sampler import find_pyspy
from gpucheckup.capture.telemetry import NvmlSampler
from gpucheckup.errors import CheckupError

STATUS_TIMEOUT_S = 5.0  # the whole status exchange, retries of a busy agent included
BUSY_RETRY_S = 0.2  # between retries when the agent answers that it serves too many connections
INJECT_WAIT_S = 20.0
PYSPY_TIMEOUT_S = 10.0


@dataclass
class Captured:
    """What an attach captured: the trace the agent wrote (agent, inject) and the run directory written here
    (inject, py-spy)."""

    trace: Path | None = None
    run_dir: Path | None = None


def _quiet(msg: str) -> None:
    """The default progress callback: say nothing."""


def capture(args: AttachOptions, note: Callable[[str], None] = _quiet) -> Captured:
    """Capture the running job: through its agent, by injecting one, else out of process with py-spy.
    `note` hears what is going on, one line at a time. CheckupError for a bad option or no way in."""
    pid = args.pid
    args.check()
    _check_process(pid)
    if args.mode in ("auto", "agent"):
        agent_pid, why = find_agent(pid)
        if agent_pid is not None:
            return Captured(trace=attach_agent(agent_pid, args, note))
        if args.mode == "agent":
            raise CheckupError(f"no gpucheckup agent answers in process {pid} or its children: {why} "
                               "(start the job under `gpucheckup run`, or use --mode py-spy)")
        note(f"gpucheckup attach: no agent to ask: {why}; trying the other ways in")
    if args.mode in ("auto", "inject"):
        injected = inject_agent(pid, args, note)
        if injected is not None:
            run_dir, manifest = injected
            try:
                return Captured(trace=attach_agent(pid, args, note), run_dir=run_dir)
            finally:
                finish_inject_manifest(run_dir, manifest)
        if args.mode == "inject":
            raise CheckupError("cannot inject the agent: sys.remote_exec needs Python 3.14+ in gpucheckup and the job")
    return Captured(run_dir=attach_pyspy(pid, args, note))


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


def find_agent(pid: int) -> tuple[int | None, str]:
    """The first process among pid and its descendants whose agent answers on its control socket, and why none
    did when none does. An agent busy with other connections is asked again until STATUS_TIMEOUT_S has passed
    (it gives a slot back within its request deadline)."""
    why = []
    for p in descendants(pid):
        if not control.socket_path(p).exists():
            continue
        answer, reason = _status(p)
        if answer:
            return p, ""
        why.append(f"process {p}'s agent {reason}")
    if not why:
        return None, "no control socket in it or its children"
    return None, "; ".join(why)


def _status(pid: int) -> tuple[dict | None, str]:
    """The agent's status answer, or None and why it gave none."""
    deadline = time.monotonic() + STATUS_TIMEOUT_S
    while True:
        left = deadline - time.monotonic()
        try:
            answers = control.request(pid, {"cmd": "status"}, max(left, 0.1))
        except (ConnectionResetError, BrokenPipeError):  # a busy agent closes at once, before reading the request
            answers = [{"ok": False, "error": "reset the connection: it serves too many connections"}]
        except OSError as e:
            return None, f"did not answer ({e.strerror or type(e).__name__})"
        if answers and answers[0].get("ok"):
            return answers[0], ""
        error = str(answers[0].get("error")) if answers else "closed the connection without an answer"
        if "too many connections" not in error or left <= BUSY_RETRY_S:
            return None, f"said: {error}" if answers else error
        time.sleep(BUSY_RETRY_S)


def attach_agent(agent_pid: int, args: AttachOptions, note: Callable[[str], None]) -> Path:
    """Ask the job's agent for a window; the trace it wrote."""
    if args.duration is not None:
        req = {"cmd": "profile", "seconds": args.duration}
    else:  # --steps K, or by default the same window as `gpucheckup run`
        req = {"cmd": "profile", "steps": args.steps or DEFAULT_STEPS}
    last = _ask(agent_pid, req, args, note)
    if args.steps is None and args.duration is None and not last.get("ok") and "no optimizer step" in str(
            last.get("error")):
        last = _ask(agent_pid, {"cmd": "profile", "seconds": DEFAULT_WINDOW_S}, args, note)
    if not last.get("ok") or "trace" not in last:
        raise CheckupError(f"the agent in process {agent_pid}: {last.get('error', 'no trace')}")
    return Path(last["trace"])


def _ask(agent_pid: int, req: dict, args: AttachOptions, note: Callable[[str], None]) -> dict:
    """One profile request to the agent; its final answer."""
    what = f"{req['steps']} steps" if "steps" in req else f"{req['seconds']:g} s"
    note(f"gpucheckup attach: asking the agent in process {agent_pid} to profile {what}")
    try:
        answers = control.request(agent_pid, req, args.timeout)
    except OSError as e:
        raise CheckupError(f"the agent in process {agent_pid} did not answer: {e}") from None
    if not answers:
        raise CheckupError(f"the agent in process {agent_pid} closed the connection without an answer")
    return answers[-1]


def inject_agent(pid: int, args: AttachOptions, note: Callable[[str], None]) -> tuple[Path, dict] | None:
    """Load the agent into a Python 3.14+ job with sys.remote_exec; once its socket answers, the run
    directory it writes to and the manifest written there (None when it could not be loaded)."""
    remote_exec = getattr(sys, "remote_exec", None)
    if remote_exec is None:
        note(f"gpucheckup attach: cannot inject the agent (sys.remote_exec needs Python 3.14+, this is "
             f"{sys.version.split()[0]}); sampling from outside instead")
        return None
    rd = make_run_dir(args.out, f"attach-{pid}")
    run_dir, run_dir_id = Path(rd.path), rd.id
    rd.close()  # the agent in the job opens it itself (checking it is this folder); the manifest is written anew
    root = str(Path(__file__).resolve().parents[2])
    overrides = {"skip": 10**9, "window_start_s": 1e7}
    script = (f"import sys\nsys.path.insert(0, {root!r})\ntry:\n    from gpucheckup.capture import agent\n"
              f"finally:\n    sys.path.remove({root!r})\n"
              f"agent.install({str(run_dir)!r}, {overrides!r}, {run_dir_id!r})\n")
    tmp = Path(tempfile.mkdtemp(prefix="gpucheckup-inject-"))  # mode 0700
    path = tmp / "inject.py"
    path.write_text(script)
    try:
        remote_exec(pid, str(path))
    except Exception as e:  # noqa: BLE001 - other Python version, permissions: fall back to py-spy
        note(f"gpucheckup attach: sys.remote_exec failed ({e}); sampling from outside instead")
        shutil.rmtree(run_dir, ignore_errors=True)
        return None
    deadline = time.time() + INJECT_WAIT_S
    while time.time() < deadline:
        if find_agent(pid)[0] == pid:
            shutil.rmtree(tmp, ignore_errors=True)
            manifest = write_manifest(run_dir, {
                "gpucheckup_version": __version__, "kind": layout.KIND_ATTACH_INJECT,
                "command": ["gpucheckup", "attach", "--pid", str(pid)], "pid": pid, "run_dir": str(run_dir),
                "started_epoch_s": time.time(), "exit_code": None, "exit_signal": None, "captured": {},
                "failed": {}})
            return run_dir, manifest
        time.sleep(0.5)
    shutil.rmtree(tmp, ignore_errors=True)
    write_manifest(run_dir, {"gpucheckup_version": __version__, "kind": layout.KIND_ATTACH_INJECT, "pid": pid,
                             "run_dir": str(run_dir), "started_epoch_s": time.time(), "captured": {},
                             "failed": {"agent": f"the injected agent did not answer within {INJECT_WAIT_S:g} s"}})
    note(f"gpucheckup attach: the injected agent did not answer within {INJECT_WAIT_S:g} s; "
         "sampling from outside instead")
    return None


def finish_inject_manifest(run_dir: Path, manifest: dict) -> dict | None:
    """Write the inject run directory's manifest again after the capture: its traces/attach/ files, the
    agent's account and log are listed. The agent stays in the job; what it writes later is newer."""
    try:
        traces = sorted(p.relative_to(run_dir).as_posix() for p in (run_dir / layout.ATTACH_TRACES).glob("*.json*"))
        agents = read_agents(run_dir)
        processes = {k: {"pid": a.get("pid"), "captures": a.get("captures")} for k, a in agents.items()}
        ended = time.time()
        return write_manifest(
            run_dir, manifest, ended_epoch_s=ended, duration_s=round(ended - manifest["started_epoch_s"], 3),
            captured={"traces": traces, "processes": processes},
            failed={} if traces else {"trace": "the injected agent wrote no trace (see agent.log)"})
    except Exception as e:  # noqa: BLE001 - the check-up already ran; say why the manifest is stale
        sys.stderr.write(f"gpucheckup attach: could not rewrite {run_dir / layout.MANIFEST}: "
                         f"{type(e).__name__}: {e}\n")
        return None


def attach_pyspy(pid: int, args: AttachOptions, note: Callable[[str], None]) -> Path:
    """Sample the job from outside: py-spy stacks and NVML, into a new run directory."""
    exe = find_pyspy()
    if exe is None:
        raise CheckupError(f"no gpucheckup agent in process {pid} and py-spy is not installed "
                           "(pip install py-spy), or start the job under `gpucheckup run`")
    duration = args.duration or DEFAULT_DURATION_S
    if args.steps is not None:
        note(f"gpucheckup attach: --steps needs the agent; sampling for {duration:g} s instead")
    rd = make_run_dir(args.out, f"attach-{pid}")
    run_dir = Path(rd.path)
    started = time.time()
    pids = {"now": [pid]}
    nvml = NvmlSampler(rd, 10.0, lambda: pids["now"])
    if nvml.open():
        nvml.start()
    note(f"gpucheckup attach: sampling process {pid} from outside for {duration:g} s (py-spy, {args.rate:g} per "
         f"second, {'with NVML' if nvml.status == 'ok' else f'without NVML: {nvml.status}'})")
    try:
        host_env = environment.collect_host()
    except Exception as e:  # noqa: BLE001
        host_env = {"error": f"{type(e).__name__}: {e}"}
    samples, info = sample_stacks(exe, pid, duration, args.rate, native=args.native, pids=pids)
    job = descendants(pid)  # the job's processes now: py-spy's JSON lists the threads of the main process only
    cuda = cuda_driver_loaded(job)
    nvml.close()
    failed = {}
    if nvml.status != "ok":
        failed["nvml"] = nvml.status
    if info.get("error"):
        failed["py-spy"] = info["error"]
    _write_samples(rd, samples)
    rd.write_json(layout.SPEEDSCOPE, speedscope(samples, 1.0 / max(args.rate, 0.1), pid))
    rd.write_json(layout.ATTACH, {"pid": pid, "duration_s": duration, "rate_hz": args.rate,
                                  "native": info.get("native"), "py_spy": exe})
    rd.write_json(layout.ENV, host_env)
    manifest = {
        "gpucheckup_version": __version__, "kind": layout.KIND_ATTACH_PYSPY,
        "command": ["gpucheckup", "attach", "--pid", str(pid)],
        "pid": pid, "run_dir": str(run_dir), "started_epoch_s": started, "duration_s": round(time.time() - started, 3),
        "exit_code": None, "exit_signal": None,
        "captured": {"samples": len(samples), "native": info.get("native"), "nvml": nvml.summary(),
                     "cuda_driver_loaded": cuda, "processes": len(job)},
        "failed": failed,
    }
    write_manifest(rd, manifest)
    rd.close()
    return run_dir


def cuda_driver_loaded(pids: list[int]) -> bool | None:
    """Whether any of the job's processes has the CUDA driver library (libcuda.so) mapped: a job that uses a GPU
    loads it when CUDA starts; False: none has (a CPU job); None: no process's memory map could be read."""
    read = False
    for p in pids:
        try:
            maps = Path(f"/proc/{p}/maps").read_text(errors="replace")
        except OSError:
            continue
        read = True
        if "/libcuda.so" in maps:
            return True
    return False if read else None


def sample_stacks(exe: str, pid: int, duration: float, rate: float, native: bool, pids: dict):
    """Repeated `py-spy dump --json` of the job and its children: one sample of the main thread per dump."""
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
        pids["now"] = descendants(pid)  # NVML's job processes: py-spy's JSON names the main process's threads only
        main = next((th for th in threads if th.get("pid") == pid and th.get("thread_name") == "MainThread"), None)
        main = main or next((th for th in threads if th.get("os_thread_id") == pid), None)
        frames = main.get("frames", []) if main else []
        samples.append({
            "t_s": t,
            "main_thread_active": str(bool(main.get("active"))).lower() if main else "",  # empty: no main thread
            "threads": len(threads),
            "active_threads_elsewhere": sum(1 for th in threads if th.get("pid") != pid and th.get("active")),
            "main_stack": layout.FRAME_SEP.join(f"{_clean(f.get('name'))}{layout.FRAME_AT}{_clean(f.get('filename'))}"
                                                for f in frames),
            "stack": ";".join(f"{f.get('name')}" for f in reversed(frames)),
            "frames": [(str(f.get("name")), str(f.get("filename")), f.get("line")) for f in reversed(frames)],
        })
        time.sleep(max(0.0, period - (time.time() - t)))
    return samples, info


def speedscope(samples: list[dict], period_s: float, pid: int) -> dict:
    """The main thread's sampled stacks as a speedscope file (its "sampled" profile: one stack of frame
    indices, root first, per dump, each weighing the dump period)."""
    frames: dict[tuple, int] = {}
    stacks = [[frames.setdefault(f, len(frames)) for f in s.get("frames", [])] for s in samples]
    return {"$schema": "https://www.speedscope.app/file-format-schema.json", "exporter": f"gpucheckup {__version__}",
            "name": f"gpucheckup attach --pid {pid}",
            "shared": {"frames": [{"name": n, "file": f, **({"line": ln} if isinstance(ln, int) else {})}
                                  for n, f, ln in frames]},
            "profiles": [{"type": "sampled", "name": f"process {pid}, main thread", "unit": "seconds",
                          "startValue": 0, "endValue": round(period_s * len(stacks), 6), "samples": stacks,
                          "weights": [period_s] * len(stacks)}]}


def _clean(part) -> str:
    """A frame's name or file name without the separators of samples.csv's main_stack."""
    return "" if part is None else str(part).replace(layout.FRAME_SEP, " ").replace(layout.FRAME_AT, " ")


def _write_samples(rd, samples: list[dict]) -> None:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(layout.SAMPLE_COLUMNS)
    for s in samples:
        w.writerow(f"{s[c]:.6f}" if isinstance(s[c], float) else s[c] for c in layout.SAMPLE_COLUMNS)
    rd.write_atomic(layout.SAMPLES, buf.getvalue().encode())
    stacks = Counter(s["stack"] for s in samples if s["stack"])
    rd.write_atomic(layout.STACKS, "".join(f"{k} {v}\n" for k, v in stacks.most_common()).encode())

"""The in-job agent: step times for the whole run, one profiled window, FLOPs, DataLoader settings.

It is loaded by the injected `sitecustomize` (or by `sys.remote_exec`) and does nothing until
`torch` has finished importing: `install()` only puts a finder on `sys.meta_path` that wraps the
loading of `torch`. Then, in the process that claims the run directory's key (`main`, or
`rank<R>` under torchrun), it:

- counts steps with the global `torch.optim.optimizer.register_optimizer_step_post_hook`; the
  first optimizer that steps paces the count, so a job with two optimizers counts each
  iteration once. Each step's row (step, end time in Unix seconds, ms since the previous
  step's end, phase) goes to `steps.csv.part` in batches (every FLUSH_ROWS rows or FLUSH_S
  seconds); at exit the complete file is renamed to `steps.csv` (atomic publish). The time
  the agent itself spends in its hook is not counted in any step.
- profiles steps skip+1 .. skip+K with `torch.profiler` (CPU and, where there is a GPU, CUDA
  activities); the profiler warms up during step `skip`. `ProfilerStep#i` in the trace is run
  step skip+i. The trace is exported, gzipped and renamed into `traces/` (atomic).
- with `--flops`, counts one step with `FlopCounterMode` (step skip-1 when skip >= 3, else the
  step after the window) and writes `flops.json` {"flops_per_step", "how", "step"}.
- when no optimizer has stepped `window_start_s` seconds after torch was imported, profiles a
  time window of `window_s` seconds (inference jobs; a training job whose first step comes
  later still gets its step window too) into `traces/time-window/`. The profiler is started and
  stopped on the main thread through a real-time signal handler (a profiler started from
  another thread does not record the main thread's operators).
- serves attach requests on its control socket (see `control.py`).
- records DataLoader `num_workers` / `pin_memory` (a light wrapper on `DataLoader.__init__`).
Every hook catches its own errors and writes them to the agent log; the job carries on.
Standard library only, and imported lazily: the job's start-up must not slow down.
"""

from __future__ import annotations

import os
import sys
import threading
import time

SETTINGS = {  # name: (environment variable, default, kind)
    "skip": ("GPUCHECKUP_SKIP", 20, "int"),
    "steps": ("GPUCHECKUP_STEPS", 5, "int"),
    "record_shapes": ("GPUCHECKUP_RECORD_SHAPES", False, "bool"),
    "with_stack": ("GPUCHECKUP_WITH_STACK", False, "bool"),
    "flops": ("GPUCHECKUP_FLOPS", False, "bool"),
    "window_start_s": ("GPUCHECKUP_WINDOW_START_S", 60.0, "float"),
    "window_s": ("GPUCHECKUP_WINDOW_S", 10.0, "float"),
    "control": ("GPUCHECKUP_CONTROL", True, "bool"),
}
ENV_RUN_DIR = "GPUCHECKUP_RUN_DIR"
LIMITS = {"skip": (2, 10**9), "steps": (1, 1000), "window_start_s": (0.0, 1e7), "window_s": (0.1, 3600.0)}
FLUSH_ROWS = 256
FLUSH_S = 1.0
STEPS_HEADER = "step,t_end_s,ms,phase\n"
MAX_DATALOADERS = 20
MAX_ERRORS_KEPT = 20
SIGNAL_OFFSET = 7  # the agent's real-time signal: SIGRTMIN + 7
MAIN_CALL_TIMEOUT_S = 30.0
DURATION_MAX_STEPS = 100  # a window asked for in seconds stops after this many steps: more adds only trace size

_agent = None


def parse_settings(environ) -> tuple[dict, list[str]]:
    """Settings from the environment, with a message for every value that could not be used."""
    out, errors = {}, []
    for name, (var, default, kind) in SETTINGS.items():
        raw = environ.get(var)
        out[name] = default
        if raw is None or raw == "":
            continue
        try:
            if kind == "bool":
                low = raw.strip().lower()
                if low not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                    raise ValueError
                value = low in ("1", "true", "yes", "on")
            elif kind == "int":
                value = int(raw)
            else:
                value = float(raw)
                if value != value:  # nan
                    raise ValueError
        except ValueError:
            errors.append(f"bad setting {var}={raw!r} (expected {kind}); using the default {default}")
            continue
        lo_hi = LIMITS.get(name)
        if lo_hi and not lo_hi[0] <= value <= lo_hi[1]:
            clipped = min(max(value, lo_hi[0]), lo_hi[1])
            errors.append(f"setting {var}={raw!r} is outside {lo_hi[0]}..{lo_hi[1]}; using {clipped}")
            value = type(default)(clipped)
        out[name] = value
    return out, errors


def process_key(environ) -> str:
    """`rank<R>` under a distributed launcher (RANK set), else `main`."""
    rank = environ.get("RANK", "")
    return f"rank{int(rank)}" if rank.strip().isdigit() else "main"


def file_names(key: str) -> dict:
    """The run-directory file names one agent writes, by process key."""
    sfx = "" if key == "main" else f"-{key}"
    return {
        "steps": f"steps{sfx}.csv",
        "log": f"agent{sfx}.log",
        "info": f"agent{sfx}.json",
        "trace": f"traces/{'trace' if key == 'main' else key}.json.gz",
        "flops": "flops.json" if key in ("main", "rank0") else f"flops{sfx}.json",
    }


def install(run_dir: str | None = None, overrides: dict | None = None) -> None:
    """Arm the agent: do nothing now, activate once `torch` is imported (or now if it already is).
    `run_dir` and `overrides` (settings by name) serve `sys.remote_exec` injection, which must not
    change the job's environment variables."""
    global _agent
    if _agent is not None:
        return
    run_dir = run_dir or os.environ.get(ENV_RUN_DIR)
    if not run_dir:
        return
    _agent = Agent(run_dir)
    _agent.settings.update(overrides or {})
    if "torch" in sys.modules and hasattr(sys.modules["torch"], "optim"):
        _agent.activate(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _TorchImportHook(_agent.activate))


class _TorchImportHook:
    """A meta-path finder that calls back once `torch` has finished importing (one shot)."""

    def __init__(self, callback):
        self.callback = callback

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        import importlib.util

        spec = importlib.util.find_spec(name)
        loader = getattr(spec, "loader", None) if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module
        callback = self.callback

        def exec_then_activate(module):
            exec_module(module)
            callback(module)

        loader.exec_module = exec_then_activate
        return spec


class Window:
    """One profiler session: by steps (driven by the step hook) or by time (driven by a thread)."""

    def __init__(self, prof, kind, path, first_step=None, last_step=None, seconds=None, request=None, auto=False):
        self.prof = prof
        self.kind = kind  # "steps" or "time"
        self.path = path
        self.first_step = first_step  # first recorded run step (steps windows)
        self.last_step = last_step  # last recorded run step, or None when bounded by seconds
        self.seconds = seconds
        self.deadline = None
        self.request = request
        self.auto = auto
        self.started = time.time()


class Request:
    """An attach request from the control socket, answered when its trace is written."""

    def __init__(self, steps=None, seconds=None):
        self.steps = steps
        self.seconds = seconds
        self.picked = threading.Event()
        self.done = threading.Event()
        self.result = None


class Agent:
    """The agent's state in one process."""

    def __init__(self, run_dir: str):
        self.run_dir = os.path.abspath(run_dir)
        self.pid = os.getpid()
        self.key = process_key(os.environ)
        self.files = file_names(self.key)
        self.settings, self.setting_errors = parse_settings(os.environ)
        self.passive = True
        self.torch = None
        self.lock = threading.Lock()
        self.step = 0
        self.pacer = None
        self.pacer_name = None
        self.last_end = None
        self.phase = ""
        self.buffer: list[str] = []
        self.last_flush = time.time()
        self.window: Window | None = None
        self.pending: Request | None = None
        self.auto_done = False  # the automatic step window ran (or could not)
        self.time_done = False  # the automatic time window ran (or could not)
        self.flop_counter = None
        self.flops_step = None
        self.flops_result = None
        self.captures: list[dict] = []
        self.capture_seq = 0
        self.errors: list[str] = []
        self.error_count = 0
        self.dataloaders: list[dict] = []
        self.dataloader_count = 0
        self.info: dict = {}
        self.signum = None
        self.main_calls: list = []
        self.time_windows = "not set up"
        self.control = "off"
        self.stop_event = threading.Event()
        self.step_ms_recent: list[float] = []
        self.activated_at = None

    # ---- logging -------------------------------------------------------------------------------
    def log(self, msg: str) -> None:
        """Append one line to the agent log (one write on an O_APPEND descriptor)."""
        line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} pid {os.getpid()} {self.key}: {msg}\n"
        try:
            fd = os.open(os.path.join(self.run_dir, self.files["log"]), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(fd, line.encode("utf-8", "replace"))
            finally:
                os.close(fd)
        except OSError:
            pass

    def error(self, where: str, exc: BaseException | None = None) -> None:
        """Log an agent error with its traceback; the job carries on."""
        import traceback

        self.error_count += 1
        text = f"{where}: {type(exc).__name__}: {exc}" if exc is not None else where
        if len(self.errors) < MAX_ERRORS_KEPT:
            self.errors.append(text)
        tb = traceback.format_exc() if exc is not None else ""
        self.log("ERROR " + text + ("\n" + tb if tb and tb.strip() != "NoneType: None" else ""))

    # ---- activation ----------------------------------------------------------------------------
    def activate(self, torch) -> None:
        """Called once torch is imported: claim the key, hook steps and DataLoaders, arm windows."""
        try:
            if self._is_helper_process():
                return
            os.makedirs(os.path.join(self.run_dir, "traces"), exist_ok=True)
            if not self._claim():
                return
            self.passive = False
            self.torch = torch
            self.activated_at = time.time()
            self.log(f"agent active in {sys.argv[:1]} (torch {getattr(torch, '__version__', '?')}); "
                     f"settings {self.settings}")
            for msg in self.setting_errors:
                self.error(msg)
            os.register_at_fork(after_in_child=self._forked)
            import atexit

            atexit.register(self.at_exit)
            self._open_steps_file()
            from torch.optim.optimizer import register_optimizer_step_post_hook

            register_optimizer_step_post_hook(self._on_step)
            self._wrap_dataloader(torch)
            self._setup_main_calls()
            if self.settings["control"]:
                self._start_control()
            t = threading.Timer(self.settings["window_start_s"], self._auto_time_window)
            t.daemon = True
            t.name = "gpucheckup-window-timer"
            t.start()
            self._write_info()
        except Exception as e:  # noqa: BLE001 - the job must go on
            self.error("activation", e)

    def _is_helper_process(self) -> bool:
        """DataLoader/multiprocessing children and the torchrun launcher itself stay passive."""
        argv = list(getattr(sys, "orig_argv", sys.argv)) + list(sys.argv)
        if any(a.startswith("from multiprocessing") or a == "--multiprocessing-fork" for a in argv):
            return True
        try:
            import multiprocessing

            if multiprocessing.parent_process() is not None:
                return True
        except Exception:  # noqa: BLE001
            pass
        orig = list(getattr(sys, "orig_argv", []))
        if "-m" in orig[:-1] and orig[orig.index("-m") + 1] in ("torch.distributed.run", "torch.distributed.launch"):
            return True
        arg0 = (sys.argv[0] if sys.argv else "").replace("\\", "/")
        return arg0.endswith(("torchrun", "torch/distributed/run.py", "torch/distributed/launch.py"))

    def _claim(self) -> bool:
        """Claim this process key in the run directory; a second process with the same key stays passive."""
        d = os.path.join(self.run_dir, ".claims")
        os.makedirs(d, exist_ok=True)
        try:
            fd = os.open(os.path.join(d, self.key), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        os.write(fd, str(self.pid).encode())
        os.close(fd)
        return True

    def _forked(self) -> None:
        self.passive = True  # a forked child (DataLoader worker): never counts, profiles or writes

    # ---- steps ---------------------------------------------------------------------------------
    def _open_steps_file(self) -> None:
        self.steps_part = os.path.join(self.run_dir, self.files["steps"] + ".part")
        with open(self.steps_part, "w") as f:
            f.write(STEPS_HEADER)

    def _flush_steps(self) -> None:
        rows, self.buffer = self.buffer, []
        self.last_flush = time.time()
        if rows:
            with open(self.steps_part, "a") as f:
                f.write("".join(rows))

    def _on_step(self, optimizer, args, kwargs) -> None:
        """The global optimizer post-step hook: one row per step, then the capture state machine."""
        if self.passive:
            return
        now = time.time()
        try:
            if self.pacer is None:
                self.pacer = id(optimizer)
                self.pacer_name = type(optimizer).__name__
            elif id(optimizer) != self.pacer:
                return
            self.step += 1
            n = self.step
            if self.last_end is None:
                ms = ""
            else:
                d = (now - self.last_end) * 1000.0
                ms = f"{d:.3f}"
                if not self.phase:
                    self.step_ms_recent = (self.step_ms_recent + [d])[-32:]
            self.buffer.append(f"{n},{now:.6f},{ms},{self.phase}\n")
            if len(self.buffer) >= FLUSH_ROWS or now - self.last_flush >= FLUSH_S:
                self._flush_steps()
            if n == 1:
                self._collect_info()
                self._write_info()
            self._after_step(n, now)
        except Exception as e:  # noqa: BLE001
            self.error(f"step hook (step {self.step})", e)
        finally:
            self.last_end = time.time()

    def _after_step(self, n: int, now: float) -> None:
        """Start, advance and finish the profiled window, the FLOP count and attach requests."""
        s = self.settings
        w = self.window
        if w is not None and w.kind == "steps":
            if w.deadline is None and w.seconds is not None and n >= w.first_step - 1:
                w.deadline = now + w.seconds
            done = (w.last_step is not None and n >= w.last_step) or (
                w.deadline is not None and n >= w.first_step and now >= w.deadline) or (
                w.seconds is not None and n >= w.first_step + DURATION_MAX_STEPS - 1)
            if done:
                self._finish_window(w, last_step=n)
            else:
                w.prof.step()
        if self.flop_counter is not None and n >= self.flops_step:
            self._finish_flops(n)
        if self.window is None and self.flop_counter is None:
            if not self.auto_done and n >= s["skip"] - 1:
                self._start_step_window(n, steps=s["steps"], auto=True)
            elif self.pending is not None:
                with self.lock:
                    req, self.pending = self.pending, None
                    if req is not None:
                        req.picked.set()
                if req is not None:
                    self._start_step_window(n, steps=req.steps, seconds=req.seconds, request=req)
            if s["flops"] and self.flops_result is None and self.window is None:
                if self.flops_step is None:
                    self.flops_step = s["skip"] - 1 if s["skip"] >= 3 else s["skip"] + s["steps"] + 1
                if n == self.flops_step - 1:
                    self._start_flops()
        w = self.window
        if w is not None and w.kind == "steps":
            self.phase = "profile-warmup" if n + 1 < w.first_step else "profiled"
        elif self.flop_counter is not None:
            self.phase = "flops"
        else:
            self.phase = ""

    # ---- profiler windows ----------------------------------------------------------------------
    def _new_profiler(self, schedule=None, all_threads=False):
        torch = self.torch
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU]
        try:
            if ProfilerActivity.CUDA in torch.profiler.supported_activities() and torch.cuda.is_available():
                acts.append(ProfilerActivity.CUDA)
        except Exception as e:  # noqa: BLE001
            self.error("checking for CUDA", e)
        kw = dict(activities=acts, record_shapes=self.settings["record_shapes"],
                  with_stack=self.settings["with_stack"])
        if schedule is not None:
            kw["schedule"] = schedule
        if all_threads:
            try:
                from torch._C._profiler import _ExperimentalConfig

                kw["experimental_config"] = _ExperimentalConfig(profile_all_threads=True)
            except Exception:  # noqa: BLE001 - older torch: main thread (and CUDA) only
                pass
        return profile(**kw)

    def _trace_path(self, request, kind: str = "steps") -> str:
        """traces/<key>.json.gz for the step window, traces/time-window/ and traces/attach/ for the others."""
        if request is None and kind == "steps":
            return os.path.join(self.run_dir, self.files["trace"])
        self.capture_seq += 1  # two captures in one second must not share a name
        stamp = time.strftime("%Y%m%d-%H%M%S")
        folder = "attach" if request is not None else "time-window"
        return os.path.join(self.run_dir, "traces", folder, f"{stamp}-{self.capture_seq}-{self.key}.json.gz")

    def _start_step_window(self, n: int, steps=None, seconds=None, request=None, auto=False) -> None:
        """Begin profiling: warm-up during step n+1, record from step n+2 (K steps or S seconds)."""
        from torch.profiler import ProfilerAction

        def schedule(i):
            return ProfilerAction.WARMUP if i == 0 else ProfilerAction.RECORD

        try:
            prof = self._new_profiler(schedule=schedule)
            first = n + 2
            w = Window(prof, "steps", self._trace_path(request), first_step=first,
                       last_step=first + steps - 1 if steps else None, seconds=seconds, request=request, auto=auto)
            prof.start()
            self.window = w
            self.log(f"profiling steps from {first} ({f'{steps} steps' if steps else f'{seconds:g} s'}; "
                     f"warm-up step {n + 1}){' for attach' if request else ''}")
        except Exception as e:  # noqa: BLE001
            if auto:
                self.auto_done = True
            self.error("starting the profiler", e)
            if request is not None:
                request.result = {"ok": False, "error": f"could not start the profiler: {e}"}
                request.done.set()

    def _take_window(self, w: Window) -> bool:
        """Whether this caller owns finishing window w (only one caller ever does)."""
        with self.lock:
            if self.window is not w:
                return False
            self.window = None
            return True

    def _finish_window(self, w: Window, last_step=None, cut_short: str = "") -> None:
        """Stop the profiler, export the trace atomically, answer the request that asked for it."""
        if not self._take_window(w):
            return
        if w.auto and w.kind == "steps":
            self.auto_done = True
        capture = {"kind": w.kind, "trace": os.path.relpath(w.path, self.run_dir), "attach": w.request is not None,
                   "started_epoch_s": w.started}
        try:
            w.prof.stop()
            if w.kind == "steps":
                capture["steps"] = [w.first_step, last_step]
                capture["profiler_step_offset"] = w.first_step - 1
                if last_step is None or last_step < w.first_step:
                    raise RuntimeError("the job ended before the first profiled step")
            else:
                capture["seconds"] = round(time.time() - w.started, 3)
            if cut_short:
                capture["cut_short"] = cut_short
            t0 = time.time()
            self._export(w.prof, w.path)
            capture["export_s"] = round(time.time() - t0, 3)
            capture["status"] = "done"
            result = {"ok": True, "trace": w.path, **{k: capture[k] for k in ("steps", "seconds") if k in capture}}
            self.log(f"trace written: {capture['trace']} ({capture})")
        except Exception as e:  # noqa: BLE001
            capture["status"] = f"failed: {type(e).__name__}: {e}"
            result = {"ok": False, "error": capture["status"]}
            self.error("finishing the profiled window", e)
        self.captures.append(capture)
        if w.request is not None:
            w.request.result = result
            w.request.done.set()
        self._write_info()

    def _export(self, prof, path: str) -> None:
        """Export the Chrome trace, gzip it beside its final name, then rename it into place."""
        import gzip
        import shutil

        os.makedirs(os.path.dirname(path), exist_ok=True)
        base = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{os.getpid()}")
        tmp_json, tmp_gz = base + ".json", base + ".tmp"
        try:
            prof.export_chrome_trace(tmp_json)
            with open(tmp_json, "rb") as src, gzip.open(tmp_gz, "wb", compresslevel=3) as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            os.replace(tmp_gz, path)
        finally:
            for p in (tmp_json, tmp_gz):
                try:
                    os.unlink(p)
                except OSError:
                    pass

    # ---- time windows (no optimizer steps) -----------------------------------------------------
    def _setup_main_calls(self) -> None:
        """A real-time signal whose handler runs queued calls on the main thread."""
        import signal

        if threading.current_thread() is not threading.main_thread():
            self.time_windows = "profiler started from a helper thread (torch was imported off the main thread)"
            return
        sig = getattr(signal, "SIGRTMIN", None)
        if sig is None:
            self.time_windows = "profiler started from a helper thread (no real-time signals here)"
            return
        sig += SIGNAL_OFFSET
        if signal.getsignal(sig) not in (signal.SIG_DFL, None):
            self.time_windows = f"profiler started from a helper thread (signal {sig} is taken by the job)"
            return
        signal.signal(sig, self._on_signal)
        signal.siginterrupt(sig, False)
        self.signum = sig
        self.time_windows = f"main thread, through signal {sig}"

    def _on_signal(self, signum, frame) -> None:
        while self.main_calls:
            fn = self.main_calls.pop(0)
            try:
                fn()
            except Exception as e:  # noqa: BLE001
                self.error("main-thread call", e)

    def _on_main(self, fn, timeout_s: float = MAIN_CALL_TIMEOUT_S) -> bool:
        """Run fn on the main thread (here, without the signal) and wait; False when it did not run in time."""
        done = threading.Event()
        state = {"cancelled": False}

        def call():
            if state["cancelled"]:
                return
            try:
                fn()
            finally:
                done.set()

        if self.signum is None:
            call()
            return True
        import signal

        self.main_calls.append(call)
        signal.pthread_kill(threading.main_thread().ident, self.signum)
        if done.wait(timeout_s):
            return True
        state["cancelled"] = True
        return done.is_set()

    def _auto_time_window(self) -> None:
        """Timer: when no optimizer has stepped, profile a time window instead."""
        try:
            if self.passive or self.step > 0 or self.time_done or self.stop_event.is_set():
                return
            self.time_done = True
            self.log(f"no optimizer step {self.settings['window_start_s']:g} s after torch was imported: "
                     f"profiling a {self.settings['window_s']:g} s time window")
            self._time_window(self.settings["window_s"], auto=True)
        except Exception as e:  # noqa: BLE001
            self.error("time window", e)

    def _time_window(self, seconds: float, request: Request | None = None, auto: bool = False) -> None:
        """Profile `seconds` of wall time, started and stopped on the main thread."""
        box = {}

        def start():
            with self.lock:
                if self.window is not None:
                    return
                prof = self._new_profiler(all_threads=True)
                w = Window(prof, "time", self._trace_path(request, "time"), seconds=seconds, request=request, auto=auto)
                prof.start()
                self.window = box["w"] = w

        started = self._on_main(start)
        if "w" not in box:
            msg = "another capture is running" if started else \
                f"the main thread did not take the request in {MAIN_CALL_TIMEOUT_S:g} s"
            if request is not None:
                request.result = {"ok": False, "error": f"no time window: {msg}"}
                request.done.set()
            self.log(f"no time window: {msg}")
            return
        w = box["w"]
        self.stop_event.wait(seconds)
        if self.window is w and not self._on_main(lambda: self._finish_window(w)) and self.window is w:
            self.log("the main thread did not stop the time window in time; stopping it from the timer thread")
            self._finish_window(w)

    # ---- FLOPs ---------------------------------------------------------------------------------
    def _start_flops(self) -> None:
        try:
            from torch.utils.flop_counter import FlopCounterMode

            fc = FlopCounterMode(display=False)
            fc.__enter__()
            self.flop_counter = fc
        except Exception as e:  # noqa: BLE001
            self.flops_result = {"status": f"failed: {e}"}
            self.error("starting the FLOP count", e)

    def _finish_flops(self, n: int) -> None:
        fc, self.flop_counter = self.flop_counter, None
        try:
            fc.__exit__(None, None, None)
            total = int(fc.get_total_flops())
            rank = os.environ.get("RANK")
            how = (f"torch.utils.flop_counter.FlopCounterMode over run step {n} (forward, backward and "
                   f"optimizer of one step{', on rank ' + rank if rank else ''}; FLOPs of matrix products "
                   "and convolutions as torch counts them)")
            from gpucheckup.atomic import write_json_atomic

            self.flops_result = {"flops_per_step": total, "how": how, "step": n}
            write_json_atomic(os.path.join(self.run_dir, self.files["flops"]), self.flops_result)
            self.log(f"FLOPs of step {n}: {total}")
        except Exception as e:  # noqa: BLE001
            self.flops_result = {"status": f"failed: {e}"}
            self.error("finishing the FLOP count", e)

    # ---- DataLoader and environment ------------------------------------------------------------
    def _wrap_dataloader(self, torch) -> None:
        import functools

        cls = torch.utils.data.DataLoader
        orig = cls.__init__
        agent = self

        @functools.wraps(orig)
        def __init__(loader, *args, **kwargs):
            orig(loader, *args, **kwargs)
            if agent.passive:
                return
            try:
                agent._saw_dataloader(loader)
            except Exception as e:  # noqa: BLE001
                agent.error("reading DataLoader settings", e)

        cls.__init__ = __init__

    def _saw_dataloader(self, loader) -> None:
        self.dataloader_count += 1
        d = {
            "num_workers": int(getattr(loader, "num_workers", 0)),
            "pin_memory": bool(getattr(loader, "pin_memory", False)),
            "batch_size": getattr(loader, "batch_size", None),
            "persistent_workers": bool(getattr(loader, "persistent_workers", False)),
            "prefetch_factor": getattr(loader, "prefetch_factor", None),
            "dataset": type(getattr(loader, "dataset", None)).__name__,
        }
        if d not in self.dataloaders and len(self.dataloaders) < MAX_DATALOADERS:
            self.dataloaders.append(d)

    def _collect_info(self) -> None:
        """torch, CUDA, cuDNN and NCCL versions as the job sees them (after its first step)."""
        torch = self.torch
        t = {"version": getattr(torch, "__version__", None), "cuda": getattr(torch.version, "cuda", None)}
        for key, fn in (("cudnn", lambda: torch.backends.cudnn.version()),
                        ("cuda_available", lambda: torch.cuda.is_available()),
                        ("nccl", lambda: ".".join(map(str, torch.cuda.nccl.version()))
                         if torch.cuda.is_available() else None)):
            try:
                t[key] = fn()
            except Exception as e:  # noqa: BLE001
                t[key] = None
                self.log(f"could not read {key}: {e}")
        try:
            if torch.cuda.is_initialized():
                t["devices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
                t["current_device"] = torch.cuda.current_device()
        except Exception as e:  # noqa: BLE001
            self.log(f"could not read CUDA devices: {e}")
        self.info["torch"] = t

    def snapshot(self) -> dict:
        """What the agent saw and did: written to agent.json."""
        return {
            "pid": self.pid,
            "key": self.key,
            "rank": os.environ.get("RANK"),
            "local_rank": os.environ.get("LOCAL_RANK"),
            "world_size": os.environ.get("WORLD_SIZE"),
            "local_world_size": os.environ.get("LOCAL_WORLD_SIZE"),
            "argv": sys.argv,
            "python": sys.version.split()[0],
            "settings": self.settings,
            "setting_errors": self.setting_errors,
            "files": self.files,
            "steps": self.step,
            "step_pacer": self.pacer_name,
            "activated_epoch_s": self.activated_at,
            "dataloaders": self.dataloaders,
            "dataloaders_created": self.dataloader_count,
            "captures": self.captures,
            "flops": self.flops_result,
            "time_windows": self.time_windows,
            "control": self.control,
            "errors": self.errors,
            "error_count": self.error_count,
            **self.info,
        }

    def _write_info(self) -> None:
        try:
            from gpucheckup.atomic import write_json_atomic

            write_json_atomic(os.path.join(self.run_dir, self.files["info"]), self.snapshot())
        except Exception as e:  # noqa: BLE001
            self.error("writing agent.json", e)

    # ---- control socket ------------------------------------------------------------------------
    def _start_control(self) -> None:
        try:
            import socket

            from gpucheckup.capture import control

            control.private_dir()
            path = control.socket_path(os.getpid())
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            old = os.umask(0o177)
            try:
                srv.bind(str(path))
            finally:
                os.umask(old)
            srv.listen(4)
            self.control_path = str(path)
            self.control = str(path)
            t = threading.Thread(target=self._serve, args=(srv, control), name="gpucheckup-control", daemon=True)
            t.start()
        except Exception as e:  # noqa: BLE001
            self.control = f"unavailable: {e}"
            self.error("starting the control socket", e)

    def _serve(self, srv, control) -> None:
        """Answer one connection at a time; blocked in accept() it costs the job nothing."""
        import json

        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            try:
                with conn:
                    uid = control.peer_uid(conn)
                    if uid is not None and uid != os.getuid():
                        self.log(f"refused a control connection from uid {uid}")
                        continue
                    conn.settimeout(10)
                    data = b""
                    while b"\n" not in data and len(data) <= control.REQUEST_MAX_BYTES:
                        chunk = conn.recv(1024)
                        if not chunk:
                            break
                        data += chunk
                    try:
                        req = control.parse_request(data.split(b"\n", 1)[0])
                    except ValueError as e:
                        conn.sendall(json.dumps({"ok": False, "error": str(e)}).encode() + b"\n")
                        continue
                    conn.settimeout(None)
                    for answer in self._handle(req):
                        conn.sendall(json.dumps(answer, default=str).encode() + b"\n")
            except Exception as e:  # noqa: BLE001
                self.error("control connection", e)

    def _handle(self, req: dict):
        """Answers to one request (a generator: the acceptance first, the result when ready)."""
        if req["cmd"] == "status":
            yield {"ok": True, "pid": self.pid, "key": self.key, "run_dir": self.run_dir, "step": self.step,
                   "busy": self.window is not None, "captures": self.captures}
            return
        r = Request(steps=req.get("steps"), seconds=req.get("seconds"))
        with self.lock:
            if self.pending is not None or self.window is not None:
                yield {"ok": False, "error": "a capture is already running in this job; try again when it ends"}
                return
            self.pending = r
        yield {"ok": True, "accepted": req, "step": self.step}
        recent = sorted(self.step_ms_recent)
        wait_s = max(10.0, 3 * recent[len(recent) // 2] / 1000) if recent else 10.0
        seen, idle_s = self.step, 0.0
        while not r.picked.wait(1.0):  # steps flowing (maybe through another window): keep waiting
            if self.step != seen:
                seen, idle_s = self.step, 0.0
                continue
            idle_s += 1.0
            if idle_s >= wait_s:
                break
        if not r.picked.is_set():
            with self.lock:
                taken = self.pending is not r
                if not taken:
                    self.pending = None
            if not taken:
                if r.seconds is None:
                    yield {"ok": False, "error": f"no optimizer step in {wait_s:.0f} s (the job steps no optimizer, "
                                                 "or is stalled); ask for --duration instead"}
                    return
                self._time_window(r.seconds, request=r)
        r.done.wait()
        yield r.result

    # ---- exit ----------------------------------------------------------------------------------
    def at_exit(self) -> None:
        """Finish what is open: a window cut short is still exported; steps.csv is published."""
        if self.passive or os.getpid() != self.pid:
            return
        self.stop_event.set()
        try:
            if "torch" not in self.info:
                self._collect_info()
            w = self.window
            if w is not None:
                n = self.step
                last = n if w.kind == "steps" else None
                self._finish_window(w, last_step=last, cut_short=f"the job ended at step {n}")
            if self.flop_counter is not None:
                fc, self.flop_counter = self.flop_counter, None
                fc.__exit__(None, None, None)
                self.flops_result = {"status": "not counted: the job ended during the counted step"}
            if self.flops_result is None and self.settings["flops"]:
                self.flops_result = {"status": f"not counted: the job ran {self.step} steps, the count needed "
                                               f"step {self.flops_step}"}
        except Exception as e:  # noqa: BLE001
            self.error("finishing at exit", e)
        try:
            self._flush_steps()
            os.replace(self.steps_part, os.path.join(self.run_dir, self.files["steps"]))
        except Exception as e:  # noqa: BLE001
            self.error("publishing steps.csv", e)
        if not self.captures:
            s = self.settings
            self.log(f"no trace: the job ran {self.step} optimizer steps; the window needed {s['skip'] + s['steps']}")
        self._write_info()
        path = getattr(self, "control_path", None)
        if path:
            try:
                os.unlink(path)
            except OSError:
                pass

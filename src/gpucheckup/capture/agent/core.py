"""The agent's state in one process and what drives it: activation once torch is imported, the step
hook, the profiled windows it starts and finishes, attach requests, and the finish at exit."""

from __future__ import annotations

import os
import sys
import threading
import time

from gpucheckup import layout
from gpucheckup.capture.agent import loaders, server
from gpucheckup.capture.agent.settings import DURATION_MAX_STEPS, parse_settings, process_key
from gpucheckup.capture.agent.steplog import StepLog
from gpucheckup.capture.agent.windows import (
    MAIN_CALL_TIMEOUT_S,
    MainThread,
    Request,
    Window,
    export_trace,
    new_profiler,
)

MAX_ERRORS_KEPT = 20
RECENT_STEPS = 32  # the recent step times that pace an attach request's wait

_agent = None


def install(run_dir: str | None = None, overrides: dict | None = None) -> None:
    """Arm the agent: do nothing now, activate once `torch` is imported (or now if it already is).
    `run_dir` and `overrides` (settings by name) serve `sys.remote_exec` injection, which must not
    change the job's environment variables."""
    global _agent
    if _agent is not None:
        return
    run_dir = run_dir or os.environ.get(layout.ENV_RUN_DIR)
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


class Agent:
    """The agent's state in one process."""

    def __init__(self, run_dir: str):
        self.run_dir = os.path.abspath(run_dir)
        self.pid = os.getpid()
        self.key = process_key(os.environ)
        self.files = layout.agent_files(self.key)
        self.settings, self.setting_errors = parse_settings(os.environ)
        self.passive = True
        self.torch = None
        self.lock = threading.Lock()
        self.step = 0
        self.pacer = None
        self.pacer_name = None
        self.last_end = None
        self.phase = ""
        self.steplog: StepLog | None = None
        self.window: Window | None = None
        self.pending: Request | None = None
        self.auto_done = False  # the automatic step window ran (or could not)
        self.time_done = False  # the automatic time window ran (or could not)
        self.flop_count = None
        self.flops_step = None
        self.flops_result = None
        self.captures: list[dict] = []
        self.capture_seq = 0
        self.errors: list[str] = []
        self.error_count = 0
        self.dataloaders: list[dict] = []
        self.dataloader_count = 0
        self.info: dict = {}
        self.main = MainThread(self.error)
        self.control = "off"
        self.control_path = None
        self.stop_event = threading.Event()
        self.step_ms_recent: list[float] = []
        self.activated_at = None
        self.light_marked = False  # the light window's sampling was asked for (agent/light.py)

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

    def _path(self, name: str) -> str:
        return os.path.join(self.run_dir, name)

    # ---- activation ----------------------------------------------------------------------------
    def activate(self, torch) -> None:
        """Called once torch is imported: claim the key, hook steps and DataLoaders, arm windows."""
        try:
            if self._is_helper_process():
                return
            os.makedirs(self._path(layout.TRACES), exist_ok=True)
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
            self.steplog = StepLog(self._path(self.files["steps"]))
            from torch.optim.optimizer import register_optimizer_step_post_hook

            register_optimizer_step_post_hook(self._on_step)
            loaders.wrap_dataloader(torch, self._saw_dataloader)
            self.main.setup()
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
        d = self._path(layout.CLAIMS)
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
                    self.step_ms_recent = (self.step_ms_recent + [d])[-RECENT_STEPS:]
            self.steplog.add(n, now, ms, self.phase)
            if n == 1:
                self.info["torch"] = loaders.torch_info(self.torch, self.log)
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
        if self.flop_count is not None and n >= self.flops_step:
            self._finish_flops(n)
        if s["light"] and not self.light_marked and not self.auto_done:
            self._mark_sampling(n)
        if self.window is None and self.flop_count is None:
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
        elif self.flop_count is not None:
            self.phase = "flops"
        else:
            self.phase = ""

    # ---- profiler windows ----------------------------------------------------------------------
    def _trace_path(self, request, kind: str = "steps") -> str:
        """traces/<key>.json.gz for the step window, traces/time-window/ and traces/attach/ for the others."""
        if request is None and kind == "steps":
            return self._path(self.files["trace"])
        self.capture_seq += 1  # two captures in one second must not share a name
        stamp = time.strftime("%Y%m%d-%H%M%S")
        folder = layout.ATTACH_TRACES if request is not None else layout.TIME_WINDOW_TRACES
        return os.path.join(self.run_dir, folder, f"{stamp}-{self.capture_seq}-{self.key}.json.gz")

    def _start_step_window(self, n: int, steps=None, seconds=None, request=None, auto=False) -> None:
        """Begin profiling: warm-up during step n+1, record from step n+2 (K steps or S seconds)."""
        from torch.profiler import ProfilerAction

        def schedule(i):
            return ProfilerAction.WARMUP if i == 0 else ProfilerAction.RECORD

        w = None
        try:
            prof = new_profiler(self.torch, self.settings, self.error, schedule=schedule)
            first = n + 2
            w = Window(prof, "steps", self._trace_path(request), first_step=first,
                       last_step=first + steps - 1 if steps else None, seconds=seconds, request=request, auto=auto)
            if self.settings["light"]:
                self._start_light(w)
            prof.start()
            self.window = w
            self.log(f"profiling steps from {first} ({f'{steps} steps' if steps else f'{seconds:g} s'}; "
                     f"warm-up step {n + 1}){' for attach' if request else ''}")
        except Exception as e:  # noqa: BLE001
            if auto:
                self.auto_done = True
            if w is not None and w.light is not None:
                w.light.off()
            self.error("starting the profiler", e)
            if request is not None:
                request.result = {"ok": False, "error": f"could not start the profiler: {e}"}
                request.done.set()

    def _start_light(self, w: Window) -> None:
        """A light window (agent/light.py): user-scope ranges only, and the launcher asked to sample stacks."""
        from gpucheckup.capture.agent.light import UserScopes

        w.light = UserScopes(self.torch)
        w.light.on()
        if not self.light_marked:
            self._mark_sampling(None)

    def _mark_sampling(self, n: int | None) -> None:
        """Ask the launcher to start sampling stacks, LEAD_S before the window (n=None: now)."""
        from gpucheckup.capture.agent.light import lead_due, mark

        if n is not None and not lead_due(n, self.settings["skip"], self.step_ms_recent):
            return
        self.light_marked = True
        try:
            mark(self.run_dir, self.files["sampling_start"], self.pid)
        except OSError as e:
            self.error("asking the launcher to sample stacks", e)

    def _stop_light(self, w: Window, capture: dict) -> None:
        """Restore the profiler's scopes and ask the launcher to stop sampling."""
        light = getattr(w, "light", None)
        if light is None:
            return
        from gpucheckup.capture.agent.light import mark

        light.off()
        capture["light"] = True
        try:
            mark(self.run_dir, self.files["sampling_stop"], self.pid)
        except OSError as e:
            self.error("asking the launcher to stop sampling", e)

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
            try:
                w.prof.stop()
            finally:
                self._stop_light(w, capture)
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
            export_trace(w.prof, w.path)
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

    # ---- time windows (no optimizer steps) -----------------------------------------------------
    def _auto_time_window(self) -> None:
        """Timer: when no optimizer has stepped, profile a time window instead."""
        try:
            if self.passive or self.step > 0 or self.time_done or self.stop_event.is_set():
                return
            self.time_done = True
            self.log(f"no optimizer step {self.settings['window_start_s']:g} s after torch was imported: "
                     f"profiling a {self.settings['window_s']:g} s time window")
            self.time_window(self.settings["window_s"], auto=True)
        except Exception as e:  # noqa: BLE001
            self.error("time window", e)

    def time_window(self, seconds: float, request: Request | None = None, auto: bool = False) -> None:
        """Profile `seconds` of wall time, started and stopped on the main thread."""
        box = {}

        def start():
            with self.lock:
                if self.window is not None:
                    return
                prof = new_profiler(self.torch, self.settings, self.error, all_threads=True)
                w = Window(prof, "time", self._trace_path(request, "time"), seconds=seconds, request=request, auto=auto)
                prof.start()
                self.window = box["w"] = w

        started = self.main.run(start)
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
        if self.window is w and not self.main.run(lambda: self._finish_window(w)) and self.window is w:
            self.log("the main thread did not stop the time window in time; stopping it from the timer thread")
            self._finish_window(w)

    # ---- FLOPs ---------------------------------------------------------------------------------
    def _start_flops(self) -> None:
        try:
            from gpucheckup.capture.agent.flops import FlopCount

            self.flop_count = FlopCount()
        except Exception as e:  # noqa: BLE001
            self.flops_result = {"status": f"failed: {e}"}
            self.error("starting the FLOP count", e)

    def _finish_flops(self, n: int) -> None:
        fc, self.flop_count = self.flop_count, None
        try:
            self.flops_result = fc.finish(n, self._path(self.files["flops"]))
            self.log(f"FLOPs of step {n}: {self.flops_result['flops_per_step']}")
        except Exception as e:  # noqa: BLE001
            self.flops_result = {"status": f"failed: {e}"}
            self.error("finishing the FLOP count", e)

    # ---- DataLoaders -----------------------------------------------------------------------------
    def _saw_dataloader(self, loader) -> None:
        if self.passive:
            return
        try:
            self.dataloader_count += 1
            d = loaders.loader_settings(loader)
            if d not in self.dataloaders and len(self.dataloaders) < loaders.MAX_DATALOADERS:
                self.dataloaders.append(d)
        except Exception as e:  # noqa: BLE001
            self.error("reading DataLoader settings", e)

    # ---- agent.json ------------------------------------------------------------------------------
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
            "time_windows": self.main.how,
            "control": self.control,
            "errors": self.errors,
            "error_count": self.error_count,
            **self.info,
        }

    def _write_info(self) -> None:
        try:
            from gpucheckup.atomic import write_json_atomic

            write_json_atomic(self._path(self.files["info"]), self.snapshot())
        except Exception as e:  # noqa: BLE001
            self.error("writing agent.json", e)

    # ---- attach requests -------------------------------------------------------------------------
    def _start_control(self) -> None:
        try:
            self.control_path = self.control = server.start(self)
        except Exception as e:  # noqa: BLE001
            self.control = f"unavailable: {e}"
            self.error("starting the control socket", e)

    def handle(self, req: dict):
        """Answers to one control request (server.answers)."""
        return server.answers(self, req)

    # ---- exit ----------------------------------------------------------------------------------
    def at_exit(self) -> None:
        """Finish what is open: a window cut short is still exported; steps.csv is published."""
        if self.passive or os.getpid() != self.pid:
            return
        self.stop_event.set()
        try:
            if "torch" not in self.info:
                self.info["torch"] = loaders.torch_info(self.torch, self.log)
            w = self.window
            if w is not None:
                n = self.step
                last = n if w.kind == "steps" else None
                self._finish_window(w, last_step=last, cut_short=f"the job ended at step {n}")
            if self.flop_count is not None:
                fc, self.flop_count = self.flop_count, None
                fc.abandon()
                self.flops_result = {"status": "not counted: the job ended during the counted step"}
            if self.flops_result is None and self.settings["flops"]:
                self.flops_result = {"status": f"not counted: the job ran {self.step} steps, the count needed "
                                               f"step {self.flops_step}"}
        except Exception as e:  # noqa: BLE001
            self.error("finishing at exit", e)
        try:
            self.steplog.publish()
        except Exception as e:  # noqa: BLE001
            self.error("publishing steps.csv", e)
        if not self.captures:
            s = self.settings
            self.log(f"no trace: the job ran {self.step} optimizer steps; the window needed {s['skip'] + s['steps']}")
        self._write_info()
        if self.control_path:
            try:
                os.unlink(self.control_path)
            except OSError:
                pass

"""The agent's state in one process and what drives it: activation once torch is imported, the step
hook, the profiled windows it starts and finishes, attach requests, and the finish at exit."""

from __future__ import annotations

import os
import sys
import threading
import time

from gpucheckup import layout
from gpucheckup.capture import safe_dir
from gpucheckup.capture.agent import framework, loaders, server
from gpucheckup.capture.agent.gpu_clock import GpuClock
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


def install(run_dir: str | None = None, overrides: dict | None = None, run_dir_id: str | None = None) -> None:
    """Arm the agent: do nothing now, activate once `torch` is imported (or now if it already is).
    `run_dir`, `run_dir_id` and `overrides` (settings by name) serve `sys.remote_exec` injection, which
    must not change the job's environment variables. A run directory that is a link, not ours, open
    to others or not the one the launcher made (GPUCHECKUP_RUN_DIR_ID) is refused: one line on
    stderr, nothing written anywhere, and the job goes on."""
    global _agent
    if _agent is not None:
        return
    run_dir = run_dir or os.environ.get(layout.ENV_RUN_DIR)
    if not run_dir:
        return
    try:
        rd = safe_dir.RunDirectory.existing(run_dir, run_dir_id or os.environ.get(layout.ENV_RUN_DIR_ID))
    except OSError as e:
        try:
            sys.stderr.write(f"gpucheckup agent: not armed, refusing the run directory: {safe_dir.cause(e)}\n")
        except Exception:  # noqa: BLE001 - no stderr: the job goes on regardless
            pass
        return
    _agent = Agent(rd)
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

    def __init__(self, rd: safe_dir.RunDirectory):
        self.dir = rd  # every file is written relative to its descriptor, never through a link
        self.run_dir = rd.path
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
        self.exec_pending = False  # this image is about to exec (said in agent.json until the next image re-arms)
        self.execs = 0  # images this process ran before this one (os.exec*), counting on from theirs
        self.faults: list[str] = []  # writes that failed, by their cause (ENOSPC, EACCES, ...)
        self.light_marked = False  # the light window's sampling was asked for (agent/light.py)
        self.gpu_clock: GpuClock | None = None  # the `gpu_clock` setting's step events (agent/gpu_clock.py)
        self.trial = None  # the fixes `gpucheckup try` asked this process to apply (agent/trial.py)
        self.ended_by_max_steps = False

    # ---- logging -------------------------------------------------------------------------------
    def log(self, msg: str) -> None:
        """Append one line to the agent log (one write on an O_APPEND descriptor)."""
        line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} pid {os.getpid()} {self.key}: {msg}\n"
        try:
            self.dir.append(self.files["log"], line.encode("utf-8", "replace"))
        except OSError as e:
            self._fault("writing the agent log", e)

    def _fault(self, where: str, exc: BaseException) -> None:
        """Keep a failed write's real cause (said in agent.json and by the launcher in the manifest)."""
        if isinstance(exc, OSError) and len(self.faults) < MAX_ERRORS_KEPT:
            text = f"{where}: {safe_dir.cause(exc)}"
            if text not in self.faults:
                self.faults.append(text)

    def error(self, where: str, exc: BaseException | None = None) -> None:
        """Log an agent error with its traceback; the job carries on."""
        import traceback

        self.error_count += 1
        text = f"{where}: {safe_dir.cause(exc)}" if exc is not None else where
        if exc is not None:
            self._fault(where, exc)
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
            self.dir.makedirs(layout.TRACES)
            previous = self._claim()
            if previous is None:
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
            self.steplog = StepLog(self.dir, self.files["steps"], resume=bool(previous))
            if self.settings["gpu_clock"]:
                self.gpu_clock = GpuClock(torch)
            if previous:
                self._resume(previous)
            _wrap_exec(self)
            from torch.optim.optimizer import register_optimizer_step_post_hook

            register_optimizer_step_post_hook(self._on_step)
            self._start_trial(torch)  # its DataLoader patch edits the arguments the wrapper below then records
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

    def _claim(self) -> dict | None:
        """Claim this process key in the run directory: {} when claimed now; the account of this very process's
        previous image when it exec'd (the claim holds our pid); None when another process holds it (passive)."""
        name = f"{layout.CLAIMS}/{self.key}"
        try:
            fd = self.dir.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            try:
                holder = int(self.dir.read_text(name).strip() or 0)
            except (OSError, ValueError):
                return None
            if holder != self.pid:
                return None
            import json

            try:
                account = json.loads(self.dir.read_text(self.files["info"]))
            except (OSError, ValueError):
                account = {}
            return account if isinstance(account, dict) and account else {"steps": 0}
        os.write(fd, str(self.pid).encode())
        os.close(fd)
        return {}

    def _resume(self, previous: dict) -> None:
        """Count on after an exec: the step number and time from steps.csv, the captures and errors of the
        images before (from their agent.json)."""
        self.execs = int(previous.get("execs") or 0) + 1
        last = self.steplog.last_row
        if last is not None:
            self.step, self.last_end = last
        state = previous.get("state") or {}
        self.auto_done = bool(state.get("auto_done"))
        self.time_done = bool(state.get("time_done")) or self.step > 0
        self.flops_result = previous.get("flops")
        self.captures = list(previous.get("captures") or [])
        self.capture_seq = len(self.captures)
        self.errors = list(previous.get("errors") or [])[:MAX_ERRORS_KEPT]
        self.error_count = int(previous.get("error_count") or 0)
        self.faults = list(previous.get("faults") or [])[:MAX_ERRORS_KEPT]
        self.log(f"resumed after exec #{self.execs} at step {self.step}")

    def before_exec(self) -> None:
        """The process is about to exec a new image (which re-arms, as the environment still injects us):
        finish an open window, flush steps.csv.part (left as a part for the new image to append to), say so
        in agent.json, remove the control socket. No atexit handler runs on exec."""
        if self.passive or os.getpid() != self.pid:
            return
        try:
            w = self.window
            if w is not None:
                self._finish_window(w, last_step=self.step if w.kind == "steps" else None,
                                    cut_short=f"the job exec'd a new image at step {self.step}")
            if self.flop_count is not None:
                fc, self.flop_count = self.flop_count, None
                fc.abandon()
            self.steplog.flush()  # its descriptor is close-on-exec
        except Exception as e:  # noqa: BLE001 - the exec goes on
            self.error("before exec", e)
        self.log(f"exec at step {self.step}: the new image counts on")
        self.exec_pending = True
        self._write_info()
        self._remove_socket()

    def _start_trial(self, torch) -> None:
        """Apply the fixes GPUCHECKUP_TRY names (only `gpucheckup try` sets it); each says what it did in trial.json."""
        from gpucheckup.capture.agent.trial import ENV_TRY, Trial

        text = os.environ.get(ENV_TRY, "")
        if not text:
            return
        name = self.files["trial"]

        def write(records):
            try:
                self.dir.write_json(name, {"pid": self.pid, "key": self.key, "asked": text, "fixes": records})
            except OSError as e:
                self.error(f"writing {name}", e)

        self.trial = Trial(text, write)
        try:
            self.trial.install(torch)
            write(self.trial.records)
            self.log(f"trial fixes {text!r} installed")
        except Exception as e:  # noqa: BLE001 - the job runs without them
            self.error("installing the trial fixes", e)

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
            try:
                self.steplog.add(n, now, ms, self.phase)  # rows a failed write could not take stay buffered
            except OSError as e:
                self.error(f"writing {self.files['steps']} at step {n}", e)
            if self.gpu_clock is not None:  # the stream's point at this step's end (no work queued since)
                try:
                    self.gpu_clock.mark(n)
                except Exception as e:  # noqa: BLE001
                    self.gpu_clock = None
                    self.error(f"timing step {n} on the GPU (gpu-steps.csv: not written)", e)
            if n == 1:
                self.info["torch"] = loaders.torch_info(self.torch, self.log)
                self.info["framework"] = framework.calling_framework(sys._getframe(1))
                if self.trial is not None:
                    self.trial.first_step()
                self._write_info()
            self._after_step(n, now)
        except Exception as e:  # noqa: BLE001
            self.error(f"step hook (step {self.step})", e)
        finally:
            self.last_end = time.time()
        limit = self.settings["max_steps"]
        if limit and self.step >= limit and not self.ended_by_max_steps:
            self.ended_by_max_steps = True  # said in agent.json; at_exit publishes steps.csv as for any exit
            self.info["ended_by_max_steps"] = self.step
            self.log(f"ending the job after {self.step} optimizer steps (max_steps): SystemExit(0) from the step hook")
            raise SystemExit(0)

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
                self._follow_records_warmup(w)
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
            counting = w.counters_from is not None and w.counters_from <= n + 1 < w.counters_from + w.counter_steps
            self.phase = "counters" if counting else "profile-warmup" if n + 1 < w.first_step else "profiled"
        elif self.flop_count is not None:
            self.phase = "flops"
        else:
            self.phase = ""

    @staticmethod
    def _follow_records_warmup(w: Window) -> None:
        """A light window's recorded steps start after its counter steps and the records' warm-up (the recorder's
        `shift`, which grows while the GPU still runs what was queued before the records, agent/cupti_window.py),
        keeping their count."""
        if w.records_base is None or w.last_step is None:
            return
        late = w.records_base + getattr(w.prof, "shift", 0) - w.first_step
        if late > 0:
            w.first_step += late
            w.last_step += late

    # ---- profiler windows ----------------------------------------------------------------------
    def _trace_path(self, request, kind: str = "steps") -> str:
        """traces/<key>.json.gz for the step window, traces/time-window/ and traces/attach/ for the others
        (names inside the run directory)."""
        if request is None and kind == "steps":
            return self.files["trace"]
        self.capture_seq += 1  # two captures in one second must not share a name
        stamp = time.strftime("%Y%m%d-%H%M%S")
        folder = layout.ATTACH_TRACES if request is not None else layout.TIME_WINDOW_TRACES
        return f"{folder}/{stamp}-{self.capture_seq}-{self.key}.json.gz"

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
                self._start_light(w, counter_steps=self.settings["light_counter_steps"] if steps else 0)
            prof = w.prof
            prof.start()
            counted = getattr(prof, "counted", 0)  # a light window's counter steps, then the records' warm-up
            if counted:
                w.counters_from, w.counter_steps = first, counted
            if getattr(prof, "follows_warmup", False):
                w.records_base = first
                self._follow_records_warmup(w)
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

    def _start_light(self, w: Window, counter_steps: int = 0) -> None:
        """A light window (agent/light.py): CUPTI's activity records (after `counter_steps` counter steps where the
        counters run) or user-scope ranges only, and the launcher asked to sample stacks."""
        from gpucheckup.capture.agent.light import counters_span_s, light_recorder, recent_step_s

        records = w.last_step - w.first_step + 1 if w.last_step is not None else 0
        expected_s = counters_span_s(counter_steps, records, self.step_ms_recent)
        w.prof, w.light = light_recorder(self.torch, w.prof, self.log, syncs=self.settings["light_syncs"],
                                         counter_steps=counter_steps, expected_s=expected_s,
                                         follows_warmup=w.last_step is not None,
                                         pace_s=recent_step_s(self.step_ms_recent))
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
            mark(self.dir, self.files["sampling_start"], self.pid)
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
        capture["light_backend"] = getattr(light, "backend", "")
        try:
            mark(self.dir, self.files["sampling_stop"], self.pid)
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
        capture = {"kind": w.kind, "trace": w.path, "attach": w.request is not None,
                   "started_epoch_s": w.started}
        try:
            try:
                w.prof.stop()
            finally:
                self._stop_light(w, capture)
            if w.kind == "steps":
                capture["steps"] = [w.first_step, last_step]
                if w.counters_from is not None:
                    capture["counter_steps"] = [w.counters_from, min(w.counters_from + w.counter_steps - 1,
                                                                     last_step or 0)]
                if w.records_base is not None:
                    capture["record_warmup_steps"] = w.prof.warmups
                capture["profiler_step_offset"] = w.first_step - 1
                if last_step is None or last_step < w.first_step:
                    raise RuntimeError("the job ended before the first profiled step")
            else:
                capture["seconds"] = round(time.time() - w.started, 3)
            if cut_short:
                capture["cut_short"] = cut_short
            t0 = time.time()
            export_trace(w.prof, self.dir, w.path)
            capture["export_s"] = round(time.time() - t0, 3)
            capture["status"] = "done"
            result = {"ok": True, "trace": os.path.join(self.run_dir, w.path), **{k: capture[k] for k in ("steps", "seconds") if k in capture}}
            self.log(f"trace written: {capture['trace']} ({capture})")
        except Exception as e:  # noqa: BLE001
            capture["status"] = f"failed: {safe_dir.cause(e)}"
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
            self.flops_result = fc.finish(n, self.dir, self.files["flops"])
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
            "variables": layout.run_variables(os.environ),  # this process's own: torchrun sets some per rank
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
            "faults": self.faults,
            "execs": self.execs,
            "state": {"auto_done": self.auto_done, "time_done": self.time_done, "exec_pending": self.exec_pending},
            **self.info,
        }

    def _write_info(self) -> None:
        try:
            self.dir.write_json(self.files["info"], self.snapshot())
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
        try:
            text = self.gpu_clock.finish() if self.gpu_clock is not None else ""
            if text:
                self.dir.write_atomic(self.files["gpu_steps"], text.encode())
        except Exception as e:  # noqa: BLE001
            self.error(f"writing {self.files['gpu_steps']}", e)
        if not self.captures:
            s = self.settings
            self.log(f"no trace: the job ran {self.step} optimizer steps; the window needed {s['skip'] + s['steps']}")
        self._write_info()
        self._remove_socket()
        if _launcher_gone():
            self._write_orphan_manifest()

    def _remove_socket(self) -> None:
        if self.control_path:
            try:
                os.unlink(self.control_path)
            except OSError:
                pass

    def _write_orphan_manifest(self) -> None:
        """The launcher ended before the job (killed with SIGKILL, say): no one else will write the manifest,
        so the agent does, at the job's exit, saying what is missing. The job is not stopped when its launcher
        dies (no PR_SET_PDEATHSIG: a training run is worth more than its check-up)."""
        try:
            import fnmatch

            files = self.dir.files()
            names = [n for n, _ in files]
            launcher = os.environ.get(layout.ENV_LAUNCHER_PID)
            now = time.time()
            started = self.activated_at or now
            manifest = {
                "gpucheckup_version": _version(), "kind": layout.KIND_RUN, "command": list(sys.argv),
                "cwd": os.getcwd(), "run_dir": self.run_dir, "pid": self.pid, "started_epoch_s": started,
                "ended_epoch_s": now, "duration_s": round(now - started, 3), "exit_code": None,
                "exit_signal": None,
                "captured": {"traces": sorted(n for n in names if n.startswith(layout.TRACES + "/")),
                             "steps": {n: max(len(self.dir.read_text(n).splitlines()) - 1, 0) for n in names
                                       if fnmatch.fnmatch(n, layout.STEPS_GLOB)}},
                "failed": {"launcher": (f"the launcher (pid {launcher}) ended before the job: this manifest was "
                                        f"written by the agent of process {self.pid} ({self.key}) at the job's exit; "
                                        "the job's exit status, env.json and telemetry after the launcher's end "
                                        "are missing; started_epoch_s is when the agent activated")},
                "artefacts": self.dir.artefacts(),
            }
            self.dir.write_json(layout.MANIFEST, manifest)
        except Exception as e:  # noqa: BLE001
            self.error("writing the manifest for a launcher that is gone", e)


def _version() -> str:
    try:
        from gpucheckup import __version__

        return __version__
    except Exception:  # noqa: BLE001
        return "unknown"


def _launcher_gone() -> bool:
    """Whether `gpucheckup run` (GPUCHECKUP_LAUNCHER_PID) has ended while the job still runs."""
    raw = os.environ.get(layout.ENV_LAUNCHER_PID, "")
    if not raw.isdigit():
        return False
    pid = int(raw)
    if os.getppid() == pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    try:  # a pid reused by another program: the launcher's command line names gpucheckup
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"gpucheckup" not in f.read()
    except OSError:
        return False


_EXEC_WRAPPED = False


def _wrap_exec(agent: Agent) -> None:
    """os.execv / os.execve (every os.exec* goes through one of them) tell the agent first."""
    global _EXEC_WRAPPED
    if _EXEC_WRAPPED:
        return
    _EXEC_WRAPPED = True
    for name in ("execv", "execve"):
        real = getattr(os, name, None)
        if real is None:
            continue

        def wrapper(*args, _real=real, **kwargs):
            try:
                if _agent is not None:
                    _agent.before_exec()
            except Exception:  # noqa: BLE001 - the exec goes on
                pass
            return _real(*args, **kwargs)

        wrapper.__name__ = wrapper.__qualname__ = name
        wrapper.__doc__ = real.__doc__
        setattr(os, name, wrapper)

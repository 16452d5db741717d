"""Profiler windows: a session by steps (driven by the step hook) or by time (driven by a thread), the
profiler they run, the atomic export of their trace, and the calls made on the main thread.

A profiler started from another thread does not record the main thread's operators, so time
windows are started and stopped on the main thread through a real-time signal handler
(SIGRTMIN + SIGNAL_OFFSET), where the job leaves that signal free. The handler never runs a call
while the main thread is inside an import (a lazy `import torch._dynamo` in the job's first
forward, say: the profiler would find that module half-made); it is signalled again until the
import is over."""

from __future__ import annotations

import os
import threading
import time

SIGNAL_OFFSET = 7  # the agent's real-time signal: SIGRTMIN + 7
MAIN_CALL_TIMEOUT_S = 30.0
RESIGNAL_S = 0.2  # a call not yet run (the main thread was importing) is signalled again this often


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
        self.light = None  # a light window's UserScopes (agent/light.py)
        self.counters_from = None  # a light window's first counter step (agent/pm_counters.py), None without them
        self.counter_steps = 0  # and how many there are (the records' warm-up steps follow them)
        # a light window whose record steps move by the recorder's `shift` (agent/cupti_window.py): the step they
        # start at with no counter step and one warm-up step; None for every other window
        self.records_base = None


class Request:
    """An attach request from the control socket, answered when its trace is written."""

    def __init__(self, steps=None, seconds=None):
        self.steps = steps
        self.seconds = seconds
        self.picked = threading.Event()
        self.done = threading.Event()
        self.result = None


def new_profiler(torch, settings: dict, on_error, schedule=None, all_threads=False):
    """A torch.profiler session: CPU, and CUDA where there is a GPU; on_error(where, exc) for what failed."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU]
    try:
        if ProfilerActivity.CUDA in torch.profiler.supported_activities() and torch.cuda.is_available():
            acts.append(ProfilerActivity.CUDA)
    except Exception as e:  # noqa: BLE001
        on_error("checking for CUDA", e)
    kw = dict(activities=acts, record_shapes=settings["record_shapes"], with_stack=settings["with_stack"])
    if schedule is not None:
        kw["schedule"] = schedule
    if all_threads:
        try:
            from torch._C._profiler import _ExperimentalConfig

            kw["experimental_config"] = _ExperimentalConfig(profile_all_threads=True)
        except Exception:  # noqa: BLE001 - older torch: main thread (and CUDA) only
            pass
    return profile(**kw)


def export_trace(prof, rd, name: str) -> None:
    """Export the Chrome trace, gzip it beside its final name, then rename it into place: every file opened
    relative to the run directory's descriptor (rd: safe_dir.RunDirectory), none through a link."""
    import gzip

    folder, leaf = os.path.split(name)
    rd.makedirs(folder)
    base = os.path.join(folder, f".{leaf}.{os.getpid()}")
    tmp_json, tmp_gz = base + ".json", base + ".tmp"
    try:
        # The profiler writes to a path: a file made here first (O_EXCL, no link followed), reached through
        # the descriptor of the folder held open (/proc/self/fd), so the path cannot lead anywhere else.
        os.close(rd.open(tmp_json, os.O_WRONLY | os.O_CREAT | os.O_EXCL))
        via = f"/proc/self/fd/{rd.fd}"
        prof.export_chrome_trace(os.path.join(via if os.path.isdir(via) else rd.path, tmp_json))
        src = os.fdopen(rd.open(tmp_json, os.O_RDONLY), "rb")
        with src, os.fdopen(rd.open(tmp_gz, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "wb") as raw, \
                gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=3, filename="") as dst:
            while True:
                chunk = src.read(1 << 20)
                if not chunk:
                    break
                dst.write(chunk)
        rd.replace(tmp_gz, name)
    finally:
        for p in (tmp_json, tmp_gz):
            try:
                rd.unlink(p)
            except OSError:
                pass


class MainThread:
    """Calls run on the main thread, through a real-time signal whose handler runs them."""

    def __init__(self, on_error):
        self.on_error = on_error
        self.signum = None
        self.calls: list = []
        self.how = "not set up"  # said in agent.json as time_windows

    def setup(self) -> None:
        """Take the signal, where it is free and we are on the main thread."""
        import signal

        if threading.current_thread() is not threading.main_thread():
            self.how = "profiler started from a helper thread (torch was imported off the main thread)"
            return
        sig = getattr(signal, "SIGRTMIN", None)
        if sig is None:
            self.how = "profiler started from a helper thread (no real-time signals here)"
            return
        sig += SIGNAL_OFFSET
        if signal.getsignal(sig) not in (signal.SIG_DFL, None):
            self.how = f"profiler started from a helper thread (signal {sig} is taken by the job)"
            return
        signal.signal(sig, self._on_signal)
        signal.siginterrupt(sig, False)
        self.signum = sig
        self.how = f"main thread, through signal {sig}"

    def _on_signal(self, signum, frame) -> None:
        if _importing(frame):  # the main thread is half-way through an import: torch's modules may be half-made
            return  # the calls stay queued; `run` signals again
        while self.calls:
            fn = self.calls.pop(0)
            try:
                fn()
            except Exception as e:  # noqa: BLE001
                self.on_error("main-thread call", e)

    def run(self, fn, timeout_s: float = MAIN_CALL_TIMEOUT_S) -> bool:
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

        self.calls.append(call)
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            signal.pthread_kill(threading.main_thread().ident, self.signum)
            if done.wait(min(RESIGNAL_S, max(deadline - time.time(), 0.0))):
                return True
        state["cancelled"] = True
        return done.is_set()


def _importing(frame) -> bool:
    """Whether a frame runs inside an import (importlib's bootstrap is on its stack)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False

"""The light window's cost paired inside a framework's own training loop (HF Trainer, Lightning, a plain loop).

validation/light_paired.py pairs the window's phases around a step function it calls itself; a framework owns its
loop, so here the job calls `PairedSteps.step_end()` at the end of every step (a TrainerCallback, a Lightning
Callback) and the phases change there, as the agent's optimizer hook changes its window. After WARMUP_S of steps the
step pace sets STEPS per phase (about PHASE_S each); then cycles of the modes, the order rotated every cycle:
  plain   the job alone
  ranges  the window's host ranges only (cupti_window.HostRanges: the optimizer's and DataLoader's wrappers)
  cupti   the agent's CuptiWindow as shipped (kernels, copies, memsets; ranges on; step() after every step; one
          untimed warm-up step after start(); CUPTI detached at stop)
  kern    cupti with kernels only
  shared  cupti with CUPTI's ATTR_PER_THREAD_BUFFER flipped from its default before the window starts (set before
          the window registers its buffer callbacks, as CUPTI asks; every CUPTI phase records the value it ran with)
  spy     py-spy sampling the process from outside (the launcher's command line; LEAD_S of untimed steps first)
  both    spy + cupti: the light window as `gpucheckup run --light` runs it
  pm      CUPTI's PM sampling of the GPU's active cycles (validation/pm_window.py, cupti-python 13.3+), no kernel
          records: enabled at the phase's start, decoded and torn down at its end (outside the timed steps)
  pmk     pm with the cupti window inside it over the same steps, CUPTI not detached: not a cost (CUPTI stays
          attached for every later phase) but PM's busy share against the kernels', sample by sample
          (pm_overlap_probe.compare)
Each phase: synchronize, STEPS steps, synchronize (block ms per step), and the median step interval. Its cost is
against the same cycle's plain phase; medians over cycles with quartiles (light_paired.summary).
Environment: PAIRED_MODES (default plain,ranges,cupti,spy,both), PAIRED_SECONDS (default 60), PAIRED_HZ (100).
Writes OUT.json at the end (and every 4 cycles) and prints one line per mode.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from light_paired import LEAD_S, print_summary, spawn_spy, stop_spy, summary
from light_variant import per_thread_buffer

WARMUP_S = 3.0
PHASE_S = 0.3
MIN_STEPS = 8
WINDOW_MODES = {"cupti": None, "both": None, "kern": ("CONCURRENT_KERNEL",), "shared": None, "pmk": None}


class PairedSteps:
    """Phases of the modes, changed at step ends; `step_end()` True once the time is spent."""

    def __init__(self, torch, out: str, args=None):
        self.torch = torch
        self.out = out
        self.modes = tuple(os.environ.get("PAIRED_MODES", "plain,ranges,cupti,spy,both").split(","))
        self.seconds = float(os.environ.get("PAIRED_SECONDS", "60"))
        self.hz = float(os.environ.get("PAIRED_HZ", "100"))
        self.cuda = torch.cuda.is_available()
        self.cw = self.cupti = None
        if any(m in WINDOW_MODES or m == "ranges" for m in self.modes):
            from gpucheckup.capture.agent import cupti_window as cw

            self.cw = cw
            if any(m in WINDOW_MODES for m in self.modes):
                self.cupti = cw.load_cupti()
        self.pm = None
        if "pm" in self.modes or "pmk" in self.modes:
            from pm_window import PmWindow, preload_nvperf

            if self.cw is None:
                from gpucheckup.capture.agent import cupti_window as cw

                self.cw = cw
            self.cw.preload_libcupti()
            preload_nvperf()
            self.pm = PmWindow()
        self.py_spy = shutil.which("py-spy")
        if self.py_spy is None and any(m in ("spy", "both") for m in self.modes):
            raise SystemExit("paired_steps: py-spy is not on PATH")
        self.tmp = tempfile.mkdtemp()
        self.ptb_default = None
        self.t_start = time.perf_counter()
        self.deadline = None
        self.steps = None  # timed steps per phase, from the pace after warm-up
        self.cycles: list[list[dict]] = []
        self.cycle: list[dict] = []
        self.order: list[str] = []
        self.phase = None  # the phase in progress: dict with its recorders and step ends
        self.errors: list[str] = []
        self.warm_ends: list[float] = []

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def step_end(self) -> bool:
        """Called at every step's end: advance the phase; True when the job should stop."""
        now = time.perf_counter()
        if self.steps is None:
            self.warm_ends.append(now)
            if now - self.t_start >= WARMUP_S and len(self.warm_ends) >= 10:
                tail = self.warm_ends[len(self.warm_ends) // 2:]
                pace = (tail[-1] - tail[0]) / (len(tail) - 1)
                self.steps = max(MIN_STEPS, round(PHASE_S / pace))
                self.deadline = now + self.seconds
                self._next_phase()
            return False
        try:
            return self._advance(now)
        except Exception as e:  # noqa: BLE001 - the cycles so far still count
            self.errors.append(f"{type(e).__name__}: {e}")
            self._end_phase(keep=False)
            return True

    def _advance(self, now: float) -> bool:
        p = self.phase
        if p["window"] is not None:
            p["window"].step()
        if p["state"] == "lead":
            if now >= p["lead_until"]:
                self._open_window(p)
                p["state"] = "warm"
            return False
        if p["state"] == "warm":  # the agent's warm-up step after start() is over: time from here
            self.sync()
            p["t0"] = time.perf_counter()
            p["ends"] = [p["t0"]]
            p["state"] = "timed"
            return False
        p["ends"].append(now)
        if len(p["ends"]) - 1 < self.steps:
            return False
        self.sync()
        n = len(p["ends"]) - 1
        p["fig"]["block_ms"] = (time.perf_counter() - p["t0"]) / n * 1000.0
        iv = sorted((b - a) * 1000.0 for a, b in zip(p["ends"], p["ends"][1:]))
        p["fig"]["median_ms"] = iv[len(iv) // 2]
        self._end_phase(keep=True)
        if not self.order:
            self.cycles.append(self.cycle)
            self.cycle = []
            if len(self.cycles) % 4 == 0:
                self._write()
            if time.perf_counter() >= self.deadline:
                return True
        self._next_phase()
        return False

    def _next_phase(self) -> None:
        if not self.order:
            k = len(self.cycles) % len(self.modes)
            self.order = list(self.modes[k:] + self.modes[:k])
        mode = self.order.pop(0)
        p = {"mode": mode, "fig": {"mode": mode}, "window": None, "ranges": None, "spy": None, "state": "warm"}
        if mode in ("spy", "both"):
            p["spy_out"] = os.path.join(self.tmp, f"spy-{time.monotonic_ns()}.json")
            p["spy"] = spawn_spy(self.py_spy, self.hz, p["spy_out"])
            p["state"] = "lead"
            p["lead_until"] = time.perf_counter() + LEAD_S
        else:
            self._open_window(p)
        self.phase = p

    def _open_window(self, p: dict) -> None:
        """The phase's in-job recorder, started at this step's end (the next step is its untimed warm-up)."""
        mode = p["mode"]
        if mode == "ranges":
            p["ranges"] = self.cw.HostRanges(self.torch)
            p["ranges"].on()
        if mode in ("pm", "pmk"):
            p["pm"] = self.pm
            self.pm.enable()
            self.pm.start()
        if mode in WINDOW_MODES:
            kinds, shipped = WINDOW_MODES[mode], self.cw.ACTIVITIES
            if kinds is not None:
                self.cw.ACTIVITIES = kinds
            try:
                p["window"] = self.cw.CuptiWindow(self.torch, self.cupti)
            finally:
                self.cw.ACTIVITIES = shipped
            p["fig"]["per_thread_buffer"] = self._per_thread_buffer(flip=mode == "shared")
            p["ranges"] = p["window"].host
            p["ranges"].on()
            if mode == "pmk":  # CUPTI stays attached: its profiler would not initialize again after a detach
                p["window"]._detach = lambda: None
            p["window"].start()
            p["c0"] = self.cupti.get_timestamp()

    def _per_thread_buffer(self, flip: bool) -> list | str:
        """CUPTI's ATTR_PER_THREAD_BUFFER set to its default, or flipped from it when `flip`: [default, now], or the error.

        The attribute is the process's, so every CUPTI phase sets it: a `cupti` phase after a `shared` one must not
        inherit the flip. The default is the value read before any phase set it.
        """
        try:
            if self.ptb_default is None:
                self.ptb_default = per_thread_buffer(self.cupti)
            want = (1 - self.ptb_default) if flip else self.ptb_default
            return [self.ptb_default, per_thread_buffer(self.cupti, want)]
        except Exception as e:  # noqa: BLE001 - a CUPTI that refuses the attribute: the phase runs as shipped
            return f"{type(e).__name__}: {e}"[:200]

    def _end_phase(self, keep: bool) -> None:
        p, self.phase = self.phase, None
        if p is None:
            return
        if p["window"] is not None:
            p["window"].stop()
            p["c1"] = self.cupti.get_timestamp()
            p["fig"]["records"] = p["window"].summary()["records"]
            p["fig"]["buffers"] = p["window"].buffers
        if p.get("pm") is not None:
            try:
                p["pm"].stop()
                got = p["pm"].collect(keep_samples=p["mode"] == "pmk")
                p["fig"]["pm_samples"], p["fig"]["pm_busy_pct"] = got["samples"], got.get("busy_pct")
                if p["mode"] == "pmk" and got.get("series"):  # the same steps' kernel records against PM's samples
                    from pm_overlap_probe import compare

                    kern = [r for r in p["window"].records if r[0] == "kernel"]
                    p["fig"]["overlap"] = compare(got["series"], got["metrics"], kern, p["c0"], p["c1"])
            finally:
                p["pm"].disable()
        if p["ranges"] is not None:
            p["ranges"].off()
            p["fig"]["host_ranges"] = len(p["ranges"].ranges)
        if p["spy"] is not None:
            p["fig"]["samples"] = stop_spy(p["spy"], p["spy_out"])
        if keep:
            self.cycle.append(p["fig"])

    def _write(self) -> dict:
        res = {"torch": self.torch.__version__, "gpu": self.torch.cuda.get_device_name(0) if self.cuda else "cpu",
               "modes": self.modes, "steps_per_phase": self.steps, "hz": self.hz, "cycles": self.cycles,
               "errors": self.errors, "summary": summary(self.cycles, self.modes) if self.cycles else None}
        with open(self.out, "w") as f:
            json.dump(res, f)
        return res

    def finish(self) -> None:
        """Close a phase left open, write OUT.json, print each mode's median change against plain."""
        if self.phase is not None:
            self._end_phase(keep=False)
        res = self._write()
        print(f"paired: {len(self.cycles)} cycles of {self.steps} steps, errors {self.errors}")
        print_summary(res["summary"] or {}, self.modes)

"""What the live monitor names as it happens: a utilization heartbeat, clock throttling and saturated loader
workers, in plain words.

Definitions (docs/metrics.md, "Live monitor"):
- heartbeat: analysis/run_logs/telemetry.py's definition (pulses above max(5%, p90/2), >= 3 of them,
  >= 30% of samples at or below the level; period = median time between pulse starts), applied
  to the mean utilization of the shown GPUs over the last window of samples (capture/monitor.py
  keeps 60 s) instead of the whole run.
- matches the step time: |period - step time| <= MATCH_PCT (15%) of the step time. NVML
  samples utilization over its own period (1/6 s to 1 s by GPU), so a period is known to about
  one sample; 15% covers that at step times of a few seconds, where a heartbeat is visible.
  A match means each step has a GPU-idle phase (data, a sync). A period within MATCH_PCT of one
  step from k steps (k >= 2) points at something every k steps (gradient accumulation, logging every k
  steps); any other period at something periodic across steps (evaluation, checkpoints).
- throttling now: the latest sample's clock-event reason bits, each named (THROTTLE_BITS of
  analysis/run_logs/telemetry.py, plus sync boost, which telemetry does not count as throttling since it
  only aligns clocks within a group) with what it means.
- worker process: a child of a process of the job started by Python's multiprocessing, as DataLoader
  workers are (capture/monitor.py: its command line is its parent's, a fork, or names multiprocessing,
  a spawn or forkserver child).
- saturated workers: worker processes whose CPU demand, averaged over the readings of the last
  SATURATED_S (3 s, at least MIN_READINGS of them), is at least SATURATED_PCT (80%) of one core: they
  compute without pause, so more batches per second need more workers (up to the free cores) or less
  work per sample; a loader that waits on storage or the network keeps its workers well below a core.
  CPU demand = CPU use + the time its threads were ready to run but waited for a CPU (the run
  queue, where the host reports it): a worker on a host busy with other work computes flat out too,
  and its use alone would read low. 80% rather than 100% leaves room for the readings' own jitter.
Needs no torch and no NVML.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpucheckup.analysis.run_logs.telemetry import THROTTLE_BITS, heartbeat

MATCH_PCT = 15.0
SATURATED_PCT = 80.0
SATURATED_S = 3.0
MIN_READINGS = 3
SYNC_BOOST = 0x10
PLAIN_WORDS = {
    0x4: "held under its power limit: clocks lowered to stay within the board's power cap",
    0x8: "hardware slowdown: clocks cut hard (overheating or an external power-brake signal)",
    0x10: "sync boost: clocks held to those of the slowest GPU in its sync-boost group",
    0x20: "too hot: the driver lowered clocks to cool the GPU",
    0x40: "too hot: the GPU itself lowered clocks to protect the chip",
    0x80: "power brake: the system (power supply) told the GPU to slow down",
}
NAMES = {**THROTTLE_BITS, SYNC_BOOST: "sync boost"}


@dataclass(frozen=True)
class Heartbeat:
    """The heartbeat seen in the window, and whether it matches the step time."""

    seen: bool
    pulses: int
    low_pct: float
    period_s: float | None
    threshold_pct: float | None
    step_s: float | None = None
    matches_step: bool | None = None  # None when the step time is unknown or there is no heartbeat
    steps_per_period: int | None = None  # k when the period is within MATCH_PCT of k steps

    def sentence(self) -> str:
        if not self.seen:
            return (f"no heartbeat: {self.pulses} pulse{'s' if self.pulses != 1 else ''} in the window, "
                    f"{self.low_pct:.0f}% of samples low")
        s = (f"HEARTBEAT: utilization swings every {self.period_s:.2f} s ({self.pulses} pulses, {self.low_pct:.0f}% "
             f"of samples at or below {self.threshold_pct:.0f}%): the GPU works in bursts and waits in between")
        if self.matches_step is True:
            s += (f"; the period matches the step time ({self.step_s:.2f} s): every step has an idle phase "
                  "(waiting for data or a sync)")
        elif self.steps_per_period:
            s += (f"; the period is {self.steps_per_period} steps of {self.step_s:.2f} s: something happens every "
                  f"{self.steps_per_period} steps (gradient accumulation, logging or a sync every N steps)")
        elif self.matches_step is False:
            s += (f"; the period does not match the step time ({self.step_s:.2f} s): something periodic across "
                  "steps (logging, evaluation, checkpoints)")
        return s


@dataclass(frozen=True)
class Throttle:
    """One clock-event reason active now on one GPU."""

    gpu: int
    bit: int
    name: str
    words: str
    slows_clocks: bool  # False for sync boost: it aligns clocks, telemetry does not count it as throttling

    def sentence(self) -> str:
        return f"GPU {self.gpu}: {self.name.upper()}: {self.words}"


def mean_util_series(rows: list[dict], gpus: list[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(sample times, mean utilization of the given GPUs at each) from NVML rows (NVML_COLUMNS keys)."""
    by_t: dict[float, list[float]] = {}
    for r in rows:
        if gpus and r["gpu"] not in gpus:
            continue
        u = r.get("util_pct")
        if u is None or u == "":
            continue
        by_t.setdefault(float(r["t_s"]), []).append(float(u))
    t = np.array(sorted(by_t), dtype=float)
    return t, np.array([np.mean(by_t[x]) for x in t], dtype=float)


def heartbeat_now(t: np.ndarray, util: np.ndarray, step_s: float | None = None) -> Heartbeat:
    """The heartbeat over the window, compared with the step time when it is known."""
    hb = heartbeat(t, util)
    match = k = None
    if hb["heartbeat"] and hb["period_s"] and step_s:
        match = abs(hb["period_s"] - step_s) <= MATCH_PCT / 100 * step_s
        n = round(hb["period_s"] / step_s)
        if not match and n >= 2 and abs(hb["period_s"] - n * step_s) <= MATCH_PCT / 100 * step_s:
            k = n
    return Heartbeat(seen=hb["heartbeat"], pulses=hb["pulses"], low_pct=hb["low_pct"], period_s=hb["period_s"],
                     threshold_pct=hb["threshold_pct"], step_s=step_s, matches_step=match, steps_per_period=k)


def throttles_now(rows: list[dict]) -> list[Throttle]:
    """The named clock-event reasons in each GPU's latest sample."""
    latest: dict[int, dict] = {}
    for r in rows:
        latest[int(r["gpu"])] = r
    out = []
    for gpu, r in sorted(latest.items()):
        bits = r.get("clock_reasons")
        if bits is None or bits == "":
            continue
        bits = int(bits)
        for bit, name in sorted(NAMES.items()):
            if bits & bit:
                out.append(Throttle(gpu, bit, name, PLAIN_WORDS[bit], bit != SYNC_BOOST))
    return out


@dataclass(frozen=True)
class Saturation:
    """The job's worker processes now, and those saturated (pid, mean CPU demand % of one core over SATURATED_S)."""

    workers: int
    saturated: tuple[tuple[int, float], ...] = ()

    def sentence(self) -> str:
        pcts = ", ".join(f"{pct:.0f}%" for _, pct in self.saturated)
        return (f"SATURATED WORKERS: {len(self.saturated)} of {self.workers} DataLoader worker processes each "
                f"demand {pcts} of a core (CPU use + run-queue wait) over the last {SATURATED_S:g} s: the loader's "
                "workers compute flat out; if the training loop waits for data, add workers (up to the free "
                "cores) or make each sample cheaper")


def saturated_workers(history: dict[int, list[tuple[float, float]]], workers: set[int], now: float) -> Saturation:
    """Which worker processes are saturated now, from each process's (time, CPU demand %) readings."""
    out = []
    for pid in sorted(workers):
        recent = [cpu for t, cpu in history.get(pid, []) if now - t <= SATURATED_S]
        if len(recent) >= MIN_READINGS and float(np.mean(recent)) >= SATURATED_PCT:
            out.append((pid, float(np.mean(recent))))
    return Saturation(len(workers), tuple(out))

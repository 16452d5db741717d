"""`gpucheckup monitor`: the live loop (sample, name what happens, draw), and `analyze` of a recording.

Sampling is capture/monitor.py's, the heartbeat, throttle and saturated-worker naming
analysis/run_logs/live_events.py's,
the frame report/text/terminal_monitor.py's. A recording (`--record FILE`) has nvml.csv's columns;
`gpucheckup analyze FILE.csv` reads it as a run holding only NVML telemetry
(trace/rundir.py read_nvml_recording) and checks it up with the run-level analyses and rules.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.text import Text

from gpucheckup.analysis.run_logs.live_events import (MATCH_PCT, SATURATED_S, heartbeat_now, mean_util_series,
                                                       saturated_workers, throttles_now)
from gpucheckup.atomic import write_atomic
from gpucheckup.capture.monitor import Monitor
from gpucheckup.report import json_doc
from gpucheckup.safe_text import safe


@dataclass
class EventLog:
    """Named events as they start and stop: heartbeat seen / changed / gone, each throttle reason on / off,
    saturated loader workers seen (or their count changed) / gone."""

    lines: list[str] = field(default_factory=list)
    heartbeats: list = field(default_factory=list)  # every Heartbeat logged
    throttles: set = field(default_factory=set)  # (gpu, name) ever seen
    saturations: list = field(default_factory=list)  # every Saturation logged
    _period: float | None = None
    _active: frozenset = frozenset()
    _saturated: int = 0

    def note_workers(self, t: float, sat) -> None:
        """Saturated worker processes (live_events.Saturation): logged when their count changes, and when none is."""
        n = len(sat.saturated)
        if n != self._saturated:
            stamp = time.strftime("%H:%M:%S", time.localtime(t))
            self.lines.append(f"{stamp} {sat.sentence()}" if n else f"{stamp} DataLoader workers no longer saturated")
            if n:
                self.saturations.append(sat)
            self._saturated = n

    def note(self, t: float, hb, throttles) -> None:
        stamp = time.strftime("%H:%M:%S", time.localtime(t))
        if hb.seen and (self._period is None or abs(hb.period_s - self._period) > MATCH_PCT / 100 * self._period):
            self.lines.append(f"{stamp} {hb.sentence()}")
            self.heartbeats.append(hb)
            self._period = hb.period_s
        elif not hb.seen and self._period is not None:
            self.lines.append(f"{stamp} heartbeat gone")
            self._period = None
        now = frozenset((th.gpu, th.name) for th in throttles)
        for th in throttles:
            if (th.gpu, th.name) not in self._active:
                self.lines.append(f"{stamp} {th.sentence()}")
        for gpu, name in sorted(self._active - now):
            self.lines.append(f"{stamp} GPU {gpu}: {name} cleared")
        self.throttles |= now
        self._active = now


def run(pid: int | None, interval_s: float, record: Path | None, duration_s: float | None, step_ms: float | None,
        console: Console) -> EventLog:
    """Sample until the duration ends, the process exits, or Ctrl-C; print the events named on the way."""
    mon = Monitor(pid, interval_s, record)
    mon.open()
    if not mon.nvml_ok:
        console.print(Text(f"no NVML ({mon.nvml.status}): showing the CPU side only", style="yellow"))
    log = EventLog()
    cpu: dict[int, list[tuple[float, float]]] = {}  # pid -> (time, CPU demand %) of the last SATURATED_S
    step_s = step_ms / 1000 if step_ms else None
    end = time.time() + duration_s if duration_s else math.inf
    try:
        from gpucheckup.report.text.terminal_monitor import render_monitor

        with Live(console=console, auto_refresh=False) as live:
            nxt = time.time()
            while time.time() < end:
                snap = mon.tick()
                t, u = mean_util_series(snap.window, snap.gpus)
                hb = heartbeat_now(t, u, step_s)
                th = throttles_now(snap.window)
                if mon.nvml_ok:
                    log.note(snap.t_s, hb, th)
                sat = saturated_workers(_cpu_history(cpu, snap), {p.pid for p in snap.processes if p.role == "worker"},
                                        snap.t_s)
                log.note_workers(snap.t_s, sat)
                live.update(render_monitor(snap, hb, th, log.lines[-6:] if console.is_terminal else [], sat),
                            refresh=True)
                if pid is not None and snap.pid_status:
                    break
                nxt += interval_s
                time.sleep(max(0.0, nxt - time.time()))
    except KeyboardInterrupt:
        pass
    finally:
        mon.close()
    if not console.is_terminal:
        console.line()
    if log.lines:
        console.print(Text("Named while monitoring:", style="bold"))
    for line in log.lines:
        console.print(Text(line))
    if record is not None and mon.sink.file is not None:
        console.print(Text(f"recorded {mon.sink.count} NVML rows to {record}: `gpucheckup analyze {record}` reads it",
                           style="dim"))
    elif record is not None:
        console.print(Text(f"nothing recorded to {record}: no NVML samples", style="yellow"))
    return log


def _cpu_history(cpu: dict[int, list[tuple[float, float]]], snap) -> dict[int, list[tuple[float, float]]]:
    """Each live process's CPU demand readings (use + run-queue wait) of the last SATURATED_S, with this tick's added
    (processes gone dropped)."""
    now = {p.pid: None if p.cpu_pct is None else p.cpu_pct + (p.wait_pct or 0.0) for p in snap.processes}
    for pid in list(cpu):
        if pid not in now:
            del cpu[pid]
    for pid, pct in now.items():
        readings = [(t, c) for t, c in cpu.get(pid, []) if snap.t_s - t <= SATURATED_S]
        cpu[pid] = readings + ([(snap.t_s, pct)] if pct is not None else [])
    return cpu


def analyze_recording(path: Path, console: Console, quiet: bool = False, json_path: Path | None = None) -> int:
    """Check up a monitor recording: the run-level NVML figures (heartbeat, throttling, memory) and rules."""
    from gpucheckup.analysis.run_logs.run import analyze_run
    from gpucheckup.diagnosis.run_rules import run_findings
    from gpucheckup.checkup.run_report import run_only_dict
    from gpucheckup.report.text.terminal_run import render_run_only
    from gpucheckup.trace.rundir import read_nvml_recording

    run = read_nvml_recording(path)
    ra = analyze_run(run)
    why = "a `gpucheckup monitor --record` file: NVML telemetry only, no profiler trace (no timeline verdict)"
    findings = run_findings(ra)
    report = run_only_dict(ra, findings, why, [])
    if not quiet:
        render_run_only(report, console)
    if json_path:
        from gpucheckup.checkup.assemble import document
        from gpucheckup.checkup.pipeline import Checkups, RunCheckup

        rc = RunCheckup(run=run, analysis=ra, findings=findings, no_timeline=why, report=report)
        data = json_doc.document(document(Checkups(Path(path), run=rc)))
        if str(json_path) == "-":  # `--json -`: standard output (the terminal report went to stderr: cli/__init__)
            sys.stdout.buffer.write(data + b"\n")
            sys.stdout.flush()
        else:
            write_atomic(json_path, data)
            console.print(f"JSON written to {safe(json_path)}", style="dim", markup=False)
    return 0

"""Sampling for `gpucheckup monitor`: NVML per GPU and the CPU of a job's processes, one tick at a time.

The NVML readings are capture/telemetry.py's NvmlSampler's (the same fields, the same columns,
NVML_COLUMNS): the monitor calls its tick() from its own loop instead of a thread, and takes the
rows through a sink that keeps the last WINDOW_S seconds in memory for the live view and, with
`--record FILE`, writes them to FILE as telemetry.py's CsvSink does (a `.part` file renamed into
place at the end), so `gpucheckup analyze FILE` reads it like a run directory's nvml.csv.
pynvml (nvidia-ml-py) is imported lazily, inside NvmlSampler.open(); without it, or without a
driver, the GPU side is off and `nvml_status` says why, and the CPU side still runs.
CPU: psutil over the process `--pid` and all its descendants (DataLoader workers, ranks), cpu_pct
100 = one core busy, as in cpu.csv. A descendant started by Python's multiprocessing (its command line is its
parent's, a fork, or names multiprocessing: a spawn or forkserver child), as DataLoader workers are, has the
role "worker" (torch names its DataLoader workers pt_data_worker); any other, "child". Each process's
run-queue wait (Linux: /proc/PID/task/*/schedstat, the time its threads were ready to run but waited for a
CPU), % of one core since the last tick: with cpu_pct, what the process would use on an idle host.
"""

from __future__ import annotations

import tempfile
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from gpucheckup.capture.telemetry import CsvSink, NvmlSampler
from gpucheckup.layout import NVML_COLUMNS
from gpucheckup.errors import CheckupError

WINDOW_S = 60.0  # the live view's memory: enough for several periods of a slow heartbeat


class WindowSink:
    """Rows of NVML_COLUMNS kept for the last WINDOW_S seconds, and also written to a CsvSink when recording."""

    def __init__(self, record: Path | None, window_s: float = WINDOW_S):
        self.rows: deque = deque()
        self.window_s = window_s
        self.record = record
        self.file = None  # created with the first row: no NVML, no file
        self.count = 0

    def add(self, values: list) -> None:
        row = dict(zip(NVML_COLUMNS, values))
        self.rows.append(row)
        self.count += 1
        while self.rows and row["t_s"] - self.rows[0]["t_s"] > self.window_s:
            self.rows.popleft()
        if self.record is not None:
            if self.file is None:
                self.file = CsvSink(self.record, NVML_COLUMNS)
            self.file.add(values)

    def finish(self) -> None:
        if self.file is not None:
            self.file.finish()


@dataclass
class ProcRow:
    """One process of the job at the last tick."""

    pid: int
    ppid: int
    name: str
    role: str  # "main" (the --pid process), "worker" (a multiprocessing child: a DataLoader worker) or "child" (a rank...)
    cpu_pct: float | None  # None on the first tick (psutil needs two readings)
    rss_mb: float
    threads: int
    wait_pct: float | None = None  # waiting for a CPU (run queue), % of one core; None: first tick, or not Linux


@dataclass
class Snapshot:
    """What the live view shows after a tick."""

    t_s: float
    nvml_status: str
    gpus: list[int]
    window: list[dict]  # NVML rows of the last WINDOW_S seconds, all GPUs (NVML_COLUMNS keys)
    processes: list[ProcRow] = field(default_factory=list)
    pid_status: str = ""
    host_cpu_pct: float | None = None  # the whole host, 100 = every core busy


class Monitor:
    """Opens NVML and psutil, samples both on each tick(), closes (finishing the recording)."""

    def __init__(self, pid: int | None, interval_s: float, record: Path | None = None):
        if not interval_s > 0:
            raise CheckupError(f"--interval must be above 0 s, got {interval_s}")
        self.pid = pid
        self.record = record
        self.interval_s = interval_s
        self.sink = WindowSink(record)
        self._tmp = tempfile.TemporaryDirectory(prefix="gpucheckup-monitor-")
        self.nvml = NvmlSampler(Path(self._tmp.name), 1.0 / interval_s, self._pids)
        self.nvml_ok = False
        self.procs: dict[int, object] = {}
        self.roles: dict[int, str] = {}  # pid -> "worker" or "child"
        self.waits: dict[int, tuple[float, int]] = {}  # pid -> (monotonic s, run-queue wait ns) at the last tick
        self.pid_status = ""

    def open(self) -> None:
        """Start NVML (or note why not) and find the process."""
        import psutil

        self.ps = psutil
        if self.pid is not None:
            try:
                self.root = psutil.Process(self.pid)
            except psutil.Error as e:
                raise CheckupError(f"--pid {self.pid}: {e}") from None
        psutil.cpu_percent(None)
        if self.record is not None and not self.record.parent.is_dir():
            raise CheckupError(f"--record {self.record}: no such folder {self.record.parent}")
        self.nvml_ok = self.nvml.open()
        if self.nvml_ok:
            tmp_sink = self.nvml.sink  # telemetry's own nvml.csv in a temporary folder: replaced by ours
            self.nvml.sink = self.sink
            tmp_sink.discard()
            self._job_gpus()

    def _job_gpus(self) -> None:
        """With --pid, keep the GPUs on which NVML lists one of the job's processes (all when none is listed)."""
        if self.pid is None:
            return
        nv, pids = self.nvml.nv, set(self._pids())
        used = []
        for gpu, h in self.nvml.handles.items():
            try:
                procs = nv.nvmlDeviceGetComputeRunningProcesses(h)
            except Exception:  # noqa: BLE001 - NVMLError, or a binding without the call
                continue
            if any(p.pid in pids for p in procs):
                used.append(gpu)
        if used:
            self.nvml.gpus = used
            self.nvml.handles = {g: self.nvml.handles[g] for g in used}

    def _pids(self) -> list[int]:
        return list(self.procs) or ([self.pid] if self.pid is not None else [])

    def tick(self) -> Snapshot:
        """One reading of every GPU and process."""
        t = time.time()
        if self.nvml_ok:
            try:
                self.nvml.tick()
            except Exception as e:  # noqa: BLE001 - NVML failing mid-way: say so, keep the CPU side
                self.nvml_ok = False
                self.nvml.status = f"stopped: {type(e).__name__}: {e}"
        return Snapshot(t_s=t, nvml_status=self.nvml.status, gpus=list(getattr(self.nvml, "gpus", [])),
                        window=list(self.sink.rows), processes=self._proc_rows(),
                        pid_status=self.pid_status, host_cpu_pct=self.ps.cpu_percent(None))

    def _proc_rows(self) -> list[ProcRow]:
        if self.pid is None:
            return []
        ps = self.ps
        try:
            current = [self.root] + self.root.children(recursive=True)
        except ps.Error:
            self.pid_status = f"process {self.pid} has exited"
            self.procs = {}
            return []
        rows, seen = [], {}
        for p in current:
            proc = self.procs.get(p.pid) or p
            first = p.pid not in self.procs
            try:
                with proc.oneshot():
                    cpu = proc.cpu_percent(None)
                    rows.append(ProcRow(pid=p.pid, ppid=proc.ppid(), name=proc.name(),
                                        role="main" if p.pid == self.pid else self._role(proc),
                                        cpu_pct=None if first else cpu, rss_mb=proc.memory_info().rss / 2**20,
                                        threads=proc.num_threads(), wait_pct=self._wait_pct(p.pid)))
            except ps.Error:
                continue
            seen[p.pid] = proc
        self.procs = seen
        return rows

    def _wait_pct(self, pid: int) -> float | None:
        """The process's threads' run-queue wait since the last tick, % of one core (None on its first tick)."""
        now, waited = time.monotonic(), 0
        try:
            for task in Path(f"/proc/{pid}/task").iterdir():
                try:
                    waited += int((task / "schedstat").read_text().split()[1])  # ns ready to run, not running
                except (OSError, IndexError, ValueError):
                    continue
        except OSError:
            return None
        last = self.waits.get(pid)
        self.waits[pid] = (now, waited)
        if last is None or now <= last[0]:
            return None
        return max(0.0, 100 * (waited - last[1]) / 1e9 / (now - last[0]))

    def _role(self, proc) -> str:
        """"worker" for a DataLoader worker (named pt_data_worker by torch) or another multiprocessing child (its
        parent's command line, or one naming multiprocessing), else "child"; decided once per process."""
        if proc.pid not in self.roles:
            ps = self.ps
            try:
                cmd = proc.cmdline()
                parent = ps.Process(proc.ppid()).cmdline()
                worker = (proc.name() == "pt_data_worker" or cmd == parent
                          or any("multiprocessing" in part for part in cmd))
            except ps.Error:
                worker = False
            self.roles[proc.pid] = "worker" if worker else "child"
        return self.roles[proc.pid]

    def close(self) -> None:
        """Stop NVML and finish the recording (the file appears only now, whole)."""
        if self.nvml_ok or self.nvml.sink is self.sink:
            self.nvml.close()
        else:
            self.sink.finish()
        self._tmp.cleanup()

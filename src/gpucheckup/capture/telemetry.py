"""Telemetry sampled outside the job, in the launcher: NVML per GPU and the CPU use of the job's processes.

- nvml.csv, one row per GPU per tick at `hz` (default 10): t_s (Unix seconds, the trace's clock
  once `baseTimeNanoseconds` is added to its `ts`), gpu (NVML index), util_pct (share of the
  driver's last sample period in which a kernel ran), mem_util_pct, mem_used_mb, mem_total_mb,
  power_w, sm_clock_mhz, clock_reasons (NVML clock-event / throttle reason bits), temp_c, and
  once a second pcie_tx_mbs, pcie_rx_mbs (MB/s; NVML measures these over 20 ms) and
  proc_sm_util_pct (summed SM utilization of the job's processes, where the driver answers).
  A field the GPU does not support stays empty.
- cpu.csv, one row per process of the job (the command and all its descendants: DataLoader
  workers, torchrun ranks) every second: t_s, pid, ppid, name, cpu_pct (100 = one core busy),
  rss_mb, threads.
Rows go to `<name>.part` in batches and the finished file is renamed into place (atomic).
Sampling from a separate process keeps the job's GIL out of it.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from gpucheckup import layout

SLOW_EVERY = 10  # PCIe and per-process utilization on every 10th NVML tick
FLUSH_S = 2.0


class CsvSink:
    """A CSV file written in batches to `<path>.part`, renamed to `<path>` when finished. Given a run directory
    (safe_dir.RunDirectory), `path` is a name inside it, opened relative to its descriptor, no link followed."""

    def __init__(self, path, columns: tuple[str, ...], rd=None):
        self.rd = rd
        self.path = Path(path)
        self.part = self.path.with_name(self.path.name + layout.PART)
        self.rows: list[str] = []
        self.count = 0
        self.last_flush = time.time()
        self.finished = False
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        self.fd = rd.open(str(self.part), flags) if rd is not None else os.open(self.part, flags, 0o644)
        self._write(",".join(columns) + "\n")

    def _write(self, text: str) -> None:
        view = memoryview(text.encode())
        while view:
            view = view[os.write(self.fd, view):]

    def add(self, values: list) -> None:
        self.rows.append(",".join("" if v is None else (f"{v:.6f}" if isinstance(v, float) else str(v))
                                  for v in values) + "\n")
        self.count += 1
        if time.time() - self.last_flush >= FLUSH_S:
            self.flush()

    def flush(self) -> None:
        rows, self.rows = self.rows, []
        self.last_flush = time.time()
        if rows:
            self._write("".join(rows))

    def discard(self) -> None:
        """Close and remove the partial file (nothing is published)."""
        if not self.finished:
            os.close(self.fd)
            self.finished = True
            if self.rd is not None:
                self.rd.unlink(str(self.part))
            else:
                self.part.unlink(missing_ok=True)

    def finish(self) -> None:
        """Write what is left and rename the file into place (once; later calls do nothing)."""
        if self.finished:
            return
        try:
            self.flush()
        finally:
            os.close(self.fd)
            self.finished = True
        if self.rd is not None:
            self.rd.replace(str(self.part), str(self.path))
        else:
            os.replace(self.part, self.path)


def sink_in(run_dir, name: str, columns: tuple[str, ...]) -> CsvSink:
    """A CsvSink for `name` in a run directory (a safe_dir.RunDirectory, or a plain folder's Path)."""
    if hasattr(run_dir, "fd"):
        return CsvSink(name, columns, rd=run_dir)
    return CsvSink(Path(run_dir) / name, columns)


def visible_indices(cvd: str | None, count: int, uuids: list[str]) -> list[int]:
    """NVML indices of the GPUs that CUDA_VISIBLE_DEVICES lets the job see (all when unset or unclear)."""
    if cvd is None:
        return list(range(count))
    out = []
    for item in (x.strip() for x in cvd.split(",") if x.strip()):
        if item.isdigit() and int(item) < count:
            out.append(int(item))
        elif item.startswith("GPU-"):
            match = [i for i, u in enumerate(uuids) if u.startswith(item)]
            if not match:
                return list(range(count))
            out += match
        else:  # MIG or unknown syntax: sample every GPU
            return list(range(count))
    return sorted(set(out))


class Sampler(threading.Thread):
    """A daemon thread calling `tick()` at a fixed rate until stopped."""

    def __init__(self, period_s: float, name: str):
        if not 0 < period_s < float("inf"):  # a period of 0 or less would spin a core
            raise ValueError(f"{name}: sampling period must be above 0 s, got {period_s}")
        super().__init__(name=name, daemon=True)
        self.period_s = period_s
        self.halt = threading.Event()
        self.errors: list[str] = []

    def run(self) -> None:
        nxt = time.time()
        while not self.halt.is_set():
            try:
                self.tick()
            except Exception as e:  # noqa: BLE001 - telemetry must never stop the run
                if len(self.errors) < 10:
                    self.errors.append(f"{type(e).__name__}: {e}")
            nxt += self.period_s
            self.halt.wait(max(0.0, nxt - time.time()))

    def stop(self) -> None:
        self.halt.set()
        if self.is_alive():
            self.join(timeout=5)


class NvmlSampler(Sampler):
    """NVML readings of the job's GPUs at `hz`."""

    def __init__(self, run_dir: Path, hz: float, job_pids):
        if not 0 < hz < float("inf"):
            raise ValueError(f"NVML sampling rate must be above 0 Hz, got {hz}")
        super().__init__(1.0 / hz, "gpucheckup-nvml")
        self.run_dir = run_dir  # a safe_dir.RunDirectory, or a plain folder's Path
        self.job_pids = job_pids  # callable: the pids of the job's processes now
        self.status = "not started"
        self.sink = None
        self.ticks = 0
        self.unsupported: dict[int, set] = {}
        self.proc_util_answered = False
        self.last_proc_ts: dict[int, int] = {}

    def open(self) -> bool:
        """Initialise NVML; False (and a status saying why) when there is none."""
        try:
            import pynvml
        except ImportError:
            self.status = "unavailable: nvidia-ml-py is not installed (pip install nvidia-ml-py)"
            return False
        try:
            pynvml.nvmlInit()
            n = pynvml.nvmlDeviceGetCount()
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
            uuids = [nvml_text(pynvml.nvmlDeviceGetUUID(h)) for h in handles]
        except Exception as e:  # noqa: BLE001 - NVMLError and friends
            self.status = f"unavailable: {e}"
            return False
        self.nv = pynvml
        self.gpus = visible_indices(os.environ.get("CUDA_VISIBLE_DEVICES"), n, uuids)
        self.handles = {i: handles[i] for i in self.gpus}
        self.sink = sink_in(self.run_dir, layout.NVML, layout.NVML_COLUMNS)
        self.status = "ok"
        return True

    def _read(self, gpu: int, field: str, fn):
        if field in self.unsupported.setdefault(gpu, set()):
            return None
        try:
            return fn()
        except self.nv.NVMLError as e:
            if isinstance(e, (self.nv.NVMLError_NotSupported, self.nv.NVMLError_NoPermission)):
                self.unsupported[gpu].add(field)
            return None

    def tick(self) -> None:
        nv = self.nv
        t = time.time()
        slow = self.ticks % SLOW_EVERY == 0
        self.ticks += 1
        pids = set(self.job_pids()) if slow else set()
        reasons_fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            nv.nvmlDeviceGetCurrentClocksThrottleReasons
        for gpu, h in self.handles.items():
            util = self._read(gpu, "util", lambda: nv.nvmlDeviceGetUtilizationRates(h))
            mem = self._read(gpu, "mem", lambda: nv.nvmlDeviceGetMemoryInfo(h))
            power = self._read(gpu, "power", lambda: nv.nvmlDeviceGetPowerUsage(h))
            clock = self._read(gpu, "clock", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
            reasons = self._read(gpu, "reasons", lambda: reasons_fn(h))
            temp = self._read(gpu, "temp", lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))
            tx = rx = proc = None
            if slow:
                tx = self._read(gpu, "pcie", lambda: nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_TX_BYTES))
                rx = self._read(gpu, "pcie", lambda: nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_RX_BYTES))
                proc = self._proc_util(gpu, h, pids)
            self.sink.add([
                t, gpu,
                None if util is None else util.gpu, None if util is None else util.memory,
                None if mem is None else round(mem.used / 2**20), None if mem is None else round(mem.total / 2**20),
                None if power is None else power / 1000.0, clock, reasons, temp,
                None if tx is None else round(tx / 1024, 1), None if rx is None else round(rx / 1024, 1), proc,
            ])

    def _proc_util(self, gpu: int, h, pids: set):
        """Summed SM utilization of the job's processes on this GPU since the last query, or None."""
        nv = self.nv
        try:
            samples = nv.nvmlDeviceGetProcessUtilization(h, self.last_proc_ts.get(gpu, 0))
        except nv.NVMLError:
            return None
        if not samples:
            return None
        self.last_proc_ts[gpu] = max(s.timeStamp for s in samples)
        mine = [s for s in samples if s.pid in pids]
        if not mine:
            return None
        self.proc_util_answered = True
        return sum(s.smUtil for s in mine)

    def close(self) -> None:
        self.stop()
        if self.sink is not None:
            self.sink.finish()
        try:
            self.nv.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass

    def summary(self) -> dict:
        return {
            "status": self.status,
            "hz": 1.0 / self.period_s,
            "gpus": getattr(self, "gpus", []),
            "rows": self.sink.count if self.sink else 0,
            "unsupported_fields": {str(g): sorted(f) for g, f in self.unsupported.items() if f},
            "per_process_utilization": "answered" if self.proc_util_answered else "never answered for the job's pids",
            "errors": self.errors,
        }


class CpuSampler(Sampler):
    """psutil CPU use of every process of the job, once a second."""

    def __init__(self, run_dir: Path, root_pid: int, period_s: float = 1.0):
        super().__init__(period_s, "gpucheckup-cpu")
        self.run_dir = run_dir
        self.root_pid = root_pid
        self.procs: dict[int, object] = {}
        self.pids: list[int] = [root_pid]
        self.status = "not started"
        self.sink = None
        self.max_processes = 0

    def open(self) -> bool:
        try:
            import psutil
        except ImportError:
            self.status = "unavailable: psutil is not installed (pip install psutil)"
            return False
        self.ps = psutil
        try:
            self.root = psutil.Process(self.root_pid)
        except psutil.Error as e:
            self.status = f"unavailable: {e}"
            return False
        self.sink = sink_in(self.run_dir, layout.CPU, layout.CPU_COLUMNS)
        self.status = "ok"
        return True

    def tick(self) -> None:
        ps = self.ps
        t = time.time()
        try:
            current = [self.root] + self.root.children(recursive=True)
        except ps.Error:
            return
        seen = {}
        for p in current:
            proc = self.procs.get(p.pid) or p
            seen[p.pid] = proc
            try:
                with proc.oneshot():
                    cpu = proc.cpu_percent(None)
                    first = p.pid not in self.procs
                    row = [t, p.pid, proc.ppid(), proc.name().replace(",", " "), None if first else round(cpu, 1),
                           round(proc.memory_info().rss / 2**20, 1), proc.num_threads()]
            except ps.Error:
                continue
            self.sink.add(row)
        self.procs = seen
        self.pids = list(seen)
        self.max_processes = max(self.max_processes, len(seen))

    def close(self) -> None:
        self.stop()
        if self.sink is not None:
            self.sink.finish()

    def summary(self) -> dict:
        return {"status": self.status, "rows": self.sink.count if self.sink else 0,
                "max_processes": self.max_processes, "errors": self.errors}


def nvml_text(x) -> str:
    """A string NVML returned: bytes from older nvidia-ml-py releases, str from newer ones."""
    return x.decode() if isinstance(x, bytes) else str(x)

"""The light window's counter steps: the GPU's activity counters sampled by CUPTI's PM sampling, no per-launch work.

CUPTI's kernel records cost every launch (3-4 us on an H200: +6 to +11% a step on launch-bound HF Trainer, timm and
Lightning loops, docs/validation.md 6j). PM sampling reads the GPU's performance counters every `interval_ns` of GPU
time into a hardware buffer, with nothing done per launch (its cost paired in those loops' steps: -1.1%, +1.3%, -1.0%,
within noise, 6k). Per sample it gives:
- `gr__compute_cycles_active.avg` / `gr__cycles_elapsed.max`: the share of the sample's cycles the compute engine was
  active, which read the kernels' union within 0.0-1.5 points over the same steps on seven loops (6k, 6m);
- `gr__dispatch_count.sum`: the kernels dispatched (2,000 of 2,000 one-block launches, 6k).
No kernel names and no durations per kernel: the window's record steps give those (agent/cupti_window.py).

  s = PmCounters(device, log); s.start(expected_s)   # CUPTI's profiler initialized, the metrics configured, sampling
  ...counter steps, then record steps...
  s.stop() -> Samples (CUPTI ns; the first decoded sample, which spans from before the window, left out)
  s.close()                                          # the profiler torn down: before any CUPTI detach

Order matters (H200, 2026-12-02): the profiler cannot initialize after `cuptiFinalize` (the light window's detach) in
the same process, a collector that has sampled cannot be configured again, and the process died when CUPTI was
detached inside a running PM window: the window starts PM before it enables records and closes it before it detaches.

cupti-python 13.3+ (PM sampling's bindings) against an older libcupti (torch's CUDA 13.0 wheels): 13.3+'s profiler-host
init struct carries a field 13.0's lacks (56 bytes against 48), which 13.0 refuses with ERROR_INVALID_PARAMETER;
`fit_host_struct` falls back to 13.0's size, the fields 13.0 reads unchanged (6k). Where the counters are closed to the
user (ERR_NVGPUCTRPERM), the GPU has no GPU-time trigger, or cupti-python is older, `start` raises and the window
records every step as before (one line in the agent log says why).
Standard library only at import.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

HOST_INIT_13_0 = 48  # CUpti_Profiler_Host_Initialize_Params through pHostObject, CUDA 13.0's cupti_profiler_host.h
INTERVAL_NS = 20_000  # the finest interval: one sample per 20 us of GPU time (the finest tried in 6k)
SAMPLE_BUDGET = 5_000  # samples a window aims at: the decode runs in the step ending the window (~35 us a sample, 6m)
MAX_SAMPLES = 200_000  # decoded at most per window (a window that ran 40 times longer than expected)
HW_BUFFER = 256 << 20  # the hardware buffer CUPTI fills until the window's decode
COMPUTE_PAIR = ("gr__compute_cycles_active.avg", "gr__cycles_elapsed.max")
DISPATCHES = "gr__dispatch_count.sum"
METRIC_SETS = (COMPUTE_PAIR + (DISPATCHES,), COMPUTE_PAIR)  # tried in order: launches where the chip configures them


@dataclass
class Samples:
    """The counter samples of one window, CUPTI ns: sample i covers [start[i], end[i])."""

    metrics: list[str]
    interval_ns: int
    start: list[int] = field(default_factory=list)
    end: list[int] = field(default_factory=list)
    busy_pct: list[float] = field(default_factory=list)  # compute-engine active cycles / elapsed cycles x 100
    launches: list[int] = field(default_factory=list)  # kernels dispatched (empty where DISPATCHES is not configured)
    decoded: int = 0  # samples the hardware buffer held
    dropped_first: bool = False  # the first one spanned from before the window (left out)


def interval_for(expected_s: float) -> int:
    """The sampling interval (ns, a multiple of 10 us): the narrowest, from INTERVAL_NS up, at which a window of
    expected_s seconds fits in SAMPLE_BUDGET samples. Each sample counts cycles, so a coarser one loses no busy
    time: a figure over steps weights each sample by its overlap, and only a sample across a step's edge is shared
    out evenly (a 10 ms step has about 180 samples at the budget's interval for a 27-step window)."""
    need = math.ceil(expected_s * 1e9 / SAMPLE_BUDGET) if expected_s > 0 else 0
    return max(INTERVAL_NS, -(-need // 10_000) * 10_000)


def preload_nvperf() -> list[str]:
    """Load nvperf's host and target libraries (CUPTI's profiler needs them) from the CUDA wheels beside torch's
    libcupti; the paths loaded."""
    from gpucheckup.capture.agent.cuda_libs import load_wheel_libraries

    return load_wheel_libraries("libnvperf_*.so*")


def fit_host_struct(chip: str) -> int:
    """The profiler-host init struct size the loaded libcupti takes (the bindings' own, else CUDA 13.0's), set in
    cupti-python's module for every later ProfilerHost (configure, decode); the size kept."""
    from cupti import cupti as cc
    from cupti import profiler_host as ph

    for size in dict.fromkeys((cc.PROFILER_HOST_INITIALIZE_PARAMS_STRUCT_SIZE, HOST_INIT_13_0)):
        cc.PROFILER_HOST_INITIALIZE_PARAMS_STRUCT_SIZE = size
        host = ph.ProfilerHost(chip, ph.ProfilerType.PM_SAMPLING)
        try:
            host.initialize()
        except cc.cuptiError as e:
            if e.status != cc.Result.ERROR_INVALID_PARAMETER:
                raise
            continue
        host.deinitialize()
        return size
    raise RuntimeError("CUPTI's profiler host refused every init struct size tried")


class PmCounters:
    """PM sampling of one device's compute-engine cycles and dispatches over one window."""

    def __init__(self, device: int = 0, log=None):
        self.device = device
        self.log = log or (lambda msg: None)
        self.collector = None
        self.metrics: tuple[str, ...] = ()
        self.interval_ns = INTERVAL_NS
        self.running = False

    def start(self, expected_s: float = 0.0) -> None:
        """Initialize CUPTI's profiler, configure the first metric set the chip takes, start sampling; raises (and leaves
        nothing enabled) where PM sampling cannot run here."""
        from cupti import pm_sampling

        preload_nvperf()
        c = pm_sampling.Collector(device_index=self.device)
        c.enable()
        try:
            fit_host_struct(c._chip_name)
            self.interval_ns = interval_for(expected_s)
            refused = []
            for metrics in METRIC_SETS:
                try:
                    c.configure(metrics=list(metrics), hardware_buffer_size=HW_BUFFER, sampling_interval=self.interval_ns,
                                trigger_mode=pm_sampling.TriggerMode.GPU_TIME_INTERVAL)
                except Exception as e:  # noqa: BLE001 - the next set
                    refused.append(f"{len(metrics)} metrics: {type(e).__name__}: {str(e)[:120]}")
                    continue
                self.metrics = metrics
                break
            if not self.metrics:
                raise RuntimeError("no metric set configured (" + "; ".join(refused) + ")")
            c.start()
        except BaseException:
            c.disable()
            raise
        self.collector, self.running = c, True

    def stop(self) -> Samples:
        """Stop sampling and decode the window's samples (host work after the window, never inside it)."""
        out = Samples(metrics=list(self.metrics), interval_ns=self.interval_ns)
        if self.collector is None:
            return out
        if self.running:
            self.collector.stop()
            self.running = False
        samples = list(self.collector.decode(max_samples=MAX_SAMPLES))
        out.decoded = len(samples)
        if samples and samples[0].end_timestamp - samples[0].start_timestamp > 2 * self.interval_ns:
            samples, out.dropped_first = samples[1:], True  # from one early instant before the window (6k)
        launches = len(self.metrics) > 2
        for s in samples:
            v = s.metric_values
            if not all(math.isfinite(x) for x in v):
                continue  # a sample the hardware could not count says nothing (and JSON has no NaN)
            out.start.append(int(s.start_timestamp))
            out.end.append(int(s.end_timestamp))
            out.busy_pct.append(round(min(100.0 * v[0] / v[1], 100.0), 3) if v[1] else 0.0)
            if launches:
                out.launches.append(int(round(v[2])))
        return out

    def close(self) -> None:
        """Stop if still sampling and tear CUPTI's profiler down (before any cuptiFinalize)."""
        c, self.collector = self.collector, None
        if c is None:
            return
        try:
            if self.running:
                c.stop()
        finally:
            self.running = False
            c.disable()

"""A GPU-activity window from CUPTI's PM sampling (cupti-python 13.3+), for measuring, not shipped (issue 26, 6j, 6k).

CUPTI's activity records cost every kernel launch (docs/validation.md 6j: 3-4 us a launch on HF Trainer). PM sampling
reads the GPU's performance counters every INTERVAL_NS of GPU time into a hardware buffer, with no work per launch:
what it can give a check-up is each interval's share of cycles the compute engine was active (a GPU-busy timeline,
within a point of the kernels' union in 6k), with no kernel names. This module answers two questions on a real GPU:
what it costs a training step (paired_steps.py's `pm` mode) and whether its busy share agrees with the kernels'
(pm_sampling_probe.py, pm_overlap_probe.py).

  w = PmWindow(log=print)
  w.enable(); w.start(); ...steps...; w.stop()   # each window: CUPTI's profiler initialized, the metric set configured
  w.collect() -> {"samples": n, "busy_pct": ..., "metrics": [...], "t0_ns": ..., "t1_ns": ...}
  w.disable()                                    # the profiler torn down, before any CUPTI detach (6k: SIGSEGV)

Busy share: sum of `active` over sum of `elapsed` (cycles) of the completed samples, for the counter pairs of
METRIC_SETS; the first set CUPTI configures in one pass is kept (a set named by a percentage is read as it is).
Needs the profiling counters open to the user (else CUPTI raises ERR_NVGPUCTRPERM: PermissionError).

cupti-python 13.3+ against an older libcupti (torch's CUDA 13.0 wheels): its profiler-host init struct carries a field
13.0's does not (pSinglePassMetricSetName, 56 bytes against 48), which 13.0 refuses (ERROR_INVALID_PARAMETER on every
metric set, H200, 2026-12-02); fit_host_struct() falls back to 13.0's size, the fields 13.0 reads unchanged. The other
structs PM sampling passes have the same sizes in 13.0's headers and the 13.4 bindings. A window after cuptiFinalize (the
light window's detach) cannot initialize CUPTI's profiler (ERROR_NOT_INITIALIZED, same day): measure PM phases before
any detaching CUPTI phase, or apart from them.
"""

from __future__ import annotations

from gpucheckup.capture.agent.pm_counters import (  # noqa: F401 - shipped since 6l
    HOST_INIT_13_0,
    fit_host_struct,
    preload_nvperf,
)

INTERVAL_NS = 20_000  # one sample per 20 us of GPU time: 50 a millisecond, ~500 a 10 ms step
HW_BUFFER = 256 << 20  # the hardware buffer CUPTI fills between decodes
MAX_SAMPLES = 200_000  # decoded at most per window (a 4 s window at INTERVAL_NS)
# (active, elapsed) counter pairs tried in order; a one-metric set is already a percentage of the elapsed cycles
# (the compute engine's pair first: it read the kernels' union within a point over the same steps, 6k)
METRIC_SETS = (
    ("gr__compute_cycles_active.avg", "gr__cycles_elapsed.max"),
    ("gr__cycles_active.avg", "gr__cycles_elapsed.max"),
    ("gr__cycles_active.sum", "gr__cycles_elapsed.sum"),
    ("sm__cycles_active.avg", "sm__cycles_elapsed.avg"),
    ("gr__cycles_active.avg.pct_of_peak_sustained_elapsed",),
)


def base_metrics(chip: str) -> list[str]:
    """Every PM-sampling base metric the chip offers, sorted (after fit_host_struct)."""
    from cupti import profiler_host as ph

    host = ph.ProfilerHost(chip, ph.ProfilerType.PM_SAMPLING)
    host.initialize()
    names: set[str] = set()
    try:
        for mt in ph.MetricType:
            if mt.name.endswith("COUNT"):
                continue
            try:
                names.update(host.get_base_metrics(mt))
            except Exception:  # noqa: BLE001, S112 - a metric type this path does not take
                continue
    finally:
        host.deinitialize()
    return sorted(names)


class PmWindow:
    """PM sampling of the GPU's active cycles on one device: enable once, then start/stop/collect per window."""

    def __init__(self, device: int = 0, log=None):
        self.device = device
        self.log = log or (lambda msg: None)
        self.collector = None
        self.metrics: tuple[str, ...] = ()
        self.tried: dict[str, str] = {}  # metric set -> why it was refused
        self.host_struct = 0  # the profiler-host init struct size kept (fit_host_struct)

    def enable(self) -> str:
        """Initialize CUPTI's profiler and configure the metric set (the first one CUPTI accepts); the chip's name."""
        from cupti import pm_sampling

        c = pm_sampling.Collector(device_index=self.device)
        c.enable()
        try:
            self.host_struct = self.host_struct or fit_host_struct(c._chip_name)
        except Exception:
            c.disable()
            raise
        for metrics in ([self.metrics] if self.metrics else METRIC_SETS):
            try:
                c.configure(metrics=list(metrics), hardware_buffer_size=HW_BUFFER, sampling_interval=INTERVAL_NS,
                            trigger_mode=pm_sampling.TriggerMode.GPU_TIME_INTERVAL)
            except Exception as e:  # noqa: BLE001 - the next set
                self.tried[",".join(metrics)] = f"{type(e).__name__}: {e}"[:300]
                continue
            self.collector, self.metrics = c, metrics
            self.log(f"pm window: {','.join(metrics)} every {INTERVAL_NS} ns")
            return c._chip_name or ""
        c.disable()
        raise RuntimeError(f"no metric set configured: {self.tried}")

    def start(self) -> None:
        self.collector.start()

    def stop(self) -> None:
        self.collector.stop()

    def collect(self, keep_samples: bool = False) -> dict:
        """Decode the window's samples: their count, span and the busy share of their cycles."""
        data = self.collector.decode(max_samples=MAX_SAMPLES)
        samples = list(data)  # evaluates every sample on the host: after the window, never inside it
        out = {"metrics": list(self.metrics), "samples": len(samples),
               "populated": data.num_populated_samples, "total": data.num_total_samples, "dropped_first": False}
        if samples and samples[0].end_timestamp - samples[0].start_timestamp > 2 * INTERVAL_NS:
            # the first sample starts at one early instant, from before the window (6k): its cycles are not the window's
            samples, out["dropped_first"] = samples[1:], True
        if not samples:
            return out
        out["t0_ns"], out["t1_ns"] = samples[0].start_timestamp, samples[-1].end_timestamp
        vals = [s.metric_values for s in samples]
        if len(self.metrics) == 2:
            active, elapsed = sum(v[0] for v in vals), sum(v[1] for v in vals)
            out["busy_pct"] = round(100.0 * active / elapsed, 2) if elapsed else None
        else:
            out["busy_pct"] = round(sum(v[0] for v in vals) / len(vals), 2)
        if keep_samples:
            out["series"] = [(s.start_timestamp, s.end_timestamp, *s.metric_values) for s in samples]
        return out

    def disable(self) -> None:
        if self.collector is not None:
            self.collector.disable()
            self.collector = None

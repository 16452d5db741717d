"""THE step time and the one per-step, per-device normalizer every finding's figures use.

Definitions (also in docs/metrics.md, section "One window"):
- step time (`Window.step_ms`, defined in analysis/step_basis.py): the median of the step
  windows' lengths (analysis/one_trace/steps.py). The median, not the mean: the first profiled step is
  often a warm-up outlier (267.9 ms among 118-128 ms steps on `compute_bound`), and one outlier
  moves the mean of five steps, not their median. When the step time without the profiler is
  known (a run's step log: the throughput of its unprofiled steps, or --unprofiled-step-ms), that
  is the step time instead, whether or not the profiler-overhead correction applies
  (analysis/one_trace/profiler_overhead.py), and `traced_step_ms` keeps the trace's median.
- share of a time: a time summed over the analysis window (every step window) and every device,
  over the window's length times the number of devices (`share`); a host-side time (one
  training thread, not one per device) is divided by the window's length alone.
- ms per step of a GPU-side time = its share x the traced median step (the profiler does not
  slow kernels); of a host-side time = its share x the step time (the host's share of the
  step is kept); percent of step = ms per step / step time. So every percent printed equals its ms over the printed step time, and no share of
  the window is more than one step: a cost or saving never exceeds the step.
"""

from __future__ import annotations

import msgspec

from gpucheckup.analysis.distinct import median
from gpucheckup.analysis.one_trace.steps import Steps


class Window(msgspec.Struct, frozen=True):
    """The step time every figure is expressed in, and the normalizer from window totals to it."""

    step_ms: float  # the step time printed and used for every percent
    basis: str  # what step_ms is, said once in the report
    traced_step_ms: float  # the trace's median step window
    length_us: float  # the summed length of the step windows (the analysis window)
    devices: int  # GPUs in the trace with work in the window
    steps: int

    def share(self, us: float, per_device: bool = True) -> float:
        """A window total's share of the window (summed over devices unless per_device is False)."""
        span = self.length_us * (self.devices if per_device else 1)
        return float(us) / span if span > 0 else 0.0

    def per_step(self, total: float) -> float:
        """A GPU-side window total in any unit (bytes, counts, us), summed over devices, per step per device."""
        return self.share(total) * self.traced_step_ms * 1000

    def ms(self, us: float) -> float:
        """A GPU-side window total (summed over devices) as ms per step per device: share x traced step."""
        return self.share(us) * self.traced_step_ms

    def host_ms(self, us: float) -> float:
        """A host-side window total (one training thread) as ms per step: its share of the window x step time."""
        return self.share(us, per_device=False) * self.step_ms

    def pct(self, ms: float) -> float:
        """ms per step as percent of the step time."""
        return 100 * ms / self.step_ms if self.step_ms > 0 else 0.0

    def to_dict(self) -> dict:
        return {"step_ms": self.step_ms, "basis": self.basis, "traced_step_ms": self.traced_step_ms,
                "devices": self.devices, "steps": self.steps, "length_ms": self.length_us / 1000}


def traced_window(steps: Steps, devices: int) -> Window:
    """The window of a trace as profiled: the median step window is the step time."""
    med = float(median(steps.duration)) / 1000
    basis = (f"median of {steps.count} step windows" if steps.marked
             else "the whole trace (no ProfilerStep markers)")
    return Window(med, basis, med, float(steps.duration.sum()), max(devices, 1), steps.count)


def unprofiled(w: Window, step_ms: float, source: str) -> Window:
    """The same window with the step time measured without the profiler."""
    return Window(step_ms, f"the step without the profiler ({source})", w.traced_step_ms, w.length_us,
                  w.devices, w.steps)

"""The host's side of a light window from sampled stacks: what the main thread did during the GPU's idle gaps
and during the profiled steps, where the trace holds no operator events.

A light window (`gpucheckup run --light`, docs/capture.md) records CUDA activities and the cheap
record_function ranges only; the host's attribution comes from py-spy stacks sampled outside the job
(trace/host_samples.py). Definitions (docs/metrics.md):

- sampled state: the main thread's state by stack_samples.classify over its sampled frames (`dataloader`,
  `sync`, `communication`, `checkpoint`, `optimizer`, `backward`, `forward`, else `python`; py-spy samples
  idle threads too, so `waiting` is never told apart from `python` here), held from one sampled stack
  change to the next; on the trace's clock: sample Unix microseconds - base_time_ns / 1000.
- covered: the part of a span where the state is known, from the first sample to the end of sampling.
- idle by host state (GPU traces): each GPU idle gap's overlap with each state, summed over the analysis
  window's gaps (every device); shares are of the covered gap time.
- window by host state: each state's overlap with the profiled steps' span (the first ProfilerStep's
  start to the last one's end; the sampled span where there is none); shares of the covered window time.
- ranges: the time the cheap record_function ranges cover in that span, from the profiler (not sampled):
  `dataloader` (`enumerate(DataLoader)#...`), `optimizer` (`Optimizer.step#...`, `Optimizer.zero_grad#...`).
py-spy samples at random intervals (exponential, mean 1/rate_hz: no aliasing with a periodic job), so a state
change is seen after a random delay of mean 1/rate_hz with no bound, and a share p of N samples is good to about
sqrt(p(1-p)/N) (N = span x rate_hz).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpucheckup.analysis import intervals as iv
from gpucheckup.analysis.groups import by_key
from gpucheckup.analysis.one_trace.host.host_calls import SYNC_CALLS
from gpucheckup.analysis.run_logs.stack_samples import classify, frames_of
from gpucheckup.trace.host_samples import HostSamples
from gpucheckup.trace.tables import CPU_OP, RUNTIME, USER_ANNOTATION, Trace

SOURCE_SAMPLES = "sampled stacks"  # the words every figure from here carries
SOURCE_OPS = "profiler ops"  # the operator-based gap causes of a full window
SOURCE_RUNTIME = "CUDA runtime calls (light window: no operators)"  # the same causes where no operator was recorded
SOURCE_GPU_ONLY = "GPU records only (CUPTI light window: no operators, no runtime calls)"  # every gap reads other_host
# a CUPTI light window with CUPTI's synchronization records: gaps a sync drained read `sync`, the others other_host
SOURCE_GPU_SYNCS = "GPU records and sync calls (CUPTI light window: no operators, no launches)"
STEP_PREFIX = "ProfilerStep#"
RANGES = {"dataloader": ("enumerate(DataLoader)#",), "optimizer": ("Optimizer.step#", "Optimizer.zero_grad#")}


@dataclass
class SampledCauses:
    """The main thread's sampled states over the window and over the GPU's idle gaps, in microseconds."""

    source: str
    samples_path: str
    rate_hz: float
    changes: int
    window_us: float
    window_covered_us: float
    window_by_state: dict[str, float]
    gap_us: float | None  # None: the trace has no GPU timeline
    gap_covered_us: float | None
    gap_by_state: dict[str, float] | None
    ranges_us: dict[str, float] = field(default_factory=dict)

    @property
    def window_covered_pct(self) -> float:
        return 100.0 * self.window_covered_us / self.window_us if self.window_us > 0 else 0.0

    def to_dict(self) -> dict:
        """The report's `sampled_causes` entry: shares in percent, most time first."""
        def shares(by: dict[str, float], covered: float) -> list[dict]:
            return [{"state": k, "ms": round(v / 1e3, 3), "pct": round(100.0 * v / covered, 1) if covered > 0 else 0.0}
                    for k, v in sorted(by.items(), key=lambda kv: -kv[1]) if v > 0]

        out = {"source": self.source, "samples": self.samples_path, "rate_hz": self.rate_hz,
               "stack_changes": self.changes, "window_ms": round(self.window_us / 1e3, 3),
               "window_covered_pct": round(self.window_covered_pct, 1),
               "window_by_state": shares(self.window_by_state, self.window_covered_us),
               "ranges": {k: {"ms": round(v / 1e3, 3), "pct": round(100.0 * v / self.window_us, 1)
                              if self.window_us > 0 else 0.0, "source": "profiler ranges"}
                          for k, v in self.ranges_us.items()}}
        if self.gap_by_state is not None:
            out["gap_ms"] = round((self.gap_us or 0.0) / 1e3, 3)
            out["gap_covered_pct"] = round(100.0 * (self.gap_covered_us or 0.0) / self.gap_us, 1) if self.gap_us else 0.0
            out["gap_by_state"] = shares(self.gap_by_state, self.gap_covered_us or 0.0)
        return out


def gap_source(trace: Trace) -> str:
    """What the trace's gap causes (analysis/one_trace/host/gap_causes.py) were attributed from: operators, runtime
    calls only, sync calls only (a CUPTI light window with CUPTI's synchronization records), or neither (its GPU
    records)."""
    if bool(np.any(trace.host.cat == CPU_OP)):
        return SOURCE_OPS
    calls = trace.host.name[trace.host.cat == RUNTIME]
    if not len(calls):
        return SOURCE_GPU_ONLY
    syncs_only = bool(np.all(np.isin(calls, trace.name_ids(lambda n: n in SYNC_CALLS))))
    return SOURCE_GPU_SYNCS if syncs_only else SOURCE_RUNTIME


def state_intervals(samples: HostSamples, base_us: float) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Each sampled state's span on the trace's clock: starts, ends, states."""
    starts = samples.t_us - base_us
    ends = np.append(starts[1:], samples.end_us - base_us)
    states = [classify(frames_of(s), True) if s else "waiting" for s in samples.stacks]
    return starts, np.maximum(ends, starts), states


def _named_spans(trace: Trace, prefixes: tuple[str, ...]) -> iv.Intervals:
    """The union of the user-annotation ranges whose name starts with one of `prefixes`."""
    h = trace.host
    ann = np.flatnonzero(h.cat == USER_ANNOTATION)
    names = trace.names
    keep = [i for i in ann if names[h.name[i]].startswith(prefixes)]
    return iv.union(h.start[keep], h.end[keep]) if keep else iv.EMPTY


def by_state(starts, ends, states, spans: iv.Intervals) -> tuple[dict[str, float], float]:
    """Microseconds of `spans` under each state, and the covered total."""
    lens = iv.covered_between(spans, starts, ends) if len(starts) else np.zeros(0)
    out: dict[str, float] = {}
    for s, x in zip(states, lens):
        if x > 0:
            out[s] = out.get(s, 0.0) + float(x)
    return out, float(np.sum(lens))


def sampled_causes(trace: Trace, samples: HostSamples, gaps=None) -> SampledCauses | None:
    """The sampled host states of a light window (gaps: the timeline's Gaps on a GPU trace, else None);
    None when the trace has no wall clock (baseTimeNanoseconds) to align the samples to."""
    if trace.base_time_ns is None:
        return None
    starts, ends, states = state_intervals(samples, trace.base_time_ns / 1000.0)
    steps = _named_spans(trace, (STEP_PREFIX,))
    if len(steps[0]):
        lo, hi = float(steps[0][0]), float(steps[1][-1])
    elif len(starts):
        lo, hi = float(starts[0]), float(ends[-1])
    else:
        lo = hi = 0.0
    window = (np.array([lo]), np.array([hi])) if hi > lo else iv.EMPTY
    w_by, w_cov = by_state(starts, ends, states, window)
    ranges = {k: iv.total(iv.clip(_named_spans(trace, p), lo, hi)) for k, p in RANGES.items()}
    gap_by = gap_cov = gap_us = None
    if gaps is not None:
        gap_by, gap_cov, gap_us = {}, 0.0, float(np.sum(gaps.dur)) if len(gaps) else 0.0
        for g in by_key(gaps.device).values():  # one sort, not a mask per device
            d_by, d_cov = by_state(starts, ends, states, iv.union(gaps.start[g], gaps.end[g]))
            gap_cov += d_cov
            for k, v in d_by.items():
                gap_by[k] = gap_by.get(k, 0.0) + v
    return SampledCauses(SOURCE_SAMPLES, samples.path, samples.rate_hz, len(starts), hi - lo, w_cov, w_by,
                         gap_us, gap_cov, gap_by, ranges)

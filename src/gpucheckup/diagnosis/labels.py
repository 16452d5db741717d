"""Job labels for schedulers: is the job compute-, IO- or communication-intensive?

Definition (docs/metrics.md, "Job labels"), from the verdict's scores (diagnosis/verdict.py),
each in percent of step time:
- io_pct: GPU idle while the host waits for input (gap cause `input`: DataLoader, storage)
  plus copy time with no kernel beside it (host<->device traffic over PCIe and host memory).
- communication_pct: exposed communication kernel time plus idle waiting on collectives.
- compute_pct: GPU busy minus exposed copies and communication (kernels computing).
- host_pct: idle while the job's own host thread launches, allocates, syncs or runs Python;
  shown, but no label: it loads one CPU thread of the job itself, no resource other jobs share.
Rule: `io` when io_pct >= INTENSIVE_PCT and io_pct >= communication_pct; `communication` when
communication_pct >= INTENSIVE_PCT and above io_pct; else `compute`.
INTENSIVE_PCT is 15%, the articles' healthy ceiling for the GPU's idle share of a step: a job
that waits on a shared resource for more than that is slowed measurably when a neighbour on
the same card or host competes for it, so a scheduler should not pair two such jobs.
"""

from __future__ import annotations

import msgspec

from gpucheckup.analysis.checkup import TraceAnalysis
from gpucheckup.diagnosis.verdict import scores

INTENSIVE_PCT = 15.0
RULE = (f"io if io_pct >= {INTENSIVE_PCT:g}% of step and >= communication_pct; communication if "
        f"communication_pct >= {INTENSIVE_PCT:g}% and > io_pct; else compute "
        "(io_pct = GPU idle waiting for input + exposed copies; communication_pct = exposed communication "
        "+ idle waiting on collectives)")


class Intensity(msgspec.Struct, frozen=True):
    """The label and the shares of step time behind it."""

    intensity: str  # "compute", "io" or "communication"
    compute_pct: float
    io_pct: float
    communication_pct: float
    host_pct: float
    reason: str
    rule: str = RULE

    def to_dict(self) -> dict:
        return msgspec.structs.asdict(self)


def classify(compute_pct: float, io_pct: float, communication_pct: float, host_pct: float = 0.0) -> Intensity:
    """The intensity label from the shares of step time (see the module docstring)."""
    if io_pct >= INTENSIVE_PCT and io_pct >= communication_pct:
        label, why = "io", f"io_pct {io_pct:.1f}% >= {INTENSIVE_PCT:g}%"
    elif communication_pct >= INTENSIVE_PCT:
        label, why = "communication", f"communication_pct {communication_pct:.1f}% >= {INTENSIVE_PCT:g}%"
    else:
        label, why = "compute", (f"io_pct {io_pct:.1f}% and communication_pct {communication_pct:.1f}% both "
                                 f"< {INTENSIVE_PCT:g}%")
    return Intensity(label, compute_pct, io_pct, communication_pct, host_pct, why)


def job_labels(a: TraceAnalysis) -> Intensity:
    """The job's intensity label from one trace's analysis (JSON key `labels`: intensity, the shares, rule)."""
    sc = scores(a)
    return classify(compute_pct=sc["gpu_bound"], io_pct=sc["input_bound"] + sc["copy_bound"],
                    communication_pct=sc["communication_bound"], host_pct=sc["launch_bound"] + sc["sync_bound"])

"""The report dict of a CPU-side check-up (analysis/one_trace/cpu_profile.py): what the terminal, JSON, HTML and
Markdown show for a trace without device activity."""

from __future__ import annotations

from dataclasses import asdict

from gpucheckup import __version__
from gpucheckup.analysis.one_trace.cpu_profile import CpuProfile
from gpucheckup.trace.tables import Trace

CPU_VERDICT = "cpu_only"  # the verdict id of every CPU-side check-up (no device activity to bound)


def cpu_dict(trace: Trace, p: CpuProfile) -> dict:
    """The CPU-side check-up as a report dict (its keys are the API's and the JSON's)."""
    return {
        "gpucheckup_version": __version__,
        "kind": "cpu",
        "trace": {"path": trace.path, "rank": trace.rank, "world_size": trace.world_size,
                  "devices": [{"id": x.id, "name": x.name} for x in trace.devices],
                  "base_time_ns": trace.base_time_ns},
        "verdict": {"primary": CPU_VERDICT, "title": "CPU-side check-up (no device activity in the trace)",
                    "reason": p.summary, "scores": {}, "findings": []},
        "findings": [],
        "fixes": [],
        "cpu": asdict(p),
        "notes": ["the trace holds no kernels, copies, memsets or other device work: this check-up reads its CPU "
                  "operators only; record with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] on a GPU "
                  "for the GPU check-up"] + list(trace.warnings),
    }

"""The report dict of a CPU-side check-up (analysis/one_trace/host/cpu_profile.py): what the terminal, JSON, HTML and
Markdown show for a trace without device activity."""

from __future__ import annotations

from dataclasses import asdict

from gpucheckup import __version__
from gpucheckup.analysis.one_trace.host.cpu_profile import CpuProfile
from gpucheckup.diagnosis.cpu_rules import NOT_REPLAYED_CPU
from gpucheckup.diagnosis.findings import Finding
from gpucheckup.diagnosis.savings import NOT_REPLAYED
from gpucheckup.checkup.run_report import fix_dicts
from gpucheckup.trace.tables import Trace

CPU_VERDICT = "cpu_only"  # the verdict id of every CPU-side check-up (no device activity to bound)


def cpu_dict(trace: Trace, p: CpuProfile, findings: list[Finding] | None = None, run_notes: list[str] = ()) -> dict:
    """The CPU-side check-up as a report dict (its keys are the API's and the JSON's), with its findings
    (diagnosis/cpu_rules.py; a run directory's run-level ones after them) and their ranked fixes, its notes then a
    run directory's (`run_notes`)."""
    findings = list(findings or [])
    return {
        "gpucheckup_version": __version__,
        "kind": "cpu",
        "trace": {"path": trace.path, "rank": trace.rank, "world_size": trace.world_size,
                  "devices": [{"id": x.id, "name": x.name} for x in trace.devices],
                  "base_time_ns": trace.base_time_ns},
        "verdict": {"primary": CPU_VERDICT, "title": "CPU-side check-up (no device activity in the trace)",
                    "reason": p.summary, "scores": {}, "findings": [f.to_dict() for f in findings]},
        "findings": [],
        "fixes": cpu_fix_dicts(findings),
        "cpu": asdict(p),
        "notes": ["the trace holds no kernels, copies, memsets or other device work: this check-up reads its CPU "
                  "operators only; record with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] on a GPU "
                  "for the GPU check-up"] + list(trace.warnings) + list(run_notes),
    }


def cpu_fix_dicts(findings: list[Finding]) -> list[dict]:
    """The ranked fixes of a CPU-side check-up's findings (as every check-up ranks them: checkup/run_report.py); none
    is replayed, and a fix whose graph edit exists says why."""
    out = fix_dicts(findings)
    for x in out:
        if x["predicted"] is None and x["predicted_note"] == NOT_REPLAYED:
            x["predicted_note"] = NOT_REPLAYED_CPU
    return out

"""Findings from analyses: a verdict, its evidence and ranked fixes."""

from __future__ import annotations

import msgspec

from gpucheckup.analysis.checkup import TraceAnalysis
from gpucheckup.diagnosis import rules, verdict
from gpucheckup.diagnosis.fixes import BY_KEY
from gpucheckup.diagnosis.findings import SEVERITIES, Diagnosis, Event, Finding, Fix
from gpucheckup.diagnosis.savings import FixPrediction, Predictions

# A replayed saving above the fix's bound: the bound is what the fix's mechanism has on the critical path, so the
# replay's excess is an edit removing more than its mechanism (the prediction is capped; the note says by how much).
CAPPED = ("capped at the fix's bound: the replay predicted {replay:.2f} ms/step, more than the {bound:.2f} ms its "
          "mechanism has on the critical path")

VERDICT_FINDING = {
    "input_bound": "input_pipeline",
    "launch_bound": "launch_overhead",
    "sync_bound": "synchronizations",
    "copy_bound": "exposed_copies",
    "communication_bound": "exposed_communication",
}


# A finding costing less than this share of the step left once the primary bound is removed is
# information, not a warning: after the DataLoader fix a 7 ms copy in a 308 ms step is 13% of a 54 ms step.
MIN_WARNING_PCT = 3.0


def diagnose(a: TraceAnalysis, predictions: Predictions | None = None) -> Diagnosis:
    """Run every rule, attach each fix's replayed saving (diagnosis/savings.py, computed once by the
    pipeline), pick the primary verdict (from the savings, else from the scores), order findings."""
    primary, reason, sc = verdict.primary(a)
    findings = [f for f in (rule(a) for rule in rules.RULES) if f is not None]
    if predictions is not None:  # the edits of the fixes these findings (or the gpu_bound one) can offer
        predictions.replay_edits({fx.key for fd in findings for fx in fd.fixes} | set(rules.GPU_BOUND_FIXES))
        _attach(findings, predictions)
        offered = [fx for fd in findings if fd.severity != "info" for fx in fd.fixes]
        chosen = verdict.from_savings(offered, a.window.step_ms)
        if chosen is not None:
            primary, reason = chosen
    lead = VERDICT_FINDING.get(primary)
    step_ms = a.window.step_ms
    left_ms = step_ms - sum(f.cost_ms_per_step for f in findings if f.id == lead)
    for f in findings:
        if f.id == lead:
            f.severity = "critical"
        elif f.severity == "warning" and 100 * f.cost_ms_per_step < MIN_WARNING_PCT * max(left_ms, 1e-9):
            f.severity = "info"
    if primary == "gpu_bound":
        findings.append(rules.gpu_bound_finding(a, sc["gpu_bound"]))
        _attach(findings[-1:], predictions)
    findings.sort(key=lambda f: (f.id != lead and not (primary == "gpu_bound" and f.id == "gpu_bound"),
                                 SEVERITIES.index(f.severity), -f.cost_ms_per_step))
    notes = list(a.trace.warnings)
    if predictions is not None and predictions.note:
        notes.append(predictions.note)
    linked = float((a.launch_rows >= 0).mean()) if len(a.launch_rows) else 1.0
    if linked < 0.5:
        notes.append(f"only {100 * linked:.0f}% of GPU ops are linked to the CUDA call that launched them (correlation "
                     "ids missing: a trace without CUDA runtime events?); for the others the gap causes read the main "
                     "thread's state at the gap, a weaker guess")
    if not a.steps.marked:
        notes.append("no ProfilerStep# markers in the trace: one window over the whole trace stands in for a step")
    return Diagnosis(primary=primary, reason=reason, scores=sc, findings=findings, notes=notes)


def _attach(findings: list[Finding], predictions: Predictions | None) -> None:
    """Each fix's replayed prediction, by its catalogue key (None when the replay has none for it), capped at the
    fix's bound where that bound is its mechanism's whole time on the critical path (`ceiling`) and the replay
    predicts more."""
    for fd in findings if predictions is not None else ():
        for fx in fd.fixes:
            entry = BY_KEY.get(fx.key)
            ceiling = fx.saving_ms if entry is not None and entry.ceiling else None
            fx.predicted = capped(predictions.by_key.get(fx.key), ceiling)


def capped(p: FixPrediction | None, bound_ms: float | None) -> FixPrediction | None:
    """A prediction no larger than its fix's bound; one that was larger says so (CAPPED, in its note)."""
    if p is None or bound_ms is None or p.saving_ms <= bound_ms * (1 + 1e-9):
        return p
    step_before = p.step_ms + p.saving_ms
    note = CAPPED.format(replay=p.saving_ms, bound=max(bound_ms, 0.0))
    saving = max(bound_ms, 0.0)
    return msgspec.structs.replace(p, step_ms=step_before - saving, saving_ms=saving,
                                   saving_pct=100 * saving / step_before if step_before > 0 else 0.0,
                                   coarse=f"{p.coarse}; {note}" if p.coarse else note)


__all__ = ["Diagnosis", "Event", "Finding", "Fix", "diagnose"]

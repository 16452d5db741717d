"""The check-up as one JSON-ready dict: the single source every report format renders.

Key reference (also in docs/metrics.md, section "JSON report"):
- verdict.primary / verdict.title / verdict.reason / verdict.scores
- window: step_ms (THE step time every ms per step and percent is expressed in), basis (what it is),
  traced_step_ms, devices, steps, length_ms (analysis/one_trace/window.py)
- verdict.findings[]: id, severity, title, rule, cost_ms_per_step, cost_pct_of_step, evidence[],
  events[] (the events behind it: name, where, start_ms from the trace's first event, dur_ms, t_us on
  the trace's clock), fix[] (action, tier, saving_ms, how, key, reason, predicted)
- fixes[]: every fix once (by catalogue key), configuration-only first, then by the time it saves (predicted,
  else its bound); saving_ms is the bound; predicted (diagnosis/savings.py: transform, what, step_ms,
  saving_ms, saving_pct) is the replayed prediction, null with predicted_note saying why when there is none
- gpu.busy_pct, gpu.devices, gpu.streams
- steps.count, steps.median_ms, ... ; kernels.count, kernels.mean_us, kernels.small_pct,
  kernels.categories (percent of kernel time, with data_movement)
- gaps.by_cause_ms, gaps.per_step_ms, gaps.pct_of_step, gaps.pattern
- dataloader.pct_of_step; sync.count_per_step; copies.pct_of_gpu_time; copies.pageable_count
- communication, cuda_api, trace (path, devices, rank, versions), notes[]
- profiler (null, or the profiler-overhead correction: unprofiled_step_ms, inflation_pct,
  gpu_ms_per_step, busy_pct_unprofiled, host_idle_factor, applied); gpu.busy_pct_unprofiled
- gaps.histogram, timeline: the arrays behind the HTML plots (see analysis/plot_arrays.py, docs/reports.md)
- optional, filled by other producers and rendered when present: step_history (whole-run step
  times from steps.csv), nvml (GPU samples), env (environment); shapes in docs/reports.md
- mfu.flops_per_step, mfu.source, mfu.achieved_tflops, mfu.peak_tflops, mfu.pct, mfu.pct_of_measured,
  mfu.reason (why a figure is null), mfu.estimates, mfu.healthy_bands_pct (docs/mfu.md)
- roofline.ops[] (arithmetic intensity against the ridge point); ncu (Nsight Compute bounds, or null)
- labels.intensity ("compute", "io", "communication"), labels.*_pct, .reason, .rule (diagnosis/labels.py)
"""

from __future__ import annotations

import math

import msgspec
from msgspec.structs import asdict as fields_of  # the analyses' result records (msgspec Structs), one level

from gpucheckup import __version__
from gpucheckup.analysis.checkup import TraceAnalysis
from gpucheckup.analysis.one_trace.host.gap_causes import CAUSE_TITLES, CAUSES
from gpucheckup.analysis.one_trace.gpu.kernels import kernel_label
from gpucheckup.diagnosis import Diagnosis
from gpucheckup.diagnosis.fixes import BY_KEY
from gpucheckup.diagnosis.savings import NO_EDIT, NOT_REPLAYED
from gpucheckup.diagnosis.labels import job_labels
from gpucheckup.analysis import plot_arrays


class TraceFacts(msgspec.Struct, frozen=True):
    """What the work across traces reads of one trace's check-up (ordering, stragglers, the ranks table, re-checking):
    its rank and path, its step (the window's: analysis/step_basis.py) and its GPU busy, as the report gives them."""

    rank: int | None
    path: str
    step_ms: float | None
    busy_pct: float | None
    busy_pct_unprofiled: float | None  # null: the profiler-overhead correction did not apply
    corrected: bool  # the profiler-overhead correction was computed (the unprofiled step was known)
    comm_overlap_pct: float | None  # communication hidden behind compute, % (analysis/one_trace/gpu/communication.py)


def trace_facts(a: TraceAnalysis) -> TraceFacts:
    """The facts of an analyzed trace, with the report's values (plain Python numbers, null for NaN)."""
    unprofiled = a.profiler.busy_pct_unprofiled if a.profiler and a.profiler.applied else None
    return TraceFacts(rank=_clean(a.trace.rank), path=a.trace.path, step_ms=_clean(a.window.step_ms),
                      busy_pct=_clean(a.timeline.busy_pct), busy_pct_unprofiled=_clean(unprofiled),
                      corrected=a.profiler is not None, comm_overlap_pct=_clean(a.communication.overlap_pct))


def diagnosis_keys(report: dict, d: Diagnosis) -> None:
    """A report's diagnosis keys (verdict, fixes, notes) built from its diagnosis as it ends: after the steps that
    add to it across traces (a folder's skipped traces and stragglers, the cross-rank findings of checkup/ranks.py),
    the last step of a check-up, here or for a check-up that ran in a worker process."""
    new = _clean({"verdict": {"primary": d.primary, "title": d.title, "reason": d.reason, "scores": d.scores,
                              "findings": [f.to_dict() for f in d.findings]},
                  "fixes": fix_dicts(d), "notes": list(d.notes)})
    report["verdict"] = {**report["verdict"], **new["verdict"]}
    report["fixes"] = new["fixes"]
    report["notes"] = new["notes"]


def checkup_dict(a: TraceAnalysis, d: Diagnosis, gaps_source: str | None = None, run: dict | None = None) -> dict:
    """Everything the reports show, as plain JSON types; a run directory's trace with where its gap causes came from
    (`gaps.source`) and its run's run-level keys (`run`: checkup/run_report.run_parts) after its own."""
    k = a.kernels.to_dict()
    for t in k["top"]:
        t["label"] = kernel_label(t["name"])
    out = {
        "gpucheckup_version": __version__,
        "trace": _trace_section(a),
        "verdict": {
            "primary": d.primary,
            "title": d.title,
            "reason": d.reason,
            "scores": d.scores,
            "findings": [f.to_dict() for f in d.findings],
        },
        "fixes": fix_dicts(d),
        "window": a.window.to_dict(),
        "gpu": _gpu_section(a),
        "steps": fields_of(a.step_summary),
        "profiler": fields_of(a.profiler) if a.profiler else None,
        "kernels": k,
        "gaps": {
            **_gaps(a),
            "pattern": fields_of(a.gap_pattern),
            "cause_titles": CAUSE_TITLES,
            "longest": _longest_gaps(a),
            "histogram": plot_arrays.gap_histogram(a),
            **({"source": gaps_source} if gaps_source is not None else {}),
        },
        "timeline": plot_arrays.step_timeline(a),
        "dataloader": fields_of(a.dataloader),
        "sync": msgspec.to_builtins(a.syncs),
        "copies": {**fields_of(a.copies),
                   "by_direction": {k: fields_of(v) for k, v in a.copies.by_direction.items()}},
        "communication": fields_of(a.communication),
        "cuda_api": {"slow_count": a.api.slow_count, "slow": [fields_of(x) for x in a.api.slow],
                     "contention": [fields_of(x) for x in a.api.contention]},
        "notes": list(d.notes),
        "mfu": fields_of(a.mfu) if a.mfu else None,
        "roofline": fields_of(a.roofline) if a.roofline else None,
        "ncu": fields_of(a.ncu) if a.ncu else None,
        "labels": job_labels(a).to_dict(),  # diagnosis/labels.py
        "counters": fields_of(a.counters) if a.counters else None,
    }
    return {**_clean(out), **(run or {})}


def _trace_section(a: TraceAnalysis) -> dict:
    """The report's `trace`: where the trace came from, its devices, versions and window."""
    tr = a.trace
    return {
        "path": tr.path,
        "rank": tr.rank,
        "world_size": tr.world_size,
        "devices": [{"id": x.id, "name": x.name, "sm_count": x.sm_count, "memory_gb": x.total_memory / 1e9,
                     "compute_capability": x.compute_capability} for x in tr.devices],
        "cuda_runtime_version": tr.cuda_runtime_version,
        "cuda_driver_version": tr.cuda_driver_version,
        "with_stack": tr.with_stack,
        "record_shapes": tr.record_shapes,
        "window_us": list(a.steps.window),
        "start_us": a.trace.span[0],  # the trace's first event: times a person reads are ms from it
        "base_time_ns": tr.base_time_ns,
    }


def _gpu_section(a: TraceAnalysis) -> dict:
    """The report's `gpu`: busy % of the step (as traced, and without the profiler), per device, stream, step."""
    length = a.timeline.length
    busy_dev = {str(dev): 100 * a.timeline.busy_us(dev) / length if length > 0 else 0.0 for dev in a.timeline.busy}
    return {
        "busy_pct": a.timeline.busy_pct,
        "busy_pct_unprofiled": a.profiler.busy_pct_unprofiled if a.profiler and a.profiler.applied else None,
        "devices": busy_dev,
        "streams": [{"device": dev, "stream": s, "busy_ms": us / 1000}
                    for (dev, s), us in sorted(a.timeline.busy_by_stream.items())],
        "step_busy_pct": [float(x) for x in a.timeline.step_busy_pct],
    }


def _gaps(a: TraceAnalysis) -> dict:
    """The gap summary's keys (`traced` only when the profiler correction applied, as before)."""
    d = fields_of(a.gaps_summary)
    if d["traced"] is None:
        del d["traced"]
    return d


def fix_dicts(d: Diagnosis) -> list[dict]:
    """The report's `fixes`: Diagnosis.ranked_fixes (each catalogue key once), with the finding that offers each
    and its replayed prediction (diagnosis/savings.py; null, with `predicted_note` saying why, when none;
    `predicted_note` also says why a prediction is coarse)."""
    return [{"action": f.action, "tier": f.tier, "saving_ms": f.saving_ms, "how": f.how, "key": f.key,
             "reason": f.reason, "finding": fd.id,
             "predicted": _prediction(f.predicted), "predicted_note": _prediction_note(f)}
            for f, fd in d.ranked_fixes()]


def _prediction(p) -> dict | None:
    """A replayed prediction's fields as the document holds them (its `coarse`, which also says why it is an upper
    bound when it is one, goes to `predicted_note`)."""
    if p is None:
        return None
    d = fields_of(p)
    d.pop("coarse", None)
    d.pop("upper_bound", None)
    return d


def _prediction_note(f) -> str | None:
    """Why a fix has no prediction, or why its prediction is coarse (a light window's: diagnosis/savings.py COARSE);
    None for a full prediction."""
    if f.predicted is None:
        return _not_replayed(f.key)
    return getattr(f.predicted, "coarse", "") or None


def _not_replayed(key: str) -> str:
    """Why a fix has no replayed prediction: its catalogue entry names no graph edit, or the trace was not replayed."""
    entry = BY_KEY.get(key)
    return NO_EDIT if entry is None or not entry.replay else NOT_REPLAYED


def _longest_gaps(a: TraceAnalysis, n: int = 10) -> list[dict]:
    """The longest idle gaps with their main cause: where to look in the trace."""
    g = a.timeline.gaps
    dom = a.causes.dominant()
    out = []
    for i in g.dur.argsort()[::-1][:n]:
        out.append({"t_us": float(g.start[i]), "dur_us": float(g.dur[i]), "device": int(g.device[i]),
                    "step": int(g.step[i]), "position": float(g.position[i]), "cause": CAUSES[int(dom[i])]})
    return out


def _clean(x):
    """Plain JSON types: numpy scalars to Python, NaN and infinities to None."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x

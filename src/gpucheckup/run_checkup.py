"""The check-up of a run directory: its traces (when they hold a GPU timeline) plus the run-level parts.

`check_run` reads the run (trace/rundir.py), runs the run-level analyses (analysis/run.py) and
rules (diagnosis/run_rules.py), checks up each rank's trace (the step windows in traces/; else
the time windows; else the latest attach capture) with the same pipeline as
`gpucheckup analyze TRACE`, appends the run-level findings to each trace's diagnosis and adds
the run keys (report/run_model.py) to its report dict. A run whose traces hold no GPU activity
(a CPU-only machine), or that has no trace, still gets its run-level report, which says so.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from pathlib import Path

import msgspec
from rich.console import Console

from gpucheckup.analysis.mfu import MfuInputs
from gpucheckup.analysis.run import RunAnalysis, analyze_run
from gpucheckup.atomic import write_atomic
from gpucheckup.checkup import Checkup, _note_stragglers, agent_flops, check_trace, rank_summary
from gpucheckup.diagnosis.findings import Finding
from gpucheckup.diagnosis.run_rules import run_findings
from gpucheckup.errors import CheckupError
from gpucheckup.ranks_checkup import attach_job, job_dict
from gpucheckup.ranks_checkup import payload as ranks_payload
from gpucheckup.report.run_model import run_only_dict, run_parts
from gpucheckup.trace import read_trace
from gpucheckup.trace.ncu_csv import read_ncu_csv
from gpucheckup.trace.rundir import RunDir, is_run_dir, read_run


@dataclass
class RunCheckup:
    """A run directory's analysis, run-level findings, per-trace check-ups and the report(s)."""

    run: RunDir
    analysis: RunAnalysis
    findings: list[Finding]
    checkups: list[Checkup] = field(default_factory=list)
    no_timeline: str | None = None
    report: dict | None = None  # the run-only report when there is no GPU timeline
    job: object | None = None  # many GPUs (issue 9): ranks_checkup.JobCheckup when ranks share collectives


def check_run(path: Path, inputs: MfuInputs | None = None, ncu_csv: Path | None = None) -> RunCheckup:
    """Check up a run directory (FLOPs per step from the agent's flops.json unless given)."""
    path = Path(path)
    if not is_run_dir(path):
        raise CheckupError(f"{path}: not a gpucheckup run directory (no manifest.json)")
    inputs = inputs or MfuInputs()
    if inputs.agent_flops is None:
        inputs = replace(inputs, agent_flops=agent_flops(path))
    ncu = read_ncu_csv(ncu_csv) if ncu_csv else None
    run = read_run(path)
    ra = analyze_run(run)
    st = ra.steps or {}
    if inputs.unprofiled_step_ms is None and st.get("steady_median_ms") and st.get("profiled_median_ms"):
        inputs = replace(inputs, unprofiled_step_ms=st["steady_median_ms"],
                         unprofiled_from=f"steps.csv: median of the run's unprofiled steady-state steps ({ra.steps_key})")
    findings = run_findings(ra)
    rc = RunCheckup(run=run, analysis=ra, findings=findings)
    traces = run.traces or run.time_traces or run.attach_traces[-1:]
    used = []
    all_traces = []  # many GPUs (issue 9)
    for p in traces:
        trace = read_trace(p)
        all_traces.append(trace)
        if not trace.has_gpu:
            rc.no_timeline = (f"no GPU timeline: {p.relative_to(path)} holds CPU activity only (no kernels, copies "
                              "or memsets), so only the run-level figures are checked up")
            continue
        used.append(str(p.relative_to(path)))
        rc.checkups.append(check_trace(trace, inputs, ncu, ncu_csv, copy.deepcopy(findings)))
    if not traces:
        failed = run.manifest.get("failed", {})
        why = "; ".join(v for k, v in failed.items() if k.startswith("trace")) or "no trace was captured"
        rc.no_timeline = f"no GPU timeline: {why}"
    rc.checkups.sort(key=lambda c: (c.analysis.trace.rank is None, c.analysis.trace.rank or 0))
    if len(rc.checkups) > 1:
        _note_stragglers(rc.checkups)
    rc.job = attach_job(all_traces, rc.checkups, path, run.env, ra.nvml)  # many GPUs (issue 9)
    parts_traces = used or [str(p.relative_to(path)) for p in traces]
    for c in rc.checkups:
        c.report.update(run_parts(ra, used, None))
    if not rc.checkups:
        rc.report = run_only_dict(ra, findings, rc.no_timeline or "no GPU timeline", parts_traces)
    return rc


def reports(rc: RunCheckup) -> list[dict]:
    """The report dicts: one per checked-up trace, or the run-only one."""
    return [c.report for c in rc.checkups] or [rc.report]


def payload(rc: RunCheckup) -> dict:
    """The JSON document: one report, or ranks and their reports."""
    if len(rc.checkups) > 1 or rc.job:
        return ranks_payload(rc.job, rank_summary(rc.checkups), reports(rc))
    return reports(rc)[0]


def emit_run(rc: RunCheckup, console: Console, quiet: bool = False, json_path: Path | None = None) -> None:
    """Print the run's check-up and write its JSON when asked."""
    from gpucheckup.report import terminal, terminal_run

    if not quiet:
        if rc.job:
            from gpucheckup.report import terminal_ranks

            terminal_ranks.render_job(job_dict(rc.job, rank_summary(rc.checkups), reports(rc)), console)
        elif len(rc.checkups) > 1:
            terminal.render_ranks(rank_summary(rc.checkups), console)
        for c in rc.checkups:
            terminal.render(c.report, console)
        if rc.checkups:
            terminal_run.render_run(rc.checkups[0].report, console)
        else:
            terminal_run.render_run_only(rc.report, console)
    if json_path:
        write_atomic(json_path, msgspec.json.format(msgspec.json.encode(payload(rc)), indent=2))
        console.print(f"JSON written to {json_path}", style="dim", markup=False)

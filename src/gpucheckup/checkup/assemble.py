"""The check-ups of a path assembled into its one document (gpucheckup/document.py).

`document(result)` is what `--json` writes and what the Python API returns: the job's verdict, step,
fixes and notes at the top; each trace's report in `checkups` (or `cpu_checkups`); the cross-rank
section in `job`; a run directory's run-level section once, in `run`.
The job's verdict, in order: several ranks matched by their collectives: the cross-rank verdict
(checkup/ranks.check_job: the straggler's bound, a slow link, else what most ranks share);
several traces without that: what most share; one trace: its own; a run with no trace: the
run-level check-up's. The job's fixes and notes: those of the check-up whose verdict is the job's
(the first such in rank order; for a CPU-only job of several ranks, its cross-rank findings' fixes first),
its notes with every other check-up's that it lacks.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import msgspec

from gpucheckup import __version__, layout
from gpucheckup.analysis import step_basis
from gpucheckup.diagnosis.findings import VERDICT_TITLES
from gpucheckup.document import (
    RUN_KEYS, SCHEMA_VERSION, CpuReport, Document, Finding, Fix, Job, Run, RunOnly, Step, TraceReport, Verdict, cpu_part,
    decode, run_only, trace_part,
)
from gpucheckup.errors import CheckupError
from gpucheckup.files import check_regular
from gpucheckup.checkup.pipeline import Checkups, rank_summary

CPU_STEP_BASIS = "median ProfilerStep of the trace (CPU-side check-up)"


def document(result: Checkups, cases: list[str] | None = None) -> Document:
    """The one document of a path's check-ups (`cases`: the demo's case names, one per check-up): each report
    converted to its type once, the job's parts then read from those types."""
    reports = [c.report for c in result.checkups]
    cpu = [c.report for c in result.cpu]
    run_report = result.run.report if result.run and result.run.report else None
    first = (reports or cpu or [run_report])[0]
    parts = [trace_part(r) for r in reports]
    cpu_parts = [cpu_part(r) for r in cpu]
    run = msgspec.convert(_run(first, bool(reports)), Run) if result.run else None
    head = _job_head(result)
    verdict, lead = _job_verdict(result, head, parts, cpu_parts, run_report)
    fixes = _cpu_job_fixes(verdict, lead) if result.job is not None and not parts else list(lead.fixes)
    return Document(
        schema_version=SCHEMA_VERSION,
        gpucheckup_version=__version__,
        kind=_kind(result, cases),
        path=str(result.path),
        verdict=verdict,
        step=_step(parts, cpu_parts, run),
        fixes=fixes,
        notes=_notes(lead, parts + cpu_parts),
        checkups=parts,
        cpu_checkups=cpu_parts,
        job=msgspec.convert({"ranks": head["ranks"], "communication": head.get("communication")}, Job)
        if head else None,
        run=run,
        cases=list(cases) if cases else None,
    )


def _kind(result: Checkups, cases: list[str] | None) -> str:
    """What was checked up (document.KINDS)."""
    if cases:
        return "cases"
    if result.run is not None:
        return "run"
    if len(result.checkups) + len(result.cpu) > 1:
        return "traces"
    return "trace" if result.checkups else "cpu_trace"


def _job_verdict(result: Checkups, head: dict | None, parts: list[TraceReport], cpu: list[CpuReport],
                 run_report: dict | None) -> tuple[Verdict, TraceReport | CpuReport | RunOnly]:
    """The job's verdict (module docstring) and the check-up whose fixes and notes go with it."""
    if result.job is not None:
        primary, reason = result.job.primary, result.job.reason
        findings = msgspec.convert(head["verdict"]["findings"], list[Finding])
    elif not parts and not cpu:
        lead = run_only(run_report)
        return lead.verdict, lead
    elif len(parts) + len(cpu) == 1:
        r = (parts or cpu)[0]
        return r.verdict, r
    else:
        votes = Counter(r.verdict.primary for r in parts or cpu)
        primary = votes.most_common(1)[0][0]
        what = "traces" if result.run is None else "ranks"
        reason = f"{votes[primary]} of {len(parts or cpu)} {what}: {str(primary).replace('_', ' ')}"
        findings = []
    lead = next((r for r in parts + cpu if r.verdict.primary == primary), (parts or cpu)[0])
    title = VERDICT_TITLES.get(primary) or lead.verdict.title
    return Verdict(primary=primary, title=title, reason=reason, scores={}, findings=findings), lead


def _cpu_job_fixes(verdict: Verdict, lead: CpuReport) -> list[Fix]:
    """A CPU-only job's fixes: those of its cross-rank findings (a GPU rank's check-up holds them already:
    checkup/ranks.check_job), then the lead rank's, each catalogue key (else action) once."""
    found = [msgspec.structs.replace(x, finding=f.id) for f in verdict.findings if f.severity != "info" for x in f.fix]
    out: dict[str, Fix] = {}
    for x in found + list(lead.fixes):
        out.setdefault(x.key or x.action, x)
    return list(out.values())


def _step(parts: list[TraceReport], cpu: list[CpuReport], run: Run | None) -> Step | None:
    """The job's step time (analysis/step_basis.py)."""
    steps = [(_label(p, i), Step(ms=p.window.step_ms, basis=p.window.basis))
             for i, p in enumerate(parts) if p.window.step_ms is not None]
    if steps:  # in a run directory, each window's step is already its step log's (analysis/step_basis.py)
        return step_basis.job_step(steps)
    if run is not None:
        key = run.info.steps_from
        step = step_basis.run_step(run.figures.steps, layout.steps_file(key) if key else "")
        if step is not None:
            return step
    ms = [p.cpu.step_median_ms for p in cpu if p.cpu.step_median_ms is not None]
    return Step(ms=max(ms), basis=CPU_STEP_BASIS) if ms else None


def _label(part: TraceReport, i: int) -> str:
    """'rank R' of a trace's check-up (its position when it has no rank)."""
    rank = part.trace.rank
    return f"rank {rank if rank is not None else i}"


def _notes(lead, parts: list) -> list[str]:
    """The lead check-up's notes, then every other check-up's that it lacks, each once."""
    out = list(lead.notes)
    for r in parts:
        out += [n for n in r.notes if n not in out]
    return out


def _run(first: dict, traces: bool) -> dict:
    """The run-level section, once (every report of a run carries it); a light window's host samples go with
    their trace's report, and stay here only for a run without one."""
    out = {field: first[key] for key, field in RUN_KEYS.items()}
    if traces:
        out["figures"] = {k: v for k, v in out["figures"].items() if k != "host_samples"}
    return out


def _job_head(result: Checkups) -> dict | None:
    """The cross-rank part (checkup/ranks.job_dict: ranks, communication, the job's verdict), or the plain ranks
    table of several traces; None for one."""
    if len(result.checkups) < 2 and result.job is None:
        return None
    from gpucheckup.checkup.ranks import job_dict, plain_ranks_dict

    summary = rank_summary(result.checkups)
    return job_dict(result.job, summary, result.checkups) if result.job else plain_ranks_dict(summary)


DOCUMENT_BYTES = 256 << 20  # a check-up document is kilobytes a trace (a few MB for many ranks): a larger file is not one


def is_document(path: Path) -> bool:
    """Whether a .json file is a check-up document rather than a profiler trace (no traceEvents near its start)."""
    with open(path, "rb") as f:
        return b"traceEvents" not in f.read(1 << 16)


def read_document(path: Path) -> Document:
    """A check-up document written by `--json`, read back through its types; CheckupError when it is not one
    (one line: what was found, and for an older shape, what to do)."""
    check_regular(Path(path), DOCUMENT_BYTES)  # read whole: a 2 GiB sparse file took 2.1 GB and 8 s to refuse
    try:
        data = Path(path).read_bytes()
        head = msgspec.json.decode(data)
    except (OSError, msgspec.DecodeError) as e:
        raise CheckupError(f"{path}: not a readable check-up JSON ({e})") from None
    version = head.get("schema_version") if isinstance(head, dict) else None
    if version != SCHEMA_VERSION:
        found = f"schema version {version}" if version is not None else "no schema_version (an older gpucheckup's)"
        raise CheckupError(f"{path}: a check-up document of schema version {SCHEMA_VERSION} is expected, found "
                           f"{found}; check the trace or run directory up again with this gpucheckup")
    try:
        return decode(data)
    except msgspec.ValidationError as e:
        raise CheckupError(f"{path}: not a valid check-up document: {e}") from None

"""The check-up of a job's ranks together: cross-rank analysis, straggler and link rules, the job's verdict.

`check_job` takes every rank's trace (with its single-trace check-up when it has a GPU
timeline), matches their collectives (analysis/job/ranks.py), finds the straggler and its cause and
judges the collectives' bus bandwidth against the link (diagnosis/rank_rules.py), discounts the
waiting ranks' communication findings, and gives the job one verdict: the bound of the straggler's
cause when one is named (else the straggler's own verdict) when there is a straggler, `communication_bound` when
the link is slow, else the verdict most ranks share. A job none of whose ranks has device activity is `cpu_only`
(no GPU bound holds where no kernel ran), with the straggler and its cause in its reason and findings. `job_dict` is its JSON part (`ranks`, `communication`, `verdict`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from gpucheckup.analysis.job.ranks import distribution, RankInput, RanksAnalysis, analyze_ranks, straggler_cause
from gpucheckup.diagnosis import rank_rules
from gpucheckup.diagnosis.findings import Finding
from gpucheckup.hardware import links
from gpucheckup.checkup.cpu_report import CPU_VERDICT


@dataclass
class JobCheckup:
    """The job's cross-rank figures, findings and verdict."""

    analysis: RanksAnalysis
    findings: list[Finding]
    primary: str
    reason: str
    link_gb_s: float | None = None
    link_from: str = ""
    cause: str | None = None
    excess: dict[str, float] = field(default_factory=dict)
    rank_verdicts: dict[int, str] = field(default_factory=dict)


def link_figure(run_path: Path | None, env: dict, device: str, nranks: int, cc: str) -> tuple[float | None, str]:
    """The link's GB/s and where it came from: the run's commbench.json, the cached commbench, the topology."""
    for p in ([run_path / links.COMMBENCH_FILE] if run_path else []) + [links.cache_path(device or "cpu", nranks)]:
        bench = links.read_commbench(p)
        found = links.measured_link(bench) if bench else None
        if found:
            return found[0], f"{found[1]} ({p})"
    topo = links.link_from_topology((env or {}).get("topology") or "", cc)
    return (topo[0], topo[1]) if topo else (None, "")


def throttle_note(nvml: dict | None, straggler: int) -> str | None:
    """The straggler's GPU's throttling against the others', from the run's per-GPU NVML figures."""
    per = {g["gpu"]: (g.get("throttle") or {}) for g in (nvml or {}).get("per_gpu", [])}
    if not per:
        return None
    mine = per.get(straggler % len(per), {})
    if not mine.get("known") or not mine.get("throttled_pct"):
        return None
    others = [p.get("throttled_pct") or 0.0 for g, p in per.items() if g != straggler % len(per)]
    worst = ", ".join(f"{k} {v:.0f}%" for k, v in sorted(mine["by_reason_pct"].items(), key=lambda kv: -kv[1]))
    return (f"its GPU ({straggler % len(per)}) was throttled in {mine['throttled_pct']:.0f}% of the NVML samples "
            f"({worst}), the other GPUs in {max(others, default=0.0):.0f}% at most")


def check_job(inputs: list[RankInput], checkups: dict[int, object], run_path: Path | None = None,
              env: dict | None = None, nvml: dict | None = None, recheck=None) -> JobCheckup | None:
    """Check up the ranks together; None when fewer than two ranks hold collective calls.
    `inputs`: each rank's compact table (analysis/ranks.rank_input), in rank order, numbered by place when a
    trace has no rank; `checkups`: rank -> that rank's single-trace Checkup (only ranks with a GPU timeline);
    `recheck(waits)`: re-runs the check-ups of the ranks in `waits` (rank -> each call's matched wait, us)
    with those waits, for the profiler-overhead correction (analysis/one_trace/profiler_overhead.py)."""
    for i, r in enumerate(inputs):
        if r.rank is None:
            r.rank = i
    ra = analyze_ranks(inputs)
    if ra is None:
        return None
    if recheck is not None:
        waits = {rk: ra.call_waits[rk] for rk, c in checkups.items()
                 if c.facts.corrected and rk in ra.call_waits}
        if waits:
            recheck(waits)
    env = env or {}
    device, cc = inputs[0].device, inputs[0].compute_capability
    link_gb_s, link_from = (link_figure(run_path, env, device, len(ra.ranks), cc) if ra.on_gpu else (None, ""))
    findings = []
    cause, excess = None, {}
    if ra.straggler is not None:
        cause, ex_ms, excess = straggler_cause(inputs, ra.straggler, {r.rank: r.exposed_wait_ms for r in ra.table})
        f = rank_rules.straggler_finding(ra, cause, ex_ms, excess, throttle_note(nvml, ra.straggler))
        findings.append(f)
        if ex_ms < rank_rules.CAUSE_SHARE * ra.straggler_late_ms:
            cause = None
    slow = rank_rules.slow_link_finding(ra, link_gb_s, link_from, env.get("variables") or {})
    if slow:
        findings.append(slow)
    _add_to_ranks(ra, checkups, findings, slow)
    verdicts = {rk: c.diagnosis.primary for rk, c in checkups.items()}
    if not checkups and not ra.on_gpu:  # no rank launched a kernel: no GPU bound can hold (checkup/cpu_report.py)
        verdicts = {r.rank: CPU_VERDICT for r in ra.table}
    primary, reason = _job_verdict(ra, checkups, verdicts, cause, slow)
    return JobCheckup(analysis=ra, findings=findings, primary=primary, reason=reason, link_gb_s=link_gb_s,
                      link_from=link_from, cause=cause, excess=excess, rank_verdicts=verdicts)


def _add_to_ranks(ra, checkups: dict[int, object], findings: list, slow) -> None:
    """The job's findings in each rank's check-up: the straggler's and the slow link's first; the others' wait for
    the straggler discounted (and said of their GPU busy, which counts NCCL kernels waiting as work)."""
    step = max(r.step_ms for r in ra.table)
    for row in ra.table:
        c = checkups.get(row.rank)
        if c is None:
            continue
        if ra.straggler is not None and row.rank != ra.straggler:
            rank_rules.discount_wait(c.diagnosis, row.exposed_wait_ms, ra.straggler, step, row.transfer_ms)
            if row.exposed_wait_ms > 0 and c.facts.busy_pct_unprofiled is None:
                busy = c.facts.busy_pct  # as traced (the unprofiled figure leaves the wait out)
                c.diagnosis.notes.append(
                    f"GPU busy {busy:.1f}% counts {row.exposed_wait_ms:.2f} ms per step of NCCL kernels waiting for "
                    f"rank {ra.straggler} as work; without them the GPU computes "
                    f"{max(busy - 100 * row.exposed_wait_ms / row.step_ms, 0.0):.1f}% of the step")
        if slow:
            rank_rules.drop_comm_tuning(c.diagnosis)
            c.diagnosis.findings.insert(0, slow)
        if ra.straggler is not None:
            c.diagnosis.findings.insert(0, findings[0])


def _job_verdict(ra, checkups: dict[int, object], verdicts: dict, cause: str | None, slow) -> tuple[str, str]:
    """The job's verdict and its reason: a CPU-only job's; else the straggler's bound (its cause against the other
    ranks, else its own check-up's); else a slow link; else what most ranks share."""
    if not checkups and not ra.on_gpu:
        if ra.straggler is not None:
            why = rank_rules.CPU_CAUSE_TEXT.get(cause or "", "with no single cause")
            return CPU_VERDICT, (f"no rank has device activity (a CPU-only job); rank {ra.straggler} is the straggler "
                                 f"({ra.straggler_late_ms:.2f} ms late per step, {why}) and the job runs at its pace")
        return CPU_VERDICT, (f"no rank has device activity (a CPU-only job) and no rank is a straggler "
                             f"({len(ra.table)} ranks)")
    if ra.straggler is not None:
        # the cause found against the other ranks is the sharper evidence; else the straggler's own check-up
        primary = rank_rules.CAUSE_BOUND.get(cause or "") or verdicts.get(ra.straggler) or "unknown"
        why = rank_rules.CAUSE_TEXT.get(cause, "with no single cause") if cause else "with no single cause"
        return primary, (f"rank {ra.straggler} is the straggler ({ra.straggler_late_ms:.2f} ms late per step, {why}); "
                         f"the job runs at its pace, so its bottleneck is the job's: {primary.replace('_', ' ')}")
    if slow:
        return "communication_bound", slow.evidence[0]
    if verdicts:
        primary = Counter(verdicts.values()).most_common(1)[0][0]
        return primary, (f"{sum(v == primary for v in verdicts.values())} of {len(verdicts)} ranks: "
                         f"{primary.replace('_', ' ')}")
    return "unknown", "no rank has a GPU timeline and no rank is a straggler"


def _r(x, nd=3):
    return None if x is None else round(float(x), nd)


def job_dict(job: JobCheckup, summary: list[dict] | None = None, checkups: list | None = None) -> dict:
    """The job's JSON keys: ranks (straggler, table), communication, verdict (`checkups`: the ranks' GPU check-ups,
    for their communication overlap)."""
    from gpucheckup.checkup.trace_report import _clean

    ra = job.analysis
    old = {r["rank"]: r for r in (summary or [])}
    overlap = {c.facts.rank: c.facts.comm_overlap_pct for c in checkups or []}
    table = []
    for row in ra.table:
        d = {"rank": row.rank, "step_ms": _r(row.step_ms), "compute_ms": _r(row.compute_ms),
             "transfer_ms": _r(row.transfer_ms), "wait_ms": _r(row.wait_ms),
             "exposed_wait_ms": _r(row.exposed_wait_ms), "idle_ms": _r(row.idle_ms),
             "late_ms": _r(row.late_ms), "last_pct": _r(row.last_pct, 1), "clock_offset_us": _r(row.offset_us, 1),
             "verdict": job.rank_verdicts.get(row.rank)}
        d.update({k: v for k, v in old.get(row.rank, {}).items() if k not in d})
        d["comm_overlap_pct"] = _r(overlap.get(row.rank), 1)
        table.append(d)
    return _clean({
        "ranks": {"straggler": ra.straggler, "late_ms_per_step": _r(ra.straggler_late_ms) if ra.straggler is not None
                  else None, "waited_ms_per_step": _r(ra.waited_ms) if ra.straggler is not None else None,
                  "cause": job.cause, "excess_ms": {k: _r(v) for k, v in job.excess.items()}, "table": table,
                  "distribution": [{k: (_r(v) if isinstance(v, float) else v) for k, v in d.items()}
                                   for d in distribution(ra.table)],
                  "matched_calls": ra.matched, "unmatched_calls": ra.unmatched, "steps": ra.steps, "notes": ra.notes},
        "communication": {
            "collectives": [{"name": c.name, "bytes": c.bytes, "count": c.count, "group_size": c.group_size,
                             "transfer_ms": _r(c.transfer_ms), "wait_ms": _r(c.wait_ms),
                             "busbw_gb_s": _r(c.busbw_gb_s, 2)} for c in ra.collectives],
            "busbw_gb_s": _r(ra.busbw_gb_s, 2), "link_gb_s": _r(job.link_gb_s, 1), "link_from": job.link_from or None,
        },
        "verdict": {"primary": job.primary, "reason": job.reason,
                    "findings": [f.to_dict() for f in job.findings]},
    })


def plain_ranks_dict(summary: list[dict]) -> dict:
    """The `ranks` key when the ranks share no collective calls: the per-rank rows only."""
    return {"ranks": {"straggler": None, "table": summary, "matched_calls": 0}}


def attach_job(inputs: list[RankInput], checkups: list, run_path: Path | None = None,
               env: dict | None = None, nvml: dict | None = None, recheck=None) -> JobCheckup | None:
    """check_job over these ranks' compact tables (it adds the job's findings and notes to the ranks' diagnoses; their
    reports' diagnosis keys are built from them last: checkup/trace_report.diagnosis_keys)."""
    if len(inputs) < 2:
        return None
    by_rank = {}
    for i, c in enumerate(checkups):
        by_rank[c.facts.rank if c.facts.rank is not None else i] = c
    return check_job(inputs, by_rank, run_path, env, nvml, recheck)

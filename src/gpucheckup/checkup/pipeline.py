"""A path to its check-up: a trace, a folder of per-rank traces, or a gpucheckup run directory.

`check(path)` is the one way in. Each trace is read (trace/), analyzed (analysis/), diagnosed
(diagnosis/) and turned into its report dict (checkup/trace_report.py). A run directory adds its
run-level parts: the run is read (trace/rundir.py), the run-level analyses (analysis/run_logs/run.py) and
rules (diagnosis/run_rules.py) run, each rank's trace (the step windows in traces/; else the time
windows; else the latest attach capture; or the attach capture asked for: `gpucheckup attach` to a job with the
agent checks its new trace up as part of the job's run directory, so the step basis is the job's own step log, the
unprofiled step, as for `gpucheckup run`) is checked up as above with the run-level findings appended, its report
dict built once with the run keys (checkup/run_report.py) and its sampled host states (`InRun`). A run whose traces
hold no GPU activity (a CPU-only machine), or that has no trace, still gets its run-level report,
which says so. A trace without device activity gets the CPU-side check-up instead
(analysis/one_trace/host/cpu_profile.py, checkup/cpu_report.py), when it has CPU operators; with none either, it is
refused with a line naming both. An out-of-process attach's py-spy samples get their coarse verdict
(diagnosis/coarse.py) here, from the samples stored in the run directory; with no trace, it is the run's
verdict, said coarse, with its finding and fixes (checkup/run_report.py coarse_dict).
Notes are added before the reports' diagnosis keys are built: the run's own (run_notes) go into each report as
it is built; a folder's skipped traces and stragglers, and the cross-rank findings (checkup/ranks.py), go into
each check-up's diagnosis, from which its verdict, fixes and notes are built last (`_finish`).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
from rich.console import Console
from rich.markup import escape

from gpucheckup import layout
from gpucheckup.analysis.checkup import TraceAnalysis, analyze
from gpucheckup.analysis.flops.mfu import MfuInputs
from gpucheckup.diagnosis import Diagnosis, diagnose, savings
from gpucheckup.diagnosis.findings import Finding
from gpucheckup.errors import CheckupError
from gpucheckup.files import SMALL_JSON_BYTES, check_regular
from gpucheckup.hardware import ceilings
from gpucheckup.checkup.trace_report import TraceFacts, checkup_dict, diagnosis_keys, trace_facts
from gpucheckup.report.text.progress import progress_bar
from gpucheckup.safe_text import safe
from gpucheckup.trace import find_trace_files, parallel, read_trace
from gpucheckup.trace.host_samples import host_samples_for
from gpucheckup.trace.rundir import RunDir, is_live_run_dir, is_run_dir, read_run

if TYPE_CHECKING:  # a single trace's check-up imports none of the run-level, cross-rank or CPU-side modules
    from gpucheckup.analysis.one_trace.host.cpu_profile import CpuProfile
    from gpucheckup.analysis.run_logs.run import RunAnalysis
    from gpucheckup.diagnosis.coarse import CoarseVerdict
    from gpucheckup.checkup.ranks import JobCheckup

STRAGGLER_PCT = 10.0  # a rank whose step (its window's) is this much slower than the fastest is a straggler


class InRun(msgspec.Struct):
    """What a run directory gives each of its traces' reports: the run's analysis and coarse verdict, the traces
    checked up (for the run-level keys: checkup/run_report.run_parts), and this trace's sampled host states."""

    analysis: RunAnalysis
    traces: list[str]
    coarse: dict | None  # diagnosis/coarse.py's verdict of py-spy samples
    sampled: object = None  # a light window's host samples for this trace (trace/host_samples.py), or None
    notes: list[str] = msgspec.field(default_factory=list)  # the run's notes (run_notes), after the trace's own


class Checkup(msgspec.Struct):
    """One trace's analysis, diagnosis, typed facts and report dict."""

    analysis: TraceAnalysis | None  # None when checked up in a worker process: the rest comes back
    diagnosis: Diagnosis
    facts: TraceFacts  # what the work across traces reads (rank, path, step, GPU busy)
    report: dict
    ranks: object = None  # its compact cross-rank table (analysis/ranks.RankInput) when it has collective calls
    run: InRun | None = None  # in a run directory: what its report was built with (a re-check builds it the same)


class CpuCheckup(msgspec.Struct):
    """The CPU-side check-up of a trace without device activity, its trace's rank and path, and its report dict."""

    profile: CpuProfile
    rank: int | None
    path: str
    report: dict
    findings: list[Finding] = msgspec.field(default_factory=list)  # diagnosis/cpu_rules.py


class RunCheckup(msgspec.Struct):
    """A run directory's run-level analysis and findings, and its report when there is no GPU timeline."""

    run: RunDir
    analysis: RunAnalysis
    findings: list[Finding]
    notes: list[str] = msgspec.field(default_factory=list)  # run_notes: each report of the run ends with them
    coarse: CoarseVerdict | None = None  # out-of-process attach: the verdict of its py-spy samples
    no_timeline: str | None = None
    report: dict | None = None  # the run-only report when there is no GPU timeline


class Checkups(msgspec.Struct):
    """What one path checks up to: a check-up per trace (in rank order) and, for a run directory, its run part."""

    path: Path
    checkups: list[Checkup] = msgspec.field(default_factory=list)
    run: RunCheckup | None = None
    job: JobCheckup | None = None  # several ranks with collectives: the cross-rank check-up (checkup/ranks.py)
    cpu: list[CpuCheckup] = msgspec.field(default_factory=list)  # traces without device activity: CPU-side check-ups

    def reports(self) -> list[dict]:
        """The report dicts: one per checked-up trace (GPU ones; else the CPU-side ones), or the run-only one."""
        return ([c.report for c in self.checkups] or [c.report for c in self.cpu]
                or ([self.run.report] if self.run and self.run.report else []))


def check(path: Path, inputs: MfuInputs | None = None, ncu_csv: Path | None = None,
          console: Console | None = None, jobs: int | None = None) -> Checkups:
    """Check up a trace, a folder of traces or a run directory (`jobs`: worker processes for a large folder)."""
    path = Path(path)
    if is_run_dir(path):
        return check_run(path, inputs, ncu_csv)
    cpu: list[CpuCheckup] = []
    inputs, ncu = _settings(path, inputs, ncu_csv)
    checkups = check_path(path, console, inputs, ncu_csv, jobs, cpu)
    out = Checkups(path, checkups, cpu=cpu)
    if len(checkups) > 1:
        from gpucheckup.checkup.ranks import attach_job

        for c in checkups:
            c.ranks = c.ranks or _rank_table(c.analysis)

        out.job = attach_job([c.ranks for c in checkups], checkups,
                             recheck=_rechecker(checkups, inputs, ncu, ncu_csv, jobs))
    _finish(checkups)
    return out


def _finish(checkups: list[Checkup]) -> None:
    """The last step: each report's diagnosis keys from its diagnosis, once every step that adds to it has run."""
    for c in checkups:
        diagnosis_keys(c.report, c.diagnosis)


def _settings(path: Path, inputs: MfuInputs | None, ncu_csv: Path | None) -> tuple[MfuInputs, object]:
    """The MFU inputs (FLOPs per step from the agent's flops.json unless given) and the Nsight Compute rows."""
    inputs = inputs or MfuInputs()
    if inputs.agent_flops is None:
        inputs = msgspec.structs.replace(inputs, agent_flops=agent_flops(path))
    return inputs, _ncu_launches(ncu_csv)


def _rechecker(checkups: list[Checkup], inputs: MfuInputs, ncu, ncu_csv: Path | None, jobs: int | None,
               extra: list[Finding] | None = None):
    """recheck(waits) for ranks_checkup.check_job: the check-ups of the ranks in `waits` again, with their calls'
    matched waits (the profiler-overhead correction); here for traces in memory, else in worker processes."""
    def recheck(waits: dict[int, object]) -> None:
        by_rank = {(c.facts.rank if c.facts.rank is not None else i): c for i, c in enumerate(checkups)}
        todo = [(by_rank[rk], w) for rk, w in waits.items()]
        for c, w in todo:
            if c.analysis is not None:
                _replace(c, check_trace(c.analysis.trace, inputs, ncu, ncu_csv, copy.deepcopy(extra or []), w,
                                        run=c.run))
        far = [(c, w) for c, w in todo if c.analysis is None]
        items = [(Path(c.facts.path), w) for c, w in far]
        for (c, _), (_, new) in zip(far, parallel.map_files(_recheck_file, items, inputs, ncu, ncu_csv, jobs=jobs)):
            if isinstance(new, CheckupError):
                raise new
            _replace(c, new)
    return recheck


def _replace(c: Checkup, new: Checkup) -> None:
    """Checkup c takes new's analysis, diagnosis and report; the notes c's diagnosis gathered stay, first."""
    old = c.report
    gathered = c.diagnosis.notes
    new.diagnosis.notes = gathered + [n for n in new.diagnosis.notes if n not in gathered]
    new.report.update({k: v for k, v in old.items() if k not in new.report})
    c.analysis, c.diagnosis, c.facts, c.report = new.analysis, new.diagnosis, new.facts, new.report


def trace_paths(path: Path) -> list[Path]:
    """The trace files a path names: the file itself, or the traces in a folder."""
    if not path.exists():
        raise CheckupError(f"{path}: no such file or folder")
    if path.is_dir():
        files = find_trace_files(path)
        if not files:
            raise CheckupError(f"{path}: no trace files (*.json, *.json.gz) in this folder")
        return files
    if path.is_file() and path.stat().st_size == 0:
        raise CheckupError(f"{path}: empty file (0 bytes): no trace events, so nothing to check up")
    return [path]


def agent_flops(path: Path) -> dict | None:
    """The FLOPs per step the capture agent stored in a run directory, if any."""
    f = path / layout.flops_file() if path.is_dir() else None
    if f is None or not f.exists():
        return None
    check_regular(f, SMALL_JSON_BYTES)  # a FIFO would block the read forever, a sparse file fill memory
    try:
        d = json.loads(f.read_text())
        flops = float(d["flops_per_step"])
        if not 0 <= flops < float("inf"):
            raise ValueError(f"flops_per_step {flops} is not a finite count")
    except (OSError, ValueError, KeyError, TypeError, OverflowError, RecursionError) as e:
        raise CheckupError(f"{f}: unreadable FLOPs file ({type(e).__name__}: {e}); expected "
                           '{"flops_per_step": F, "how": "..."}') from None
    return {"flops_per_step": flops, "how": str(d.get("how", "")), "path": str(f)}


def _inputs_for(trace, inputs: MfuInputs) -> MfuInputs:
    """The MFU inputs for one trace: stored ceilings of its GPU unless given."""
    if inputs.ceilings is not None:
        return inputs
    name = inputs.gpu or (trace.devices[0].name if trace.devices else "")
    found = ceilings.find_for(name) if name else None
    return msgspec.structs.replace(inputs, ceilings=found[0], ceilings_path=str(found[1])) if found else inputs


def check_trace(trace, inputs: MfuInputs, ncu=None, ncu_csv: Path | None = None, extra_findings=(),
                comm_waits=None, fork: bool = False, run: InRun | None = None) -> Checkup:
    """Analyze, diagnose and build the report dict of one trace, with its compact cross-rank table when it
    holds collective calls (`comm_waits`: their matched waits, for the profiler-overhead correction; `fork`:
    a large trace's fixes predicted on a second core, where this process is not one of several workers; `run`:
    a run directory's trace, whose report is built with its run-level keys)."""
    a = analyze(trace, _inputs_for(trace, inputs), ncu, str(ncu_csv or ""), comm_waits)
    d = diagnose(a, savings.predict(a, fork))  # each fix's replayed saving: computed here, once per trace
    d.findings += list(extra_findings)
    if run is None:
        return Checkup(a, d, trace_facts(a), checkup_dict(a, d))
    d.notes += [n for n in run.notes if n not in d.notes]  # the run's, after the trace's own (a re-check's too)
    from gpucheckup.analysis.run_logs import sampled_causes
    from gpucheckup.checkup.run_report import run_parts

    sc = sampled_causes.sampled_causes(trace, run.sampled, a.timeline.gaps) if run.sampled is not None else None
    parts = run_parts(run.analysis, run.traces, None, run.coarse, {"host_samples": sc.to_dict() if sc else None})
    return Checkup(a, d, trace_facts(a), checkup_dict(a, d, sampled_causes.gap_source(trace), parts), run=run)


def _rank_table(a: TraceAnalysis):
    """The compact cross-rank table of an analyzed trace (analysis/ranks.rank_input): what a worker sends back
    for the cross-rank analysis instead of the trace."""
    from gpucheckup.analysis.job.ranks import rank_input

    return rank_input(a.trace, None, a.launch_rows, a.steps)


def cpu_checkup(trace, step_ms: float | None = None, run: InRun | None = None,
                run_findings: list[Finding] | None = None) -> CpuCheckup:
    """The CPU-side check-up of a trace without device activity (`step_ms`: the job's step without the profiler,
    when known: CpuProfile.per_step); CheckupError when it has no CPU operators either (nothing to check up). In a
    run directory (`run`), its findings weigh the job's threads against its cores, the run-level ones
    (`run_findings`) follow them, and its report has the run-level keys."""
    from gpucheckup.analysis.one_trace.host.cpu_profile import cpu_profile
    from gpucheckup.diagnosis.cpu_rules import cpu_findings
    from gpucheckup.checkup.cpu_report import cpu_dict

    p = cpu_profile(trace)
    if p is None:
        raise CheckupError(f"{trace.path}: nothing to check up: no device activity (no kernels, copies, memsets "
                           "or other accelerator work) and no CPU operators (cpu_op events)")
    p.step_ms = step_ms
    if run is None:
        findings = cpu_findings(p)
        return CpuCheckup(p, trace.rank, trace.path, cpu_dict(trace, p, findings), findings)
    from gpucheckup.analysis.run_logs.environment import thread_budget
    from gpucheckup.checkup.run_report import run_parts

    findings = cpu_findings(p, thread_budget(run.analysis.run.env or {}, p.per_step(p.main_thread.busy_ms)))
    report = {**cpu_dict(trace, p, findings + list(run_findings or []), run.notes),
              **run_parts(run.analysis, run.traces, None, run.coarse)}
    return CpuCheckup(p, trace.rank, trace.path, report, findings)


def _check_file(f: Path, inputs: MfuInputs, ncu, ncu_csv: Path | None) -> Checkup | CpuCheckup:
    """In a worker process: one trace's check-up, without its analysis (the trace's tables stay there)."""
    trace = read_trace(f)
    if not trace.has_gpu:
        return cpu_checkup(trace)
    c = check_trace(trace, inputs, ncu, ncu_csv)
    return Checkup(None, c.diagnosis, c.facts, c.report, _rank_table(c.analysis))


def _recheck_file(item: tuple[Path, object], inputs: MfuInputs, ncu, ncu_csv: Path | None) -> Checkup:
    """In a worker process: one trace's check-up again with its calls' matched waits (item: path, waits)."""
    f, waits = item
    c = check_trace(read_trace(f), inputs, ncu, ncu_csv, (), waits)
    return Checkup(None, c.diagnosis, c.facts, c.report)


def check_path(path: Path, console: Console | None = None, inputs: MfuInputs | None = None,
               ncu_csv: Path | None = None, jobs: int | None = None,
               cpu: list[CpuCheckup] | None = None) -> list[Checkup]:
    """Check up every trace under a path, in rank order; a large folder in worker processes (`jobs`: how
    many, default one per core; 1 keeps every analysis in this process). Traces without device activity
    get their CPU-side check-up appended to `cpu` when it is given (else they are refused)."""
    files = trace_paths(path)
    inputs = inputs or MfuInputs()
    if inputs.agent_flops is None:
        inputs = msgspec.structs.replace(inputs, agent_flops=agent_flops(path))
    ncu = _ncu_launches(ncu_csv)
    results, skipped = [], []
    console = console or Console(stderr=True)
    with progress_bar(console) as progress:  # drawn on a terminal only
        task = progress.add_task("reading traces", total=len(files))
        in_process = files
        if parallel.worth_it(files, jobs):  # one trace per worker at a time; reports come back
            workers = min(len(files), jobs or parallel.cores())
            progress.update(task, description=f"checking up {len(files)} traces on {workers} cores")
            for f, c in parallel.map_files(_check_file, files, inputs, ncu, ncu_csv, jobs=jobs):
                if isinstance(c, CpuCheckup) and cpu is None:
                    c = CheckupError(f"{f}: CPU-only trace (no device activity)")
                (skipped if isinstance(c, CheckupError) else cpu if isinstance(c, CpuCheckup) else results).append(c)
                progress.advance(task)
            in_process = []
        for f in in_process:
            size_mb = f.stat().st_size / 1e6
            progress.update(task, description=f"reading {escape(safe(f.name))} ({size_mb:.1f} MB)")
            try:
                trace = read_trace(f, split=jobs != 1)  # a large trace's events on two cores (not under --jobs 1)
                progress.update(task, description=f"analyzing {escape(safe(f.name))}")
                if cpu is not None and not trace.has_gpu:
                    cpu.append(cpu_checkup(trace))
                else:
                    results.append(check_trace(trace, inputs, ncu, ncu_csv, fork=jobs != 1))
            except CheckupError as e:
                if len(files) == 1:
                    raise
                skipped.append(e)  # one bad rank file must not hide the others' check-ups
            progress.advance(task)
    if not results and not cpu:
        raise CheckupError(f"{path}: none of its {len(files)} traces could be checked up; the first: {skipped[0]}")
    _sort_by_rank(results)
    for c in results:
        c.diagnosis.notes += [f"skipped a trace of this folder: {e}" for e in skipped]
    for c in cpu or []:  # a CPU-side check-up has no diagnosis to build from: its report's notes
        c.report["notes"] += [f"skipped a trace of this folder: {e}" for e in skipped]
    if len(results) > 1:
        _note_stragglers(results)
    return results


def attach_run_dir(trace: Path) -> Path | None:
    """The run directory whose traces/attach/ holds this trace (one the agent of a job started under `gpucheckup run`,
    or injected, wrote for `gpucheckup attach`), else None."""
    run_dir = Path(trace).parent.parent.parent
    inside = Path(trace).parent == run_dir / layout.ATTACH_TRACES
    return run_dir if inside and (is_run_dir(run_dir) or is_live_run_dir(run_dir)) else None


def check_run(path: Path, inputs: MfuInputs | None = None, ncu_csv: Path | None = None,
              trace: Path | None = None) -> Checkups:
    """Check up a run directory (FLOPs per step from the agent's flops.json unless given); `trace`: check up this
    trace of the run (an attach window's) instead of the run's own windows, on the same step basis."""
    from gpucheckup.analysis.run_logs.run import analyze_run
    from gpucheckup.diagnosis.run_rules import run_findings

    path = Path(path)
    live = trace is not None and is_live_run_dir(path)  # attached to a job still running: no manifest yet
    if not (is_run_dir(path) or live):
        raise CheckupError(f"{path}: not a gpucheckup run directory (no {layout.MANIFEST})")
    inputs = inputs or MfuInputs()
    if inputs.agent_flops is None:
        inputs = msgspec.structs.replace(inputs, agent_flops=agent_flops(path))
    ncu = _ncu_launches(ncu_csv)
    run = read_run(path, live)
    ra = analyze_run(run)
    inputs = _run_inputs(inputs, run, ra)
    rc = RunCheckup(run=run, analysis=ra, findings=run_findings(ra), notes=run_notes(ra))
    sampled_states = _coarse(rc)
    out = Checkups(path, run=rc)
    traces = [Path(trace)] if trace is not None else run.traces or run.time_traces or run.attach_traces[-1:]
    seen = _check_traces(out, traces, inputs, ncu, ncu_csv)
    if not traces:
        failed = run.manifest.get("failed", {})
        why = "; ".join(v for k, v in failed.items() if k.startswith("trace")) or "no trace was captured"
        rc.no_timeline = f"no GPU timeline: {why}"
    _sort_by_rank(out.checkups)
    if len(out.checkups) > 1:
        _note_stragglers(out.checkups)
    if len(seen.traces) > 1:
        from gpucheckup.analysis.job.ranks import rank_input
        from gpucheckup.checkup.ranks import attach_job

        out.job = attach_job([rank_input(t, i) for i, t in enumerate(seen.traces)], out.checkups, path, run.env,
                             ra.nvml, _rechecker(out.checkups, inputs, ncu, ncu_csv, 1, rc.findings))
    _finish(out.checkups)
    _add_run_report(out, seen, sampled_states)
    return out


def _run_inputs(inputs: MfuInputs, run, ra: RunAnalysis) -> MfuInputs:
    """What the run itself tells a trace's check-up: the loop's framework (as the agent saw it at the first step, one
    for every rank) and the step without the profiler (the run's unprofiled steps)."""
    if not inputs.framework:
        inputs = msgspec.structs.replace(inputs, framework=next(
            (str(a["framework"]) for a in run.agents.values() if isinstance(a.get("framework"), str)), ""))
    st = ra.steps or {}
    if inputs.unprofiled_step_ms is None and st.get("unprofiled_ms") and st.get("profiled_median_ms"):
        steps_file = layout.steps_file(ra.steps_key)
        first, last = st["unprofiled_steps"]
        inputs = msgspec.structs.replace(inputs, unprofiled_step_ms=st["unprofiled_ms"],
                                         unprofiled_from=f"{steps_file}: total time over the run's unprofiled steps "
                                                         f"{first}-{last} ({st['unprofiled_basis']}; {ra.steps_key})")
    return inputs


def _coarse(rc: RunCheckup) -> tuple | None:
    """The coarse verdict of an out-of-process attach's py-spy samples into rc.coarse; (states, utilization) of the
    samples, or None where the run has none."""
    from gpucheckup.analysis.run_logs import stack_samples
    from gpucheckup.diagnosis.coarse import coarse_verdict

    run = rc.run
    if run.samples is None:
        return None
    states, util = stack_samples.sample_states(run.samples), stack_samples.sample_util(run.samples, run.nvml)
    rc.coarse = coarse_verdict(states, util, run.manifest.get("captured", {}).get("cuda_driver_loaded"))
    return states, util


class _SeenTraces(msgspec.Struct):
    """The traces of a run as read: each one, their paths in the run, the GPU ones', and each one's host samples."""

    traces: list = msgspec.field(default_factory=list)
    names: list[str] = msgspec.field(default_factory=list)
    used: list[str] = msgspec.field(default_factory=list)
    sampled: list = msgspec.field(default_factory=list)


def _check_traces(out: Checkups, paths: list[Path], inputs: MfuInputs, ncu, ncu_csv: Path | None) -> _SeenTraces:
    """Check up each of the run's traces into `out`, each report built with the run-level keys: a GPU trace with the
    run-level findings appended, a CPU-only one by its CPU side (the run says why it has no timeline)."""
    from gpucheckup.analysis.one_trace.host.cpu_profile import cpu_profile

    rc, seen = out.run, _SeenTraces()
    for p in paths:  # all read first: every report names the run's traces checked up
        seen.traces.append(read_trace(p))
        seen.sampled.append(_sampled(out.path, p))
    seen.names = [str(p.relative_to(out.path)) for p in paths]
    seen.used = [name for name, t in zip(seen.names, seen.traces) if t.has_gpu]
    coarse = rc.coarse.to_dict() if rc.coarse else None
    for p, trace, sampled in zip(paths, seen.traces, seen.sampled):
        if not trace.has_gpu:
            rc.no_timeline = (f"no GPU timeline: {p.relative_to(out.path)} holds CPU activity only (no kernels, "
                              "copies or memsets): its CPU side and the run-level figures are checked up")
            if cpu_profile(trace) is not None:  # the run's notes go with the GPU check-ups where there are any
                out.cpu.append(cpu_checkup(trace, inputs.unprofiled_step_ms,
                                           InRun(rc.analysis, seen.used or seen.names, coarse,
                                                 notes=[] if seen.used else rc.notes), rc.findings))
            continue
        out.checkups.append(check_trace(trace, inputs, ncu, ncu_csv, copy.deepcopy(rc.findings),
                                        run=InRun(rc.analysis, seen.used, coarse, sampled, rc.notes)))
    return seen


def _add_run_report(out: Checkups, seen: _SeenTraces, sampled_states: tuple | None) -> None:
    """With no GPU check-up, the run's own report (coarse where its samples decide and no trace has CPU activity)."""
    if out.checkups:
        return
    from gpucheckup.analysis.run_logs import stack_samples
    from gpucheckup.checkup.run_report import coarse_dict, run_only_dict
    from gpucheckup.diagnosis.coarse import coarse_events, coarse_findings, fix_note

    rc = out.run
    run, ra, findings = rc.run, rc.analysis, rc.findings
    parts_traces = seen.used or seen.names
    run_notes = [] if out.cpu else rc.notes  # the run's notes go with the CPU-side check-ups where there are any
    if not out.cpu and rc.coarse is not None and rc.coarse.decided:
        states, util = sampled_states
        gpu_job = run.manifest.get("captured", {}).get("cuda_driver_loaded")
        found = coarse_findings(rc.coarse, stack_samples.loader_kind(run.samples), gpu_job,
                                (run.manifest["captured"].get("processes"), ra.loaders["usable_cores"]),
                                coarse_events(ra, rc.coarse, states, util, list(run.samples["t_s"])))
        rc.report = coarse_dict(ra, findings + found, rc.coarse, fix_note(rc.coarse) if found else "",
                                rc.no_timeline, parts_traces, run_notes)
    else:
        from gpucheckup.analysis.run_logs import sampled_causes

        light = bool(seen.traces) and seen.sampled[0] is not None  # the run's first trace's sampled host states
        sc = sampled_causes.sampled_causes(seen.traces[0], seen.sampled[0], None) if light else None
        rc.report = run_only_dict(ra, findings, rc.no_timeline or "no GPU timeline", parts_traces,
                                  rc.coarse.to_dict() if rc.coarse else None,
                                  {"host_samples": sc.to_dict() if sc else None}, run_notes)


def run_notes(ra: RunAnalysis) -> list[str]:
    """The run's own notes, known before its traces are checked up: each report of the run is built with them."""
    note = unsettled_note(ra)
    return [note] if note else []


def unsettled_note(ra: RunAnalysis) -> str | None:
    """Why a run has no steady-state figures: too few plain steps, or step times that never settled."""
    st = ra.steps
    if not st or st["settled"]:
        return None
    from gpucheckup.analysis.run_logs import step_history as h

    if st["plain_count"] < h.MIN_PLAIN:
        why = f"only {st['plain_count']} unprofiled steps were timed (the figures need {h.MIN_PLAIN})"
    else:
        why = f"its step times never settled ({h.WARMUP_RUN} steps in a row within {h.WARMUP_TOL_PCT:g}% of the median)"
    return (f"no steady-state step figures: the job ran {st['last_step']} steps and {why}; it is too short for a "
            "steady-state window: run it for more steps")


def _sampled(run_dir: Path, p: Path):
    """A light window's host samples for trace p (traces/trace.json.gz: main; traces/<key>.json.gz), or None."""
    key = layout.MAIN_KEY if p.name.startswith("trace.") else p.name.split(".", 1)[0]
    return host_samples_for(run_dir, key) if p.parent.name == layout.TRACES else None


def _sort_by_rank(results: list[Checkup]) -> None:
    """Rank order (traces without a rank last, then by path); from the facts, which worker check-ups carry."""
    results.sort(key=lambda c: (c.facts.rank is None, c.facts.rank or 0, c.facts.path))


def rank_summary(results: list[Checkup]) -> list[dict]:
    """One row per trace: rank, verdict, step (its window's: analysis/step_basis.py), GPU busy."""
    return [
        {
            "rank": c.facts.rank if c.facts.rank is not None else i,
            "path": c.facts.path,
            "verdict": c.diagnosis.primary,
            "step_ms": c.facts.step_ms,
            "busy_pct": c.facts.busy_pct,
        }
        for i, c in enumerate(results)
    ]


def _note_stragglers(results: list[Checkup]) -> None:
    """Add a note to every check-up when one rank's steps are much slower than the fastest rank's."""
    steps = [(c.facts.rank if c.facts.rank is not None else i, c.facts.step_ms) for i, c in enumerate(results)]
    fastest = min(ms for _, ms in steps)
    for rank, ms in steps:
        if not ms > fastest * (1 + STRAGGLER_PCT / 100):
            continue
        note = (f"rank {rank} is a straggler: step {ms:.2f} ms against "
                f"{fastest:.2f} ms on the fastest rank; every rank waits for it at the next collective")
        for c in results:
            c.diagnosis.notes.append(note)


def _ncu_launches(ncu_csv: Path | None) -> list | None:
    """The launches of an Nsight Compute CSV (--ncu), or None when none was given (trace/ncu_csv.py, imported then)."""
    if not ncu_csv:
        return None
    from gpucheckup.trace.ncu_csv import read_ncu_csv

    return read_ncu_csv(ncu_csv)

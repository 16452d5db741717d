"""The Python API: `gpucheckup.analyze(path)` returns the check-up the command line renders, typed.

    import gpucheckup
    c = gpucheckup.analyze("trace.json.gz")          # a trace, a folder of ranks, or a run directory
    c.verdict, c.findings[0].title, c.fixes[0].action, c.figures["busy_pct"]
    c.document                                        # the whole check-up: what `--json` writes (document.py)
    c.frame("kernels")                                # a table of it as a pandas DataFrame (api_frames.py)

`CheckUp` holds the job's verdict, fixes and step (for one trace, that trace's) and, for a folder or a
run of several ranks, every rank's check-up in `ranks`. Its `report` is the first check-up's report
(with its run's run-level keys), and for several ranks the job's verdict, fixes and notes in it (each rank's
own report is in `ranks`); `figures` are the few numbers that `--fail-if` tests (FIGURES says
what each is). `conditions` / `failed` are the `--fail-on` and `--fail-if` tests of the command line.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from gpucheckup import document
from gpucheckup.document import Document, flat_report
from gpucheckup.errors import CheckupError

# The verdict ids (diagnosis/verdict.py's scores; cpu_only: checkup/cpu_report.py; host_waiting: an out-of-process
# attach's coarse verdict only, diagnosis/coarse.py; no_timeline: a run directory with no trace to check up).
VERDICTS = ("input_bound", "launch_bound", "sync_bound", "communication_bound", "copy_bound", "gpu_bound",
            "cpu_only", "host_waiting", "no_timeline")
GAP_CAUSES = ("input", "sync", "communication", "allocation", "launch", "other_host", "queued")

FIGURES = {
    "mfu_pct": "model FLOPs utilization, % of the GPU's peak (needs FLOPs per step; docs/mfu.md)",
    "busy_pct": "GPU busy, % of step time",
    "step_ms": "step time in ms (the report's one step basis; CPU-side: the median ProfilerStep)",
    "dataloader_pct": "time waiting for the DataLoader, % of step time (CPU-side: of the span)",
    "python_between_pct": "CPU-side check-up: Python between operators, % of the main thread's span",
    **{f"gap_{c}_pct": f"GPU idle for cause `{c}`, % of step time (docs/metrics.md: gap causes)" for c in GAP_CAUSES},
}


@dataclass(frozen=True)
class Finding:
    """One finding: what was found, what it costs per step, and the evidence."""

    id: str
    severity: str
    title: str
    cost_ms_per_step: float
    cost_pct_of_step: float
    evidence: tuple[str, ...]


@dataclass(frozen=True)
class Fix:
    """One fix to try, ranked as the report ranks them."""

    key: str
    action: str
    tier: str
    saving_ms: float | None
    finding: str


@dataclass
class CheckUp:
    """One check-up, typed: the verdict, findings, fixes and key figures, and the document (`--json`)."""

    path: str
    verdict: str  # one of VERDICTS
    verdict_title: str
    reason: str
    findings: list[Finding]
    fixes: list[Fix]
    figures: dict[str, float | None]
    report: dict
    ranks: list[CheckUp] = field(default_factory=list)  # every rank's check-up when there are several
    document: Document | None = None  # the whole check-up, as `--json` writes it (the job's, at the top)
    verdict_basis: str | None = None  # what a coarse verdict rests on (the `coarse` property), for a rank's check-up

    @classmethod
    def of_part(cls, doc: Document, i: int = 0, cpu: bool = False) -> CheckUp:
        """Check-up i of the document (of `cpu_checkups` when `cpu`; the run's own with neither), typed: its verdict,
        findings, fixes and figures read from the document's types; `report` is document.flat_report's."""
        reports = doc.cpu_checkups if cpu else (doc.checkups or doc.cpu_checkups)
        part = reports[i] if reports else None
        v = part.verdict if part is not None else doc.verdict
        path = part.trace.path if part is not None else (doc.run.info.path if doc.run else "")
        return cls(path=str(path), verdict=v.primary or "no_timeline", verdict_title=v.title, reason=v.reason,
                   findings=[_finding(f) for f in v.findings],
                   fixes=[_fix(x) for x in (part.fixes if part is not None else doc.fixes)],
                   figures=figures(part, doc.run), report=flat_report(doc, i, cpu), verdict_basis=v.coarse)

    @classmethod
    def of_document(cls, doc: Document) -> CheckUp:
        """The job's check-up from its document: the job's verdict, fixes and step; each check-up in `ranks`."""
        n = len(doc.checkups) + len(doc.cpu_checkups)
        ups = [cls.of_part(doc, i) for i in range(len(doc.checkups))]
        ups += [cls.of_part(doc, i, cpu=True) for i in range(len(doc.cpu_checkups))]
        first = ups[0] if ups else cls.of_part(doc)
        figs = dict(first.figures) if n <= 1 else dict.fromkeys(FIGURES)  # several: each rank's are its own
        figs["step_ms"] = doc.step.ms if doc.step else None
        report = first.report if n <= 1 else {**first.report, "verdict": msgspec.to_builtins(doc.verdict),
                                              "fixes": msgspec.to_builtins(doc.fixes), "notes": list(doc.notes)}
        v = doc.verdict
        return cls(path=doc.path, verdict=v.primary or "no_timeline", verdict_title=v.title, reason=v.reason,
                   findings=[_finding(f) for f in v.findings], fixes=[_fix(x) for x in doc.fixes], figures=figs,
                   report=report, ranks=ups if n > 1 else [], document=doc)

    @property
    def coarse(self) -> str | None:
        """What a coarse verdict rests on (an out-of-process attach's sampled stacks, diagnosis/coarse.py); None for
        a verdict read from a timeline."""
        return self.document.verdict.coarse if self.document else self.verdict_basis

    @property
    def schema_version(self) -> int | None:
        """The version of the document's schema (document.SCHEMA_VERSION)."""
        return self.document.schema_version if self.document else None

    def frame(self, name: str):
        """One table of the check-up as a pandas DataFrame (api_frames.FRAMES: their names and columns)."""
        from gpucheckup.api_frames import frame

        if self.document is None:
            raise CheckupError("this check-up has no document to take tables from (use gpucheckup.analyze)")
        return frame(self.document, name)


def _finding(f: document.Finding) -> Finding:
    """The API's Finding of a document's finding."""
    return Finding(f.id, f.severity, f.title, f.cost_ms_per_step, f.cost_pct_of_step, tuple(f.evidence))


def _fix(x: document.Fix) -> Fix:
    """The API's Fix of a document's fix."""
    return Fix(x.key, x.action, x.tier, x.saving_ms, x.finding or "")


def figures(part: document.TraceReport | document.CpuReport | None, run: document.Run | None = None
            ) -> dict[str, float | None]:
    """The FIGURES of one check-up of a document (a CPU-side one's, a GPU one's, or with neither the run's; None: not
    measured in this check-up)."""
    out: dict[str, float | None] = dict.fromkeys(FIGURES)
    if isinstance(part, document.CpuReport):
        c = part.cpu
        out.update(step_ms=c.step_median_ms, dataloader_pct=c.dataloader_pct, python_between_pct=c.python_between_pct)
        return out
    if part is None:  # a run without a trace
        from gpucheckup.analysis.step_basis import run_step

        step = run_step(run.figures.steps if run else None, "")
        out["step_ms"] = step.ms if step else None
        return out
    out.update(mfu_pct=part.mfu.pct if part.mfu else None, busy_pct=part.gpu.busy_pct, step_ms=part.window.step_ms,
               dataloader_pct=part.dataloader.pct_of_step)
    for c, v in part.gaps.pct_of_step.items():
        if f"gap_{c}_pct" in out:
            out[f"gap_{c}_pct"] = v
    return out


def analyze(path, **mfu) -> CheckUp:
    """Check up a trace, a folder of per-rank traces or a run directory (keywords: MfuInputs' fields, such as
    flops_per_step=...); CheckupError for bad input."""
    from gpucheckup.analysis.flops.mfu import MfuInputs
    from gpucheckup.checkup.pipeline import check

    up = checkup_of(check(Path(path), MfuInputs(**mfu) if mfu else None))
    if up is None:
        raise CheckupError(f"{path}: nothing was checked up")
    return up


def checkup_of(result) -> CheckUp | None:
    """The typed check-up of a pipeline.Checkups, from its document (checkup/assemble.py): the job's verdict, and
    every check-up in `ranks` when there are several (GPU ones, then CPU-side ones)."""
    from gpucheckup.checkup.assemble import document

    if not (result.checkups or result.cpu or (result.run and result.run.report)):
        return None
    return CheckUp.of_document(document(result))


# ---- the command line's --fail-on and --fail-if ------------------------------------------------------

_OPS = {"<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt}
_CONDITION = re.compile(r"^\s*([A-Za-z_]+)\s*(<=|>=|<|>)\s*(-?[0-9.]+)\s*$")


def _verdict_id(text: str) -> str:
    v = text.strip().lower().replace("-", "_").replace(" ", "_")
    if v not in VERDICTS:
        raise CheckupError(f"--fail-on {text!r}: not a verdict; one of {', '.join(VERDICTS)}")
    return v


def _figure_name(name: str) -> str:
    n = name.lower()
    for cand in (n, f"{n}_pct"):
        if cand in FIGURES:
            return cand
    raise CheckupError(f"--fail-if: unknown figure {name!r}; one of {', '.join(FIGURES)}")


def conditions(fail_on: list[str] | None, fail_if: list[str] | None) -> tuple[set[str], list[tuple]]:
    """The parsed --fail-on verdicts and --fail-if conditions (figure, op text, op, bound); CheckupError if bad."""
    verdicts = {_verdict_id(v) for arg in fail_on or () for v in arg.split(",") if v.strip()}
    tests = []
    for arg in fail_if or ():
        for part in arg.split(","):
            m = _CONDITION.match(part)
            if not m:
                raise CheckupError(f"--fail-if {part!r}: expected FIGURE<NUMBER (or <=, >, >=), e.g. 'mfu_pct<30'")
            try:
                bound = float(m.group(3))
            except ValueError:
                raise CheckupError(f"--fail-if {part!r}: {m.group(3)!r} is not a number") from None
            tests.append((_figure_name(m.group(1)), m.group(2), _OPS[m.group(2)], bound))
    return verdicts, tests


def failed(up: CheckUp, verdicts: set[str], tests: list[tuple]) -> list[str]:
    """What fired, one line each: a --fail-on verdict, a --fail-if condition (an unmeasured figure fires none,
    and says so)."""
    out = []
    for c in [up] + up.ranks:  # the job's verdict and figures, then each rank's
        where = f"{c.path}: " if c is not up else ""
        if c.verdict in verdicts:
            out.append(f"{where}verdict {c.verdict} (--fail-on)")
        for name, op_text, op, bound in tests:
            v = c.figures.get(name)
            if v is not None and op(v, bound):
                out.append(f"{where}{name} = {v:.4g} {op_text} {bound:g} (--fail-if)")
    return out


def unmeasured(up: CheckUp, tests: list[tuple]) -> list[str]:
    """The --fail-if figures this check-up has no value for (the command line fails such a gate unless
    --allow-missing)."""
    return sorted({name for c in up.ranks or [up] for name, *_ in tests if c.figures.get(name) is None})

"""The check-up document: the one typed, versioned shape of every output and of the Python API.

`--json` writes a `Document`; `gpucheckup.analyze` returns one (wrapped in api.CheckUp); `compare`
and `dataloader --checkup` read one back through these same types; `gpucheckup schema` prints the
JSON Schema generated from them (also shipped as gpucheckup/data/schema.json and docs/schema.json).
A trace, a CPU-only trace, a folder of traces, a rank folder and a run directory all give the same
top-level keys: a part that does not apply is null (or an empty list), never missing.

Top level (docs/schema.md says what each key holds and lists every change by version):
- schema_version: SCHEMA_VERSION; a change of any key bumps it
- kind: what was checked up (KINDS); path: the path given
- verdict, step, fixes, notes: the job's one verdict, its step time (analysis/step_basis.py), its
  fixes ranked, its notes; for one trace, that trace's; for several ranks, the job's
- checkups: one report per trace with device activity (rank order); cpu_checkups: one per trace
  without (the CPU-side check-up)
- job: the cross-rank section of several ranks (null for one); run: the run directory's run-level
  section (null for a trace or a folder); cases: the demo's case names, one per check-up (else null)

The other commands write their own documents under the same version: `ab --json` an `AbDocument`
(kind "ab"), `try --json` a `TryDocument` ("try"), `compare --json` a `CompareDocument` ("compare"),
`scaling --json` a `ScalingDocument` ("scaling"), `dataloader --json` a `DataloaderDocument`
("dataloader"); the schema holds them all.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from gpucheckup import __version__

SCHEMA_VERSION = 3
KINDS = ("trace", "cpu_trace", "traces", "run", "cases")
Kind = Literal["trace", "cpu_trace", "traces", "run", "cases"]
Section = dict[str, Any]  # a part whose keys docs/metrics.md and docs/reports.md list (typed in a later version)


class Struct(msgspec.Struct, forbid_unknown_fields=True):
    """A part of the document: its keys exactly, none unknown (a key added is a new schema version)."""


class Step(Struct):
    """The one step time every figure per step stands on, and what it is (analysis/step_basis.py)."""

    ms: float | None
    basis: str


class Prediction(Struct):
    """A fix's replayed saving (diagnosis/savings.py): the edit, what it changes, the step after it."""

    transform: str
    what: str
    step_ms: float | None
    saving_ms: float | None
    saving_pct: float | None


class Fix(Struct):
    """One fix: the action, its tier, the most it could save per step, how, and its replayed prediction."""

    action: str
    tier: str
    saving_ms: float | None
    how: str = ""
    key: str = ""
    reason: str = ""
    finding: str | None = None  # the finding that offers it (in the ranked `fixes`; null inside a finding)
    predicted: Prediction | None = None
    predicted_note: str | None = None  # why there is no prediction, or why it is coarse or an upper bound (ranked `fixes`)


class Event(Struct):
    """One event behind a finding: its name, where it ran, when (ms from the trace's first event), how long."""

    name: str
    where: str
    start_ms: float | None
    dur_ms: float | None
    t_us: float | None = None


class Finding(Struct):
    """One conclusion: the rule that fired, its cost per step, the evidence, the events, the fixes."""

    id: str
    severity: str
    title: str
    rule: str
    cost_ms_per_step: float | None
    cost_pct_of_step: float | None
    evidence: list[str]
    events: list[Event]
    fix: list[Fix]


class Verdict(Struct):
    """The primary verdict (null: no GPU timeline to judge), its title, why, each bound's score, the findings, and
    what a coarse verdict rests on (sampled stacks, with or without NVML; null: read from a timeline)."""

    primary: str | None
    title: str
    reason: str
    scores: dict[str, float | None]
    findings: list[Finding]
    coarse: str | None = None


class Window(Struct):
    """The step windows a trace's figures are taken over (analysis/one_trace/window.py)."""

    step_ms: float | None
    basis: str
    traced_step_ms: float | None
    devices: int
    steps: int
    length_ms: float | None


class Gpu(Struct):
    """GPU busy: percent of the step, without the profiler when corrected, per device and stream, per step."""

    busy_pct: float | None
    busy_pct_unprofiled: float | None
    devices: dict[str, float | None]
    streams: list[Section]
    step_busy_pct: list[float | None]


class TraceReport(Struct):
    """The check-up of one trace with device activity."""

    trace: Section
    verdict: Verdict
    fixes: list[Fix]
    window: Window
    gpu: Gpu
    steps: Section
    profiler: Section | None
    kernels: Section
    gaps: Section
    timeline: Section
    dataloader: Section
    sync: Section
    copies: Section
    communication: Section
    cuda_api: Section
    notes: list[str]
    mfu: Section
    roofline: Section
    ncu: Section | None
    labels: Section
    host_samples: Section | None = None  # a light window's sampled host states (analysis/run_logs/sampled_causes.py)


class CpuReport(Struct):
    """The CPU-side check-up of a trace without device activity."""

    trace: Section
    verdict: Verdict
    findings: list[Finding]
    fixes: list[Fix]
    cpu: Section
    notes: list[str]


class Job(Struct):
    """The cross-rank section of several ranks: the ranks table and straggler, and their collectives."""

    ranks: Section
    communication: Section | None = None


class Run(Struct):
    """A run directory's run-level section: how it ran, NVML samples, step history, environment, figures."""

    info: Section
    nvml: Section
    step_history: Section | None
    env: Section
    figures: Section


class Document(Struct):
    """A check-up, whatever was checked up: the same keys every time (module docstring)."""

    schema_version: int
    gpucheckup_version: str
    kind: Kind
    path: str
    verdict: Verdict
    step: Step | None
    fixes: list[Fix]
    notes: list[str]
    checkups: list[TraceReport]
    cpu_checkups: list[CpuReport]
    job: Job | None
    run: Run | None
    cases: list[str] | None


class AbSide(Struct):
    """One side of a measured comparison (analysis/comparison/ab_stats.py): each round's median step, the side's
    median with its interval, throughput, and how much its rounds moved."""

    label: str
    round_ms: list[float]
    steps: int
    median_ms: float
    interval_ms: list[float]
    per_s: float
    spread_pct: float
    samples_per_step: float | None


class RanAhead(Struct):
    """A side whose host ran ahead of its GPU: its mean step on either clock, and the share queued."""

    label: str
    host_ms: float
    gpu_ms: float
    share: float


class AbDocument(Struct):
    """`gpucheckup ab --json`: B against A over interleaved processes, with the one decision rule (`rule`)."""

    schema_version: int
    gpucheckup_version: str
    kind: Literal["ab"]
    a: AbSide
    b: AbSide
    change_pct: float  # B's step vs A's, percent (negative: B is faster)
    interval_pct: list[float]  # the change's interval [lo, hi]
    noise_pct: float
    verdict: Literal["faster", "slower", "same"]
    sentence: str
    confidence: float
    bootstrap: int
    clock: Literal["host", "gpu"]
    ran_ahead: list[RanAhead]
    run_ahead_share: float
    rule: str
    notes: list[str]


TrialVerdict = Literal["faster", "slower", "no difference", "not applied", "failed", "not measured"]


class Trial(Struct):
    """One fix tried by `gpucheckup try`: what the agent applied and where, the prediction, the measurement."""

    fix: str  # as asked, e.g. "dataloader_workers=8" or "tf32+cudnn_benchmark"
    applied: bool  # every fix of the trial was applied somewhere in the job
    how: str  # what was applied where ("DataLoader(num_workers 0 -> 8, persistent_workers) at train.py:41"), or "not applied: why"
    predicted_saving_pct: float | None  # the base check-up's predicted saving (null: it offered no such fix)
    predicted_from: str  # the check-up's fix it comes from, or why there is none
    measured_saving_pct: float | None  # -(the change of the fix's step vs the base's), percent: positive is faster
    interval_pct: list[float] | None  # the measured saving's interval [lo, hi], percent
    rounds: int  # processes of the fix measured (each against the base's of the same rounds)
    verdict: TrialVerdict
    sentence: str
    exit_code: int | None = None  # the job's exit status when the fix broke it (verdict "failed")
    step: AbSide | None = None  # the fix's step times (null: not measured)
    noise_pct: float | None = None
    clock: Literal["host", "gpu"] | None = None


class TryCheckup(Struct):
    """The base run's check-up the predictions come from."""

    run_dir: str
    verdict: str | None
    step_ms: float | None


class TryDocument(Struct):
    """`gpucheckup try --json`: the command as it is (the base) against each fix applied by the agent."""

    schema_version: int
    gpucheckup_version: str
    kind: Literal["try"]
    command: list[str]
    base_ms: float | None  # the base's median step time over its rounds (null when it could not be measured)
    base: AbSide | None
    rounds: int
    warmup: int
    measure: int
    max_steps: int | None
    checkup: TryCheckup | None
    fixes: list[Trial]
    notes: list[str]


class FigureChange(Struct):
    """One figure of two check-ups compared (analysis/comparison/compare.py): its value on each side, its change in
    `unit` ("pct": relative, "points": of a percentage, "absolute": from 0), and whether it is beyond noise."""

    key: str
    name: str
    group: str
    a: float | None
    b: float | None
    change: float | None
    unit: Literal["pct", "points", "absolute"]
    status: Literal["changed", "new", "gone", "from 0"]
    beyond_noise: bool


class CompareDocument(Struct):
    """`gpucheckup compare --json`: two check-ups (A, B) figure by figure, with the step's change and the noise."""

    schema_version: int
    gpucheckup_version: str
    kind: Literal["compare"]
    a: str  # the paths compared
    b: str
    headline: str  # the step-time key compared
    step_change_pct: float | None  # B's step vs A's, percent (negative: B is faster; null: no step on a side)
    noise_pct: float
    step_beyond_noise: bool
    cv_pct: list[float | None]  # each side's step-time variation [A, B]
    verdict: list[str | None]  # each side's primary verdict [A, B]
    sentence: str
    figures: list[FigureChange]
    noise_k: float
    min_noise_pct: float


class EnvDifference(Struct):
    """Something env.json records that differs between the two runs of `scaling`."""

    name: str
    run_1: str
    run_n: str


class ScalingDocument(Struct):
    """`gpucheckup scaling --json`: the N-GPU run against the 1-GPU run (analysis/job/scaling.py)."""

    schema_version: int
    gpucheckup_version: str
    kind: Literal["scaling"]
    n: int  # GPUs of the N-GPU run
    step_1_ms: float
    step_n_ms: float
    efficiency_pct: float  # 100 x step_1 / step_n
    extra_ms: float  # step_n - step_1
    parts_ms: dict[str, float]  # the extra time by part: waiting, transfer, compute (when known), other
    step_from: str  # what the step times are
    env_differences: list[EnvDifference]
    over_100_cause: str | None  # above 100% efficiency: its likely cause


class LoaderRun(Struct):
    """One DataLoader setting measured by `gpucheckup dataloader` (capture/dataloader_bench.py)."""

    num_workers: int
    pin_memory: bool
    batches: int  # timed batches (fewer than asked when the loader ran out)
    seconds: float
    batches_per_s: float
    samples_per_s: float | None
    startup_s: float
    worker_pids: list[int]
    worker_rss_mb: list[float]
    worker_shared_mb: list[float]
    worker_uss_mb: list[float]
    main_rss_mb: float | None
    note: str
    worker_cpu_s: float | None  # the workers' CPU seconds over the timed batches (null: not readable)
    main_cpu_s: float | None
    worker_runq_s: float | None  # the workers' seconds ready to run but waiting for a core (null: unknown)


class LoaderBench(Struct):
    """Every setting measured, and the CPU budget of the process that ran them."""

    factory: str
    runs: list[LoaderRun]
    cpu: Section  # count, affinity, cgroup_quota_cpus, cgroup_source, usable (capture/environment.cpu_budget)
    accelerator: bool  # whether pin_memory could pin (torch saw a CUDA device)
    notes: list[str]


class LoaderAdvice(Struct):
    """The advice of `gpucheckup dataloader` (analysis/run_logs/loader_advice.py): figures and sentences."""

    usable_cores: float | None
    limited_by: str
    worker_cap: int | None
    best_workers: int
    best_batches_per_s: float
    knee_workers: int
    feed_workers: int
    feed_batches_per_s: float
    gpu_step_ms: float | None
    gpu_steps_per_s: float | None
    gpu_source: str
    bottleneck: bool | None  # null when the GPU's step time is unknown
    suffice_workers: int | None
    recommended_workers: int
    recommended_pin_memory: bool | None
    over_cap: list[int]
    waits_on: Literal["io", "cpu"] | None
    worker_cpu_share: float | None
    share_at_workers: int | None
    sentences: list[str]


class DataloaderDocument(Struct):
    """`gpucheckup dataloader --json`: the loader's settings measured alone, and the advice."""

    schema_version: int
    gpucheckup_version: str
    kind: Literal["dataloader"]
    dataloader_bench: LoaderBench
    advice: LoaderAdvice


MEASURED = {"ab": AbDocument, "try": TryDocument, "compare": CompareDocument, "scaling": ScalingDocument,
            "dataloader": DataloaderDocument}  # the other commands' documents, by their `kind`


def measured(kind: str, parts: dict):
    """A measuring command's document of `kind` ("compare", "scaling", "dataloader", ...) from its parts' plain
    fields, checked against its type (msgspec.ValidationError names the first key that does not fit)."""
    return msgspec.convert({"schema_version": SCHEMA_VERSION, "gpucheckup_version": __version__, "kind": kind, **parts},
                           MEASURED[kind])


RUN_KEYS = {"run": "info", "nvml": "nvml", "step_history": "step_history", "env": "env", "run_figures": "figures"}


def json_schema() -> dict:
    """The JSON Schema of the documents, generated from these types (`gpucheckup schema` prints it): a check-up, or
    a measuring command's document (`ab`, `try`, `compare`, `scaling`, `dataloader`; told apart by `kind`)."""
    refs, defs = msgspec.json.schema_components([Document, *MEASURED.values()], ref_template="#/$defs/{name}")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": f"gpucheckup check-up, schema version {SCHEMA_VERSION}", "anyOf": list(refs), "$defs": defs}


def decode(data: bytes) -> Document:
    """A document read back through its types; msgspec.ValidationError names the first key that does not fit."""
    return msgspec.json.decode(data, type=Document)


def flat_report(doc: Document, i: int = 0, cpu: bool = False) -> dict:
    """Check-up i (of `cpu_checkups` when `cpu`, or when there is no GPU one) as one report dict with its run's
    run-level keys (the shape the renderers and `compare` read): a trace's host samples once, in the run's figures,
    as the pipeline builds it."""
    reports = doc.cpu_checkups if cpu else (doc.checkups or doc.cpu_checkups)
    out = msgspec.to_builtins(reports[i]) if reports else {"verdict": msgspec.to_builtins(doc.verdict),
                                                           "fixes": msgspec.to_builtins(doc.fixes),
                                                           "notes": list(doc.notes)}
    samples = out.pop("host_samples", None)
    if doc.run is not None:
        run = msgspec.to_builtins(doc.run)
        out.update({key: run[field] for key, field in RUN_KEYS.items()})
        if reports is doc.checkups and doc.checkups:
            out["run_figures"] = {**out["run_figures"], "host_samples": samples}
    return out

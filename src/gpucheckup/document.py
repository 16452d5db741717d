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
from msgspec import UNSET, UnsetType

from gpucheckup import __version__

SCHEMA_VERSION = 6
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


class Device(Struct):
    """A GPU the trace's device properties name."""

    id: int
    name: str
    sm_count: int
    memory_gb: float | None
    compute_capability: str


class TraceInfo(Struct):
    """Where a trace came from: its path and rank, its devices and versions, its window and first event (us)."""

    path: str
    rank: int | None
    world_size: int | None
    devices: list[Device]
    cuda_runtime_version: int | None
    cuda_driver_version: int | None
    with_stack: bool
    record_shapes: bool
    window_us: list[float | None]
    start_us: float | None  # the trace's first event: times a person reads are ms from it
    base_time_ns: int | None


class Steps(Struct):
    """The profiled steps' times (analysis/one_trace/steps.py), in ms; `marked`: ProfilerStep markers were found."""

    count: int
    marked: bool
    median_ms: float | None
    mean_ms: float | None
    min_ms: float | None
    max_ms: float | None
    cv_pct: float | None
    per_step_ms: list[float | None]
    host_median_ms: float | None
    labels: list[str]


class Profiler(Struct):
    """The profiler-overhead correction (analysis/one_trace/profiler_overhead.py)."""

    source: str
    traced_step_ms: float | None
    unprofiled_step_ms: float | None
    inflation_pct: float | None
    gpu_ms_per_step: float | None
    busy_pct_unprofiled: float | None
    host_idle_factor: float | None
    applied: bool
    comm_wait_ms: float | None


class Counters(Struct):
    """A light window's counter steps: the GPU's activity counters over steps without kernel records
    (analysis/one_trace/counter_steps.py builds it; `agrees`: the two busy sources within its AGREE_POINTS)."""

    steps: int
    step_ms: float
    busy_pct: float | None
    coverage_pct: float
    launches_per_step: float | None
    record_step_ms: float
    records_cost_pct: float
    record_busy_pct: float | None
    record_kernels_busy_pct: float
    agrees: bool | None
    samples: int
    interval_us: float
    metrics: list[str]


class KernelRow(Struct, omit_defaults=True):
    """One kernel name's time (analysis/one_trace/gpu/kernels.py); `label` (a short name) on the top kernels only."""

    name: str
    category: str
    count: int
    total_ms: float | None
    mean_us: float | None
    pct: float | None
    label: str | None = None


class DataMovement(Struct):
    """One family of data-movement kernels: its share of kernel time, its kernels' names and labels."""

    family: str
    pct: float | None
    total_ms: float | None
    count: int
    kernels: list[str]
    labels: list[str]


class Kernels(Struct):
    """The kernels of the window: count, durations, share under the small threshold, categories, top names."""

    count: int
    total_ms: float | None
    mean_us: float | None
    median_us: float | None
    small_pct: float | None
    small_threshold_us: float
    categories: dict[str, float | None]  # percent of kernel time, by category
    categories_ms: dict[str, float | None]
    top: list[KernelRow]
    by_name: list[KernelRow]
    data_movement: list[DataMovement]
    launch_delay_median_us: float | None
    launch_delay_p90_us: float | None


class GapsTraced(Struct):
    """The idle figures as traced, before the profiler-overhead correction."""

    per_step_ms: dict[str, float | None]
    pct_of_step: dict[str, float | None]


class GapPattern(Struct):
    """Where the idle time falls (analysis/one_trace/timeline.py)."""

    idle_ms: float | None
    gap_count: int
    idle_at_step_start_pct: float | None
    largest_gap_share_pct: float | None
    shape: str


class LongGap(Struct):
    """One of the longest idle gaps and its main cause: where to look in the trace."""

    t_us: float | None
    dur_us: float | None
    device: int
    step: int
    position: float | None
    cause: str


class GapHistogram(Struct):
    """Gap counts and idle time per log-spaced duration bin, by dominant cause (analysis/plot_arrays.py)."""

    edges_us: list[float | None]
    count: dict[str, list[int]]
    time_ms: dict[str, list[float | None]]


class Gaps(Struct, kw_only=True, omit_defaults=True):
    """GPU idle time by cause, its pattern, the longest gaps and their histogram; `traced` only when the
    profiler-overhead correction applied, `source` only where a run's sampled stacks gave the causes."""

    by_cause_ms: dict[str, float | None]
    per_step_ms: dict[str, float | None]
    pct_of_step: dict[str, float | None]
    traced: GapsTraced | None = None
    pattern: GapPattern
    cause_titles: dict[str, str]
    longest: list[LongGap]
    histogram: GapHistogram
    source: str | None = None


class TimelineRow(Struct):
    """One step on one device: busy and idle time by cause, and runs [first bin, end bin, state]."""

    step: int
    label: str
    device: int
    dur_ms: float | None
    busy_ms: float | None
    idle_ms: dict[str, float | None]
    runs: list[list[int]]


class Timeline(Struct):
    """The arrays behind the HTML step timeline (analysis/plot_arrays.py)."""

    states: list[str]
    bins: int
    bin_ms: float | None
    scale_ms: float | None
    rows: list[TimelineRow]
    truncated: int


class Dataloader(Struct):
    """Time in DataLoader `__next__` (analysis/one_trace/host/dataloader.py)."""

    present: bool
    count: int
    iterators: list[str]
    per_step_ms: list[float | None]
    median_ms: float | None
    ms_per_step: float | None
    pct_of_step: float | None
    workers_to_keep_pace: int


class SyncCause(Struct):
    """The sync points of one cause (outer op, inner op, user frame, calls)."""

    op: str
    inner_op: str | None
    frame: str | None
    calls: list[str]
    count: int
    blocked_ms: float | None
    gpu_idle_ms: float | None
    per_step: float | None


class SyncPoint(Struct):
    """One sync point: when (the trace's clock), what, the host blocked and the GPU idle it caused."""

    t_us: float | None
    op: str
    inner_op: str | None
    frame: str | None
    blocked_us: float | None
    gpu_idle_us: float | None


class Sync(Struct):
    """Sync points in the window (analysis/one_trace/host/syncs.py); `recorded`: the trace could hold one."""

    recorded: bool
    count: int
    count_per_step: float | None
    blocked_ms: float | None
    blocked_ms_per_step: float | None
    gpu_idle_ms: float | None
    gpu_idle_ms_per_step: float | None
    by_cause: list[SyncCause]
    points: list[SyncPoint]


class Direction(Struct):
    """Copies of one direction (HtoD, DtoH, ...)."""

    count: int
    bytes: float | None
    time_us: float | None
    pageable_count: int
    gb_per_s: float | None
    mb: float | None


class Copies(Struct):
    """Copy figures of the window (analysis/one_trace/gpu/copies.py)."""

    count: int
    by_direction: dict[str, Direction]
    pageable_count: int
    pageable_mb: float | None
    pageable_mb_per_step: float | None
    pageable_ms_per_step: float | None
    time_ms: float | None
    pct_of_gpu_time: float | None
    overlap_pct: float | None
    per_step_ms: float | None
    exposed_ms_per_step: float | None
    exposed_pct_of_step: float | None


class Communication(Struct):
    """Communication kernel time and its overlap with compute (analysis/one_trace/gpu/communication.py)."""

    present: bool
    time_ms: float | None
    overlap_pct: float | None
    exposed_ms_per_step: float | None
    exposed_pct_of_step: float | None


class SlowCall(Struct):
    """One CUDA API call far slower than its typical duration (analysis/one_trace/host/api_health.py)."""

    call: str
    thread: str
    dur_us: float | None
    typical_us: float | None
    t_us: float | None


class ApiContention(Struct):
    """Slow calls of one name on one thread that overlapped an allocation on another thread."""

    call: str
    thread: str
    blocker: str
    blocker_thread: str
    count: int
    slow_ms: float | None
    typical_us: float | None


class CudaApi(Struct):
    """The CUDA API's slow calls and lock contention."""

    slow_count: int
    slow: list[SlowCall]
    contention: list[ApiContention]


class Labels(Struct):
    """The job's intensity label for schedulers and the shares of step time behind it (diagnosis/labels.py)."""

    intensity: str
    compute_pct: float | None
    io_pct: float | None
    communication_pct: float | None
    host_pct: float | None
    reason: str
    rule: str


Number = int | float  # a figure read from outside (the peak table, a ceilings file, a flag): an integer stays one


class Mfu(Struct):
    """Model FLOPs utilization (analysis/flops/mfu.py): the FLOPs per step and their source, achieved TFLOP/s, the
    peak it divides by and why, MFU against it and the healthy bands; nulls with a `reason` where unknown."""

    flops_per_step: Number | None
    source: str | None
    source_detail: str | None
    estimates: dict[str, Number | None]  # FLOPs per step by source (user, formula, agent, annotations, shapes)
    step_s: float | None
    achieved_tflops: float | None
    device: str | None
    gpu: Section | None  # the peak table's entry (hardware/peaks.py GpuPeak.to_dict)
    dtype: str
    dtype_from: str
    gemm_dtypes_pct: dict[str, float | None]
    peak_tflops: Number | None
    peak_from: str | None
    pct: float | None
    pct_of_bf16_peak: float | None
    gemm_dtype: str | None
    pct_of_gemm_dtype_peak: float | None
    measured_tflops: Number | None
    pct_of_measured: float | None
    ceilings_path: str | None
    tokens_per_s: float | None
    samples_per_s: float | None
    healthy_bands_pct: dict[str, list[float]]
    assessment: str | None
    reason: str | None
    shape_flops: Section | None  # the FLOPs counted from the recorded shapes (analysis/flops/shape_flops.py)
    annotated_flops: Section | None  # the FLOPs of the profiler's annotations


class RooflineOp(Struct):
    """One group of GEMM/conv/attention ops (op, shapes, dtype) against the roofline (analysis/flops/roofline.py)."""

    op: str
    kind: str
    shapes: list[list[Any]]  # the op's input shapes as the trace recorded them (its operands' are ints)
    dtype: str | None
    count_per_step: float | None
    gflops_each: float | None
    mb_each: float | None
    intensity: float | None  # FLOP per byte
    ridge: float | None
    expected: str | None
    kernel_ms_per_step: float | None
    achieved_tflops: float | None
    pct_of_peak: float | None


class Roofline(Struct):
    """The top op groups against the roofline, or why there are none."""

    ops: list[RooflineOp]
    reason: str | None
    mem_bw_gb_s: Number | None


class NcuKernel(Struct):
    """One kernel name Nsight Compute profiled, its weighted Speed-of-Light figures, bound, and trace kernel."""

    name: str
    label: str
    launches: int
    sm_pct: float | None
    dram_pct: float | None
    memory_pct: float | None
    warps_active_pct: float | None
    duration_us_total: float | None
    bound: str | None
    trace_name: str | None
    trace_pct: float | None
    trace_ms: float | None


class NcuTop(Struct):
    """One of the trace's top kernels with the bound of the ncu kernel matched to it (nulls: not profiled)."""

    name: str
    label: str
    pct: float | None
    total_ms: float | None
    bound: str | None
    sm_pct: float | None
    memory_pct: float | None
    warps_active_pct: float | None


class NcuLaunchRow(Struct):
    """One profiled launch's figures and bound."""

    id: str
    name: str
    sm_pct: float | None
    dram_pct: float | None
    memory_pct: float | None
    warps_active_pct: float | None
    duration_us: float | None
    bound: str | None


class Ncu(Struct):
    """Nsight Compute's bounds of the kernels, joined to the trace (analysis/flops/ncu_bounds.py; --ncu only)."""

    path: str
    thresholds: dict[str, str]
    launches: int
    kernel_names: int
    matched_to_trace: int
    trace_ms_by_bound: dict[str, float | None]
    kernels: list[NcuKernel]
    top: list[NcuTop]
    per_launch: list[NcuLaunchRow]


class Window(Struct):
    """The step windows a trace's figures are taken over (analysis/one_trace/window.py)."""

    step_ms: float | None
    basis: str
    traced_step_ms: float | None
    devices: int
    steps: int
    length_ms: float | None


class GpuStream(Struct):
    """One stream's busy time."""

    device: int
    stream: int
    busy_ms: float | None


class Gpu(Struct):
    """GPU busy: percent of the step, without the profiler when corrected, per device and stream, per step."""

    busy_pct: float | None
    busy_pct_unprofiled: float | None
    devices: dict[str, float | None]
    streams: list[GpuStream]
    step_busy_pct: list[float | None]


class StateShare(Struct):
    """A host state's sampled time (ms) and its share of the time covered (percent)."""

    state: str
    ms: float | None
    pct: float | None


class RangeShare(Struct):
    """A profiler range's time over the profiled steps and its share of them."""

    ms: float | None
    pct: float | None
    source: str


class HostSamples(Struct):
    """A light window's sampled host states (analysis/run_logs/sampled_causes.py): the main thread's states over
    the profiled steps and, where the GPU timeline gave its idle time, over that idle time; the cheap ranges."""

    source: str
    samples: str | None
    rate_hz: Number | None
    stack_changes: int
    window_ms: float | None
    window_covered_pct: float | None
    window_by_state: list[StateShare]
    ranges: dict[str, RangeShare]
    gap_ms: float | None | UnsetType = UNSET  # the three gap keys: only where the GPU's idle time was known
    gap_covered_pct: float | None | UnsetType = UNSET
    gap_by_state: list[StateShare] | UnsetType = UNSET


class TraceReport(Struct):
    """The check-up of one trace with device activity."""

    trace: TraceInfo
    verdict: Verdict
    fixes: list[Fix]
    window: Window
    gpu: Gpu
    steps: Steps
    profiler: Profiler | None
    kernels: Kernels
    gaps: Gaps
    timeline: Timeline
    dataloader: Dataloader
    sync: Sync
    copies: Copies
    communication: Communication
    cuda_api: CudaApi
    notes: list[str]
    mfu: Mfu | None
    roofline: Roofline | None
    ncu: Ncu | None
    labels: Labels
    host_samples: HostSamples | None = None  # a light window's sampled host states
    counters: Counters | None = None  # a light window's counter steps (null for any other trace)


class CpuDevice(Struct):
    """A device the trace's properties name (a CPU-side check-up's trace has no device activity)."""

    id: int
    name: str


class CpuTrace(Struct):
    """Where a trace without device activity came from: its path and rank, its devices, its clock."""

    path: str
    rank: int | None
    world_size: int | None
    devices: list[CpuDevice]
    base_time_ns: int | None


class CpuThread(Struct):
    """A host thread's operator time (analysis/one_trace/host/cpu_profile.py)."""

    pid: int
    tid: int
    name: str
    ops: int
    busy_ms: float | None
    busy_pct: float | None


class CpuOp(Struct):
    """An operator's calls and self time, every thread."""

    name: str
    count: int
    self_ms: float | None
    total_ms: float | None
    self_pct: float | None


class CpuFigures(Struct):
    """The CPU-side figures of a trace without device activity (analysis/one_trace/host/cpu_profile.py)."""

    ops_count: int
    self_ms: float | None
    span_ms: float | None
    main_thread: CpuThread
    python_between_ms: float | None
    python_between_pct: float | None
    dataloader_ms: float | None
    dataloader_pct: float | None
    steps: int
    step_median_ms: float | None
    top_ops: list[CpuOp]
    threads: list[CpuThread]
    summary: str
    python_outside_loader_ms: float | None
    loader_iterators: list[str]
    step_ms: float | None  # the job's step without the profiler, when known (a run directory's)


class CpuReport(Struct):
    """The CPU-side check-up of a trace without device activity."""

    trace: CpuTrace
    verdict: Verdict
    findings: list[Finding]
    fixes: list[Fix]
    cpu: CpuFigures
    notes: list[str]


class RankSpread(Struct):
    """One column of the ranks table across the ranks (analysis/job/ranks.py): min, median, p90, max, outliers."""

    figure: str
    min: Number | None
    median: Number | None
    p90: Number | None
    max: Number | None
    outliers: list[int]


class RankRow(Struct, kw_only=True):
    """One row of the ranks table, read back (`rank_table`): either form, a key the form lacks None. The JSON keeps
    each form's keys in its own order, so `Ranks.table` holds the rows as written: several traces that share no
    collective call: rank, path, verdict, step_ms, busy_pct (checkup/pipeline.py rank_summary); ranks matched by
    their calls: rank, the per-step times (analysis/job/ranks.py), last_pct, clock_offset_us, verdict, then path and
    busy_pct where the traces were checked up, and comm_overlap_pct (checkup/ranks.py job_dict)."""

    rank: int
    path: str | None = None
    verdict: str | None = None
    step_ms: float | None = None
    busy_pct: float | None = None
    compute_ms: float | None = None
    transfer_ms: float | None = None
    wait_ms: float | None = None
    exposed_wait_ms: float | None = None
    idle_ms: float | None = None
    late_ms: float | None = None
    last_pct: float | None = None
    clock_offset_us: float | None = None
    comm_overlap_pct: float | None = None


class Ranks(Struct, kw_only=True):
    """The ranks side by side (checkup/ranks.py): the straggler, how late it is and why, the ranks table and each
    column's spread, the collective calls matched. Several traces that share no collective call have only
    `straggler` (null), `table` and `matched_calls` (0); the other keys are those of ranks matched by their calls."""

    straggler: int | None
    late_ms_per_step: float | None | UnsetType = UNSET
    waited_ms_per_step: float | None | UnsetType = UNSET
    cause: str | None | UnsetType = UNSET
    excess_ms: dict[str, float | None] | UnsetType = UNSET
    table: list[Section]  # one row per rank, as written: two forms differing in keys and order (RankRow reads both)
    distribution: list[RankSpread] | UnsetType = UNSET
    matched_calls: int
    unmatched_calls: int | UnsetType = UNSET
    steps: int | UnsetType = UNSET
    notes: list[str] | UnsetType = UNSET


class Collective(Struct):
    """One collective matched across the ranks: its size, calls, transfer and wait per step, bus bandwidth."""

    name: str
    bytes: Number
    count: int
    group_size: int | None
    transfer_ms: float | None
    wait_ms: float | None
    busbw_gb_s: float | None


class JobCommunication(Struct):
    """The job's collectives, its byte-weighted bus bandwidth and the link's, and where the link's comes from."""

    collectives: list[Collective]
    busbw_gb_s: float | None
    link_gb_s: float | None
    link_from: str | None


class Job(Struct):
    """The cross-rank section of several ranks: the ranks table and straggler, and their collectives."""

    ranks: Ranks
    communication: JobCommunication | None = None


class JobVerdict(Struct):
    """The cross-rank verdict (checkup/ranks.py job_dict; the document's `verdict` for the job is made from it)."""

    primary: str
    reason: str
    findings: list[Finding]


class RunInfo(Struct):
    """How a run ran (its manifest: checkup/run_report.py): the command, its end, what was captured or failed, the
    traces checked up, why there is no GPU timeline, and which step log speaks for the run."""

    path: str
    kind: str
    command: list[str] | None
    exit_code: int | float | None  # the manifest's numbers as written
    exit_signal: str | None
    started_epoch_s: int | float | None
    duration_s: int | float | None
    captured: Section  # what the run captured, by name, as its manifest says (free-form: paths, counts, flags)
    failed: dict[str, str]  # what it could not capture, by name ("nvml", "trace", "disk", ...), and why
    traces: list[str]
    no_gpu_timeline: str | None
    steps_from: str | None


class NvmlSeries(Struct):
    """The NVML samples as plotted: seconds since the run started, utilization %, power W, SM clock MHz, throttled."""

    t_s: list[float | None]
    gpu_util: list[float | None]
    power_w: list[float | None]
    sm_clock_mhz: list[float | None]
    throttled: list[int]


class StepHistory(Struct):
    """Every timed step of the run (bucket medians above 5000), the profiled steps, the step log they come from."""

    step: list[int]
    time_ms: list[float | None]
    profiled: list[int] | None
    source: str | None


class SlowSteps(Struct):
    """The steps over twice the steady median (analysis/run_logs/step_history.py slow_steps): how many, the first
    50 of them, the time they add and its share, their median, and the period they recur at (or null)."""

    count: int
    steps: list[int]
    extra_ms: Number
    extra_pct: Number
    median_slow_ms: Number | None
    period: int | None


class StepStats(Struct):
    """The whole-run step figures of the process whose step log speaks for the run (analysis/run_logs/
    step_history.py step_stats; docs/metrics.md): the steps, the warm-up and steady step, the profiled steps and
    what the profiler cost, the slow steps, and the unprofiled step the run's step time stands on."""

    count: int
    last_step: int
    plain_count: int
    profiled_steps: list[int] | None
    profiled_median_ms: Number | None
    instrumented_steps: dict[str, list[int]]
    total_s: Number
    late_median_ms: Number | None
    settled: bool
    steady_median_ms: Number | None
    steady_ms: Number | None
    warmup_steps: int | None
    cv_pct: Number | None
    slow: SlowSteps | None
    profiler_overhead_pct: Number | None
    unprofiled_ms: Number | None
    unprofiled_steps: list[int] | None
    unprofiled_basis: str | None


class Heartbeat(Struct):
    """Pulses of GPU utilization (analysis/run_logs/telemetry.py heartbeat): whether it beats, the pulses, the share
    of samples low, the period, the threshold used."""

    heartbeat: bool
    pulses: int
    low_pct: Number
    period_s: Number | None
    threshold_pct: Number | None


class Throttle(Struct):
    """The share of active NVML samples with a throttle reason, overall and by reason; only `known` (false) when
    no sample told its reasons."""

    known: bool
    throttled_pct: Number | None | UnsetType = UNSET
    by_reason_pct: dict[str, Number] | UnsetType = UNSET


class MemoryGrowth(Struct):
    """Used GPU memory at the start and end of the active period and the growth between them (MB); no key when
    the GPUs never showed activity, no `total_mb` when too few samples had memory."""

    start_mb: Number | None | UnsetType = UNSET
    end_mb: Number | None | UnsetType = UNSET
    growth_mb: Number | None | UnsetType = UNSET
    growth_pct_of_total: Number | None | UnsetType = UNSET
    peak_mb: Number | None | UnsetType = UNSET
    total_mb: Number | None | UnsetType = UNSET


class NvmlGpu(Struct):
    """One GPU's own NVML figures, in a job of several GPUs."""

    gpu: int
    util_mean_pct: Number | None
    throttle: Throttle
    memory: MemoryGrowth
    sm_clock_median_mhz: Number | None


class NvmlSummary(Struct, kw_only=True):
    """The run's NVML figures (analysis/run_logs/telemetry.py nvml_summary): utilization and its heartbeat, power,
    SM clock, throttling and memory over the active period (the steady state where the step log gives it). `note`
    only when the GPUs never showed activity, `active_from_epoch_s` only when they did, `per_gpu` only for several."""

    samples: int
    gpus: list[int]
    active_s: Number
    util_mean_pct: Number | None
    heartbeat: Heartbeat
    throttle: Throttle
    memory: MemoryGrowth
    power_mean_w: Number | None
    sm_clock_median_mhz: Number | None
    note: str | UnsetType = UNSET
    active_from_epoch_s: Number | UnsetType = UNSET
    window: str
    per_gpu: list[NvmlGpu] | UnsetType = UNSET


class CpuSummary(Struct):
    """The sampled CPU use of the job (analysis/run_logs/telemetry.py cpu_summary): its main process's median and
    its other processes' (summed per sample); only `samples` (0) when nothing was sampled."""

    samples: int
    main_pid: int | UnsetType = UNSET
    main_median_pct: Number | None | UnsetType = UNSET
    others_median_pct: Number | UnsetType = UNSET
    max_processes: int | UnsetType = UNSET


class LoaderLoad(Struct):
    """The DataLoader settings env.json saw and the workers they put on the host (analysis/run_logs/environment.py
    dataloader_load): loaders, the most workers of one, processes and workers on the host, usable cores and what
    limits them, the pin_memory settings seen."""

    loaders: int
    max_workers: int | None
    processes_on_host: int
    workers_on_host: int | None
    usable_cores: Number | None
    cores_limited_by: str | None
    pin_memory: list[bool]


class CoarseFigures(Struct):
    """An out-of-process attach's verdict from sampled stacks (diagnosis/coarse.py CoarseVerdict): the verdict, the
    samples, its sentence, the GPU's idle share, the main thread's states, what it rests on, its cost, top state."""

    verdict: str
    samples: int
    sentence: str
    gpu_idle_pct: Number | None
    main_states_pct: dict[str, Number]
    basis: str
    cost_pct: Number | None
    top_state: str


class RunFigures(Struct):
    """The whole run's figures (checkup/run_report.py run_parts): its step log's, NVML's, the sampled CPU's, the
    DataLoaders', its FLOP count, an out-of-process attach's coarse verdict; each null when the run lacks it.
    `host_samples`: a light window's sampled host states, here only for a run without a trace to hold them."""

    steps: StepStats | None
    nvml: NvmlSummary | None
    cpu: CpuSummary | None
    dataloaders: LoaderLoad | None
    flops: dict[str, Any] | None  # flops.json as the job's agent wrote it (only flops_per_step is checked: a number)
    coarse: CoarseFigures | None
    host_samples: HostSamples | None | UnsetType = UNSET


RunEnv = dict[str, Any]  # env.json as the run wrote it: free-form (its keys are the capturing gpucheckup's, and a
# run directory may come from another version); the long `topology` text cut at 20000 characters


class Run(Struct):
    """A run directory's run-level section: how it ran, NVML samples, step history, environment, figures."""

    info: RunInfo
    nvml: NvmlSeries
    step_history: StepHistory | None
    env: RunEnv
    figures: RunFigures


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


class NumaNode(Struct):
    """A NUMA node of the host and its CPUs as the kernel lists them ("0-15")."""

    node: int
    cpus: str


class CpuBudget(Struct):
    """The CPUs a process may use (capture/environment.py cpu_budget): the host's count, its affinity mask, the
    cgroup quota and where it was read, the NUMA nodes, and the fewest of the three (null: none known)."""

    count: int | None
    affinity: int | None
    cgroup_quota_cpus: Number | None
    cgroup_source: str
    numa_nodes: list[NumaNode]
    usable: Number | None


class LoaderBench(Struct):
    """Every setting measured, and the CPU budget of the process that ran them."""

    factory: str
    runs: list[LoaderRun]
    cpu: CpuBudget
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


def trace_dict(report: dict) -> dict:
    """A GPU check-up's report dict (the pipeline's: with `gpucheckup_version` and, in a run directory, its run's
    run-level keys) without what the document holds once at the top; its trace's host samples as `host_samples`."""
    out = {k: v for k, v in report.items() if k != "gpucheckup_version" and k not in RUN_KEYS}
    if "run_figures" in report:
        out["host_samples"] = report["run_figures"].get("host_samples")
    return out


def trace_part(report: dict) -> TraceReport:
    """A GPU check-up's report dict as its typed part of the document (what the renderers read)."""
    return msgspec.convert(trace_dict(report), TraceReport)


def run_info(report: dict) -> RunInfo:
    """A run directory's report dict's `run` key (how the run ran) as its document type."""
    return msgspec.convert(report["run"], RunInfo)


def step_history(report: dict) -> StepHistory | None:
    """A report dict's whole-run step times (a run directory's) as their document type; None without them."""
    return msgspec.convert(report["step_history"], StepHistory) if report.get("step_history") else None


def host_samples(report: dict) -> HostSamples | None:
    """A report dict's sampled host states (a light window's, in its run's figures) as their type; None without."""
    hs = (report.get("run_figures") or {}).get("host_samples")
    return msgspec.convert(hs, HostSamples) if hs else None


def rank_table(rows: list[dict]) -> list[RankRow]:
    """The ranks table's rows (`Ranks.table`, or checkup/pipeline.py rank_summary's), either form, as RankRows."""
    return msgspec.convert(rows, list[RankRow])


def run_figures(report: dict) -> RunFigures:
    """A run directory's report dict's whole-run figures (`run_figures`) as their document type."""
    return msgspec.convert(report["run_figures"], RunFigures)


def nvml_series(report: dict) -> NvmlSeries | None:
    """A report dict's NVML samples as plotted (a run directory's) as their document type; None without them."""
    return msgspec.convert(report["nvml"], NvmlSeries) if report.get("nvml") else None


class RunOnly(Struct):
    """The verdict, fixes and notes of a run directory's own report (a run with no trace to check up): the
    document's top-level ones then."""

    verdict: Verdict
    fixes: list[Fix]
    notes: list[str]


def run_only(report: dict) -> RunOnly:
    """A run-only report dict's (checkup/pipeline.py) verdict, fixes and notes as their document types."""
    return msgspec.convert({k: report[k] for k in ("verdict", "fixes", "notes")}, RunOnly)


def job_part(job: dict) -> tuple[Job, JobVerdict]:
    """The cross-rank section's dict (checkup/ranks.job_dict) as its document type, and the job's verdict."""
    return (msgspec.convert({"ranks": job["ranks"], "communication": job.get("communication")}, Job),
            msgspec.convert(job["verdict"], JobVerdict))


def cpu_part(report: dict) -> CpuReport:
    """A CPU-side check-up's report dict (the pipeline's) as its typed part of the document."""
    return msgspec.convert({k: v for k, v in report.items() if k not in ("gpucheckup_version", "kind")
                            and k not in RUN_KEYS}, CpuReport)


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

"""The coarse verdict of an out-of-process attach: the main thread's states while the GPU idles, and its fixes.

Definitions (docs/capture.md; the states and the pairing with NVML are analysis/run_logs/stack_samples.py's):
- GPU idle sample: NVML utilization < IDLE_UTIL_PCT on the job's GPUs (mean over them).
- each state names a bound (VERDICT_OF_STATE): dataloader -> input_bound, sync -> sync_bound,
  communication -> communication_bound, forward/backward/optimizer/python -> launch_bound (the host runs
  Python and dispatches ops while the GPU idles), checkpoint/waiting -> host_waiting.
- with NVML: when >= IDLE_SHARE_PCT of the samples with a known utilization have an idle GPU, the bound
  named by most of those samples is the verdict (its share: of the idle samples); otherwise gpu_bound.
- without NVML, on a CPU job (none of the job's processes had the CUDA driver library loaded when it
  was sampled): the main thread's time is the step, so the bound named by most of all samples is the
  verdict, the compute states naming `cpu_only` (the job computes on the CPU: no device to bound);
  without NVML on a job that loaded the driver (or where that is not known): unknown, with the main
  thread's states.
- cost (of the input, sync, communication and host-waiting verdicts): the share of all samples in
  which the GPU idles (a CPU job: the main thread is) in the verdict's states: the share of the job's
  time the fixes can remove, at most.
Coarse means coarse: a few samples per second, and NVML's utilization is itself an average. Every
verdict, finding and fix made here says so (`basis`, and the fixes' `predicted_note`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field

from gpucheckup.diagnosis.evidence import MAX_EVENTS, run_event
from gpucheckup.diagnosis.findings import VERDICT_TITLES, Event, Finding
from gpucheckup.diagnosis.fixes import BY_KEY, make

IDLE_UTIL_PCT = 30.0
IDLE_SHARE_PCT = 50.0
STATE_TEXT = {
    "dataloader": "waits in DataLoader __next__",
    "sync": "waits on a host-GPU synchronization",
    "communication": "waits on communication (torch.distributed)",
    "checkpoint": "writes a checkpoint (torch.save)",
    "optimizer": "runs the optimizer step",
    "backward": "runs backward",
    "forward": "runs the model's forward",
    "python": "runs other Python code",
    "waiting": "is idle (waiting outside torch)",
    "unknown": "could not be sampled",
}
VERDICT_OF_STATE = {
    "dataloader": "input_bound", "sync": "sync_bound", "communication": "communication_bound",
    "forward": "launch_bound", "backward": "launch_bound", "optimizer": "launch_bound", "python": "launch_bound",
    "checkpoint": "host_waiting", "waiting": "host_waiting", "unknown": "unknown",
}
CPU_COMPUTE = "cpu_only"  # a CPU job's main thread computing: checkup/cpu_report.py's verdict id for a CPU job
TITLES = {**VERDICT_TITLES, "host_waiting": "Host waiting: the GPU idles while the host waits outside torch",
          CPU_COMPUTE: "CPU job: the main thread computes (no GPU)"}
CPU_INPUT_TITLE = "Input-bound: the training loop waits for the DataLoader"
# The fixes of each coarse verdict (diagnosis/fixes.py keys); the DataLoader one follows the iterator in the stacks.
FIXES = {
    "input_bound": ("fast_storage",),
    "sync_bound": ("no_host_reads", "sync_debug"),
    "communication_bound": ("overlap_comm", "nccl_check"),
    "launch_bound": ("cuda_graph", "torch_compile"),
}
# What a catalogue action's {fields} read in a coarse check-up: no per-batch cost to size the worker count from.
COARSE_FILL = {"workers": "N", "why": "N up to the CPU cores left free (sampled stacks give no per-batch cost; a "
                                      "window under `gpucheckup run` says how many workers keep pace)"}
TIMELINE_HINT = ("for a verdict from a timeline, with each fix's saving replayed, start the job under "
                 "`gpucheckup run` (then `gpucheckup attach` asks its agent for a profiled window)")


@dataclass
class CoarseVerdict:
    """The verdict, its sentence, what it rests on and the shares it rests on."""

    verdict: str
    samples: int
    sentence: str
    gpu_idle_pct: float | None = None
    main_states_pct: dict[str, float] = field(default_factory=dict)
    basis: str = ""  # what the verdict rests on, in words (always coarse)
    cost_pct: float | None = None  # share of all samples the verdict's states take with the GPU (or CPU job) idle
    top_state: str = ""  # the most common state behind the verdict

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def decided(self) -> bool:
        """Whether the samples name a verdict (not unknown)."""
        return self.verdict != "unknown"

    @property
    def title(self) -> str:
        """The verdict's title (a CPU job's input-bound one names no GPU), said coarse."""
        cpu = self.gpu_idle_pct is None and self.verdict == "input_bound"
        return f"{CPU_INPUT_TITLE if cpu else TITLES.get(self.verdict, self.verdict)} (coarse: sampled stacks)"


def _basis(n: int, nvml: bool, gpu_job: bool | None) -> str:
    """What the verdict rests on, in words."""
    with_what = "and NVML utilization" if nvml else (
        "without NVML; the job loaded no CUDA driver: a CPU job" if gpu_job is False else "without NVML")
    return f"coarse: {n} py-spy samples of the main thread's stack {with_what}, no timeline"


def coarse_verdict(states: list[str], gpu_util: list[float | None], gpu_job: bool | None = None) -> CoarseVerdict:
    """The coarse verdict from paired samples: the main thread's state and the GPU's utilization (`gpu_job`:
    whether the job had the CUDA driver loaded; False: a CPU job, None: not known)."""
    states = [s if s in VERDICT_OF_STATE else "unknown" for s in states]  # an older samples.csv's main_state: any text
    n = len(states)
    if n == 0:
        return CoarseVerdict("unknown", 0, "no samples could be taken")
    all_states = {s: 100 * c / n for s, c in Counter(states).most_common()}
    known = [(s, u) for s, u in zip(states, gpu_util) if u is not None]
    if not known:
        basis = _basis(n, False, gpu_job)
        if gpu_job is False:
            return _cpu_job(states, all_states, basis)
        top, pct = next(iter(all_states.items()))
        return CoarseVerdict("unknown", n, f"GPU use unknown (no NVML); the main thread {STATE_TEXT[top]} in "
                                           f"{pct:.0f}% of {n} samples", None, all_states, basis)
    basis = _basis(n, True, gpu_job)
    idle = [s for s, u in known if u < IDLE_UTIL_PCT]
    idle_pct = 100 * len(idle) / len(known)
    if idle_pct >= IDLE_SHARE_PCT:
        verdict, top, c = _leading(idle)
        return CoarseVerdict(verdict, n,
                             f"GPU idle in {idle_pct:.0f}% of {len(known)} samples while the main thread "
                             f"{STATE_TEXT[top]} ({100 * c / len(idle):.0f}% of those samples)", idle_pct, all_states,
                             basis, 100 * c / len(known), top)
    top, c = Counter(states).most_common(1)[0]
    return CoarseVerdict("gpu_bound", n, f"GPU busy (NVML utilization >= {IDLE_UTIL_PCT:g}%) in {100 - idle_pct:.0f}% "
                                         f"of {len(known)} samples; the main thread {STATE_TEXT[top]} in "
                                         f"{100 * c / n:.0f}% of samples", idle_pct, all_states, basis, None, top)


def _leading(states: list[str]) -> tuple[str, str, int]:
    """The verdict named by most of these states, its most common state, and how many states name it."""
    by_verdict = Counter(VERDICT_OF_STATE[s] for s in states)
    verdict = by_verdict.most_common(1)[0][0]
    top = Counter(s for s in states if VERDICT_OF_STATE[s] == verdict).most_common(1)[0][0]
    return verdict, top, by_verdict[verdict]


def _cpu_job(states: list[str], all_states: dict[str, float], basis: str) -> CoarseVerdict:
    """A CPU job without NVML: the bound most of the main thread's samples name (its compute: cpu_only)."""
    n = len(states)
    verdict, top, c = _leading(states)
    verdict = CPU_COMPUTE if verdict == "launch_bound" else verdict
    return CoarseVerdict(verdict, n, f"CPU job (no CUDA driver loaded): the main thread {STATE_TEXT[top]} in "
                                     f"{100 * c / n:.0f}% of {n} samples", None, all_states, basis,
                         None if verdict == CPU_COMPUTE else 100 * c / n, top)


def coarse_events(ra, cv: CoarseVerdict, states: list[str], gpu_util: list[float | None],
                  times: list[float]) -> list[Event]:
    """Where to look: the longest stretches of consecutive samples behind the verdict (the main thread in its
    states, with the GPU idle where NVML says), as events on samples.csv, most samples first."""
    def behind(s: str, u: float | None) -> bool:
        named = VERDICT_OF_STATE.get(s, "unknown")
        named = CPU_COMPUTE if named == "launch_bound" and cv.verdict == CPU_COMPUTE else named
        return named == cv.verdict and (cv.gpu_idle_pct is None or (u is not None and u < IDLE_UTIL_PCT))

    runs, start = [], None
    for i, (s, u) in enumerate(zip(states, gpu_util)):
        if behind(s, u) and start is None:
            start = i
        if start is not None and (not behind(s, u) or i == len(states) - 1):
            last = i if behind(s, u) else i - 1
            runs.append((start, last))
            start = None
    runs.sort(key=lambda r: -(r[1] - r[0]))
    what = f"the main thread {STATE_TEXT[cv.top_state]}" + (" while the GPU idles" if cv.gpu_idle_pct is not None
                                                              else "")
    return [run_event(ra, f"{last - first + 1} samples in a row: {what}", "samples.csv", times[first],
                      times[last] - times[first]) for first, last in runs[:MAX_EVENTS]]


def coarse_findings(cv: CoarseVerdict, loader: str | None, gpu_job: bool | None,
                    cores: tuple[int | None, float | None] = (None, None), events: list[Event] = ()) -> list[Finding]:
    """The finding behind a coarse verdict, with its fixes (`loader`: "single" or "multi", the DataLoader
    iterator seen in the main thread's stacks; None when none was seen; `cores`: the job's processes (main and its
    descendants) and the host's usable cores, where known: with as many worker processes as cores, no more are
    offered). None for an undecided verdict, or one
    the samples offer nothing for (gpu_bound, cpu_only, host_waiting). Its fixes' savings are not modelled (0 here;
    the report says why: fix_note)."""
    keys = list(FIXES.get(cv.verdict, ()))
    pct = cv.cost_pct
    if not keys or cv.cost_pct is None:
        return []
    evidence = [cv.sentence, cv.basis]
    if cv.verdict == "input_bound":
        processes, usable = cores
        children = processes - 1 if processes else None
        full = loader == "multi" and children is not None and usable is not None and children >= usable
        if full:  # the workers already take every core (the main process waits for them): more would share them
            evidence.append(f"the job's {children} worker processes already fill its {usable:g} usable cores: more "
                            "workers would share the same cores; make each batch cheaper instead")
        workers = [] if full else ["more_workers" if loader == "multi" else "dataloader_workers"]
        keys = workers + (["gpu_augment"] if gpu_job is not False else []) + keys
    return [Finding(
        id=f"coarse_{cv.verdict}", severity="critical" if pct >= IDLE_SHARE_PCT else "warning",
        title=f"The main thread {STATE_TEXT[cv.top_state]} ({pct:.0f}% of the samples; coarse)",
        rule=("main thread state from py-spy stacks; the bound most samples name"
              + (f" among those with NVML utilization < {IDLE_UTIL_PCT:g}%" if cv.gpu_idle_pct is not None else "")),
        cost_ms_per_step=None, cost_pct_of_step=pct,
        evidence=evidence, events=list(events), fixes=[_fix(key) for key in keys])]


def _fix(key: str):
    """The catalogue's fix, its action and `how` filled for a coarse check-up (COARSE_FILL); its saving unmodelled."""
    e = BY_KEY[key]
    fix = make(key, 0.0, e.action.format(**COARSE_FILL) if e.fill else None)
    if e.fill and e.how:
        fix.how = e.how.format(**COARSE_FILL)
    return fix


def fix_note(cv: CoarseVerdict) -> str:
    """What a coarse verdict's fixes can save, in words: there is no timeline to replay them on."""
    what = (f"the GPU idles while the main thread {STATE_TEXT[cv.top_state]}" if cv.gpu_idle_pct is not None else
            f"the main thread of this CPU job {STATE_TEXT[cv.top_state]}")
    return f"coarse: no timeline to replay; it removes at most the {cv.cost_pct:.0f}% of the samples in which {what}"

"""The coarse verdict of an out-of-process attach: the main thread's states while the GPU idles.

Definitions (docs/capture.md; the states and the pairing with NVML are analysis/run_logs/stack_samples.py's):
- GPU idle sample: NVML utilization < IDLE_UTIL_PCT on the job's GPUs (mean over them).
- coarse verdict: when >= IDLE_SHARE_PCT of the samples with a known utilization have an idle GPU,
  the main thread's most common state among those samples names it: dataloader -> input_bound,
  sync -> sync_bound, communication -> communication_bound, forward/backward/optimizer/python ->
  launch_bound (the host runs Python and dispatches ops while the GPU idles),
  checkpoint/waiting -> host_waiting. Otherwise gpu_bound. Without NVML: unknown, with the main
  thread's states.
Coarse means coarse: a few samples per second, and NVML's utilization is itself an average.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field

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


@dataclass
class CoarseVerdict:
    """The verdict, its sentence and the shares it rests on."""

    verdict: str
    samples: int
    sentence: str
    gpu_idle_pct: float | None = None
    main_states_pct: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def coarse_verdict(states: list[str], gpu_util: list[float | None]) -> CoarseVerdict:
    """The coarse verdict from paired samples: the main thread's state and the GPU's utilization."""
    states = [s if s in VERDICT_OF_STATE else "unknown" for s in states]  # an older samples.csv's main_state: any text
    n = len(states)
    if n == 0:
        return CoarseVerdict("unknown", 0, "no samples could be taken")
    all_states = {s: 100 * c / n for s, c in Counter(states).most_common()}
    known = [(s, u) for s, u in zip(states, gpu_util) if u is not None]
    if not known:
        top, pct = next(iter(all_states.items()))
        return CoarseVerdict("unknown", n, f"GPU use unknown (no NVML); the main thread {STATE_TEXT[top]} in "
                                           f"{pct:.0f}% of {n} samples", None, all_states)
    idle = [s for s, u in known if u < IDLE_UTIL_PCT]
    idle_pct = 100 * len(idle) / len(known)
    if idle_pct >= IDLE_SHARE_PCT:
        top, c = Counter(idle).most_common(1)[0]
        return CoarseVerdict(VERDICT_OF_STATE[top], n,
                             f"GPU idle in {idle_pct:.0f}% of {len(known)} samples while the main thread "
                             f"{STATE_TEXT[top]} ({100 * c / len(idle):.0f}% of those samples)", idle_pct, all_states)
    top, c = Counter(states).most_common(1)[0]
    return CoarseVerdict("gpu_bound", n, f"GPU busy (NVML utilization >= {IDLE_UTIL_PCT:g}%) in {100 - idle_pct:.0f}% "
                                         f"of {len(known)} samples; the main thread {STATE_TEXT[top]} in "
                                         f"{100 * c / n:.0f}% of samples", idle_pct, all_states)

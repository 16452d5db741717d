"""A coarse verdict from out-of-process samples: py-spy stacks of the main thread and NVML utilization.

Used by `gpucheckup attach` on a job without the agent. Each sample is one `py-spy dump` of all
threads of the job (and its child processes), paired with the NVML sample nearest in time.

Definitions (docs/capture.md):
- main thread state: the first match, in this order, over the main thread's frames:
  `dataloader` (a frame in torch/utils/data/), `sync` (synchronize, .item(), a blocking CUDA
  copy or stream/event/device synchronize, in Python or native frames), `communication`
  (torch/distributed/, NCCL), `checkpoint` (torch/serialization.py), `optimizer` (torch/optim/),
  `backward` (torch/autograd/), `forward` (torch/nn/modules/), else `python` when the thread is
  running, `waiting` when py-spy reports it idle.
- GPU idle sample: NVML utilization < IDLE_UTIL_PCT (30%) on the job's GPUs (mean over them).
- coarse verdict: when >= half the samples have an idle GPU, the main thread's most common
  state among those samples names it: dataloader -> input_bound, sync -> sync_bound,
  communication -> communication_bound, forward/backward/optimizer/python -> launch_bound
  (the host runs Python and dispatches ops while the GPU idles), checkpoint/waiting ->
  host_waiting. Otherwise gpu_bound. Without NVML: unknown, with the main thread's states.
Coarse means coarse: a few samples per second, and NVML's utilization is itself an average.
"""

from __future__ import annotations

import re
from collections import Counter

IDLE_UTIL_PCT = 30.0
SYNC = re.compile(r"(^|\W)(synchronize|cudaStreamSynchronize|cuStreamSynchronize|cudaDeviceSynchronize|"
                  r"cudaEventSynchronize|cuEventSynchronize|_local_scalar_dense|cudaMemcpy(?!Async)|cuMemcpyDtoH(?!Async)"
                  r"|Tensor\.item)(\W|$)")
COMM = re.compile(r"nccl|ProcessGroup|c10d", re.I)
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


def classify(frames: list[dict], active: bool) -> str:
    """The main thread's state from its py-spy frames (innermost first)."""
    files = [(f.get("filename") or "").replace("\\", "/") for f in frames]
    names = [f.get("name") or "" for f in frames]
    if any("torch/utils/data/" in p for p in files):
        return "dataloader"
    if any(SYNC.search(n) for n in names):
        return "sync"
    if any("torch/distributed/" in p for p in files) or any(COMM.search(n) for n in names):
        return "communication"
    for state, part in (("checkpoint", "torch/serialization.py"), ("optimizer", "torch/optim/"),
                        ("backward", "torch/autograd/"), ("forward", "torch/nn/modules/")):
        if any(part in p for p in files):
            return state
    return "python" if active else "waiting"


def top_frame(frames: list[dict]) -> str:
    """The innermost frame as `name (file:line)`."""
    if not frames:
        return ""
    f = frames[0]
    return f"{f.get('name')} ({(f.get('short_filename') or f.get('filename') or '?')}:{f.get('line')})"


def coarse_verdict(states: list[str], gpu_util: list[float | None]) -> dict:
    """The coarse verdict and its sentence from paired samples."""
    n = len(states)
    if n == 0:
        return {"verdict": "unknown", "samples": 0, "sentence": "no samples could be taken"}
    all_states = {s: 100 * c / n for s, c in Counter(states).most_common()}
    known = [(s, u) for s, u in zip(states, gpu_util) if u is not None]
    if not known:
        top, pct = next(iter(all_states.items()))
        return {"verdict": "unknown", "samples": n, "gpu_idle_pct": None, "main_states_pct": all_states,
                "sentence": f"GPU use unknown (no NVML); the main thread {STATE_TEXT[top]} in {pct:.0f}% of "
                            f"{n} samples"}
    idle = [s for s, u in known if u < IDLE_UTIL_PCT]
    idle_pct = 100 * len(idle) / len(known)
    if idle_pct >= 50:
        top, c = Counter(idle).most_common(1)[0]
        verdict = VERDICT_OF_STATE[top]
        sentence = (f"GPU idle in {idle_pct:.0f}% of {len(known)} samples while the main thread {STATE_TEXT[top]} "
                    f"({100 * c / len(idle):.0f}% of those samples)")
    else:
        verdict = "gpu_bound"
        top, c = Counter(states).most_common(1)[0]
        sentence = (f"GPU busy (NVML utilization >= {IDLE_UTIL_PCT:g}%) in {100 - idle_pct:.0f}% of {len(known)} "
                    f"samples; the main thread {STATE_TEXT[top]} in {100 * c / n:.0f}% of samples")
    return {"verdict": verdict, "samples": n, "gpu_idle_pct": idle_pct, "main_states_pct": all_states,
            "sentence": sentence}

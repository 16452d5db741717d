"""The main thread's state in out-of-process samples: py-spy stacks of the job, paired with NVML.

Used on the run directory of `gpucheckup attach` on a job without the agent. Each sample is one
`py-spy dump` of all threads of the job (and its child processes): samples.csv holds the main
thread's frames (layout.SAMPLE_COLUMNS); each sample is paired with the NVML sample nearest in
time (within PAIR_S). The coarse verdict over them is diagnosis/coarse.py's.

Definitions (docs/capture.md):
- main thread state: the first match, in this order, over the main thread's frames:
  `dataloader` (a frame in torch/utils/data/), `sync` (synchronize, .item(), a blocking CUDA
  copy or stream/event/device synchronize, in Python or native frames), `communication`
  (torch/distributed/, NCCL), `checkpoint` (torch/serialization.py), `optimizer` (torch/optim/),
  `backward` (torch/autograd/), `forward` (torch/nn/modules/), else `python` when the thread is
  running, `waiting` when py-spy reports it idle.
- GPU utilization of a sample: the mean NVML utilization over the job's GPUs in the NVML tick
  nearest in time, when it lies within PAIR_S; else unknown.
"""

from __future__ import annotations

import re

import numpy as np

from gpucheckup import layout
from gpucheckup.analysis.run_logs.telemetry import gpu_series

PAIR_S = 1.0
SYNC = re.compile(r"(^|\W)(synchronize|cudaStreamSynchronize|cuStreamSynchronize|cudaDeviceSynchronize|"
                  r"cudaEventSynchronize|cuEventSynchronize|_local_scalar_dense|cudaMemcpy(?!Async)|cuMemcpyDtoH(?!Async)"
                  r"|Tensor\.item)(\W|$)")
COMM = re.compile(r"nccl|ProcessGroup|c10d", re.I)
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


def frames_of(stack: str) -> list[dict]:
    """The frames of samples.csv's main_stack cell (innermost first), as py-spy names them."""
    out = []
    for part in stack.split(layout.FRAME_SEP) if stack else []:
        name, _, filename = part.partition(layout.FRAME_AT)
        out.append({"name": name, "filename": filename})
    return out


def sample_states(samples: dict) -> list[str]:
    """The main thread's state in every sample (older run directories stored it as main_state)."""
    if "main_stack" not in samples:
        return list(samples["main_state"])
    active = samples.get("main_thread_active") or [""] * len(samples["t_s"])
    return ["unknown" if a == "" else classify(frames_of(st), a == "true")  # empty: py-spy found no main thread
            for st, a in zip(samples["main_stack"], active)]


def loader_kind(samples: dict) -> str | None:
    """The DataLoader iterator the main thread's frames show: "multi" (worker processes) when any sample shows
    _MultiProcessingDataLoaderIter, else "single" (num_workers=0) when any shows _SingleProcessDataLoaderIter,
    else None (none seen, or an older samples.csv without the frames)."""
    stacks = samples.get("main_stack") or []
    for kind, name in (("multi", "_MultiProcessingDataLoaderIter."), ("single", "_SingleProcessDataLoaderIter.")):
        if any(name in st for st in stacks):
            return kind
    return None


def sample_util(samples: dict, nvml: dict | None) -> list[float | None]:
    """For each sample, the job's GPUs' NVML utilization in the nearest tick within PAIR_S (older run
    directories stored it as gpu_util)."""
    times = samples["t_s"]
    if "gpu_util" in samples:
        return [None if not np.isfinite(u) else float(u) for u in samples["gpu_util"]]
    if nvml is None or not len(nvml.get("t_s", [])):
        return [None] * len(times)
    s = gpu_series(nvml)
    t, u = s["t_s"], s["util"]
    out = []
    for x in times:
        if len(t) == 0:
            out.append(None)
            continue
        i = int(np.clip(np.searchsorted(t, x), 1, len(t) - 1)) if len(t) > 1 else 0
        j = i if len(t) == 1 or abs(t[i] - x) < abs(t[i - 1] - x) else i - 1
        out.append(float(u[j]) if abs(t[j] - x) <= PAIR_S and np.isfinite(u[j]) else None)
    return out

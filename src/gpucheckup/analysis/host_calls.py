"""What host events mean: data waits, synchronizations, allocations, communication.

Each classifier returns row indices into `trace.host`. The name lists are the whole rule:
- data wait: user annotations `enumerate(DataLoader)#...__next__` (the profiler wraps every
  DataLoader `__next__` in one).
- synchronization: `cudaDeviceSynchronize`, `cudaStreamSynchronize`, `cudaEventSynchronize`,
  `cuCtxSynchronize`, `cuStreamSynchronize`, `cuEventSynchronize`, the synchronous `cudaMemcpy`,
  and any copy call whose copy touches pageable host memory (CUDA makes those block the host);
  plus the ops that exist to read a GPU value on the host: `aten::item`,
  `aten::_local_scalar_dense`.
- allocation: `cudaMalloc`, `cudaFree`, `cudaMallocHost`, `cudaHostAlloc`, `cudaFreeHost`,
  `cudaMallocAsync`, `cudaFreeAsync`, `cuMemAlloc*`, `cuMemFree*`, `cuMemCreate`, `cuMemMap`,
  `cuMemUnmap`, `cuMemRelease`, `cuMemHostAlloc`, `cuMemAddressReserve`.
- ROCm traces name the same calls `hip*` (hipStreamSynchronize, hipMalloc, ...): included.
- communication: ops and annotations naming NCCL or c10d collectives (`nccl:*`, `c10d::*`,
  `record_param_comms`, `ProcessGroupNCCL*`, `*all_reduce*`, `*all_gather*`,
  `*reduce_scatter*`, `*all_to_all*`, `*barrier*`, `*broadcast*`).
"""

from __future__ import annotations

import re

import numpy as np

from gpucheckup.analysis.copies import is_pageable
from gpucheckup.trace.tables import CPU_OP, DRIVER, MEMCPY, PYTHON, RUNTIME, USER_ANNOTATION, Trace

DATALOADER_PREFIX = "enumerate(DataLoader)"
SYNC_CALLS = frozenset({
    "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
    "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize", "cudaMemcpy",
    "hipDeviceSynchronize", "hipStreamSynchronize", "hipEventSynchronize", "hipMemcpy",  # ROCm traces
})
SYNC_OPS = frozenset({"aten::item", "aten::_local_scalar_dense"})
ALLOC_CALLS = frozenset({
    "cudaMalloc", "cudaFree", "cudaMallocHost", "cudaHostAlloc", "cudaFreeHost", "cudaMallocAsync",
    "cudaFreeAsync", "cudaMallocManaged", "cuMemAlloc", "cuMemAlloc_v2", "cuMemFree", "cuMemFree_v2",
    "cuMemCreate", "cuMemMap", "cuMemUnmap", "cuMemRelease", "cuMemHostAlloc", "cuMemAddressReserve",
    "cuMemAllocHost", "cuMemAllocHost_v2", "cuMemFreeHost",
    "hipMalloc", "hipFree", "hipHostMalloc", "hipHostFree", "hipMallocAsync", "hipFreeAsync",
})
COMM_PATTERN = re.compile(
    r"nccl|c10d::|record_param_comms|ProcessGroup|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|"
    r"barrier|broadcast",
    re.IGNORECASE,
)


def _rows(trace: Trace, cats: tuple[int, ...], predicate) -> np.ndarray:
    ids = trace.name_ids(predicate)
    host = trace.host
    return np.flatnonzero(np.isin(host.cat, cats) & np.isin(host.name, ids))


def dataloader_rows(trace: Trace) -> np.ndarray:
    """DataLoader `__next__` annotations."""
    return _rows(trace, (USER_ANNOTATION,), lambda n: n.startswith(DATALOADER_PREFIX))


def blocking_copy_rows(trace: Trace, launch_rows: np.ndarray) -> np.ndarray:
    """Copy calls that block the host: to or from pageable memory, or the synchronous cudaMemcpy."""
    gpu = trace.gpu
    pageable_ids = trace.name_ids(is_pageable)
    m = (gpu.kind == MEMCPY) & np.isin(gpu.name, pageable_ids) & (launch_rows >= 0)
    return np.unique(launch_rows[m])


def sync_call_rows(trace: Trace, launch_rows: np.ndarray) -> np.ndarray:
    """CUDA calls that make the host wait for the GPU (sync APIs and blocking copies)."""
    api = _rows(trace, (RUNTIME, DRIVER), lambda n: n in SYNC_CALLS)
    return np.union1d(api, blocking_copy_rows(trace, launch_rows))


def sync_op_rows(trace: Trace) -> np.ndarray:
    """Operators that read a GPU value on the host (`.item()` and its kernel)."""
    return _rows(trace, (CPU_OP,), lambda n: n in SYNC_OPS)


def alloc_rows(trace: Trace) -> np.ndarray:
    """Device and pinned-host memory allocation and release calls."""
    return _rows(trace, (RUNTIME, DRIVER), lambda n: n in ALLOC_CALLS)


def comm_rows(trace: Trace) -> np.ndarray:
    """Host ops and annotations of collective communication."""
    return _rows(trace, (CPU_OP, USER_ANNOTATION), lambda n: COMM_PATTERN.search(n) is not None)


def op_rows(trace: Trace) -> np.ndarray:
    """Operators and CUDA calls: the host busy dispatching and launching work."""
    return np.flatnonzero(np.isin(trace.host.cat, (CPU_OP, RUNTIME, DRIVER)))


def enclosing(trace: Trace, row: int, cats: tuple[int, ...]) -> list[int]:
    """Host rows of the given categories on the same thread that contain `row`, outermost first."""
    host = trace.host
    t0, t1 = host.start[row], host.end[row]
    m = (
        (host.tid == host.tid[row]) & (host.pid == host.pid[row]) & np.isin(host.cat, cats)
        & (host.start <= t0) & (host.end >= t1)
    )
    m[row] = False
    found = np.flatnonzero(m)
    return list(found[np.lexsort((-host.end[found], host.start[found]))])


def user_frame(trace: Trace, row: int) -> str | None:
    """The innermost Python frame around a host event that is not inside torch itself."""
    frames = enclosing(trace, row, (PYTHON,))
    return innermost_user_frame([trace.names[trace.host.name[f]] for f in frames])


def innermost_user_frame(names: list[str]) -> str | None:
    """Of Python frames outermost first, the innermost one that is not inside torch itself."""
    for name in reversed(names):
        if not _is_library_frame(name):
            return name
    return names[-1] if names else None


def _is_library_frame(name: str) -> bool:
    return (
        name.startswith(("torch/", "<built-in", "threading.py", "contextlib.py", "<frozen"))
        or "site-packages/" in name
        or "/torch/" in name
        or name.startswith("nn.Module:")
    )


def user_frames(trace: Trace, rows: np.ndarray) -> list[str | None]:
    """`user_frame` of many host rows at once (see `user_frames_during`)."""
    host = trace.host
    rows = np.asarray(rows, dtype=np.int64)
    return user_frames_during(trace, host.pid[rows], host.tid[rows], host.start[rows], host.end[rows])


def user_frames_during(trace: Trace, pid, tid, t0, t1) -> list[str | None]:
    """Per query (thread, interval): the innermost Python frame on that thread around the interval that is
    not inside torch itself, None when no frame encloses it. Per thread, the Python frames sorted by start
    (longest first on ties) form a call tree: a frame's parent is the latest frame before it still open at its
    start. A query's innermost enclosing frame is the latest frame starting at or before t0 that ends at or
    after t1 (walking up that tree from the last frame started by t0 reaches exactly it), then up to the
    first frame outside torch. Both searches are `_last_reaching` (no Python code per frame)."""
    host = trace.host
    pid, tid = np.asarray(pid, dtype=np.int64), np.asarray(tid, dtype=np.int64)
    t0, t1 = np.asarray(t0, dtype=np.float64), np.asarray(t1, dtype=np.float64)
    out: list[str | None] = [None] * len(t0)
    py = np.flatnonzero(host.cat == PYTHON)
    if len(t0) == 0 or not trace.with_stack or len(py) == 0:
        return out
    library = np.fromiter(map(_is_library_frame, trace.names), bool, len(trace.names))
    thread_of = host.pid[py].astype(np.int64) * (1 << 32) + host.tid[py].astype(np.int64)
    query_thread = pid * (1 << 32) + tid
    for key in np.unique(query_thread):
        frames = py[thread_of == key]
        if len(frames) == 0:
            continue
        frames = frames[np.lexsort((-host.end[frames], host.start[frames]))]
        starts, ends = host.start[frames], host.end[frames]
        table = _MaxTable(ends)
        parent = table.last_reaching(np.arange(len(frames)), starts)
        name = host.name[frames]
        user = np.arange(len(frames))  # per frame: itself, or its first ancestor outside torch (-1: none)
        lib = library[name]
        step = np.where(lib, parent, user)
        while True:  # pointer jumping: each pass doubles the steps taken up the tree
            nxt = np.where(step >= 0, step[step], -1)
            done = (step < 0) | ~lib[np.maximum(step, 0)]
            if done.all():
                break
            step = np.where(done, step, nxt)
        user = np.where(step >= 0, step, user)
        mine = np.flatnonzero(query_thread == key)
        at = np.searchsorted(starts, t0[mine], side="right")
        inner = table.last_reaching(at, t1[mine])
        found = inner >= 0
        for q, n in zip(mine[found].tolist(), name[user[inner[found]]].tolist()):
            out[q] = trace.names[n]
    return out


class _MaxTable:
    """Range maxima of an array by powers of two (a sparse table), for `last_reaching`."""

    def __init__(self, values: np.ndarray):
        self.levels = [values]
        width = 1
        while 2 * width <= len(values):
            prev = self.levels[-1]
            self.levels.append(np.maximum(prev[:-width], prev[width:]))
            width *= 2

    def last_reaching(self, before: np.ndarray, at_least: np.ndarray) -> np.ndarray:
        """Per query: the largest index i < before with values[i] >= at_least, -1 when there is none."""
        pos = np.asarray(before, dtype=np.int64).copy()
        for k in range(len(self.levels) - 1, -1, -1):  # skip blocks of 2**k whose maximum falls short
            lo = pos - (1 << k)
            skip = (lo >= 0) & (self.levels[k][np.maximum(lo, 0)] < at_least)
            np.copyto(pos, lo, where=skip)
        return pos - 1

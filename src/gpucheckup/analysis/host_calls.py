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
from gpucheckup.analysis.groups import pair_ids
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
    not inside torch itself, None when no frame encloses it. Per thread, the Python frames as a call tree
    (parents by a stack over frames sorted by start); each query's innermost enclosing frame found by a
    binary search and a walk up the parents, then up to the first frame outside torch."""
    host = trace.host
    pid, tid = np.asarray(pid, dtype=np.int64), np.asarray(tid, dtype=np.int64)
    t0, t1 = np.asarray(t0, dtype=np.float64), np.asarray(t1, dtype=np.float64)
    out: list[str | None] = [None] * len(t0)
    py = np.flatnonzero(host.cat == PYTHON)
    if len(t0) == 0 or not trace.with_stack or len(py) == 0:
        return out
    # One sort groups frames and queries by thread (a mask per thread was threads x frames).
    all_pid = np.concatenate([host.pid[py].astype(np.int64), pid])
    all_tid = np.concatenate([host.tid[py].astype(np.int64), tid])
    thread = pair_ids(all_pid, all_tid)
    thread_of, query_thread = thread[: len(py)], thread[len(py):]
    srt = np.lexsort((-host.end[py], host.start[py], thread_of))  # per thread by start, outermost first
    py, thread_of = py[srt], thread_of[srt]
    q_order = np.argsort(query_thread, kind="stable")
    q_cut = np.flatnonzero(np.r_[True, query_thread[q_order][1:] != query_thread[q_order][:-1], True])
    for a, b in zip(q_cut[:-1], q_cut[1:]):
        key = query_thread[q_order[a]]
        frames = py[np.searchsorted(thread_of, key, "left"):np.searchsorted(thread_of, key, "right")]
        if len(frames) == 0:
            continue
        starts, ends = host.start[frames], host.end[frames]
        parent = np.full(len(frames), -1, dtype=np.int64)
        stack: list[int] = []
        for i in range(len(frames)):
            while stack and ends[stack[-1]] < starts[i]:
                stack.pop()
            parent[i] = stack[-1] if stack else -1
            stack.append(i)
        names = [trace.names[host.name[f]] for f in frames]
        user: dict[int, str] = {}
        mine = q_order[a:b]
        at = np.searchsorted(starts, t0[mine], side="right") - 1
        for q, i in zip(mine, at):
            while i >= 0 and not (starts[i] <= t0[q] and ends[i] >= t1[q]):
                i = parent[i]
            if i < 0:
                continue
            if int(i) not in user:
                j = i
                while j >= 0 and _is_library_frame(names[j]):
                    j = parent[j]
                user[int(i)] = names[j] if j >= 0 else names[i]
            out[int(q)] = user[int(i)]
    return out

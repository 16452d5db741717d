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
import weakref

import msgspec
import numpy as np

from gpucheckup.analysis.distinct import union1d, unique
from gpucheckup.analysis.groups import by_key, pair_ids
from gpucheckup.analysis.one_trace.copy_names import is_pageable
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
    return unique(launch_rows[m])


def sync_call_rows(trace: Trace, launch_rows: np.ndarray) -> np.ndarray:
    """CUDA calls that make the host wait for the GPU (sync APIs and blocking copies)."""
    api = _rows(trace, (RUNTIME, DRIVER), lambda n: n in SYNC_CALLS)
    return union1d(api, blocking_copy_rows(trace, launch_rows))


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
    start (`frame_parents`). A query's innermost enclosing frame is found by walking up that tree from the last
    frame started by t0 to the first that ends at or after t1, then up to the first frame outside torch; the
    walks advance every query at once, one level per pass."""
    host = trace.host
    pid, tid = np.asarray(pid, dtype=np.int64), np.asarray(tid, dtype=np.int64)
    t0, t1 = np.asarray(t0, dtype=np.float64), np.asarray(t1, dtype=np.float64)
    out: list[str | None] = [None] * len(t0)
    py = np.flatnonzero(host.cat == PYTHON)
    if len(t0) == 0 or not trace.with_stack or len(py) == 0:
        return out
    for mine in by_key(pair_ids(pid, tid)).values():  # one sort groups the queries by thread
        tree = _frame_tree(trace, py, (int(pid[mine[0]]), int(tid[mine[0]])))
        if tree is None:
            continue
        starts, ends, parent, name, user = tree
        inner = np.searchsorted(starts, t0[mine], side="right") - 1
        end = t1[mine]
        while True:  # up the tree until the frame ends at or after t1 (or none is left)
            up = np.flatnonzero(inner >= 0)
            up = up[ends[inner[up]] < end[up]]
            if len(up) == 0:
                break
            inner[up] = parent[inner[up]]
        found = inner >= 0
        for q, n in zip(mine[found].tolist(), name[user[inner[found]]].tolist()):
            out[q] = trace.names[n]
    return out


MAX_SEARCHED_FRAMES = 1024  # frames outside a nested call tree searched one by one; more: the stack walk
BLOCK_FRAMES = 1 << 16  # frames whose parents are found together (~0.5 MB per array: within the CPU caches)


class _Frames(msgspec.Struct):
    """What the frame lookups keep per trace: its Python frame rows by thread (pid, tid), which names are
    frames inside torch, and each thread's call tree once built."""

    by_thread: dict[tuple[int, int], np.ndarray]
    library: np.ndarray
    trees: dict[tuple[int, int], tuple | None] = msgspec.field(default_factory=dict)


_CACHE: dict[int, _Frames] = {}  # id of a trace's host table -> its frames; dropped with the table


def _frames(trace: Trace, py: np.ndarray) -> _Frames:
    """The trace's frames grouped by thread with one sort (a mask per thread was threads x frames) and its
    torch-frame names, built once per trace and forgotten with its host table."""
    host = trace.host
    if id(host) not in _CACHE:
        pid, tid = host.pid[py].astype(np.int64), host.tid[py].astype(np.int64)
        by_thread = {(int(pid[rows[0]]), int(tid[rows[0]])): py[rows]
                     for rows in by_key(pair_ids(pid, tid)).values()}
        library = np.fromiter(map(_is_library_frame, trace.names), bool, len(trace.names))
        _CACHE[id(host)] = _Frames(by_thread, library)
        weakref.finalize(host, _CACHE.pop, id(host), None)
    return _CACHE[id(host)]


def _frame_tree(trace: Trace, py: np.ndarray, thread: tuple[int, int]) -> tuple | None:
    """One thread's Python frames as a call tree (starts, ends, parent, name id, first frame outside torch),
    sorted by start, longest first on ties; None without frames. Built once per trace and thread (several
    rules ask)."""
    host, cache = trace.host, _frames(trace, py)
    if thread in cache.trees:
        return cache.trees[thread]
    frames = cache.by_thread.get(thread, py[:0])
    tree = None
    if len(frames):
        frames = frames[np.lexsort((-host.end[frames], host.start[frames]))]
        starts, ends = host.start[frames], host.end[frames]
        parent = frame_parents(starts, ends)
        name = host.name[frames]
        lib = cache.library[name]
        user = np.where(lib, parent, np.arange(len(frames)))  # itself, or a step up towards its first non-torch ancestor
        while True:
            up = (user >= 0) & lib[np.maximum(user, 0)]
            if not up.any():
                break
            user[up] = user[user[up]]  # pointer jumping: each pass doubles the steps taken
        user = np.where(user >= 0, user, np.arange(len(frames)))  # no frame outside torch: the frame itself
        tree = starts, ends, parent, name, user
    cache.trees[thread] = tree
    return tree


def frame_parents(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per frame (sorted by start, longest first on ties): the latest earlier frame still open at its start
    (ends at or after it), -1 when none. A frame's depth is the number of earlier frames still open at its
    start; in a nested call tree its parent is the latest earlier frame one level up, and the frames above
    it are exactly the open ones. So that answer is right wherever every frame on its chain up to a root is
    still open at the frame's start (a minimum up the tree, by pointer jumping); the few frames where that
    fails (frames ending a little after their parent, by rounding) are searched one by one. Where no earlier
    frame is open, no later frame's parent lies before: the trees there are taken a block of about
    BLOCK_FRAMES frames at a time, so that the searches and jumps stay within the CPU caches at any size."""
    n = len(starts)
    idx = np.arange(n)
    # earlier frames not ended before it (the ends of frames in start order are nearly in order: timsort)
    depth = idx - np.searchsorted(np.sort(ends, kind="stable"), starts, side="left")
    parent, ok = np.empty(n, dtype=np.int64), np.empty(n, dtype=bool)
    reach = np.maximum.accumulate(ends) if n else ends  # the latest end so far (NaN: no cut after it)
    cuts = np.flatnonzero(reach[:-1] < starts[1:]) + 1  # frames before which every frame has ended
    lo = 0
    while lo < n:
        at = np.searchsorted(cuts, lo + BLOCK_FRAMES)
        hi = int(cuts[at]) if at < len(cuts) else n
        parent[lo:hi], ok[lo:hi] = _nested_parents(starts[lo:hi], ends[lo:hi], depth[lo:hi])
        parent[lo:hi] += np.where(parent[lo:hi] >= 0, lo, 0)
        lo = hi
    bad = np.flatnonzero(~ok)
    if len(bad) <= MAX_SEARCHED_FRAMES:
        if len(bad):
            parent[bad] = _last_open(starts, ends, bad)
        return parent
    parent = [-1] * n  # many overlapping frames: the stack walk, which defines the answer
    stack: list[tuple[int, float]] = []  # (frame, its end)
    for i, (s, e) in enumerate(zip(starts.tolist(), ends.tolist())):
        while stack and stack[-1][1] < s:
            stack.pop()
        if stack:
            parent[i] = stack[-1][0]
        stack.append((i, e))
    return np.array(parent, dtype=np.int64)


def _nested_parents(starts: np.ndarray, ends: np.ndarray, depth: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """frame_parents' answer for frames that have no parent before the first (positions within them), and
    whether each is right (its chain up to a root still open at its start)."""
    n = len(starts)
    idx = np.arange(n)
    key = depth * n + idx  # by depth, then position
    order = np.argsort(key, kind="stable")
    ranked = key[order]
    at = np.empty(n, dtype=np.int64)  # per frame, the last position before (depth - 1, itself): the needles key - n,
    at[order] = np.searchsorted(ranked, ranked - n, side="left") - 1  # asked in sorted order (a cache-friendly search)
    parent = np.where(at >= 0, order[np.maximum(at, 0)], -1)
    parent = np.where((depth > 0) & (parent >= 0) & (depth[np.maximum(parent, 0)] == depth - 1), parent, -1)
    low = np.where((depth > 0) & (parent < 0), -np.inf, ends)  # per frame: the earliest end of it and its chain
    up = parent.copy()
    while (has := up >= 0).any():  # pointer jumping: each pass covers twice as many frames up the chain
        low = np.where(has, np.minimum(low, low[np.maximum(up, 0)]), low)
        up = np.where(has, up[np.maximum(up, 0)], -1)
    return parent, np.where(parent >= 0, low[np.maximum(parent, 0)] >= starts, depth == 0)


def _last_open(starts: np.ndarray, ends: np.ndarray, frames: np.ndarray) -> np.ndarray:
    """Per frame i asked: the latest frame before it that has not ended before it starts, -1 when none. The
    ends go into a tree of maxima (each node the latest end below it), built once; each frame walks up from
    its left neighbour to the first node on its left reaching its start, then down to that node's last such
    frame: O(log n) per frame however far back the answer lies."""
    n = len(ends)
    size = 1 << max(n - 1, 0).bit_length()
    tree = np.full(2 * size, -np.inf)
    tree[size:size + n] = np.where(np.isnan(ends), -np.inf, ends)  # a NaN end holds no frame open
    lo = size
    while lo > 1:
        tree[lo // 2:lo] = np.maximum(tree[lo:2 * lo:2], tree[lo + 1:2 * lo:2])
        lo //= 2
    out = np.full(len(frames), -1, dtype=np.int64)
    for k, (i, s) in enumerate(zip(frames.tolist(), starts[frames].tolist())):
        node, found = size + i, -1  # the leaf of frame i; the nodes on its left are visited right to left
        while node > 1:
            if node & 1 and tree[node - 1] >= s:  # a right child: its left sibling covers frames before it
                found = node - 1
                break
            node //= 2
        if found < 0:
            continue
        while found < size:  # down to the last leaf below that reaches s
            found = 2 * found + 1 if tree[2 * found + 1] >= s else 2 * found
        out[k] = found - size
    return out

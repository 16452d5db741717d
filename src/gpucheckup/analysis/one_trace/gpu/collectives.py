"""One rank's collective calls, in issue order, with the keys that match them across ranks.

Definitions (also in docs/metrics.md):
- a collective call on a GPU: a communication kernel (NCCL) whose launching CUDA call lies
  inside a `record_param_comms` host op; that op carries the collective's name, process group,
  group size and element counts (torch.distributed writes them; torch 2.11 with and without
  record_shapes). Its time is the kernel's [start, end]: the kernel starts when the rank arrives
  and ends when every rank's data has moved.
- a collective call on CPUs (gloo): a `gloo:<collective>` annotation on gloo's worker thread;
  its bytes come from the annotation's input shapes and dtype (record_shapes), else 0.
- key: (process group, collective, step label, index of the call within that step and group):
  the same call on every rank of the group, since every rank issues a group's collectives in
  the same order.
- bytes (S): the larger of a rank's input and output buffers, as nccl-tests sizes a collective
  (hardware/links.py).
Kernels launched before the profiled window (no `record_param_comms` around their launch) are
left out.
"""

from __future__ import annotations

import json
import re

import msgspec
import numpy as np

from gpucheckup.analysis.one_trace.gpu.kernels import categorize
from gpucheckup.analysis.one_trace.steps import Steps
from gpucheckup.hardware import links
from gpucheckup.trace.tables import KERNEL, USER_ANNOTATION, Trace

DTYPE_BYTES = {"float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "c10::half": 2, "float16": 2,
               "bfloat16": 2, "c10::bfloat16": 2, "long": 8, "long int": 8, "int64": 8, "int": 4, "int32": 4,
               "short": 2, "char": 1, "signed char": 1, "unsigned char": 1, "bool": 1, "byte": 1,
               "float8_e4m3fn": 1, "float8_e5m2": 1, "c10::float8_e4m3fn": 1, "c10::float8_e5m2": 1}
GLOO_ANNOTATION = re.compile(r"^gloo:(\w+)$")


class Calls(msgspec.Struct):
    """One rank's collective calls, in issue order; times on this trace's clock (us)."""

    keys: list[tuple]  # (pg, collective, step label, index within step and pg)
    collective: list[str]  # canonical name (hardware/links.canonical)
    start: np.ndarray
    end: np.ndarray
    nbytes: np.ndarray  # S, nccl-tests' size
    group_size: np.ndarray  # nan when unknown
    on_gpu: bool
    row: np.ndarray | None = None  # the kernel's row in trace.gpu (GPU calls); None for gloo calls

    def __len__(self) -> int:
        return len(self.start)


def dtype_bytes(name: str) -> int:
    """Bytes of one element of a dtype as the profiler names it ("Float", "c10::BFloat16", "float")."""
    return DTYPE_BYTES.get(name.strip().lower(), 4)


def collective_calls(trace: Trace, steps: Steps, launch_rows: np.ndarray) -> Calls:
    """The collective calls of one trace: NCCL kernels when there are any, else gloo annotations."""
    gpu = _gpu_calls(trace, steps, launch_rows)
    return gpu if len(gpu) else _gloo_calls(trace, steps)


def _gpu_calls(trace: Trace, steps: Steps, launch_rows: np.ndarray) -> Calls:
    c, host, g = trace.comms, trace.host, trace.gpu
    rows = []
    if c is not None and len(g):
        comm_names = {i for i, n in enumerate(trace.names) if categorize(n) == "communication"}
        k = np.flatnonzero((g.kind == KERNEL) & np.isin(g.name, list(comm_names)) & (launch_rows >= 0))
        op_start, op_end, op_tid = host.start[c.host_row], host.end[c.host_row], host.tid[c.host_row]
        for row in k:
            call = launch_rows[row]
            t, tid = host.start[call], host.tid[call]
            inside = np.flatnonzero((op_tid == tid) & (op_start <= t) & (op_end >= t))
            if len(inside):
                j = inside[np.argmax(op_start[inside])]
                rows.append((op_start[j], row, j))
    rows.sort()
    issue_t = np.array([r[0] for r in rows])
    krow = np.array([r[1] for r in rows], dtype=np.int64)
    crow = np.array([r[2] for r in rows], dtype=np.int64)
    names = [links.canonical(c.collective[j]) for j in crow] if len(rows) else []
    pgs = [c.pg[j] for j in crow] if len(rows) else []
    nbytes = np.array([np.fmax(c.in_nelems[j], c.out_nelems[j]) * dtype_bytes(c.dtype[j]) for j in crow])
    return Calls(keys=_keys(pgs, names, issue_t, steps), collective=names,
                 start=g.start[krow] if len(rows) else np.zeros(0), end=g.end[krow] if len(rows) else np.zeros(0),
                 nbytes=np.nan_to_num(nbytes, nan=0.0) if len(rows) else np.zeros(0),
                 group_size=np.array([c.group_size[j] for j in crow], dtype=np.float64), on_gpu=True, row=krow)


def _gloo_calls(trace: Trace, steps: Steps) -> Calls:
    host = trace.host
    ids = {i: m.group(1) for i, n in enumerate(trace.names) for m in [GLOO_ANNOTATION.match(n)] if m}
    rows = np.flatnonzero((host.cat == USER_ANNOTATION) & np.isin(host.name, list(ids)))
    rows = rows[np.argsort(host.start[rows], kind="stable")]
    names = [links.canonical(ids[host.name[r]]) for r in rows]
    n = float(trace.world_size) if trace.world_size else np.nan
    nbytes = np.array([_annotation_bytes(host.shapes[r], host.dtypes[r]) for r in rows], dtype=np.float64)
    gathered = np.array([nm == "all_gather" for nm in names], dtype=bool)
    if np.isfinite(n):
        nbytes = np.where(gathered, nbytes * n, nbytes)
    return Calls(keys=_keys(["default"] * len(rows), names, host.start[rows], steps), collective=names,
                 start=host.start[rows], end=host.end[rows], nbytes=nbytes,
                 group_size=np.full(len(rows), n), on_gpu=False)


def _annotation_bytes(shapes: bytes | None, dtypes: bytes | None) -> float:
    """Bytes of an annotation's first input from its `Input Dims` and `Input type` (record_shapes)."""
    if not shapes or not dtypes:
        return 0.0
    try:
        dims, types = json.loads(shapes), json.loads(dtypes)
        first = dims[0]
        if first and isinstance(first[0], list):  # a tensor list: its first tensor
            first = first[0]
        return float(np.prod(first)) * dtype_bytes(types[0] if types else "float")
    except (ValueError, TypeError, IndexError):
        return 0.0


def _keys(pgs: list[str], names: list[str], issue_t: np.ndarray, steps: Steps) -> list[tuple]:
    """(pg, collective, step label, index within step and pg) for calls issued at issue_t."""
    step = steps.index_of(issue_t) if len(issue_t) else np.zeros(0, dtype=int)
    seen: dict[tuple, int] = {}
    keys = []
    for pg, name, s in zip(pgs, names, step):
        label = steps.labels[s] if s >= 0 else "outside steps"
        i = seen.get((pg, label), 0)
        seen[(pg, label)] = i + 1
        keys.append((pg, name, label, i))
    return keys

"""Link GPU ops to the host: to the CUDA call that launched each (correlation id) and to the
operator it ran for (External id).

A kernel, copy or memset carries `args.correlation`; the CUDA runtime or driver call that
enqueued it (`cudaLaunchKernel`, `cudaMemcpyAsync`, `cuLaunchKernel`, ...) carries the same id.
It also carries `args["External id"]`, the id of the `cpu_op` (e.g. `aten::mm`) it belongs to.
"""

from __future__ import annotations

import numpy as np

from gpucheckup.trace.tables import CPU_OP, DRIVER, RUNTIME, Trace


def launch_rows(trace: Trace) -> np.ndarray:
    """For each GPU op, the row in `trace.host` of its launching runtime/driver call, or -1."""
    host = trace.host
    calls = np.flatnonzero(((host.cat == RUNTIME) | (host.cat == DRIVER)) & (host.correlation >= 0))
    out = np.full(len(trace.gpu), -1, dtype=np.int64)
    if len(calls) == 0 or len(trace.gpu) == 0:
        return out
    corr = host.correlation[calls]
    order = np.argsort(corr, kind="stable")
    corr_sorted, rows_sorted = corr[order], calls[order]
    want = trace.gpu.correlation
    i = np.searchsorted(corr_sorted, want)
    i = np.minimum(i, len(corr_sorted) - 1)
    hit = (corr_sorted[i] == want) & (want >= 0)
    out[hit] = rows_sorted[i[hit]]
    return out


def op_rows(trace: Trace, gpu_rows: np.ndarray) -> np.ndarray:
    """For the given GPU op rows, the row in `trace.host` of the cpu_op with the same External id, or -1."""
    host, gpu = trace.host, trace.gpu
    cpu = np.flatnonzero((host.cat == CPU_OP) & (host.external_id >= 0))
    if len(cpu) == 0 or len(gpu_rows) == 0:
        return np.full(len(gpu_rows), -1, dtype=np.int64)
    order = np.argsort(host.external_id[cpu], kind="stable")
    ext_sorted, cpu_sorted = host.external_id[cpu][order], cpu[order]
    ext = gpu.external_id[gpu_rows]
    pos = np.minimum(np.searchsorted(ext_sorted, ext), len(ext_sorted) - 1)
    return np.where((ext >= 0) & (ext_sorted[pos] == ext), cpu_sorted[pos], -1)

"""Link each GPU op to the host call that launched it, through Kineto's correlation ids.

A kernel, copy or memset carries `args.correlation`; the CUDA runtime or driver call that
enqueued it (`cudaLaunchKernel`, `cudaMemcpyAsync`, `cuLaunchKernel`, ...) carries the same id.
"""

from __future__ import annotations

import numpy as np

from gpucheckup.trace.tables import DRIVER, RUNTIME, Trace


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

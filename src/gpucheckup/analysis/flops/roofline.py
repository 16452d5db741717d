"""Roofline without Nsight Compute: for the GEMM, convolution and attention ops whose shapes the
trace recorded, arithmetic intensity against the GPU's ridge point gives the expected bound.

Definitions (also in docs/mfu.md):
- arithmetic intensity (AI) = the op's FLOPs / its compulsory bytes (every tensor input read once,
  every output written once; shape_flops.py). Real kernels move more (tiles re-read), so AI is an
  upper bound and "compute-bound" here means "could be".
- ridge point = the datasheet dense peak for the op's dtype / memory bandwidth, FLOP per byte
  (H200 bf16: 989.4e12 / 4.8e12 = 206).
- expected bound: compute-bound when AI >= ridge, memory-bound below it.
- achieved TFLOP/s of an op group = its FLOPs / the GPU time of the kernels it launched; % of peak
  against the same dtype's peak.
Ops are grouped by (op, shapes, dtype) and the groups with the most kernel time are shown.
"""

from __future__ import annotations

import msgspec

from gpucheckup.analysis.flops.shape_flops import FlopCount
from gpucheckup.hardware.peaks import GpuPeak

TOP_N = 8


class Roofline(msgspec.Struct):
    """The report's `roofline` block: one row per op group, or why there are none."""

    ops: list[dict] = msgspec.field(default_factory=list)
    reason: str | None = None
    mem_bw_gb_s: float | None = None


def roofline(shapes: FlopCount | None, gpu: GpuPeak | None, n_steps: int, top: int = TOP_N) -> Roofline:
    """The top op groups by kernel time, each with AI, ridge, expected bound and achieved rate."""
    if shapes is None:
        return Roofline(reason="no GEMM/conv/attention shapes in the trace (record it with record_shapes=True)")
    rows = []
    for g in sorted(shapes.groups, key=lambda g: -g["kernel_ms"])[:top]:
        dtype = g["dtype"] or "bf16"
        ridge = gpu.ridge(dtype) if gpu else None
        peak = gpu.peak(dtype) if gpu else None
        ai = g["intensity"]
        rows.append({
            "op": g["op"],
            "kind": g["kind"],
            "shapes": g["shapes"],
            "dtype": g["dtype"],
            "count_per_step": g["count"] / n_steps,
            "gflops_each": g["flops_each"] / 1e9,
            "mb_each": g["bytes_each"] / 1e6,
            "intensity": ai,
            "ridge": ridge,
            "expected": None if ai is None or ridge is None else ("compute-bound" if ai >= ridge else "memory-bound"),
            "kernel_ms_per_step": g["kernel_ms"] / n_steps,
            "achieved_tflops": g["achieved_tflops"],
            "pct_of_peak": 100 * g["achieved_tflops"] / peak if peak and g["achieved_tflops"] else None,
        })
    return Roofline(ops=rows, reason=None if gpu else "GPU not in the peak table: no ridge point",
                    mem_bw_gb_s=gpu.mem_bw_gb_s if gpu else None)

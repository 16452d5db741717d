"""The hardware figures as plain text: MFU, the roofline of the top GEMM ops, Nsight Compute
bounds. Shared by the terminal, HTML and Markdown reports; no rendering library here."""

from __future__ import annotations

from gpucheckup.document import TraceReport


def mfu_short(r: TraceReport) -> str:
    """MFU in a few words for the key-figures table."""
    m = r.mfu
    if m is None or m.achieved_tflops is None:
        return "unknown (no FLOPs per step)"
    if m.pct is None:
        return f"{m.achieved_tflops:.0f} TFLOP/s (no peak)"
    return f"{pct(m.pct)} ({m.achieved_tflops:.3g} of {m.peak_tflops:g} TFLOP/s {m.dtype})"


def mfu_line(r: TraceReport) -> str:
    """One line: MFU, achieved TFLOP/s, the peak and where the FLOPs came from; or why it is unknown."""
    m = r.mfu
    if m is None or m.achieved_tflops is None:
        return f"unknown: {(m and m.reason) or 'no FLOPs per step'}"
    head = f"{m.achieved_tflops:.1f} TFLOP/s achieved"
    if m.pct is not None:
        head = f"{pct(m.pct)} of {m.peak_tflops:g} TFLOP/s ({m.dtype}, {m.peak_from}); " + head
    else:
        head += f" (no peak: {m.reason})"
    if m.pct_of_gemm_dtype_peak is not None:
        head += f"; {pct(m.pct_of_gemm_dtype_peak)} of the {m.gemm_dtype} peak the GEMMs run at"
    if m.pct_of_measured is not None:
        head += f"; {pct(m.pct_of_measured)} of measured {m.measured_tflops:.0f}"
    rate = []
    if m.tokens_per_s:
        rate.append(f"{m.tokens_per_s:,.0f} tokens/s")
    if m.samples_per_s:
        rate.append(f"{m.samples_per_s:,.1f} samples/s")
    tail = f"; FLOPs from {m.source}" + (f"; {', '.join(rate)}" if rate else "")
    return head + tail


def num(x, digits: int) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def pct(x: float) -> str:
    """A percentage with one decimal, or two significant digits under 1%."""
    return f"{x:.1f}%" if x >= 1 else f"{x:.2g}%"


def bands_line(r: TraceReport) -> str | None:
    """The healthy MFU bands and where this job stands, or None when MFU is unknown."""
    if r.mfu is None or not r.mfu.assessment:
        return None
    return "dense pre-training 35-50%, MoE with FP8 20-32%: " + r.mfu.assessment


def roofline_rows(r: TraceReport, limit: int = 5) -> list[list[str]]:
    """Top GEMM/conv/attention ops: op and shapes, dtype, ms/step, AI, ridge, expected bound, TFLOP/s."""
    rows = []
    for o in (r.roofline.ops if r.roofline else [])[:limit]:
        shapes = ", ".join("x".join(map(str, s)) for s in o.shapes[:3])
        expected = {"compute-bound": "compute", "memory-bound": "memory"}.get(o.expected, "?")
        op = o.op.removeprefix("aten::").replace("scaled_dot_product_", "sdpa_")
        rows.append([f"{op} {shapes}", o.dtype or "?", f"{o.kernel_ms_per_step:.2f}", num(o.intensity, 0),
                     num(o.ridge, 0), expected, num(o.achieved_tflops, 0)])
    return rows


ROOFLINE_HEADERS = ["op and input shapes", "dtype", "ms/step", "AI (FLOP/B)", "ridge (FLOP/B)", "expected",
                    "TFLOP/s"]
NCU_HEADERS = ["kernel", "share", "bound", "SM %", "memory %", "warps active %"]


def ncu_rows(r: TraceReport, limit: int = 5) -> list[list[str]]:
    """Top kernels with their Nsight Compute Speed-of-Light bound."""
    return [[k.label, f"{k.pct:.1f}%", k.bound or "not profiled", num(k.sm_pct, 1), num(k.memory_pct, 1),
             num(k.warps_active_pct, 1)] for k in (r.ncu.top if r.ncu else [])[:limit]]

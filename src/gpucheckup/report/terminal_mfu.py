"""The terminal report's hardware section: MFU against the healthy bands, the top GEMM ops against
the roofline, and the Nsight Compute bounds of the top kernels when imported.

Trace text (kernel and op names) goes through `Text`, never Rich markup.
"""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

BOUND_STYLE = {"compute-bound": "green", "memory-bound": "yellow", "latency-bound": "red", "balanced": "cyan"}


def mfu_short(r: dict) -> str:
    """MFU in a few words for the key-figures table."""
    m = r.get("mfu") or {}
    if m.get("achieved_tflops") is None:
        return "unknown (no FLOPs per step)"
    if m.get("pct") is None:
        return f"{m['achieved_tflops']:.0f} TFLOP/s (no peak)"
    return f"{_pct(m['pct'])} ({m['achieved_tflops']:.3g} of {m['peak_tflops']:g} TFLOP/s {m['dtype']})"


def mfu_line(r: dict) -> str:
    """One line: MFU, achieved TFLOP/s, the peak and where the FLOPs came from; or why it is unknown."""
    m = r.get("mfu") or {}
    if m.get("achieved_tflops") is None:
        return f"unknown: {m.get('reason') or 'no FLOPs per step'}"
    head = f"{m['achieved_tflops']:.1f} TFLOP/s achieved"
    if m.get("pct") is not None:
        head = f"{_pct(m['pct'])} of {m['peak_tflops']:g} TFLOP/s ({m['dtype']}, {m['peak_from']}); " + head
    else:
        head += f" (no peak: {m.get('reason')})"
    if m.get("pct_of_gemm_dtype_peak") is not None:
        head += f"; {_pct(m['pct_of_gemm_dtype_peak'])} of the {m['gemm_dtype']} peak the GEMMs run at"
    if m.get("pct_of_measured") is not None:
        head += f"; {_pct(m['pct_of_measured'])} of measured {m['measured_tflops']:.0f}"
    rate = []
    if m.get("tokens_per_s"):
        rate.append(f"{m['tokens_per_s']:,.0f} tokens/s")
    if m.get("samples_per_s"):
        rate.append(f"{m['samples_per_s']:,.1f} samples/s")
    tail = f"; FLOPs from {m['source']}" + (f"; {', '.join(rate)}" if rate else "")
    return head + tail


def render_hardware(r: dict, console: Console) -> None:
    """Print the MFU block, the roofline of the top GEMM ops and the ncu bounds."""
    m = r.get("mfu") or {}
    t = Table(title="How close to the hardware", title_justify="left", box=box.SIMPLE, show_header=False)
    t.add_column("figure")
    t.add_column("value")
    t.add_row("MFU", Text(mfu_line(r)))
    if m.get("assessment"):
        t.add_row("healthy bands", "dense pre-training 35-50%, MoE with FP8 20-32%: " + m["assessment"])
    est = m.get("estimates") or {}
    if len(est) > 1:
        t.add_row("FLOPs per step by source", ", ".join(f"{k} {v:.4g}" for k, v in est.items()))
    console.print(t)
    ops = (r.get("roofline") or {}).get("ops") or []
    if ops:
        rt = Table(title="Top GEMM/conv/attention ops against the roofline (AI and ridge in FLOP/byte)",
                   title_justify="left", box=box.SIMPLE)
        rt.add_column("op and input shapes", ratio=1, overflow="fold")
        for col in ("dtype", "ms/step", "AI", "ridge", "expected", "TFLOP/s"):
            rt.add_column(col, justify="left" if col in ("dtype", "expected") else "right", no_wrap=True)
        for o in ops[:5]:
            shapes = ", ".join("x".join(map(str, s)) for s in o["shapes"][:3])
            expected = {"compute-bound": "compute", "memory-bound": "memory"}.get(o["expected"], "?")
            op = o["op"].removeprefix("aten::").replace("scaled_dot_product_", "sdpa_")
            rt.add_row(Text(f"{op} {shapes}"), o["dtype"] or "?",
                       f"{o['kernel_ms_per_step']:.2f}", _num(o["intensity"], 0), _num(o["ridge"], 0), expected,
                       _num(o["achieved_tflops"], 0))
        console.print(rt)
    n = r.get("ncu")
    if n:
        nt = Table(title=f"Nsight Compute: top kernels ({n['matched_to_trace']} of {n['kernel_names']} ncu kernels "
                         "matched to the trace)", title_justify="left", box=box.SIMPLE)
        nt.add_column("kernel", no_wrap=True, overflow="ellipsis", max_width=36)
        for col in ("share", "bound", "SM%", "mem%", "warps%"):
            nt.add_column(col, no_wrap=True, justify="left" if col == "bound" else "right")
        for k in n["top"][:5]:
            nt.add_row(Text(k["label"]), f"{k['pct']:.1f}%", Text(k["bound"] or "not profiled",
                                                                   style=BOUND_STYLE.get(k["bound"], "dim")),
                       _num(k["sm_pct"], 1), _num(k["memory_pct"], 1), _num(k["warps_active_pct"], 1))
        console.print(nt)


def _num(x, digits: int) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def _pct(x: float) -> str:
    """A percentage with one decimal, or two significant digits under 1%."""
    return f"{x:.1f}%" if x >= 1 else f"{x:.2g}%"

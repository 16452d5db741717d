"""The terminal report's hardware section: MFU against the healthy bands, the top GEMM ops against
the roofline, and the Nsight Compute bounds of the top kernels when imported.

Trace text (kernel and op names) goes through `Text`, never Rich markup.
"""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpucheckup.document import TraceReport
from gpucheckup.report.text.hardware_text import (
    NCU_HEADERS, bands_line, mfu_line, ncu_rows, roofline_rows,
)

# ROOFLINE_HEADERS with the units in the table's title, so the op and its shapes keep the width at 80 columns
TERMINAL_ROOFLINE_HEADERS = ["op and input shapes", "dtype", "ms/step", "AI", "ridge", "bound", "TFLOP/s"]
BOUND_STYLE = {"compute-bound": "green", "memory-bound": "yellow", "latency-bound": "red", "balanced": "cyan"}


def render_hardware(r: TraceReport, console: Console) -> None:
    """Print the MFU block, the roofline of the top GEMM ops and the ncu bounds."""
    t = Table(title="How close to the hardware", title_justify="left", box=box.SIMPLE, show_header=False)
    t.add_column("figure")
    t.add_column("value")
    t.add_row("MFU", Text(mfu_line(r)))
    if bands_line(r):
        t.add_row("healthy bands", bands_line(r))
    est = r.mfu.estimates if r.mfu else {}
    if len(est) > 1:
        t.add_row("FLOPs per step by source", ", ".join(f"{k} {v:.4g}" if v is not None else f"{k} not finite" for k, v in est.items()))
    console.print(t)
    rows = roofline_rows(r)
    if rows:
        rt = Table(title="Top GEMM/conv/attention ops against the roofline (AI and ridge in FLOP/B)",
                   title_justify="left", box=box.SIMPLE, expand=True)
        for i, col in enumerate(TERMINAL_ROOFLINE_HEADERS):
            rt.add_column(col, ratio=1 if i == 0 else None, overflow="fold", min_width=16 if i == 0 else None,
                          no_wrap=i > 0, justify="left" if i in (0, 1, 5) else "right")
        for row in rows:
            rt.add_row(Text(row[0]), *row[1:])
        console.print(rt)
    n = r.ncu
    if n:
        nt = Table(title=f"Nsight Compute: top kernels ({n.matched_to_trace} of {n.kernel_names} ncu kernels "
                         "matched to the trace)", title_justify="left", box=box.SIMPLE)
        for i, col in enumerate(NCU_HEADERS):
            nt.add_column(col, no_wrap=True, overflow="ellipsis", max_width=36 if i == 0 else None,
                          justify="left" if i in (0, 2) else "right")
        for row in ncu_rows(r):
            nt.add_row(Text(row[0]), row[1], Text(row[2], style=BOUND_STYLE.get(row[2], "dim")), *row[3:])
        console.print(nt)

"""`gpucheckup ab` in the terminal: one row per side and the sentence."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:  # the typed result this renders (a type, never a call into analysis)
    from gpucheckup.analysis.comparison.ab_stats import AbResult


def render(result: AbResult, console: Console) -> None:
    """Print both sides' figures and the verdict."""
    unit = "samples/s" if result.a.samples_per_step else "steps/s"
    clock = " (on the GPU: a side ran ahead of it)" if result.clock == "gpu" else ""
    t = Table(title=f"A/B: median step time per side{clock}", title_justify="left")
    for col in ("side", "median step", f"{result.confidence:.0%} interval", unit, "rounds (median step each)", "steps"):
        t.add_column(col)
    for s in (result.a, result.b):
        t.add_row(s.label, f"{s.median_ms:.3f} ms", f"{s.lo_ms:.3f} - {s.hi_ms:.3f} ms", f"{s.per_s:.2f}",
                  ", ".join(f"{x:.3f}" for x in s.round_ms), str(s.steps))
    console.print(t, markup=False)
    console.print(result.sentence, markup=False, soft_wrap=True)

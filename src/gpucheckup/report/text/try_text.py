"""`gpucheckup try` in the terminal: one row per fix (applied where, predicted, measured, verdict), then the
sentences. It renders the TryDocument; it computes nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:  # the typed result this renders
    from gpucheckup.document import Trial, TryDocument

HEADERS = ("fix", "applied", "predicted saving", "measured saving", "95% interval", "verdict")


def pct(x: float | None) -> str:
    """A saving in percent, or '-' when there is none."""
    return "-" if x is None else f"{x:+.1f}%"


def interval(row: Trial) -> str:
    """The measured saving's interval, or '-'."""
    return "-" if not row.interval_pct else f"{row.interval_pct[0]:+.1f}% to {row.interval_pct[1]:+.1f}%"


def cells(row: Trial) -> list[str]:
    """One fix's cells, in HEADERS' order (every view prints the same)."""
    verdict = row.verdict + (f" (exit {row.exit_code})" if row.exit_code is not None else "")
    return [row.fix, "yes" if row.applied else "no", pct(row.predicted_saving_pct), pct(row.measured_saving_pct),
            interval(row), verdict]


def base_line(doc: TryDocument) -> str:
    """The base's step time and how it was measured."""
    if doc.base_ms is None:
        return "base: not measured"
    steps = f", ended after {doc.max_steps} steps by --max-steps" if doc.max_steps else ""
    return (f"base (the command as it is): {doc.base_ms:.3f} ms per step, median of {doc.rounds} processes "
            f"({doc.warmup} warm-up steps dropped, up to {doc.measure} measured{steps})")


def render(doc: TryDocument, console: Console) -> None:
    """Print the table, where each fix was applied, and each fix's sentence (the caller said the side effects
    before the processes ran)."""
    console.print(base_line(doc), markup=False, soft_wrap=True)
    if doc.checkup is not None:
        step = f", step {doc.checkup.step_ms:.3f} ms under the profiler" if doc.checkup.step_ms else ""
        console.print(f"check-up (predictions): verdict {doc.checkup.verdict or '-'}{step}; {doc.checkup.run_dir}",
                      style="dim", markup=False, soft_wrap=True)
    if doc.fixes:
        t = Table(title="Fixes tried: predicted beside measured (saving: positive is faster)", title_justify="left")
        for i, h in enumerate(HEADERS):
            t.add_column(h, justify="right" if 2 <= i <= 4 else "left", overflow="fold")
        for row in doc.fixes:
            t.add_row(*cells(row))
        console.print(t, markup=False)
    for row in doc.fixes:
        console.print(f"{row.fix}: {row.how}", markup=False, soft_wrap=True)
        console.print(f"  {row.sentence}", markup=False, soft_wrap=True)
    for note in doc.notes:
        console.print(note, style="dim", markup=False, soft_wrap=True)

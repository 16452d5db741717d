"""`gpucheckup scaling` in the terminal: the two step times, the efficiency, the extra time by part, the
environment differences and, above 100%, the likely cause."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:  # the typed result this renders (a type, never a call into analysis)
    from gpucheckup.analysis.job.scaling import Scaling


def render(sc: Scaling, step_from: str, both_envs: bool, console: Console) -> None:
    """Print the scaling table, how the steps were taken, the environment differences and the cause above 100%."""
    n = sc.n
    t = Table(title=f"Scaling: 1 -> {n} GPUs", title_justify="left")
    t.add_column("figure")
    t.add_column("value", justify="right")
    t.add_row("step, 1 GPU", f"{sc.step_1_ms:.2f} ms")
    t.add_row(f"step, {n} GPUs", f"{sc.step_n_ms:.2f} ms")
    t.add_row("efficiency", f"{sc.efficiency_pct:.1f}%" + (f" (under {sc.low_pct:g}%: look at communication)"
                                                           if sc.low else " (above 100%: see below)" if sc.high
                                                           else ""))
    for k, v in sc.parts_ms.items():
        t.add_row(f"  extra: {k}", f"{v:+.2f} ms")
    console.print(t)
    console.print(f"step times: {step_from}", style="dim", markup=False)
    if sc.env_differences:
        d = Table(title="Environment differences (env.json)", title_justify="left")
        for col in ("what", "1 rank", f"{n} ranks"):
            d.add_column(col, overflow="fold")
        for e in sc.env_differences:
            d.add_row(e.name, e.run_1, e.run_n)
        console.print(d)
    elif both_envs:
        console.print("environment (env.json): no difference besides the rank count", style="dim", markup=False)
    if sc.over_100_cause:
        console.print(f"Efficiency above 100%: {n} ranks did more than {n} times the work of one per unit of time. "
                      f"Likely cause: {sc.over_100_cause}.", markup=False)

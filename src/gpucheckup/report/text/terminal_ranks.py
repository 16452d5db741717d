"""The terminal view of a job's ranks together: the job's verdict, the straggler, per-rank time, collectives.

More than MAX_ROWS ranks are summarised: the distribution of each column (min, median, p90,
max) and the outlier ranks, as the job's `ranks.distribution` holds them (analysis/job/ranks.py),
not hundreds of rows.
"""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpucheckup.document import RankRow, job_part, rank_table

MAX_ROWS = 16


def rank_times(r: RankRow) -> tuple[float | None, ...]:
    """A rank's per-step times in the table's column order: step, compute, transfer, wait, exposed wait, idle, late."""
    return r.step_ms, r.compute_ms, r.transfer_ms, r.wait_ms, r.exposed_wait_ms, r.idle_ms, r.late_ms


def outlier_text(ranks: list[int]) -> str:
    """The outlier ranks, the first eight named."""
    return ", ".join(map(str, ranks[:8])) + (f" (+{len(ranks) - 8})" if len(ranks) > 8 else "") or "-"


def _item(console: Console, mark: str, text: str) -> None:
    """One indented list item whose wrapped lines stay indented under its text."""
    g = Table.grid(padding=(0, 1))
    g.add_column(width=len(mark) + 2, justify="right")
    g.add_column()
    g.add_row(mark, Text(text))
    console.print(g)


def render_job(d: dict, console: Console) -> None:
    """Print the job's verdict, its findings and the ranks side by side (`d`: checkup/ranks.job_dict)."""
    job, v = job_part(d)
    ranks, comm = job.ranks, job.communication
    console.print(Text(f"Job: {v.primary.replace('_', ' ').upper()}", style="bold"))
    console.print(Text(v.reason))
    for f in v.findings:
        console.print(Text(f"\n{f.title}", style="bold yellow"))
        for e in f.evidence:
            _item(console, "-", e)
        for x in f.fix:
            _item(console, "fix", f"({x.tier}, up to {x.saving_ms:.2f} ms per step): {x.action}")
    table = rank_table(ranks.table)
    t = Table(title=f"Ranks ({len(table)}; per step, ms: step, compute, transfer, wait, exposed wait, idle, late; "
                    "% of communication hidden)", title_justify="left", box=box.SIMPLE)
    if len(table) <= MAX_ROWS:
        for col in ("rank", "verdict", "step", "comp", "xfer", "wait", "exp.w", "idle", "late", "hid%"):
            t.add_column(col, justify="left" if col in ("rank", "verdict") else "right", no_wrap=True)
        for r in table:
            hidden = r.comm_overlap_pct
            t.add_row(str(r.rank), Text(str(r.verdict or "-").replace("_bound", "")),
                      *[f"{x:.1f}" if x is not None else "-" for x in rank_times(r)],
                      f"{hidden:.0f}%" if hidden is not None else "-")
    else:
        t.add_column("figure")
        for col in ("min", "median", "p90", "max", "outlier ranks"):
            t.add_column(col, justify="right")
        for s in ranks.distribution:
            t.add_row(s.figure.replace("_ms", ""), *[f"{x:.2f}" for x in (s.min, s.median, s.p90, s.max)],
                      outlier_text(s.outliers))
    console.print(t)
    if comm.collectives:
        c = Table(title="Collectives (matched across ranks; per step, ms)", title_justify="left", box=box.SIMPLE)
        for col in ("collective", "MiB", "calls", "transfer", "wait", "busbw GB/s"):
            c.add_column(col, justify="left" if col == "collective" else "right")
        for row in comm.collectives[:10]:
            c.add_row(row.name, f"{row.bytes / 2**20:.1f}", str(row.count), f"{row.transfer_ms:.2f}",
                      f"{row.wait_ms:.2f}", f"{row.busbw_gb_s:.1f}" if row.busbw_gb_s else "-")
        console.print(c)
    link = f"{comm.link_gb_s:.0f} GB/s ({comm.link_from})" if comm.link_gb_s else "unknown"
    bw = f"{comm.busbw_gb_s:.1f} GB/s" if comm.busbw_gb_s else "-"
    console.print(Text(f"bus bandwidth {bw} (byte-weighted); link {link}"))

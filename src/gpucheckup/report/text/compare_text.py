"""`gpucheckup compare` as a terminal table and as Markdown (for a pull request): by default the figures that changed
beyond noise, grouped, by the names people read (analysis/comparison/compare.py); `--all` for every figure."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:  # the typed result this renders (a type, never a call into analysis)
    from gpucheckup.analysis.comparison.compare import Comparison, FigureChange


def _num(x: float | None) -> str:
    """A value in at most 8 characters: 4 significant digits, k/M/G/T past 10,000."""
    if x is None:
        return "-"
    for div, unit in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e4, "k")):
        if abs(x) >= div:
            return f"{x / div:.4g}{unit}"
    return f"{x:.4g}"


def _change(f: FigureChange) -> str:
    """The change in words: relative (%), in points, from 0 (absolute), new or gone; never infinite."""
    if f.status in ("new", "gone"):
        return f.status
    if f.status == "from 0":
        return f"+{_num(f.change)} from 0" if f.change > 0 else f"{_num(f.change)} from 0"
    return f"{f.change:+.1f} pts" if f.points else f"{f.change:+.1f}%"


def render(c: Comparison, console: Console, everything: bool = False) -> None:
    """Print the sentence, then the figures (those beyond noise unless `everything`), grouped."""
    console.print(Text(c.sentence))
    rows = c.shown(everything)
    hidden = len(c.figures) - len(rows)
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, expand=False)
    t.add_column("figure", overflow="fold", ratio=1)
    t.add_column("A", justify="right", no_wrap=True)
    t.add_column("B", justify="right", no_wrap=True)
    t.add_column("change", justify="right", no_wrap=True)
    if everything:
        t.add_column("beyond", no_wrap=True)
    group = None
    for f in rows:
        if f.group != group:
            if group is not None:
                t.add_section()
            group = f.group
            t.add_row(Text(group, style="bold"), *([""] * (4 if everything else 3)))
        cells = [Text("  " + f.name), _num(f.a), _num(f.b), _change(f)]
        t.add_row(*cells, *(["yes" if f.beyond_noise else ""] if everything else []))
    if rows:
        console.print(t)
    what = f"change over {c.noise_pct:.1f}% (points for percentages) is beyond noise"
    console.print(Text(f"{what}; {hidden} figure{'s' if hidden != 1 else ''} within noise or unchanged not shown "
                       "(--all shows every figure)" if hidden and not everything else f"{what}."), style="dim")


def _md(s: str) -> str:
    """Text safe in a Markdown table cell."""
    out = s.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")
    for ch in "`*_[]<>":
        out = out.replace(ch, "\\" + ch)
    return out


def _code(s: str) -> str:
    """A figure key as a Markdown code span in a table cell."""
    return "`" + " ".join(s.replace("`", "'").replace("|", "\\|").split()) + "`"


def markdown(c: Comparison, a_name: str, b_name: str, everything: bool = False) -> str:
    """The comparison as Markdown: the sentence, then the figures that changed beyond noise (every one with
    `everything`), grouped."""
    lines = ["## gpucheckup compare", "", f"A: {_md(a_name)}  ", f"B: {_md(b_name)}", "", _md(c.sentence), "",
             f"A change counts as beyond noise when it exceeds {c.noise_pct:.1f}% (points for percentages)"
             + ("." if everything else "; only those are listed."), "",
             "| figure | key | A | B | change | beyond noise |", "| --- | --- | ---: | ---: | ---: | :---: |"]
    group = None
    for f in c.shown(everything):
        if f.group != group:
            group = f.group
            lines.append(f"| **{_md(group)}** | | | | | |")
        lines.append(f"| {_md(f.name)} | {_code(f.key)} | {_num(f.a)} | {_num(f.b)} | {_md(_change(f))} | "
                     f"{'yes' if f.beyond_noise else ''} |")
    return "\n".join(lines) + "\n"

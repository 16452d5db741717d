"""`gpucheckup compare` as a terminal table and as Markdown (for a pull request)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpucheckup.analysis.comparison.compare import Comparison, FigureChange


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.4g}" if abs(x) < 1e6 else f"{x:.4e}"


def _change(f: FigureChange) -> str:
    if f.change is None:
        return "only one side"
    return f"{f.change:+.1f} pts" if f.points else f"{f.change:+.1f}%"


def render(c: Comparison, console: Console, only_changed: bool = False) -> None:
    """Print the figures side by side and the sentence."""
    t = Table(title=f"Compare: A vs B (beyond noise: change over {c.noise_pct:.1f}%)", title_justify="left")
    for col in ("figure", "A", "B", "change", "beyond noise"):
        t.add_column(col)
    for f in c.figures:
        if only_changed and not f.beyond_noise:
            continue
        t.add_row(Text(f.key), _num(f.a), _num(f.b), _change(f), "yes" if f.beyond_noise else "")
    console.print(t)
    console.print(Text(c.sentence))


def _md(s: str) -> str:
    """Text safe in a Markdown table cell."""
    out = s.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")
    for ch in "`*_[]<>":
        out = out.replace(ch, "\\" + ch)
    return out


def _code(s: str) -> str:
    """A figure key as a Markdown code span in a table cell."""
    return "`" + " ".join(s.replace("`", "'").replace("|", "\\|").split()) + "`"


def markdown(c: Comparison, a_name: str, b_name: str) -> str:
    """The comparison as Markdown: the sentence, then every figure."""
    lines = ["## gpucheckup compare", "", f"A: {_md(a_name)}  ", f"B: {_md(b_name)}", "", _md(c.sentence), "",
             f"A change counts as beyond noise when it exceeds {c.noise_pct:.1f}% (points for percentages).", "",
             "| figure | A | B | change | beyond noise |", "| --- | ---: | ---: | ---: | :---: |"]
    for f in c.figures:
        lines.append(f"| {_code(f.key)} | {_num(f.a)} | {_num(f.b)} | {_change(f)} | {'yes' if f.beyond_noise else ''} |")
    return "\n".join(lines) + "\n"

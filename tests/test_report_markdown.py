"""The Markdown report renders as tables (markdown-it-py, GFM tables) holding the figures a user checks."""

from __future__ import annotations

import subprocess
import sys

from conftest import raw_events, trace_path
from independent import step_windows
from markdown_it import MarkdownIt

from gpucheckup.report.pages.markdown import md, table


def seen(inline) -> str:
    """The text a reader sees in an inline token: escapes and entities resolved, emphasis markers gone."""
    return "".join(c.content for c in inline.children or [] if c.type in ("text", "text_special", "code_inline"))


def parse_tables(text: str) -> list[dict]:
    """Each table of a Markdown document: the heading before it, its header cells and body rows."""
    tokens = MarkdownIt("commonmark", {"html": True}).enable("table").parse(text)
    tables, heading, cur, row, in_heading = [], None, None, None, False
    for i, t in enumerate(tokens):
        if t.type == "heading_open":
            in_heading = True
        elif t.type == "inline" and in_heading:
            heading, in_heading = t.content, False
        elif t.type == "table_open":
            cur = {"heading": heading, "header": [], "rows": []}
        elif t.type == "tr_open":
            row = []
        elif t.type in ("th_open", "td_open"):
            row.append(seen(tokens[i + 1]) if tokens[i + 1].type == "inline" else "")
        elif t.type == "tr_close":
            if not cur["header"]:
                cur["header"] = row
            else:
                cur["rows"].append(row)
        elif t.type == "table_close":
            tables.append(cur)
    return tables


def test_markdown_report_is_tables_with_the_trace_figures(tmp_path):
    trace = trace_path("moe_seed")
    out = tmp_path / "report.md"
    res = subprocess.run([sys.executable, "-m", "gpucheckup", "analyze", str(trace), "--quiet", "--markdown",
                          str(out)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    text = out.read_text()
    tables = parse_tables(text)
    by_heading = {t["heading"]: t for t in tables}
    for name in ("What to try first", "Key figures", "Steps", "Idle gaps by duration", "GPU time by kernel category",
                 "Top kernels", "Copies", "Synchronizations", "Environment"):
        assert name in by_heading, f"no {name!r} table; tables: {list(by_heading)}"
    for t in tables:
        assert t["rows"], t["heading"]
        assert all(len(r) == len(t["header"]) for r in t["rows"]), t["heading"]

    # Step times, checked against step windows computed independently from the raw JSON.
    windows = step_windows(raw_events(trace))
    steps = by_heading["Steps"]
    assert steps["header"][:5] == ["step", "GPU", "step ms", "GPU busy ms", "GPU busy %"]
    assert [r[0] for r in steps["rows"]] == [f"#{i}" for i in range(3, 8)]  # the one step numbering
    for row, (a, b) in zip(steps["rows"], windows):
        step_ms, busy_ms = float(row[2]), float(row[3])
        assert abs(step_ms - (b - a) / 1000) < 0.001
        assert abs(float(row[4]) - 100 * busy_ms / step_ms) < 0.06
        idle = sum(float(x) for x in row[5:])
        assert abs(busy_ms + idle - step_ms) < 0.001 * len(row)  # busy + idle by cause = the step, to rounding

    fixes = by_heading["What to try first"]
    assert fixes["header"] == ["#", "change", "fix", "predicted saving", "finding"]  # the replay (issue 10)
    assert fixes["rows"][0][1] == "configuration only"
    cats = {r[0]: r[1] for r in by_heading["GPU time by kernel category"]["rows"]}
    assert cats["data movement"] == "20.6%"
    assert "| **data movement** |" in text  # highlighted: bold
    gaps = by_heading["Idle gaps by duration"]["rows"]
    assert sum(int(r[1]) for r in gaps) == 611  # every idle gap of the trace, in some bin
    top = by_heading["Top kernels"]["rows"][0]
    assert top[0].startswith("sm80_xmma_gemm_f32f32") and top[2] == "12"
    assert text.index("Verdict: GPU-BOUND") < text.index("What to try first") < text.index("Findings")


def test_cell_escaping_keeps_tables_whole():
    nasty = ["a|b", "`code`", "<img src=x onerror=alert(1)>", "x\ny", "*bold* _it_ [l](http://e)", "\\|", "~~s~~"]
    text = table(["name", "n"], [[n, 1] for n in nasty])
    (t,) = parse_tables(text)
    assert len(t["rows"]) == len(nasty)
    assert all(len(r) == 2 for r in t["rows"])
    html_out = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"]).render(text)
    assert "<img" not in html_out and "<code>" not in html_out and "<em>" not in html_out
    assert "<a " not in html_out and "<s>" not in html_out and "<strong>" not in html_out
    # What a reader sees is the original text (line breaks become spaces).
    assert [r[0] for r in t["rows"]] == [" ".join(n.split()) for n in nasty]
    assert md("x\ny") == "x y"

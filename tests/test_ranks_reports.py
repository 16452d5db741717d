"""The job section (ranks side by side) in the HTML and Markdown reports: the figures the JSON holds, trace
text escaped, many ranks as a distribution, and no sideways overflow in Chromium at 1400 and 390 px."""

from __future__ import annotations

import html as html_lib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ranks_view

from gpucheckup.report.pages.job_pages import html_section, markdown_section

DATA = Path(__file__).resolve().parent / "data" / "h200x2"
KEYS = ("step_ms", "compute_ms", "transfer_ms", "wait_ms", "exposed_wait_ms", "idle_ms", "late_ms")


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("job")
    out = {k: tmp / f"r.{k}" for k in ("json", "html", "md")}
    res = subprocess.run([sys.executable, "-m", "gpucheckup", "analyze", str(DATA / "ddp_slow_input"), "--quiet",
                          "--json", str(out["json"]), "--html", str(out["html"]), "--markdown", str(out["md"])],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    return ranks_view(json.loads(out["json"].read_text())), out["html"], out["md"].read_text()


def _job_html(path: Path) -> str:
    page = path.read_text()
    return page[page.index('<section class="report" id="job">'):page.index("</section>")]


def test_html_job_section_holds_the_jsons_figures(outputs):
    d, path, _ = outputs
    sec = _job_html(path)
    assert "Rank 1 is the straggler" in sec and d["verdict"]["primary"].upper().replace("_", "-") in sec
    rows = re.findall(r"<tr>(.*?)</tr>", sec)
    cells = [[html_lib.unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<td[^>]*>(.*?)</td>", r)]
             for r in rows]
    for r in d["ranks"]["table"]:
        row = next(c for c in cells if c and c[0] == str(r["rank"]))
        assert row[1] == r["verdict"]
        assert row[2:9] == [f"{r[k]:.2f}" for k in KEYS]
        assert row[9] == f"{r['comm_overlap_pct']:.1f}%"
    (coll,) = d["communication"]["collectives"]
    row = next(c for c in cells if c and c[0] == "all_reduce")
    assert row[4:] == [f"{coll['transfer_ms']:.2f}", f"{coll['wait_ms']:.2f}", f"{coll['busbw_gb_s']:.2f}"]
    link = d["communication"]["link_gb_s"]
    assert f"bus bandwidth {d['communication']['busbw_gb_s']:.2f} GB/s" in sec and f"link {link:.1f} GB/s" in sec


def test_markdown_job_section_holds_the_jsons_figures(outputs):
    d, _, md = outputs
    sec = md[md.index("## The job: ranks side by side"):md.index("## Ranks\n")]
    assert "Rank 1 is the straggler" in sec
    for r in d["ranks"]["table"]:
        line = next(x for x in sec.splitlines() if x.startswith(f"| {r['rank']} | "))
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[1] == r["verdict"].replace("_", "\\_")
        assert cells[2:9] == [f"{r[k]:.2f}" for k in KEYS]
    (coll,) = d["communication"]["collectives"]
    line = next(x for x in sec.splitlines() if x.startswith("| all\\_reduce |"))
    assert f"| {coll['busbw_gb_s']:.2f} |" in line


def _hostile_job(n: int = 2) -> dict:
    from types import SimpleNamespace

    from gpucheckup.analysis.job.ranks import distribution

    evil = "<img src=x onerror=alert(1)>|*x*`\u202e"
    table = [{"rank": r, "verdict": evil, "step_ms": 100.0, "compute_ms": 80.0, "transfer_ms": 5.0,
              "wait_ms": 0.5 if r == n - 1 else 30.0, "exposed_wait_ms": 10.0, "idle_ms": 1.0,
              "late_ms": 30.0 if r == n - 1 else 0.1 * (r % 5), "comm_overlap_pct": None} for r in range(n)]
    finding = {"id": "straggler", "severity": "warning", "title": evil, "evidence": [evil], "events": [],
               "fix": [{"action": evil, "tier": "code", "saving_ms": 1.0}], "rule": evil,
               "cost_ms_per_step": 1.0, "cost_pct_of_step": 1.0}
    return {"verdict": {"primary": "input_bound", "reason": evil, "findings": [finding]},
            "ranks": {"straggler": n - 1, "late_ms_per_step": 30.0, "waited_ms_per_step": 10.0, "cause": evil,
                      "table": table, "matched_calls": 8, "steps": 2, "notes": [evil],
                      "distribution": distribution([SimpleNamespace(**r) for r in table])},
            "communication": {"collectives": [{"name": evil, "bytes": 2**20, "count": 4, "group_size": n,
                                               "transfer_ms": 1.0, "wait_ms": 2.0, "busbw_gb_s": None}],
                              "busbw_gb_s": None, "link_gb_s": 450.0, "link_from": evil}}


def test_trace_text_is_escaped():
    h = html_section(_hostile_job())
    assert "<img" not in h and "&lt;img src=x onerror=alert(1)&gt;" in h
    assert "\u202e" not in h
    m = markdown_section(_hostile_job())
    assert "<img" not in m and "&lt;img" in m and "\u202e" not in m
    assert "\\|\\*x\\*\\`" in m  # table and emphasis syntax escaped: no cell split, no emphasis


def test_many_ranks_are_a_distribution_with_the_outlier_named():
    job = _hostile_job(200)
    h, m = html_section(job), markdown_section(job)
    assert h.count("<tr>") < 20 and m.count("\n| ") < 20
    late = next(x for x in m.splitlines() if x.startswith("| late ms |"))
    assert late.rstrip(" |").endswith("199")


@pytest.mark.parametrize("width", [1400, 390])
def test_job_section_fits_the_window(outputs, width):
    from browser import Browser

    _, path, _ = outputs
    with Browser(width=width, height=900) as b:
        b.open(path.resolve().as_uri())
        got = b.evaluate("""({
          scroll: document.documentElement.scrollWidth, inner: window.innerWidth,
          job: !!document.getElementById('job'),
          wide: Array.from(document.querySelectorAll('#job table')).filter(t =>
            t.getBoundingClientRect().width > t.parentElement.getBoundingClientRect().width + 1 &&
            getComputedStyle(t.parentElement).overflowX !== 'auto').length })""")
    assert got["job"]
    assert got["scroll"] <= got["inner"], f"the page scrolls sideways at {width} px"
    assert got["wide"] == 0, "a job table is cut instead of scrolling in its box"

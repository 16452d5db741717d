"""The HTML report as a new user opens it (issue 12, items 6 and 7), in the real headless Chromium at
1400 and 390 px: no page-wide horizontal overflow, chart text readable, one step numbering, times in ms
from the trace's start, no link to a file the wheel does not install, the busy % without the profiler."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from browser import Browser
from test_run_analysis import make_run_dir
from conftest import read_report

MIN_TEXT_PX = 9  # chart text smaller than this on screen is unreadable


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """An HTML report of a run directory (trace, steps.csv, NVML): every plot and table drawn."""
    tmp = tmp_path_factory.mktemp("html")
    run = make_run_dir(tmp, "input_bound", steps_ms=[250.0] * 60)
    out, js = tmp / "report.html", tmp / "report.json"
    res = subprocess.run([sys.executable, "-m", "gpucheckup", "analyze", str(run), "--html", str(out), "--json",
                          str(js), "--unprofiled-step-ms", "250"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    return out, read_report(js)


def _layout(b: Browser) -> dict:
    return b.evaluate("""({
      scroll: document.documentElement.scrollWidth, inner: window.innerWidth,
      text: Array.from(document.querySelectorAll('svg.chart text')).map(t => {
        const svg = t.ownerSVGElement, scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
        return [t.textContent, parseFloat(t.getAttribute('font-size')) * scale]; }),
      charts: document.querySelectorAll('svg.chart').length,
      wide: Array.from(document.querySelectorAll('table')).filter(t =>
        t.getBoundingClientRect().width > t.parentElement.getBoundingClientRect().width + 1 &&
        getComputedStyle(t.parentElement).overflowX !== 'auto').length })""")


@pytest.mark.parametrize("width", [1400, 390])
def test_fits_the_window_with_readable_charts(page, width, tmp_path):
    path, _ = page
    with Browser(width=width, height=900) as b:
        b.open(path.resolve().as_uri())
        (tmp_path / f"report-{width}.png").write_bytes(b.screenshot_full())
        got = _layout(b)
    assert got["scroll"] <= got["inner"], f"the page scrolls sideways at {width} px"
    assert got["wide"] == 0, "a table is cut instead of scrolling in its box"
    assert got["charts"] >= 4
    small = [(t, round(px, 1)) for t, px in got["text"] if px < MIN_TEXT_PX]
    assert not small, f"chart text under {MIN_TEXT_PX} px at {width} px: {small[:5]}"


def test_one_step_numbering_and_relative_times(page):
    path, r = page
    with Browser(width=1400, height=900) as b:
        b.open(path.resolve().as_uri())
        tables = b.evaluate("""Object.fromEntries(Array.from(document.querySelectorAll('h4')).filter(h =>
            h.nextElementSibling && h.nextElementSibling.querySelector('table')).map(h => {
              const t = h.nextElementSibling.querySelector('table');
              return [h.textContent, {head: Array.from(t.tHead.rows[0].cells).map(c => c.textContent),
                      rows: Array.from(t.tBodies[0].rows).map(x => Array.from(x.cells).map(c => c.textContent))}];
            }))""")
        text = b.evaluate("document.body.innerText")
    steps = [row[0] for row in tables["Steps"]["rows"]]
    assert steps and all(re.fullmatch(r"#\d+", s) for s in steps), steps
    gaps = tables["Longest idle gaps"]
    col = gaps["head"].index("step")
    assert {row[col] for row in gaps["rows"]} <= set(steps)  # the same numbers name the same steps
    t_col = next(i for i, h in enumerate(gaps["head"]) if "ms from the trace's start" in h)
    length_ms = r["window"]["length_ms"] + (r["trace"]["window_us"][0] - r["trace"]["start_us"]) / 1000
    assert all(0 <= float(row[t_col]) <= length_ms for row in gaps["rows"])
    assert not re.search(r"\d{10,}|\d{1,3}(,\d{3}){3,}", text), "a raw profiler-clock time in the page"


def test_no_dead_links_and_the_unprofiled_busy_figure(page):
    path, r = page
    html = path.read_text()
    hrefs = re.findall(r'href="([^"]*)"', html)
    assert all(h.startswith(("#", "data:", "https://")) for h in hrefs), hrefs
    assert "docs/metrics.md" not in html
    busy = r["gpu"]["busy_pct_unprofiled"]
    assert busy is not None  # steps.csv gives the step without the profiler
    assert f"({busy:.0f}% without the profiler)" in html


def test_versions_and_lists_as_a_person_reads_them(tmp_path):
    from gpucheckup.report.text.lines import plain_value, version_text

    assert version_text("cudnn", 91900) == "9.19.0" and version_text("cudnn", 8907) == "8.9.7"
    assert version_text("cuda", 13000) == "13.0" and version_text("cuda", 12040) == "12.4"
    assert version_text("cuda", "12.4") == "12.4" and version_text("cudnn", None) == "-"
    assert plain_value([False]) == "False" and plain_value([True, True, False]) == "True, False"


def test_run_directory_without_a_trace_gets_its_html(tmp_path):
    run = make_run_dir(tmp_path, "input_bound", steps_ms=[250.0] * 60)
    for f in (run / "traces").iterdir():
        f.unlink()
    out = tmp_path / "run.html"
    res = subprocess.run([sys.executable, "-m", "gpucheckup", "analyze", str(run), "--html", str(out)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert out.exists(), res.stdout
    with Browser(width=390, height=900) as b:
        b.open(out.resolve().as_uri())
        got = _layout(b)
        text = b.evaluate("document.body.innerText")
        charts = b.evaluate("Array.from(document.querySelectorAll('figure[data-plot]')).map(f => f.dataset.plot)")
        assert b.errors() == []
    assert "NO GPU TIMELINE" in text and "no trace was captured" in text
    assert "Whole run" in text and "60 steps" in text and "steady step 250.00 ms" in text
    assert set(charts) == {"step_history", "nvml"}
    assert got["scroll"] <= got["inner"]
    assert not [t for t, px in got["text"] if px < MIN_TEXT_PX]


def test_run_environment_reads_as_released(tmp_path):
    """Raw values do not leak: `pin_memory [False]`, `cuDNN 91900`, NCCL `[2, 21, 5]`."""
    run = make_run_dir(tmp_path, "input_bound", steps_ms=[250.0] * 60)
    (run / "env.json").write_text(json.dumps({"dataloaders": [{"num_workers": 2, "pin_memory": False}],
                                              "torch": {"version": "2.5.1", "cuda": "12.4", "cudnn": 91900,
                                                        "nccl": [2, 21, 5]}}))
    out = tmp_path / "env.html"
    res = subprocess.run([sys.executable, "-m", "gpucheckup", "analyze", str(run), "--html", str(out)],
                         capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "80"})
    assert res.returncode == 0, res.stderr
    text = re.sub(r"\s+", " ", res.stdout)
    assert "pin_memory False" in text and "cuDNN 9.19.0" in text and "NCCL 2.21.5" in text
    assert "[False]" not in text and "91900" not in text
    page = out.read_text()
    assert "9.19.0" in page and "2.21.5" in page and "pin_memory False" in page
    assert ">91900<" not in page and "[False]" not in page

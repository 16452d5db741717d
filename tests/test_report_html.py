"""The HTML report in a real browser: headless Chromium from Debian's packages, network off.

Checked: the page loads from file:// with no console error, no exception, no CSP violation and
no request beyond the file itself; every plot is drawn (pixels in its box are not blank and
hold the colours the plot uses); the sortable table sorts; text from a trace, however hostile,
shows as text and runs nothing. Chromium missing skips these tests, or fails them when
$GPUCHECKUP_REQUIRE_BROWSER is 1 (.ci/run installs Chromium and sets it).
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from browser import Browser
from conftest import trace_path, write_trace
from PIL import Image

from gpucheckup.checkup.pipeline import check_path
from gpucheckup.report.pages import html

EVIL_KERNEL = "<img src=x onerror=alert(1)>"
EVIL_KERNEL_2 = "</script><script>alert(2)</script>"
EVIL_DIR = "<svg onload=alert(3)>"  # a folder name: the trace path is shown in the report too


def run_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "gpucheckup", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd)


@pytest.fixture(scope="module")
def browser():
    with Browser() as b:
        yield b


def plot_boxes(b: Browser) -> dict[str, tuple[int, int, int, int]]:
    """Page coordinates (left, top, right, bottom) of each plot's SVG, by figure id."""
    boxes = b.evaluate("""Array.from(document.querySelectorAll('figure[data-plot]')).map(f => {
        const r = f.querySelector('svg').getBoundingClientRect();
        return [f.id, r.left + window.scrollX, r.top + window.scrollY, r.right + window.scrollX,
                r.bottom + window.scrollY]; })""")
    return {i: (int(x0), int(y0), int(x1), int(y1)) for i, x0, y0, x1, y1 in boxes}


def pixel_stats(png: bytes, box) -> dict:
    """Share of non-white pixels, distinct colours and their spread inside a box of the screenshot."""
    img = np.asarray(Image.open(io.BytesIO(png)).convert("RGB").crop(box)).reshape(-1, 3).astype(int)
    ink = (img.min(axis=1) < 235).mean()
    colours = {tuple(p) for p in img[::3]}
    return {"ink": float(ink), "colours": len(colours), "std": float(img.std()), "pixels": img}


def has_colour(pixels: np.ndarray, hex_colour: str, tol: int = 6, min_count: int = 20) -> bool:
    """Whether at least min_count pixels are within tol of the colour on every channel."""
    rgb = np.array([int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)])
    return int((np.abs(pixels - rgb).max(axis=1) <= tol).sum()) >= min_count


def assert_clean(b: Browser, url: str) -> None:
    assert b.errors() == [], b.errors()
    assert b.dialogs() == []
    assert [u for u in b.requests() if u != url] == [], "the page tried to fetch something"


def nvml_from_csv(path: Path) -> dict:
    """The `nvml` report key (document.NvmlSeries) from a real NVML sample file (gpucheckup run's nvml.csv), with
    every 5th sample marked throttled."""
    rows = list(csv.DictReader(path.open()))
    t0 = float(rows[0]["t_s"])
    return {
        "t_s": [float(r["t_s"]) - t0 for r in rows],
        "gpu_util": [float(r["util_pct"]) for r in rows],
        "power_w": [float(r["power_w"]) for r in rows],
        "sm_clock_mhz": [float(r["sm_clock_mhz"]) for r in rows],
        "throttled": [int(i % 5 == 4) for i in range(len(rows))],
    }


def test_report_opens_offline_and_draws_every_plot(tmp_path, browser):
    c = check_path(trace_path("moe_seed"))[0]
    report = c.report
    nvml_csv = next((Path(__file__).parent / "data" / "h200" / "runs").glob("*-input_bound")) / "nvml.csv"
    report["nvml"] = nvml_from_csv(nvml_csv)  # real H200 samples from `gpucheckup run` on an input-bound job
    report["step_history"] = {"step": list(range(1, 101)), "time_ms": [12.0 - 2 * (i < 20) + (i % 7) * 0.1
                                                                        for i in range(100)],
                              "profiled": [40, 45], "source": "steps.csv"}
    report["env"] = {"torch": "2.11.0+cu130", "nccl": "2.27", "container": {"cpu_quota": "16"}}
    page = tmp_path / "report.html"
    page.write_text(html.render([(None, report)]))
    url = page.as_uri()
    browser.open(url)
    assert_clean(browser, url)

    boxes = plot_boxes(browser)
    assert set(boxes) == {f"r0-plot-{p}" for p in
                          ("steps", "step_history", "timeline", "gap_histogram", "categories", "nvml")}
    png = browser.screenshot_full()
    stats = {}
    for pid, box in boxes.items():
        s = pixel_stats(png, box)
        stats[pid] = (round(s["ink"], 3), s["colours"])
        assert box[2] - box[0] >= 600 and box[3] - box[1] >= 100, (pid, box)
        assert s["ink"] > 0.02 and s["colours"] >= 8 and s["std"] > 10, (pid, s["ink"], s["colours"], s["std"])
    print("plot pixels (non-white share, colours):", stats)
    px = {pid: pixel_stats(png, box)["pixels"] for pid, box in boxes.items()}
    assert has_colour(px["r0-plot-categories"], "#e8a33d", min_count=200), "data movement bar not highlighted"
    assert has_colour(px["r0-plot-categories"], "#5b7fa6", min_count=200)
    assert has_colour(px["r0-plot-timeline"], "#2e9e5b", min_count=500), "no busy time drawn"
    assert has_colour(px["r0-plot-timeline"], "#d62728"), "moe_seed's sync gaps not drawn"
    assert has_colour(px["r0-plot-gap_histogram"], "#76b7e5"), "queued gaps not drawn"
    assert has_colour(px["r0-plot-nvml"], "#f7c6c6", min_count=200), "throttled samples not shaded"
    assert has_colour(px["r0-plot-step_history"], "#fff1c9", min_count=200), "profiled range not shaded"

    text = browser.evaluate("document.body.innerText")
    assert text.index("GPU-BOUND") < text.index("What to try first") < text.index("Findings") < text.index("Plots")
    assert "container.cpu_quota" in text and "2.11.0+cu130" in text
    embedded = browser.evaluate("JSON.parse(document.getElementById('gpucheckup-data').textContent)")
    assert embedded["verdict"]["primary"] == "gpu_bound"
    assert embedded["kernels"]["top"][0]["name"] == report["kernels"]["top"][0]["name"]


def test_top_kernels_table_sorts_on_click(tmp_path, browser):
    c = check_path(trace_path("moe_seed"))[0]
    page = tmp_path / "report.html"
    page.write_text(html.render([(None, c.report)]))
    browser.open(page.as_uri())
    col_js = """(() => { const t = document.querySelector('table.sortable.kernels');
        const i = Array.from(t.tHead.rows[0].cells).findIndex(h => h.textContent.startsWith('%s'));
        return [i, Array.from(t.tBodies[0].rows).map(r => r.cells[i].getAttribute('data-v') ||
                r.cells[i].textContent)]; })()"""
    click_js = """(() => { const t = document.querySelector('table.sortable.kernels');
        Array.from(t.tHead.rows[0].cells).find(h => h.textContent.startsWith('%s')).click(); })()"""
    _, before = browser.evaluate(col_js % "count")
    browser.evaluate(click_js % "count")
    _, desc = browser.evaluate(col_js % "count")
    browser.evaluate(click_js % "count")
    _, asc = browser.evaluate(col_js % "count")
    counts = [float(x) for x in before]
    assert [float(x) for x in desc] == sorted(counts, reverse=True)
    assert [float(x) for x in asc] == sorted(counts)
    assert sorted(counts) != counts or sorted(counts, reverse=True) != counts  # the click changed something
    browser.evaluate(click_js % "kernel")
    _, names = browser.evaluate(col_js % "kernel")
    assert names == sorted(names, key=str.lower)
    assert browser.errors() == []


def evil_trace(folder: Path) -> Path:
    """Three steps whose kernels are named like HTML injections, in a folder named like one."""
    events = []
    for i in range(3):
        t = i * 1000.0
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1,
                       "ts": t, "dur": 900})
        for j, name in enumerate((EVIL_KERNEL, EVIL_KERNEL_2)):
            corr = i * 10 + j + 1
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                           "ts": t + 10 + 300 * j, "dur": 5, "args": {"correlation": corr}})
            events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7,
                           "ts": t + 20 + 300 * j, "dur": 200 + 50 * j,
                           "args": {"device": 0, "stream": 7, "correlation": corr}})
    folder.mkdir(parents=True, exist_ok=True)
    return write_trace(folder / "trace.json", events)


def test_hostile_names_are_text_everywhere(tmp_path, browser):
    from markdown_it import MarkdownIt

    trace = evil_trace(tmp_path / EVIL_DIR)
    page, md = tmp_path / "evil.html", tmp_path / "evil.md"
    res = subprocess.run([sys.executable, "-m", "gpucheckup", "analyze", str(trace), "--html", str(page),
                          "--markdown", str(md)], capture_output=True, text=True, timeout=300,
                         env={"COLUMNS": "300", "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr
    assert EVIL_KERNEL in res.stdout and EVIL_KERNEL_2 in res.stdout  # terminal: printed as written

    source = page.read_text()
    assert EVIL_KERNEL not in source and "<script>alert" not in source and "<svg onload" not in source
    assert "&lt;img src=x onerror=alert(1)&gt;" in source
    url = page.as_uri()
    browser.open(url)
    assert_clean(browser, url)
    dom = browser.evaluate("""({imgs: document.querySelectorAll('img').length,
        scripts: document.scripts.length,
        svgs_with_onload: document.querySelectorAll('svg[onload]').length,
        text: document.body.innerText,
        kernels: Array.from(document.querySelectorAll('table.kernels tbody td:first-child')).map(td => td.textContent),
        data: JSON.parse(document.getElementById('gpucheckup-data').textContent).kernels.top.map(k => k.name)})""")
    assert dom["imgs"] == 0 and dom["svgs_with_onload"] == 0
    assert dom["scripts"] == 2  # the JSON data block and the sort script, nothing injected
    assert EVIL_KERNEL in dom["kernels"] and EVIL_KERNEL_2 in dom["kernels"]
    assert EVIL_DIR in dom["text"]
    assert sorted(dom["data"]) == sorted([EVIL_KERNEL, EVIL_KERNEL_2])  # the JSON round-trips exactly

    text = md.read_text()
    assert EVIL_KERNEL not in text and EVIL_KERNEL_2 not in text
    rendered = MarkdownIt("commonmark", {"html": True}).enable("table").render(text)
    assert "<img" not in rendered and "<script" not in rendered and "<svg" not in rendered
    assert "&lt;img src=x onerror=alert(1)&gt;" in rendered
    assert "&lt;/script&gt;&lt;script&gt;alert(2)&lt;/script&gt;" in rendered


def test_folder_of_ranks_makes_one_page(tmp_path, browser):
    runs = tmp_path / "run"
    runs.mkdir()
    for rank, case in ((0, "moe_seed"), (1, "launch_bound")):
        shutil.copy(trace_path(case), runs / f"trace_rank{rank}.json.gz")
    page = tmp_path / "ranks.html"
    res = run_cli("analyze", str(runs), "--quiet", "--html", str(page))
    assert res.returncode == 0, res.stderr
    browser.open(page.as_uri())
    assert_clean(browser, page.as_uri())
    got = browser.evaluate("""({rows: Array.from(document.querySelectorAll('table')[0].tBodies[0].rows)
            .map(r => [r.cells[0].textContent, r.cells[2].textContent]),
        sections: Array.from(document.querySelectorAll('section.report')).map(s => s.id),
        plots: document.querySelectorAll('figure[data-plot]').length})""")
    assert got["rows"] == [["rank 0: trace_rank0.json.gz", "gpu_bound"],
                           ["rank 1: trace_rank1.json.gz", "launch_bound"]]
    assert got["sections"] == ["r0-report", "r1-report"]
    assert got["plots"] == 8  # steps, timeline, gap histogram, categories per rank
    notes = browser.evaluate("document.body.innerText")
    assert "rank 1 is a straggler" in notes


def test_demo_writes_html_and_says_where(tmp_path):
    res = run_cli("demo", "--case", "moe_seed", "--case", "launch_bound", "--quiet", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    page = tmp_path / "gpucheckup-demo.html"
    assert page.exists()
    assert page.resolve().as_uri() in res.stdout
    source = page.read_text()
    assert "demo case: moe_seed" in source and "demo case: launch_bound" in source
    data = json.loads(source.split('id="gpucheckup-data">', 1)[1].split("</script>", 1)[0])
    assert [r["verdict"]["primary"] for r in data] == ["gpu_bound", "launch_bound"]
    other = tmp_path / "elsewhere" / "demo.html"
    res = run_cli("demo", "--case", "moe_seed", "--quiet", "--html", str(other), cwd=tmp_path)
    assert res.returncode == 4 and not other.parent.exists()  # no folder is made that the user did not ask for
    assert "elsewhere" in res.stderr and "does not exist" in res.stderr
    other.parent.mkdir()
    res = run_cli("demo", "--case", "moe_seed", "--quiet", "--html", str(other), cwd=tmp_path)
    assert res.returncode == 0 and other.exists() and str(other) in res.stdout


def test_the_harness_sees_errors_dialogs_and_fetches(tmp_path, browser):
    """The checks above mean something only if the harness catches what they look for."""
    page = tmp_path / "bad.html"
    page.write_text("<!DOCTYPE html><html><head><meta http-equiv=\"Content-Security-Policy\" "
                    "content=\"default-src 'none'; script-src 'unsafe-inline'\"></head><body>"
                    "<script>console.error('boom'); alert('hi'); fetch('http://example.invalid/x').catch(() => 0);"
                    "</script><script>null.x</script></body></html>")
    browser.open(page.as_uri())
    errors = browser.errors()
    assert any("boom" in e for e in errors)
    assert any(e.startswith("exception") for e in errors)
    assert any("Content Security Policy" in e or "Content-Security-Policy" in e for e in errors), errors
    assert [d["message"] for d in browser.dialogs()] == ["hi"]
    leaky = tmp_path / "leaky.html"
    leaky.write_text('<!DOCTYPE html><html><body><img src="http://example.invalid/a.png"></body></html>')
    browser.open(leaky.as_uri())
    assert "http://example.invalid/a.png" in browser.requests()

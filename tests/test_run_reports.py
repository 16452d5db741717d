"""The HTML and Markdown reports of a real run directory (captured on the H200 by `gpucheckup run`) show the
step time over the whole run. Expected figures are read from steps.csv with the standard library."""

from __future__ import annotations

import csv
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

RUNS = Path(__file__).resolve().parent / "data" / "h200" / "runs"


def input_bound_run() -> Path:
    (run,) = RUNS.glob("*-input_bound")
    return run


def timed_steps(run: Path) -> list[tuple[int, float, str]]:
    """(step, ms, phase) of every steps.csv row that has a time."""
    with open(run / "steps.csv", newline="") as f:
        return [(int(r["step"]), float(r["ms"]), r["phase"]) for r in csv.DictReader(f) if r["ms"]]


class PlotFinder(HTMLParser):
    """The tags inside the element with data-plot=NAME, in order."""

    def __init__(self, name: str):
        super().__init__()
        self.name, self.depth, self.tags, self.titles = name, 0, [], []
        self._in_title = False

    def handle_starttag(self, tag, attrs):
        if self.depth:
            self.depth += 1
            self.tags.append((tag, dict(attrs)))
            self._in_title = tag == "title"
        elif dict(attrs).get("data-plot") == self.name:
            self.depth = 1

    def handle_startendtag(self, tag, attrs):
        if self.depth:
            self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if self.depth:
            self.depth -= 1
            self._in_title = False

    def handle_data(self, data):
        if self.depth and self._in_title:
            self.titles.append(data)


def test_html_and_markdown_of_a_real_run_show_the_whole_run_step_times(tmp_path):
    run = input_bound_run()
    html, md = tmp_path / "run.html", tmp_path / "run.md"
    res = subprocess.run([sys.executable, "-m", "gpucheckup", "analyze", str(run), "--quiet", "--html", str(html),
                          "--markdown", str(md)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    steps = timed_steps(run)
    ms = [m for _, m, _ in steps]
    profiled = [s for s, _, p in steps if p == "profiled"]
    assert len(steps) == 29 and profiled == [11, 12, 13, 14, 15]  # the committed run, as written on the H200

    plot = PlotFinder("step_history")
    plot.feed(html.read_text())
    names = [t for t, _ in plot.tags]
    assert "svg" in names, "no step-history plot in the HTML report"
    drawn = names[names.index("svg") + 1:]
    assert "rect" in drawn or "path" in drawn
    line = next(a for t, a in plot.tags if t == "polyline")
    assert len(line["points"].split()) == len(steps)  # one point per timed step
    assert f"profiled steps {profiled[0]}-{profiled[-1]}" in plot.titles  # the shaded band

    text = md.read_text()
    m = re.search(r"Whole run \(steps\.csv\): (\d+) steps, median ([\d.]+) ms, min ([\d.]+) ms, max ([\d.]+) ms",
                  text)
    assert m, "no whole-run step line in the Markdown report"
    assert int(m.group(1)) == len(steps)
    assert float(m.group(3)) == round(min(ms), 2) and float(m.group(4)) == round(max(ms), 2)

"""Issue 12, the input and command-line side: short runs, silent skips, `--json -`, CI thresholds, the API.

Real CPU torch jobs (tests/jobs/train_mlp.py) through `gpucheckup run`, in subprocesses.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import flat, modules_loaded, read_report

from gpucheckup.analysis.run_logs import step_history

JOBS = Path(__file__).resolve().parent / "jobs"


def cli(*args, cwd=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "gpucheckup", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


def test_steps_that_never_settle_have_no_warmup_and_no_steady_figures():
    """64 steps each 30% longer than the last (a leak) never hold a steady rate: no warm-up end (it used to be
    the last step, and `--skip 68` was suggested for a 64-step job), no steady figures."""
    n = np.arange(1, 65)
    ms = 1.3 ** np.arange(64)
    ms[0] = np.nan
    st = step_history.step_stats({"step": n, "ms": ms, "phase": [""] * len(n)})
    assert st["settled"] is False
    assert st["warmup_steps"] is None and st["steady_median_ms"] is None and st["cv_pct"] is None
    assert st["steady_ms"] is None
    steady = np.r_[np.full(20, 9.0), np.full(44, 3.0)]
    st = step_history.step_stats({"step": n, "ms": steady, "phase": [""] * len(n)})
    assert st["settled"] is True and st["warmup_steps"] == 20 and st["steady_median_ms"] == 3.0


def test_steps_that_alternate_settle_at_their_rate():
    """64 steps of 1 and 3 ms in turn (two loader workers out of phase) never hold five alike, but their rate is
    steady: one step per 2 ms, after no warm-up; before, they were called unsettled and got no steady figures."""
    n = np.arange(1, 65)
    ms = np.where(n % 2 == 0, 1.0, 3.0)
    ms[0] = np.nan
    st = step_history.step_stats({"step": n, "ms": ms, "phase": [""] * len(n)})
    assert st["settled"] is True and st["warmup_steps"] == 1
    rate = (32 * 1.0 + 31 * 3.0) / 63  # steps 2-64: total time over steps
    assert st["steady_ms"] == pytest.approx(rate) and st["unprofiled_ms"] == pytest.approx(rate, rel=0.02)


@pytest.fixture(scope="module")
def short_runs(tmp_path_factory):
    """A 10-step job (fewer steps than the default skip) and a 64-step one, run through `gpucheckup run`."""
    pytest.importorskip("torch", reason="runs a real torch training job")
    out = tmp_path_factory.mktemp("runs")
    runs = {}
    for steps in (10, 64):
        p = cli("run", "--out", out / str(steps), "--json", out / f"{steps}.json", "--",
                sys.executable, JOBS / "train_mlp.py", steps)
        (run_dir,) = (out / str(steps)).iterdir()
        runs[steps] = (p, run_dir, read_report(out / f"{steps}.json"))
    return runs


@pytest.mark.parametrize("steps", [10, 64])
def test_short_run_checks_up_without_an_internal_error(short_runs, steps):
    p, run_dir, report = short_runs[steps]
    assert p.returncode == 0, p.stderr[-2000:]
    assert "internal error" not in p.stderr and "Traceback" not in p.stderr
    assert "no check-up" not in p.stderr
    a = cli("analyze", run_dir)
    assert a.returncode == 0, a.stderr[-2000:]
    assert "internal error" not in a.stderr


@pytest.mark.parametrize("steps", [10, 64])
def test_short_run_suggests_no_skip_past_its_end(short_runs, steps):
    """Any `--skip N` the check-up suggests is a step the job reaches; an unsettled run says it is too short."""
    _, _, report = short_runs[steps]
    text = json.dumps(report)
    for n in re.findall(r"--skip (\d+)", text):
        assert int(n) < steps, f"suggests --skip {n} for a {steps}-step job"
    st = report["run_figures"]["steps"]
    assert st["count"] == st["last_step"] == steps
    if steps < 20 + 5:  # the default window (skip 20, profile 5) never opens: said, with no step number to skip to
        assert st["profiled_steps"] is None
        assert any(f"the job ran {steps} optimizer steps, the window needed 25 (use --skip/--steps)" in n
                   for n in report["notes"]), report["notes"]
    else:
        assert st["profiled_steps"] == [21, 25]  # the default window, inside the job
    # whether the step times settle depends on the machine's load; either way the report says which
    too_short = any("too short for a steady-state window" in n for n in report["notes"])
    assert too_short == (not st["settled"]), (st["settled"], report["notes"])
    if st["settled"]:
        assert 0 <= st["warmup_steps"] < steps and st["steady_median_ms"] > 0


# ---- item 6: files asked for are written, or said and a non-zero exit; `--json -` ----------------------

def test_cpu_only_run_writes_html_and_markdown_and_says_what_it_cannot_write(short_runs, tmp_path):
    """A CPU training job's run directory: its CPU-side check-up as HTML and Markdown (they used to be skipped
    silently with exit 0); the annotated trace cannot be made: one line, exit 4."""
    _, run_dir, _ = short_runs[64]
    html, md = tmp_path / "r.html", tmp_path / "r.md"
    p = cli("analyze", run_dir, "--html", html, "--markdown", md, "--quiet")
    assert p.returncode == 0, p.stderr[-2000:]
    assert "aten::addmm" in html.read_text() and "aten::addmm" in md.read_text()
    p = cli("analyze", run_dir, "--perfetto", tmp_path / "a.json.gz", "--quiet")
    assert p.returncode == 4
    lines = [x for x in p.stderr.splitlines() if "not written" in x]
    assert len(lines) == 1 and "--perfetto" in lines[0] and not (tmp_path / "a.json.gz").exists()


def test_run_without_a_trace_writes_its_html_and_says_what_it_cannot_write(short_runs, tmp_path):
    """No profiled window: the run-level HTML and Markdown are written; the annotated trace adds tracks to a GPU
    timeline, so it is one 'not written' line and exit 4, never a silent skip."""
    _, run_dir, _ = short_runs[10]  # fewer steps than the default skip: no profiled window
    p = cli("analyze", run_dir, "--html", tmp_path / "r.html", "--markdown", tmp_path / "r.md", "--perfetto",
            tmp_path / "r.json.gz", "--quiet")
    assert p.returncode == 4, p.stderr
    assert (tmp_path / "r.html").stat().st_size > 0
    assert "No GPU timeline" in (tmp_path / "r.md").read_text()
    assert sum("not written: --perfetto" in x for x in p.stderr.splitlines()) == 1
    assert not (tmp_path / "r.json.gz").exists()


def test_json_dash_writes_standard_output_only(tmp_path):
    from conftest import DEMO

    p = cli("analyze", DEMO / "input_bound" / "trace.json.gz", "--json", "-", cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads(p.stdout)  # stdout holds the JSON alone: the terminal report went to stderr
    assert doc["verdict"]["primary"] == "input_bound"
    assert "Verdict" in p.stderr
    assert not (tmp_path / "-").exists()


def test_json_dash_for_a_monitor_recording(tmp_path):
    """`analyze FILE.csv --json -` (a `monitor --record` file): the JSON on standard output, no file named `-`."""
    from gpucheckup.layout import NVML_COLUMNS

    rec = tmp_path / "gpu.csv"
    rows = [",".join(NVML_COLUMNS)]
    for i in range(50):  # 5 s at 10 Hz of one GPU at 80% utilization
        row = {"t_s": f"{i / 10:.1f}", "gpu": "0", "util_pct": "80", "mem_used_mb": "1000", "mem_total_mb": "80000"}
        rows.append(",".join(row.get(c, "") for c in NVML_COLUMNS))
    rec.write_text("\n".join(rows) + "\n")
    p = cli("analyze", rec, "--json", "-", cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    doc = flat(json.loads(p.stdout))
    assert doc["run_figures"]["nvml"]["util_mean_pct"] == pytest.approx(80.0)
    assert not (tmp_path / "-").exists()


# ---- CI: --fail-on, --fail-if ---------------------------------------------------------------------------

def test_fail_on_and_fail_if_exit_3_with_one_line_each(tmp_path):
    from conftest import DEMO

    trace = DEMO / "launch_bound" / "trace.json.gz"
    ok = cli("analyze", trace, "--quiet", "--json", tmp_path / "r.json")
    busy = read_report(tmp_path / "r.json")["gpu"]["busy_pct"]
    assert ok.returncode == 0
    p = cli("analyze", trace, "--quiet", "--fail-on", "input_bound,LAUNCH-BOUND")
    assert p.returncode == 3 and p.stderr.count("failed:") == 1 and "verdict launch_bound" in p.stderr
    p = cli("analyze", trace, "--quiet", "--fail-if", f"busy<{busy + 1:.3f}", "--fail-if", f"busy_pct<{busy - 1:.3f}")
    assert p.returncode == 3 and p.stderr.count("failed:") == 1 and "busy_pct" in p.stderr
    p = cli("analyze", trace, "--quiet", "--fail-on", "gpu_bound", "--fail-if", f"busy_pct>{busy + 1:.3f}")
    assert p.returncode == 0, p.stderr
    for bad in (("--fail-if", "speed<3"), ("--fail-if", "busy_pct~3"), ("--fail-on", "slow")):
        p = cli("analyze", trace, "--quiet", *bad)
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr


# ---- the Python API ---------------------------------------------------------------------------------------

def test_api_returns_the_checkup_the_cli_writes(tmp_path):
    from conftest import DEMO

    import gpucheckup

    trace = DEMO / "input_bound" / "trace.json.gz"
    cli("analyze", trace, "--quiet", "--json", tmp_path / "r.json")
    doc = read_report(tmp_path / "r.json")
    c = gpucheckup.analyze(trace)
    assert c.verdict == doc["verdict"]["primary"] == "input_bound"
    assert [f.id for f in c.findings] == [f["id"] for f in doc["verdict"]["findings"]]
    assert [x.action for x in c.fixes] == [x["action"] for x in doc["fixes"]]
    assert c.figures["busy_pct"] == pytest.approx(doc["gpu"]["busy_pct"])
    assert c.figures["step_ms"] == pytest.approx(doc["window"]["step_ms"])
    assert set(c.figures) == set(gpucheckup.FIGURES)


def test_import_gpucheckup_stays_light():
    assert modules_loaded("import gpucheckup", ("gpucheckup", "numpy")) == ["gpucheckup"]


# ---- attach in py-spy mode writes a speedscope file ---------------------------------------------------------

def test_pyspy_attach_writes_a_speedscope_file_listed_in_the_manifest(tmp_path):
    pytest.importorskip("torch", reason="attaches to a real torch job")
    import csv
    import time

    from gpucheckup import layout
    from gpucheckup.capture.attach import find_pyspy

    if find_pyspy() is None:
        pytest.fail("py-spy is part of the test extras; install it (pip install -e '.[test]')")
    ready = tmp_path / "ready"
    job = subprocess.Popen([sys.executable, str(JOBS / "slow_loader.py"), "60", str(ready)])
    try:
        deadline = time.time() + 120
        while not ready.exists() and time.time() < deadline:
            time.sleep(0.2)
        p = cli("attach", "--pid", job.pid, "--mode", "py-spy", "--duration", "3", "--rate", "4", "--out",
                tmp_path / "runs", "--markdown", tmp_path / "r.md", timeout=120)
    finally:
        job.kill()
        job.wait()
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert p.returncode == 0, p.stderr  # the coarse check-up, said coarse, in Markdown too
    assert "(coarse)" in (tmp_path / "r.md").read_text()
    doc = json.loads((run_dir / layout.SPEEDSCOPE).read_text())
    rows = list(csv.DictReader((run_dir / layout.SAMPLES).open()))
    prof = doc["profiles"][0]
    assert doc["$schema"] == "https://www.speedscope.app/file-format-schema.json" and prof["type"] == "sampled"
    assert len(prof["samples"]) == len(prof["weights"]) == len(rows) >= 4
    frames = doc["shared"]["frames"]
    assert all(0 <= i < len(frames) for s in prof["samples"] for i in s)
    assert any(f["file"].endswith("slow_loader.py") for f in frames)
    # root first: the job's module frame is the first of a stack that holds it
    top = [frames[s[0]]["name"] for s in prof["samples"] if s]
    assert "<module>" in top
    manifest = json.loads((run_dir / layout.MANIFEST).read_text())
    assert layout.SPEEDSCOPE in json.dumps(manifest["artefacts"])


def test_cpu_side_pages_escape_names_from_the_trace(tmp_path):
    """Synthetic (an edge case: hostile names): an operator named like markup is text in every format."""
    from conftest import write_trace

    evil = "<img src=x onerror=alert(1)>\x1b[2J"
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
              {"ph": "X", "cat": "cpu_op", "name": evil, "pid": 1, "tid": 1, "ts": 10, "dur": 50},
              {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 20, "dur": 10}]
    trace = write_trace(tmp_path / "t.json", events)
    p = cli("analyze", trace, "--html", tmp_path / "r.html", "--markdown", tmp_path / "r.md", "--json", "-")
    assert p.returncode == 0, p.stderr
    doc = flat(json.loads(p.stdout))
    assert doc["verdict"]["primary"] == "cpu_only"
    ops = {o["name"]: o for o in doc["cpu"]["top_ops"]}
    assert ops[evil]["self_ms"] == pytest.approx(0.040) and ops["aten::add"]["self_ms"] == pytest.approx(0.010)
    assert doc["cpu"]["python_between_pct"] == pytest.approx(50.0)
    page = (tmp_path / "r.html").read_text()
    assert "<img" not in page and "&lt;img src=x" in page and "\x1b" not in page
    assert "<img" not in (tmp_path / "r.md").read_text() and "\x1b" not in p.stderr


def test_folder_mixing_gpu_and_cpu_only_traces(tmp_path):
    """A GPU trace and a CPU-only one (HTA's rank_non_gpu) in one folder: both checked up, neither refused."""
    import shutil

    from conftest import DEMO, REPO

    import gpucheckup

    shutil.copy(DEMO / "input_bound" / "trace.json.gz", tmp_path / "a.json.gz")
    shutil.copy(REPO / "tests" / "data" / "hta" / "rank_non_gpu.json.gz", tmp_path / "b.json.gz")
    c = gpucheckup.analyze(tmp_path)
    assert [r.verdict for r in c.ranks] == ["input_bound", "cpu_only"]
    p = cli("analyze", tmp_path, "--quiet", "--json", tmp_path / "r.json", "--fail-on", "cpu_only")
    assert p.returncode == 3 and "b.json.gz: verdict cpu_only" in p.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["verdict"]["primary"] == "input_bound" and doc["cpu_checkups"][0]["verdict"]["primary"] == "cpu_only"

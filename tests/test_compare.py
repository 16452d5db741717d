"""`gpucheckup compare`: figures side by side, the noise rule, the CI gate; on real captures."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import DEMO, REPO, read_report, trace_path
from gpucheckup.analysis.comparison import compare
from gpucheckup.cli import main
from gpucheckup.document import SCHEMA_VERSION

LAUNCH, COMPUTE = DEMO / "launch_bound/trace.json.gz", DEMO / "compute_bound/trace.json.gz"


def _report(path, tmp_path, name):
    out = tmp_path / f"{name}.json"
    assert main(["analyze", str(path), "--quiet", "--json", str(out)]) == 0
    return out, read_report(out)


def test_two_different_jobs_are_flagged_with_the_verdict_change(tmp_path, capsys):
    (pa, a), (pb, b) = _report(LAUNCH, tmp_path, "a"), _report(COMPUTE, tmp_path, "b")
    c = compare.compare(a, b)
    expected = 100 * (b["steps"]["median_ms"] / a["steps"]["median_ms"] - 1)  # two traces: their median step
    assert c.headline == "window.step_ms" and c.step_change_pct == pytest.approx(expected)
    assert c.noise_pct == pytest.approx(2 * max(a["steps"]["cv_pct"], b["steps"]["cv_pct"]))
    assert c.step_beyond_noise and "slower" in c.sentence
    assert (c.verdict_a, c.verdict_b) == (a["verdict"]["primary"], b["verdict"]["primary"])
    assert c.verdict_a != c.verdict_b
    md = tmp_path / "cmp.md"
    rc = main(["compare", str(pa), str(pb), "--markdown", str(md), "--fail-if-slower", "10"])
    assert rc == 3  # compute_bound's step is ~7x launch_bound's: the gate fired (README: exit codes)
    text = md.read_text()
    assert "| median step (ms) | `steps.median_ms` |" in text and "beyond noise" in text
    assert main(["compare", str(pb), str(pa), "--fail-if-slower", "10"]) == 0  # faster passes the gate


def _cli(*args) -> subprocess.CompletedProcess:
    env = {**__import__("os").environ, "COLUMNS": "80", "PYTHONPATH": str(REPO / "src")}
    return subprocess.run([sys.executable, "-m", "gpucheckup", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def _figure_rows(stdout: str) -> list[str]:
    """The table's figure rows: indented by two under their group's title."""
    return [line for line in stdout.splitlines() if line.startswith("   ") and line.strip()]


def test_default_view_fits_80_columns_and_shows_what_changed_grouped_by_name(tmp_path):
    """The real H200 input_bound trace (a DataLoader starving the GPU, 196.6 MB of pageable host-to-device copies)
    against launch_bound (tiny kernels, no copies): only what changed beyond noise, in groups, by names people read,
    every line within 80 columns; --all shows every figure."""
    pa, _ = _report(trace_path("input_bound"), tmp_path, "a")
    pb, _ = _report(trace_path("launch_bound"), tmp_path, "b")
    js = tmp_path / "cmp.json"
    res = _cli("compare", str(pa), str(pb), "--json", str(js))
    assert res.returncode == 0, res.stderr
    doc = json.loads(js.read_text())
    # a versioned document like every other (docs/schema.md: kind "compare"; conftest validates it by the schema)
    assert (doc["schema_version"], doc["kind"], doc["a"], doc["b"]) == (SCHEMA_VERSION, "compare", str(pa), str(pb))
    beyond = [f for f in doc["figures"] if f["beyond_noise"]]
    assert 0 < len(beyond) < len(doc["figures"])
    rows = _figure_rows(res.stdout)
    assert len(rows) == len(beyond)  # only the figures beyond noise
    assert max(len(line) for line in res.stdout.splitlines()) <= 80
    assert "…" not in res.stdout and "..." not in res.stdout  # no name cut short
    assert not any(r.strip().startswith(("run_figures.", "copies.", "gaps.")) for r in rows)  # names, not keys
    for title in ("DataLoader", "Copies", "GPU idle gaps"):
        assert any(line.strip() == title for line in res.stdout.splitlines()), title
    assert "waiting for data, % of step" in res.stdout
    # the copies input_bound made and launch_bound does not: gone, never a percentage
    host_to_device = [r for r in rows if r.strip().startswith("host to device (MB)")]
    assert host_to_device and host_to_device[0].split()[-1] == "gone" and "196.6" in host_to_device[0]
    everything = _cli("compare", str(pa), str(pb), "--all")
    assert len(_figure_rows(everything.stdout)) == len(doc["figures"])
    assert max(len(line) for line in everything.stdout.splitlines()) <= 80


def test_a_figure_from_zero_says_its_absolute_change_never_inf(tmp_path):
    """launch_bound made no copies and input_bound 15 (its trace's memcpy events: 10 host-to-device, 5 on the device):
    B vs A is "+15 from 0", not "+inf%"."""
    pa, _ = _report(trace_path("launch_bound"), tmp_path, "a")
    pb, _ = _report(trace_path("input_bound"), tmp_path, "b")
    md, js = tmp_path / "cmp.md", tmp_path / "cmp.json"
    res = _cli("compare", str(pa), str(pb), "--all", "--markdown", str(md), "--json", str(js))
    assert res.returncode == 0, res.stderr
    for text in (res.stdout, md.read_text(), js.read_text()):
        assert "inf" not in text.lower().replace("info", ""), text
    copies = res.stdout.split("\n Copies")[1]
    count = next(r for r in _figure_rows(copies) if r.strip().startswith("count "))
    assert count.split()[1:] == ["0", "15", "+15", "from", "0", "yes"]  # --all: the last column, beyond noise
    row = next(f for f in json.loads(js.read_text())["figures"] if f["key"] == "copies.count")
    assert (row["status"], row["change"], row["unit"], row["beyond_noise"]) == ("from 0", 15, "absolute", True)


def test_ids_are_never_compared(tmp_path):
    """Two real CPU runs: each trace's main thread has its own thread id (the report keeps it, cpu.main_thread.tid);
    compare shows no id among its figures."""
    pytest.importorskip("torch")
    out = tmp_path / "runs"
    out.mkdir()  # run --out makes the run's own folder, not the folders above it
    for name in ("one", "two"):
        res = _cli("run", "--out", str(out / name), "--skip", "3", "--steps", "3", "--no-report", "--",
                   sys.executable, str(REPO / "tests" / "jobs" / "train_mlp.py"))
        assert res.returncode == 0, res.stderr
    (r1,), (r2,) = (list((out / n).iterdir()) for n in ("one", "two"))
    reports = []
    for i, r in enumerate((r1, r2)):
        js = tmp_path / f"r{i}.json"
        assert _cli("analyze", str(r), "--quiet", "--json", str(js)).returncode in (0, 1)
        reports.append(read_report(js))
    assert reports[0]["cpu"]["main_thread"]["tid"] != reports[1]["cpu"]["main_thread"]["tid"]
    js = tmp_path / "cmp.json"
    res = _cli("compare", str(r1), str(r2), "--json", str(js))  # the JSON holds every figure
    assert res.returncode == 0, res.stderr
    keys = [f["key"] for f in json.loads(js.read_text())["figures"]]
    assert keys and not [k for k in keys if k.rsplit(".", 1)[-1] in ("tid", "pid", "id", "rank")]
    assert "tid" not in res.stdout


def test_the_same_capture_twice_changes_nothing(tmp_path):
    (pa, a) = _report(LAUNCH, tmp_path, "a")
    c = compare.compare(a, a)
    assert c.step_change_pct == 0 and not c.step_beyond_noise
    assert not any(f.beyond_noise for f in c.figures)
    assert len(c.figures) > 50  # every figure, not only the headline


def test_percent_figures_compare_in_points():
    a = {"verdict": {"primary": "x"}, "steps": {"median_ms": 10.0, "cv_pct": 1.0}, "gpu": {"busy_pct": 50.0}}
    b = {"verdict": {"primary": "x"}, "steps": {"median_ms": 10.0, "cv_pct": 1.0}, "gpu": {"busy_pct": 51.5}}
    c = compare.compare(a, b)
    busy = next(f for f in c.figures if f.key == "gpu.busy_pct")
    assert busy.points and busy.change == pytest.approx(1.5)
    assert busy.beyond_noise is False  # 1.5 points < noise 2 x 1% = 2


# A job whose step is mostly a known sleep, so that its step time does not follow this machine's speed: a 2-core
# KVM guest whose CPU-bound steps switch between two speeds 2x apart every ~50-100 ms (seen here: the launch
# example's bare loop at 0.9 and 1.9 ms a step, in runs of ~40 steps), which two short captures of a CPU-bound job
# sample differently (CI once read +55.9% between two captures of one job). The sleep's jitter, the same sequence in
# every run (seed 0), gives each capture a spread of its own (cv ~10%: noise ~20%) for the noise rule to work on.
PACED = """
import random, sys, time, torch
rng = random.Random(0)
layer = torch.nn.Linear(4, 4)
opt = torch.optim.SGD(layer.parameters(), lr=0.1)
for _ in range(int(sys.argv[1])):
    time.sleep((float(sys.argv[2]) + rng.uniform(0.0, 4.0)) / 1000)
    layer(torch.ones(1, 4)).sum().backward()
    opt.step()
    opt.zero_grad()
"""


def _capture(tmp_path, name, sleep_ms):
    script = tmp_path / "paced.py"
    script.write_text(PACED)
    out = tmp_path / name
    r = subprocess.run([sys.executable, "-m", "gpucheckup", "run", "--out", str(out), "--no-nvml", "--no-report",
                        "--skip", "20", "--steps", "2", "--", sys.executable, str(script), "80", str(sleep_ms)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    (run_dir,) = list(out.iterdir())
    return run_dir


def test_live_captures_one_job_twice_and_a_heavier_one(tmp_path):
    pytest.importorskip("torch")
    first, second = _capture(tmp_path, "a", 10), _capture(tmp_path, "b", 10)
    heavy = _capture(tmp_path, "c", 40)  # ~12 ms a step against ~42 ms
    js = tmp_path / "same.json"
    assert main(["compare", str(first), str(second), "--json", str(js), "--changed"]) == 0
    same = json.loads(js.read_text())
    assert same["headline"] == "run_figures.steps.unprofiled_ms"  # the unprofiled steps, not the profiled window
    assert not same["step_beyond_noise"], same["sentence"]
    assert same["verdict"][0] == same["verdict"][1]
    assert main(["compare", str(first), str(heavy), "--json", str(js)]) == 0
    diff = json.loads(js.read_text())
    assert diff["step_beyond_noise"] and diff["step_change_pct"] > 150, diff["sentence"]


def test_bad_inputs_are_one_line(tmp_path, capsys):
    assert main(["compare", str(tmp_path / "nope"), str(LAUNCH)]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["compare", str(LAUNCH), str(LAUNCH), "--fail-if-slower", "-1"]) == 2


def test_syncs_a_light_window_did_not_record_are_missing_not_zero(tmp_path):
    """The H200 launch-bound job through the full window's torch.profiler light fallback (runtime calls recorded) and
    through the CUPTI window (no synchronization records): B's sync figures are missing, not 0 syncs per step."""
    light = REPO / "tests/data/h200/light"
    (_, a), (_, b) = _report(light / "launch_bound", tmp_path, "a"), _report(light / "launch_bound_cupti", tmp_path, "b")
    assert a["sync"]["recorded"] is True and b["sync"]["recorded"] is False
    rows = {f.key: f for f in compare.compare(a, b).figures}
    row = rows["sync.count_per_step"]
    assert row.a == a["sync"]["count_per_step"] and row.b is None and row.beyond_noise
    assert not any(k.startswith("sync.") and f.b is not None for k, f in rows.items())


def test_a_run_directory_against_its_own_json_changes_nothing(tmp_path):
    """The H200 launch-bound job's CUPTI light window (its host samples beside the trace): the run directory checked
    up here and its `--json` read back are the same check-up, so no figure is new, gone or beyond noise (the JSON's
    host samples were a second copy of the run's, 10 figures 'new')."""
    run = REPO / "tests/data/h200/light/launch_bound_cupti"
    js, cmp = tmp_path / "run.json", tmp_path / "cmp.json"
    assert main(["analyze", str(run), "--quiet", "--json", str(js)]) == 0
    assert main(["compare", str(run), str(js), "--all", "--json", str(cmp)]) == 0
    doc = json.loads(cmp.read_text())
    assert [f["key"] for f in doc["figures"] if f["status"] != "changed" or f["beyond_noise"]] == []
    assert any(f["key"].startswith("run_figures.host_samples.") for f in doc["figures"])  # compared, once
    assert doc["step_change_pct"] == 0

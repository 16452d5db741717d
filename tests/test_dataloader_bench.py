"""`gpucheckup dataloader`: a real CPU torch Dataset with a slow __getitem__, iterated alone per num_workers,
under the CPU budget the process really has (sched_setaffinity in the test), and the advice's rules."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest

from conftest import REPO, trace_path, read_report
from gpucheckup.analysis.run_logs.environment import usable_cores
from gpucheckup.analysis.run_logs.loader_advice import FLAT_PCT, HEADROOM, Rate, advise, gpu_step
from gpucheckup.capture.environment import cgroup_quota
from gpucheckup.document import SCHEMA_VERSION, GapHistogram, GapPattern, Gaps, Profiler, Window

FACTORY = f"{REPO / 'tests' / 'jobs' / 'loader_factory.py'}:make_loader"
BATCH = 4  # tests/jobs/loader_factory.py


def bench(tmp_path, workers, spin_ms, sleep_ms, cpus=None, extra=(), batches=20, cgroup=None):
    """Run the command in a subprocess (pinned to `cpus`, or in the cgroup folder `cgroup`): JSON, rates, stdout."""
    out = tmp_path / f"dl-{workers}-{spin_ms}-{sleep_ms}-{cpus}.json"
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"), COLUMNS="160", GPUCHECKUP_TEST_SPIN_MS=str(spin_ms),
               GPUCHECKUP_TEST_SLEEP_MS=str(sleep_ms))
    res = subprocess.run([sys.executable, "-m", "gpucheckup", "dataloader", FACTORY, "--workers", workers,
                          "--batches", str(batches), "--json", str(out), *extra],
                         env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path,
                         preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else
                         (lambda: (cgroup / "cgroup.procs").write_text(str(os.getpid()))) if cgroup else None)
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    assert (doc["schema_version"], doc["kind"]) == (SCHEMA_VERSION, "dataloader")  # validated by conftest
    return doc, {r["num_workers"]: r["batches_per_s"] for r in doc["dataloader_bench"]["runs"]}, res.stdout


@pytest.fixture(scope="module")
def one_cpu():
    pytest.importorskip("torch")
    return {min(os.sched_getaffinity(0))}


def test_waiting_dataset_rises_with_workers(tmp_path, one_cpu):
    """10 ms of waiting per sample (remote storage): each worker adds a batch per 40 ms, even on one core."""
    doc, rate, _ = bench(tmp_path, "1,2,4", spin_ms=0.2, sleep_ms=10, cpus=one_cpu)
    assert rate[1] == pytest.approx(1000 / (BATCH * 10.2), rel=0.35)  # one worker: 4 samples x ~10 ms
    assert rate[2] > 1.6 * rate[1]
    assert rate[4] > 2.5 * rate[1]
    runs = {r["num_workers"]: r for r in doc["dataloader_bench"]["runs"]}
    assert [len(runs[w]["worker_rss_mb"]) for w in (1, 2, 4)] == [1, 2, 4]  # every worker process found
    assert all(x > 10 for w in (1, 2, 4) for x in runs[w]["worker_rss_mb"])  # a torch worker holds >10 MB


def test_advice_follows_the_curve_of_a_waiting_loader_past_the_cores(tmp_path, one_cpu):
    """10 ms of sleep and 0.2 ms of CPU per sample on one allowed core: the workers wait, not compute (their CPU time
    is a small share of their wall time), so the rate keeps rising past the one core and the advice follows it
    (before: "flattens at 1 worker", recommend 1, against its own curve)."""
    doc, rate, out = bench(tmp_path, "0,1,2,4,8", spin_ms=0.2, sleep_ms=10, cpus=one_cpu)
    adv = doc["advice"]
    assert adv["usable_cores"] == 1
    assert rate[4] > 2.5 * rate[1]  # the measured curve: more workers than cores still pay
    # the stated rule, by hand over the measured rates: the fewest workers (1 or more) within 10% of the best
    with_workers = {w: r for w, r in rate.items() if w >= 1}
    best = max(with_workers.values())
    knee = min(w for w, r in with_workers.items() if r >= 0.9 * best)
    assert knee > 1
    assert adv["recommended_workers"] == knee
    assert f"recommended: num_workers={knee}" in out
    assert adv["waits_on"] == "io" and adv["worker_cpu_share"] < 0.5
    assert adv["worker_cap"] >= 8 and adv["over_cap"] == []  # the one core carries every measured worker count
    assert "the loader waits on IO" in " ".join(out.split())
    runs = {r["num_workers"]: r for r in doc["dataloader_bench"]["runs"]}
    # each timed batch holds 4 samples of 0.2 ms of CPU: the workers' CPU time is far below their wall time
    assert runs[1]["worker_cpu_s"] < 0.5 * runs[1]["seconds"]


def test_checkup_of_a_cpu_run_gives_the_step_beside_the_loader(tmp_path):
    """`--checkup` with a CPU run directory (a real torch job run by `gpucheckup run`) and with its JSON document: the
    training step's time without waiting for data, not a failure about the report's internal keys."""
    pytest.importorskip("torch")
    runs = tmp_path / "runs"
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    res = subprocess.run([sys.executable, "-m", "gpucheckup", "run", "--out", str(runs), "--skip", "4", "--steps", "3",
                          "--no-report", "--", sys.executable, str(REPO / "tests" / "jobs" / "train_mlp.py"), "40"],
                         env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    (run,) = list(runs.iterdir())
    steps = [float(line.split(",")[2]) for line in (run / "steps.csv").read_text().splitlines()[1:]
             if line.split(",")[2]]
    steps.sort()  # the job's own step times, steps.csv
    report = tmp_path / "cpu.json"
    res = subprocess.run([sys.executable, "-m", "gpucheckup", "analyze", str(run), "--quiet", "--json", str(report)],
                         env=env, capture_output=True, text=True, timeout=300)
    assert report.exists(), res.stderr
    for checkup in (run, report):
        doc, rate, out = bench(tmp_path, "1,2", spin_ms=0.1, sleep_ms=1, extra=("--checkup", str(checkup)))
        adv = doc["advice"]
        assert 0 < adv["gpu_step_ms"] <= max(steps)
        # the step less its DataLoader wait (num_workers=0, tensors): a good part of the job's fastest step (its
        # median moves with the machine's load: 136 ms on a loaded CI replica, where the window's step was 3.6)
        assert adv["gpu_step_ms"] > 0.3 * steps[0]
        assert "CPU run" in adv["gpu_source"]
        text = " ".join(out.split())
        assert "the training step takes" in text and "window.step_ms" not in text


def test_cpu_bound_dataset_flattens_at_the_one_core_it_has(tmp_path, one_cpu):
    """4 ms of CPU per sample on one allowed core: more workers share that core; the advice respects it."""
    doc, rate, out = bench(tmp_path, "0,1,2,4", spin_ms=4, sleep_ms=0, cpus=one_cpu)
    cpu = doc["dataloader_bench"]["cpu"]
    assert cpu["affinity"] == 1
    adv = doc["advice"]
    assert (adv["usable_cores"], adv["limited_by"], adv["worker_cap"]) == (1, "CPU affinity", 1)
    assert adv["waits_on"] == "cpu" and adv["worker_cpu_share"] > 0.5  # 4 ms of CPU per sample: it computes
    assert adv["recommended_workers"] <= 1
    assert adv["over_cap"] == [2, 4]
    # one core: at most 1000 / (4 samples x 4 ms) = 62.5 batches/s, whatever the workers
    assert max(rate.values()) <= 1000 / (BATCH * 4) * 1.15
    assert rate[4] < 1.8 * rate[1]  # flat (a waiting dataset gains > 2.5x here, test above)
    assert "1 usable core (limited by CPU affinity); the workers were on or waiting for a CPU" in " ".join(out.split())
    assert "the loader computes" in " ".join(out.split()) and "advice names at most 1 worker" in " ".join(out.split())
    assert "exceed the usable cores" in out


def test_gpu_step_beside_it_and_the_workers_that_suffice(tmp_path, one_cpu):
    """input_bound's GPU needs a batch per (the report's step - DataLoader wait); a 40 ms-per-batch worker is too slow alone."""
    report = tmp_path / "input_bound.json"
    from gpucheckup.cli import main

    assert main(["analyze", str(trace_path("input_bound")), "--quiet", "--json", str(report)]) == 0
    r = read_report(report)
    gpu_ms = r["window"]["step_ms"] - r["gaps"]["per_step_ms"]["input"]
    doc, rate, out = bench(tmp_path, "1,2", spin_ms=0.1, sleep_ms=10, extra=("--checkup", str(report)))
    adv = doc["advice"]
    assert adv["gpu_step_ms"] == pytest.approx(gpu_ms)
    need = 1000 / gpu_ms
    assert rate[1] < HEADROOM * need < rate[2]  # ~25 and ~50 batches/s against ~32 needed
    assert adv["bottleneck"] is False and adv["suffice_workers"] == 2 and adv["recommended_workers"] == 2
    assert "the loader is not the bottleneck; num_workers=2 suffices" in " ".join(out.split())
    doc1, _, out1 = bench(tmp_path, "1", spin_ms=0.1, sleep_ms=10, extra=("--checkup", str(report)))
    assert doc1["advice"]["bottleneck"] is True and "IS the bottleneck" in " ".join(out1.split())


@pytest.fixture
def one_cpu_cgroup():
    """A cgroup (v1 `cpu` or v2) allowing one CPU's time, where this machine lets us make one; removed after."""
    pytest.importorskip("torch")
    root = Path("/sys/fs/cgroup")
    name = f"gpucheckup-test-{os.getpid()}"
    d = None
    try:
        if (root / "cpu" / "cpu.cfs_quota_us").is_file():
            d = root / "cpu" / name
            d.mkdir()
            (d / "cpu.cfs_period_us").write_text("100000")
            (d / "cpu.cfs_quota_us").write_text("100000")
        elif "cpu" in (root / "cgroup.subtree_control").read_text().split():
            d = root / name
            d.mkdir()
            (d / "cpu.max").write_text("100000 100000")
        else:
            pytest.skip("no cgroup CPU controller to make a quota with")
    except OSError as e:
        if d is not None and d.is_dir():
            d.rmdir()
        pytest.skip(f"cannot make a cgroup here ({e})")
    yield d
    for _ in range(50):  # the benchmark's processes have exited; the folder goes once the kernel agrees
        try:
            d.rmdir()
            break
        except OSError:
            time.sleep(0.1)


def test_cgroup_quota_is_reported_and_respected(tmp_path, one_cpu_cgroup):
    """In a cgroup allowed one CPU's time on a host of more cores, the quota (not the CPU count) caps the advice."""
    doc, rate, out = bench(tmp_path, "1,2,4", spin_ms=4, sleep_ms=0, cgroup=one_cpu_cgroup)
    cpu, adv = doc["dataloader_bench"]["cpu"], doc["advice"]
    assert cpu["cgroup_quota_cpus"] == 1.0 and str(one_cpu_cgroup) in cpu["cgroup_source"]
    assert (adv["usable_cores"], adv["limited_by"], adv["worker_cap"], adv["recommended_workers"]) == (
        1.0, "cgroup quota", 1, 1)
    assert max(rate.values()) <= 1000 / (BATCH * 4) * 1.15  # one CPU's time: at most 62.5 batches/s
    assert "cgroup quota 1 CPU (" in " ".join(out.split())


@pytest.mark.parametrize("spec, words", [("no_such_module_xyz:make", "importing no_such_module_xyz"),
                                         (f"{FACTORY.rsplit(':', 1)[0]}:nope", "has no function 'nope'"),
                                         ("just_a_name", "expected MODULE:FUNCTION")])
def test_bad_factory_is_one_line(spec, words, tmp_path):
    pytest.importorskip("torch")
    res = subprocess.run([sys.executable, "-m", "gpucheckup", "dataloader", spec],
                         env=dict(os.environ, PYTHONPATH=str(REPO / "src")), capture_output=True, text=True,
                         cwd=tmp_path, timeout=120)
    assert res.returncode == 2 and words in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_bad_workers_option(capsys):
    from gpucheckup.cli import main

    assert main(["dataloader", FACTORY, "--workers", "a,b"]) == 2
    assert "--workers" in capsys.readouterr().err


# The pure parts: no torch.

def test_advice_never_names_more_workers_than_the_quota():
    """A loader that keeps scaling to 16 workers, in a container with a 4-CPU quota (the seed's example)."""
    rates = [Rate(w, False, 10.0 * max(w, 1)) for w in (0, 2, 4, 8, 16)]
    a = advise(rates, 4.0, "cgroup quota")
    assert a.worker_cap == 4 and a.recommended_workers == 4 and a.best_workers == 4 and a.over_cap == [8, 16]
    a = advise(rates, 4.0, "cgroup quota", gpu_step_ms=10.0)  # the GPU wants 100 steps/s: more than 4 workers give
    assert a.bottleneck is True and a.recommended_workers == 4
    a = advise(rates, 2.5, "cgroup quota")
    assert a.worker_cap == 2 and a.recommended_workers == 2


def test_the_reported_curve_is_followed_when_the_workers_wait():
    """The numbers users saw: 14.6, 29.2, 56.9 and 108 batches/s at 0, 2, 4 and 8 workers on 2 cores, advised 2.
    Workers on CPU 5% of their time (0.1 CPU-seconds per second at 2 workers) wait on IO: 2 cores carry
    2 / 0.05 = 40 such workers, and the curve's knee is 8 (56.9 < 0.9 x 108)."""
    rates = [Rate(0, False, 14.6, None, 0.0), Rate(2, False, 29.2, None, 0.1), Rate(4, False, 56.9, None, 0.2),
             Rate(8, False, 108.0, None, 0.4)]
    a = advise(rates, 2.0, "CPU count")
    assert (a.waits_on, a.worker_cap, a.knee_workers, a.recommended_workers, a.over_cap) == ("io", 40, 8, 8, [])
    assert a.worker_cpu_share == pytest.approx(0.05)
    assert any("still rising" in x for x in a.sentences)
    busy = [Rate(r.workers, False, r.batches_per_s, None, min(r.workers, 2) * 0.95) for r in rates]
    a = advise(busy, 2.0, "CPU count")  # the same curve from workers that compute: the cores cap the advice
    assert (a.waits_on, a.worker_cap, a.recommended_workers, a.over_cap) == ("cpu", 2, 2, [4, 8])


def test_knee_and_suffice():
    rates = [Rate(0, False, 10), Rate(2, False, 30), Rate(4, False, 38), Rate(8, False, 40)]
    a = advise(rates, 16, "CPU count")
    assert a.knee_workers == 4  # 38 >= 0.9 x 40; 30 is not
    assert 38 >= (1 - FLAT_PCT / 100) * 40 > 30
    a = advise(rates, 16, "CPU count", gpu_step_ms=40.0, gpu_source="x")  # 25 steps/s, x1.1 = 27.5
    assert (a.bottleneck, a.suffice_workers, a.recommended_workers) == (False, 2, 2)


def test_pin_memory_choice():
    rates = [Rate(2, False, 30), Rate(2, True, 29)]
    assert advise(rates, 8, "CPU count").recommended_pin_memory is True
    rates = [Rate(2, False, 30), Rate(2, True, 20)]
    assert advise(rates, 8, "CPU count").recommended_pin_memory is False


def test_gpu_step_prefers_the_unprofiled_step():
    window = Window(step_ms=20.0, basis="median of 5 step windows", traced_step_ms=20.0, devices=1, steps=5,
                    length_ms=100.0)
    gaps = msgspec.structs.replace(GAPS, per_step_ms={"input": 5.0})
    profiler = Profiler(source="given", traced_step_ms=20.0, unprofiled_step_ms=12.0, inflation_pct=66.7,
                        gpu_ms_per_step=10.0, busy_pct_unprofiled=None, host_idle_factor=1.0, applied=True,
                        comm_wait_ms=0.0)
    assert gpu_step(window, profiler, gaps)[0] == pytest.approx(7.0)  # 12 - 5
    assert gpu_step(window, None, gaps)[0] == pytest.approx(15.0)  # 20 - 5


GAPS = Gaps(by_cause_ms={}, per_step_ms={}, pct_of_step={}, pattern=GapPattern(0.0, 0, 0.0, 0.0, "none"),
            cause_titles={}, longest=[], histogram=GapHistogram([], {}, {}))


def test_the_step_of_a_gpu_checkup_document_is_its_step_less_its_input_wait(tmp_path):
    """`--checkup` with a GPU trace's JSON: the window's step less the GPU's idle waiting for input per step, both
    read from the document as JSON (the H200 input-bound trace: most of its step waits for data)."""
    from gpucheckup.checkup.loader import gpu_step_for

    out = tmp_path / "c.json"
    res = subprocess.run([sys.executable, "-m", "gpucheckup", "analyze", str(trace_path("input_bound")), "--quiet",
                          "--json", str(out)], capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr
    part = json.loads(out.read_text())["checkups"][0]
    want = part["window"]["step_ms"] - part["gaps"]["per_step_ms"]["input"]
    assert not (part["profiler"] or {}).get("applied") and part["gaps"]["per_step_ms"]["input"] > 0
    assert gpu_step_for(out)[0] == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("files, cpus", [({"cpu.max": "200000 100000\n"}, 2.0), ({"cpu.max": "max 100000\n"}, None),
                                         ({"cpu/cpu.cfs_quota_us": "150000\n", "cpu/cpu.cfs_period_us": "100000\n"},
                                          1.5),
                                         ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"},
                                          None)])
def test_cgroup_quota_v1_and_v2(tmp_path, files, cpus):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    got, _ = cgroup_quota(tmp_path)
    assert got == cpus
    if cpus:
        assert usable_cores({"cpu": {"count": 64, "affinity": 64, "cgroup_quota_cpus": got}}) == (cpus, "cgroup quota")


def test_pure_parts_import_neither_torch_nor_pynvml():
    code = ("import sys; import gpucheckup.analysis.run_logs.loader_advice, gpucheckup.analysis.run_logs.live_events, "
            "gpucheckup.diagnosis.labels, gpucheckup.report.text.terminal_loader, "
            "gpucheckup.report.text.terminal_monitor, "
            "gpucheckup.capture.monitor, gpucheckup.capture.dataloader_bench, gpucheckup.checkup.loader, "
            "gpucheckup.checkup.monitor; print(sorted(m for m in ('torch', 'pynvml') if m in sys.modules))")
    res = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=str(REPO / "src")),
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"

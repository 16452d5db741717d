"""Ranks side by side on CPUs: a real gloo job with one slow rank, nccl-tests' factors, the link, and a
synthetic 128-rank job built from a real H200 trace with a planted straggler."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from conftest import ranks_view

from gpucheckup.analysis.job.ranks import analyze_ranks, rank_input
from gpucheckup.hardware import links
from gpucheckup.trace import read_trace

JOBS = Path(__file__).resolve().parent / "jobs"
H200X2 = Path(__file__).resolve().parent / "data" / "h200x2"
PY = sys.executable


def gpucheckup(*args, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "gpucheckup", *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("n, factor", [(2, 1.0), (4, 1.5), (8, 1.75)])
def test_all_reduce_bus_factor_is_nccl_tests(n, factor):
    assert links.bus_factor("allreduce", n) == factor  # 2(n-1)/n
    assert links.bus_factor("_allgather_base", n) == (n - 1) / n
    assert links.bus_factor("reduce_scatter", n) == (n - 1) / n
    assert links.bus_factor("broadcast", n) == 1.0


def test_canonical_names():
    names = ["allreduce", "nccl:all_reduce", "gloo:all_reduce", "_allgather_base", "_reduce_scatter_base",
             "all_to_all", "alltoall_base", "ncclDevKernel_AllReduce_Sum_f32_RING_LL"]
    assert [links.canonical(n) for n in names] == ["all_reduce", "all_reduce", "all_reduce", "all_gather",
                                                   "reduce_scatter", "all_to_all", "all_to_all", "all_reduce"]


def test_link_from_pcie_topology():
    topo = "\tGPU0\tGPU1\nGPU0\t X \tPHB\nGPU1\tPHB\t X \n"
    gb, how = links.link_from_topology(topo, "8.0")
    assert gb == 32.0 and "PCIe" in how
    assert links.link_from_topology("", "9.0") is None


@pytest.fixture(scope="module")
def gloo_run(tmp_path_factory):
    pytest.importorskip("torch", reason="runs a real torch.distributed job")
    out = tmp_path_factory.mktemp("runs")
    res = gpucheckup("run", "--out", str(out), "--skip", "4", "--steps", "5", "--record-shapes", "--no-report", "--",
                     PY, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "3",
                     str(JOBS / "ddp_train.py"), "--width", "64", "--layers", "2", "--batch", "8", "--steps", "12",
                     "--slow-rank", "2", "--slow-ms", "60")
    assert res.returncode == 0, res.stderr
    (run,) = [d for d in out.iterdir() if d.is_dir()]
    report = out / "report.json"
    res = gpucheckup("analyze", str(run), "--json", str(report), "--quiet")
    assert res.returncode == 0, res.stderr
    return ranks_view(json.loads(report.read_text()))


def test_gloo_job_names_the_slow_rank_and_its_cause(gloo_run):
    d = gloo_run
    ranks = d["ranks"]
    assert ranks["straggler"] == 2 and ranks["cause"] == "input"
    # no rank launched a kernel: the job is CPU-only, its straggler's cause the reason (not a GPU bound)
    assert d["verdict"]["primary"] == "cpu_only" and "DataLoader" in d["verdict"]["reason"]
    assert 60 * 0.8 < ranks["late_ms_per_step"] < 60 * 1.5  # the planted 60 ms per batch
    table = {r["rank"]: r for r in ranks["table"]}
    for r in (0, 1):  # the others wait for it
        assert table[r]["exposed_wait_ms"] > 60 * 0.8
    assert table[2]["wait_ms"] < 5
    (ar,) = d["communication"]["collectives"]
    # DDP's one bucket holds every gradient: 2 x (64*64 + 64) float32 parameters
    assert ar["name"] == "all_reduce" and ar["bytes"] == 2 * (64 * 64 + 64) * 4
    assert d["communication"]["link_gb_s"] is None  # CPUs: no GPU link


def _shifted(trace, rows, dt):
    """A copy of a trace whose given GPU rows start (and end) dt us later."""
    t = copy.copy(trace)
    t.gpu = copy.copy(trace.gpu)
    t.gpu.start, t.gpu.end = trace.gpu.start.copy(), trace.gpu.end.copy()
    t.gpu.start[rows] += dt
    t.gpu.end[rows] += dt
    return t


def test_128_synthetic_ranks_find_the_planted_straggler():
    base = read_trace(next((H200X2 / "ddp_healthy" / "traces").glob("rank0.json.gz")))
    from gpucheckup.analysis.one_trace.launches import launch_rows

    one_rows = launch_rows(base)
    one = rank_input(base, 0, one_rows)
    comm = np.array([i for i, n in enumerate(base.names) if "nccl" in n.lower()])
    comm_rows = np.flatnonzero(np.isin(base.gpu.name, comm))
    late_us, planted, n = 20_000.0, 77, 128
    tracemalloc.start()
    inputs = []
    for r in range(n):
        if r == planted:  # arrives 20 ms late at every collective; its calls take as long as before
            t = _shifted(base, comm_rows, late_us)
        else:  # arrives on time and waits 20 ms longer in every collective
            t = copy.copy(base)
            t.gpu = copy.copy(base.gpu)
            t.gpu.end = base.gpu.end.copy()
            t.gpu.end[comm_rows] += late_us
        t.rank = r
        x = rank_input(t, r, one_rows, one.steps)
        x.calls.group_size = np.full(len(x.calls), float(n))  # one group of all 128 ranks
        inputs.append(x)
    ra = analyze_ranks(inputs)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert ra.straggler == planted
    # 20 ms late at every call: 20 ms a step (its largest lateness in each step, not the sum over its calls)
    assert ra.straggler_late_ms == pytest.approx(late_us / 1e3, rel=0.05)
    from gpucheckup.analysis.job.ranks import distribution

    late = next(d for d in distribution(ra.table) if d["figure"] == "late_ms")
    assert late["outliers"] == [planted]
    print(f"128 ranks: peak traced memory {peak / 2**20:.1f} MiB")
    assert peak < 512 * 2**20


def test_many_ranks_print_as_a_distribution_with_the_outlier_named():
    import io

    from rich.console import Console

    from types import SimpleNamespace

    from gpucheckup.analysis.job.ranks import distribution
    from gpucheckup.report.text.terminal_ranks import render_job

    table = [{"rank": r, "step_ms": 100.0, "compute_ms": 80.0 + r % 3, "transfer_ms": 5.0,
              "wait_ms": 0.5 if r == 213 else 30.0, "exposed_wait_ms": 0.5 if r == 213 else 30.0, "idle_ms": 1.0,
              "late_ms": 30.0 if r == 213 else 0.1 * (r % 5)} for r in range(256)]
    d = {"verdict": {"primary": "input_bound", "reason": "rank 213 is the straggler", "findings": []},
         "ranks": {"straggler": 213, "table": table, "matched_calls": 256,
                   "distribution": distribution([SimpleNamespace(**r) for r in table])},
         "communication": {"collectives": [], "busbw_gb_s": None, "link_gb_s": None, "link_from": None}}
    buf = io.StringIO()
    render_job(d, Console(file=buf, width=120))
    out = buf.getvalue()
    late = next(line for line in out.splitlines() if line.strip().startswith("late"))
    assert late.split()[-1] == "213"
    assert out.count("\n") < 40  # a distribution, not 256 rows


def test_throttled_straggler_gpu_is_evidence():
    from gpucheckup.checkup.ranks import throttle_note

    calm = {"known": True, "throttled_pct": 0.0, "by_reason_pct": {}}
    hot = {"known": True, "throttled_pct": 40.0, "by_reason_pct": {"SW thermal slowdown": 40.0}}
    nvml = {"per_gpu": [{"gpu": 0, "throttle": calm}, {"gpu": 1, "throttle": hot}]}
    assert "GPU (1) was throttled in 40%" in throttle_note(nvml, 1) and "SW thermal" in throttle_note(nvml, 1)
    assert throttle_note(nvml, 0) is None


def test_workers_give_the_cross_rank_analysis_of_one_process(tmp_path, monkeypatch):
    """A folder read in worker processes sends back each rank's compact table, not its trace, and the
    cross-rank analysis (and the profiler correction's matched waits) come out as with --jobs 1."""
    import msgspec

    from gpucheckup.analysis.flops.mfu import MfuInputs
    from conftest import document_of
    from gpucheckup.checkup.pipeline import check
    from gpucheckup.trace import parallel
    from synthetic_ranks import write_folder

    write_folder(tmp_path, 4, planted=2)
    monkeypatch.setattr(parallel, "MIN_BYTES", 0)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # no stored commbench
    for inputs in (None, MfuInputs(unprofiled_step_ms=30.0, unprofiled_from="test")):
        one, two = check(tmp_path, inputs, jobs=1), check(tmp_path, inputs, jobs=2)
        assert all(c.analysis is None for c in two.checkups) and all(c.analysis for c in one.checkups)
        assert two.job.analysis.straggler == 2 == one.job.analysis.straggler
        assert msgspec.json.encode(document_of(one)) == msgspec.json.encode(document_of(two))
    # every rank does the same work; the waiting ranks' NCCL kernels spin 20 ms longer per call. Without the
    # profiler their GPU work is the planted rank's (whose kernels wait for nobody: its busy time as traced)
    p = ranks_view(document_of(two))["reports"]
    planted = p[2]
    assert planted["profiler"]["comm_wait_ms"] < 0.01
    assert planted["profiler"]["gpu_ms_per_step"] == pytest.approx(
        planted["gpu"]["busy_pct"] / 100 * planted["profiler"]["traced_step_ms"], rel=1e-3)
    for r in (p[0], p[1], p[3]):
        assert r["gpu"]["busy_pct"] > 99.9  # as traced: the waiting kernels fill the step
        assert r["profiler"]["gpu_ms_per_step"] == pytest.approx(planted["profiler"]["gpu_ms_per_step"], rel=1e-3)
        assert r["profiler"]["comm_wait_ms"] > 1.0


def test_a_folders_notes_end_each_checkup_built_from_its_diagnosis(tmp_path):
    """Two unrelated ranks (rank 1's launch-bound step far slower than rank 0's) and a third rank cut in half: each
    check-up's notes are its diagnosis's, ending with the skipped trace then the straggler, the steps that add them
    run before the report's diagnosis keys are built (checkup/pipeline.py), not patched into built reports."""
    import shutil

    from conftest import trace_path

    from gpucheckup.checkup.pipeline import check

    for rank, case in ((0, "moe_seed"), (1, "launch_bound")):
        shutil.copy(trace_path(case), tmp_path / f"trace_rank{rank}.json.gz")
    data = trace_path("moe_seed").read_bytes()
    (tmp_path / "trace_rank2.json.gz").write_bytes(data[: len(data) // 2])
    result = check(tmp_path, jobs=1)
    assert [c.facts.rank for c in result.checkups] == [0, 1]
    for c in result.checkups:
        assert c.report["notes"] == c.diagnosis.notes
        skipped, straggler = c.report["notes"][-2:]
        assert skipped.startswith("skipped a trace of this folder: ") and "trace_rank2.json.gz" in skipped
        assert straggler.startswith("rank 1 is a straggler: step ")

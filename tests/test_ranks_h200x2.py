"""Ranks side by side on real two-H200 runs (tests/data/h200x2/, captured by validation/h200x2_ranks.sh).

Every job is tests/jobs/ddp_train.py with an 8-layer MLP of width 4096 (8 x (4096*4096 + 4096)
float32 parameters), batch 1024 per rank, over `torchrun --nproc_per_node 2`; expected figures
come from that model and from what each run planted, not from the code under test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpucheckup.hardware import links
from gpucheckup.cli.emit import payload
from gpucheckup.pipeline import check_run

DATA = Path(__file__).resolve().parent / "data" / "h200x2"
PARAMS = 8 * (4096 * 4096 + 4096)
SLOW_MS = 40.0  # ddp_slow_input: rank 1's DataLoader sleeps this long per batch


@pytest.fixture(scope="module")
def runs():
    return {name: payload(check_run(DATA / name)) for name in ("ddp_healthy", "ddp_slow_input", "ddp_sockets", "fsdp")}


def test_healthy_ddp_is_gpu_bound_with_no_straggler(runs):
    d = runs["ddp_healthy"]
    assert d["verdict"]["primary"] == "gpu_bound"
    assert d["ranks"]["straggler"] is None
    assert [r["rank"] for r in d["ranks"]["table"]] == [0, 1]
    (ar,) = d["communication"]["collectives"]
    assert ar["name"] == "all_reduce"
    # DDP all-reduces every gradient once per step: the calls' bytes add up to the parameters' bytes
    assert ar["bytes"] * ar["count"] / d["ranks"]["steps"] == pytest.approx(PARAMS * 4, rel=1e-3)
    # NVLink (NV18): well above a tenth of the link, at most the link
    assert d["communication"]["link_gb_s"] == pytest.approx(450.0)
    assert 100 < d["communication"]["busbw_gb_s"] <= 450


def test_slow_input_rank_is_named_with_its_cause_and_no_bucketing(runs):
    d = runs["ddp_slow_input"]
    ranks = d["ranks"]
    assert ranks["straggler"] == 1 and ranks["cause"] == "input"
    assert d["verdict"]["primary"] == "input_bound"
    assert SLOW_MS * 0.9 < ranks["late_ms_per_step"] < SLOW_MS * 1.5
    r0, r1 = ranks["table"]
    assert r0["wait_ms"] > SLOW_MS * 0.9 and r1["wait_ms"] < 1.0
    assert r0["verdict"] == "waiting" and r1["verdict"] == "input_bound"
    assert any("NCCL kernels waiting for rank 1 as work" in n for n in d["reports"][0]["notes"])
    for rep in d["reports"]:
        actions = " ".join(f["action"] for f in rep["fixes"])
        assert "bucket" not in actions.lower()
        assert rep["verdict"]["findings"][0]["id"] == "straggler"


def test_sockets_are_a_transport_finding_with_measured_busbw(runs):
    d = runs["ddp_sockets"]
    assert d["verdict"]["primary"] == "communication_bound"
    assert d["ranks"]["straggler"] is None
    ids = [f["id"] for f in d["verdict"]["findings"]]
    assert ids == ["slow_link"]
    # the same collective measured by commbench on sockets, in the same session's first call
    bench = json.loads((DATA / "commbench-sockets.json").read_text())
    ref = next(r for r in bench["results"] if r["op"] == "all_reduce" and r["bytes"] == 64 << 20)
    assert d["communication"]["busbw_gb_s"] == pytest.approx(ref["busbw_gb_s"], rel=0.3)
    for rep in d["reports"]:
        first = rep["fixes"][0]
        assert "transport" in first["action"] and "NCCL_P2P_DISABLE" in first["action"]
        assert not any("bucket" in f["action"].lower() for f in rep["fixes"])


def test_fsdp_reads_all_gather_and_reduce_scatter_with_overlap(runs):
    d = runs["fsdp"]
    names = {c["name"]: c for c in d["communication"]["collectives"]}
    steps = d["ranks"]["steps"]
    # fully_shard per Linear: one all-gather in forward and one in backward, one reduce-scatter, per layer
    assert names["all_gather"]["count"] == 2 * 8 * steps
    assert names["reduce_scatter"]["count"] == 8 * steps
    assert names["all_gather"]["bytes"] == (4096 * 4096 + 4096) * 4
    for r in d["ranks"]["table"]:
        assert 0 <= r["comm_overlap_pct"] <= 100


def test_commbench_nvlink_reaches_most_of_the_link():
    bench = links.read_commbench(DATA / "commbench-nvlink.json")
    best, _ = links.measured_link(bench)
    topo = json.loads((DATA / "ddp_healthy" / "env.json").read_text())["topology"]
    link, how = links.link_from_topology(topo, "9.0")
    assert link == 450.0 and "NV18" in how
    assert 0.5 * link < best <= link


def test_scaling_efficiency_matches_the_jobs_own_step_times(tmp_path):
    import subprocess
    import sys

    out = tmp_path / "scaling.json"
    res = subprocess.run([sys.executable, "-m", "gpucheckup", "scaling", str(DATA / "ddp_1gpu"),
                          str(DATA / "ddp_healthy"), "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    sc = json.loads(out.read_text())
    # the jobs' own perf_counter medians (console.txt): 22.28 ms on 1 GPU, 24.10 ms on 2
    console = (DATA / "console.txt").read_text()
    assert "rank 0 median step 22.28 ms" in console and "rank 0 median step 24.10 ms" in console
    assert sc["n"] == 2 and sc["efficiency_pct"] == pytest.approx(100 * 22.28 / 24.10, abs=3)
    assert sum(sc["parts_ms"].values()) == pytest.approx(sc["extra_ms"])


def test_scaling_refuses_two_multi_gpu_runs():
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-m", "gpucheckup", "scaling", str(DATA / "ddp_healthy"),
                          str(DATA / "ddp_sockets")], capture_output=True, text=True, timeout=300)
    assert res.returncode == 2 and "1-GPU run" in res.stderr


def test_nvml_figures_per_gpu_over_the_steady_state():
    from gpucheckup.analysis.run import analyze_run
    from gpucheckup.trace.rundir import read_run

    run = read_run(DATA / "ddp_slow_input")
    nv = analyze_run(run).nvml
    assert nv["window"] == "steady state (after warm-up)"
    steps = run.steps["rank0"]["t_end_s"]
    assert nv["active_s"] <= steps[-1] - steps[1]  # inside the steps, start-up and shutdown left out
    per = {g["gpu"]: g["util_mean_pct"] for g in nv["per_gpu"]}
    # rank 0's NCCL kernel spins while it waits (NVML counts it busy); rank 1's GPU idles through its input
    assert per[0] > per[1] + 20


@pytest.mark.parametrize("run, cause, verdict, planted", [
    ("ddp_slow_host", "outside_ops", "launch_bound", "rank 1 spins 30 ms in Python before each forward"),
    ("ddp_slow_compute", "gpu_compute", "gpu_bound", "rank 1's batch is 3 times larger"),
])
def test_other_stragglers_are_named_with_their_cause(run, cause, verdict, planted):
    d = payload(check_run(DATA / run))
    ranks = d["ranks"]
    assert ranks["straggler"] == 1 and ranks["cause"] == cause, planted
    assert d["verdict"]["primary"] == verdict
    assert max(ranks["excess_ms"], key=ranks["excess_ms"].get) == cause
    r0, r1 = ranks["table"]
    assert r0["verdict"] == "waiting" and r0["exposed_wait_ms"] > 10 and r1["wait_ms"] < 1
    if cause == "gpu_compute":  # three times the batch: about three times the GPU work of rank 0
        assert r1["compute_ms"] == pytest.approx(3 * r0["compute_ms"], rel=0.35)
    for rep in d["reports"]:
        assert not any("bucket" in f["action"].lower() for f in rep["fixes"])


def test_a_folder_of_rank_traces_reads_the_same_as_its_run(tmp_path):
    import shutil
    import subprocess
    import sys

    for p in (DATA / "ddp_slow_input" / "traces").glob("rank*.json.gz"):
        shutil.copy(p, tmp_path / p.name)
    out = tmp_path / "job.json"
    import os

    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}  # no stored commbench
    res = subprocess.run([sys.executable, "-m", "gpucheckup", "analyze", str(tmp_path), "--json", str(out)],
                         capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr
    assert "Rank 1 is the straggler" in res.stdout
    d = json.loads(out.read_text())
    assert d["ranks"]["straggler"] == 1 and d["verdict"]["primary"] == "input_bound"
    assert d["communication"]["link_gb_s"] is None  # no env.json (topology) and no commbench: unknown


def test_a_stored_commbench_is_the_link(tmp_path, monkeypatch):
    import shutil

    from gpucheckup.ranks_checkup import link_figure

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cached = links.cache_path("NVIDIA H200", 2)
    cached.parent.mkdir(parents=True)
    shutil.copy(DATA / "commbench-nvlink.json", cached)
    gb, how = link_figure(None, {}, "NVIDIA H200", 2, "9.0")
    assert gb == pytest.approx(327.17, abs=0.01) and "commbench" in how

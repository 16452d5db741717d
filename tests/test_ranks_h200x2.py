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
from conftest import document_of, ranks_view
from gpucheckup.checkup.pipeline import check_run

DATA = Path(__file__).resolve().parent / "data" / "h200x2"
PARAMS = 8 * (4096 * 4096 + 4096)
SLOW_MS = 40.0  # ddp_slow_input: rank 1's DataLoader sleeps this long per batch


@pytest.fixture(scope="module")
def runs():
    return {name: ranks_view(document_of(check_run(DATA / name)))
            for name in ("ddp_healthy", "ddp_slow_input", "ddp_sockets", "fsdp")}


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
    from gpucheckup.analysis.run_logs.run import analyze_run
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
    d = ranks_view(document_of(check_run(DATA / run)))
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
    d = ranks_view(json.loads(out.read_text()))
    assert d["ranks"]["straggler"] == 1 and d["verdict"]["primary"] == "input_bound"
    assert d["communication"]["link_gb_s"] is None  # no env.json (topology) and no commbench: unknown


def test_a_stored_commbench_is_the_link(tmp_path, monkeypatch):
    import shutil

    from gpucheckup.checkup.ranks import link_figure

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cached = links.cache_path("NVIDIA H200", 2)
    cached.parent.mkdir(parents=True)
    shutil.copy(DATA / "commbench-nvlink.json", cached)
    gb, how = link_figure(None, {}, "NVIDIA H200", 2, "9.0")
    assert gb == pytest.approx(327.17, abs=0.01) and "commbench" in how


def _work_without_waiting_ms(rank: int) -> float:
    """Rank `rank`'s GPU work per step in ddp_slow_input, from the raw events: every kernel, copy and memset in
    its step windows, each NCCL all-reduce cut to its transfer (the shorter of the two ranks' k-th call; the
    rest is waiting), NCCL kernels without call arguments (launched before the window) left out; the
    window's share times its median step (docs/metrics.md, "One window")."""
    import statistics

    import independent as ind
    from conftest import raw_events

    docs = [raw_events(DATA / "ddp_slow_input" / "traces" / f"rank{r}.json.gz") for r in (0, 1)]
    calls = [sorted((e for e in d["traceEvents"] if e.get("cat") == "kernel" and "nccl" in e["name"].lower()
                     and "Collective name" in e.get("args", {})), key=lambda e: e["ts"]) for d in docs]
    assert len(calls[0]) == len(calls[1]) == 40  # 8 buckets x 5 steps
    w = ind.step_windows(docs[rank])
    lo, hi = w[0][0], w[-1][1]
    spans = [(e["ts"], e["ts"] + e["dur"]) for e in docs[rank]["traceEvents"] if e.get("ph") == "X"
             and e.get("cat") in ind.GPU_CATS and "nccl" not in e["name"].lower()]
    for mine, other in zip(calls[rank], calls[1 - rank]):
        transfer = min(mine["dur"], other["dur"])
        spans.append((mine["ts"] + mine["dur"] - transfer, mine["ts"] + mine["dur"]))
    clipped = [(max(s, lo), min(e, hi)) for s, e in spans if e > lo and s < hi]
    return ind.union_length(clipped) / (hi - lo) * statistics.median(e - s for s, e in w) / 1000


def test_profiler_correction_counts_waiting_collectives_as_idle(tmp_path):
    """The waiting rank of ddp_slow_input, with a step time without the profiler of 45 ms: its NCCL kernels
    spin 58 ms of its 64 ms step, mostly waiting for rank 1; counted as GPU work they read 'GPU busy 100%
    without the profiler' and scaled its idle causes by 0.00."""
    import shutil
    import subprocess
    import sys

    for p in (DATA / "ddp_slow_input" / "traces").glob("rank*.json.gz"):
        shutil.copy(p, tmp_path / p.name)
    out = tmp_path / "job.json"
    res = subprocess.run([sys.executable, "-m", "gpucheckup", "analyze", str(tmp_path), "--unprofiled-step-ms", "45",
                          "--json", str(out), "--quiet"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    d = ranks_view(json.loads(out.read_text()))
    p = d["reports"][0]["profiler"]
    work = _work_without_waiting_ms(0)
    assert 20 < work < 35  # its own compute (26 ms per median step) and transfer, not the 58 ms its kernels spin
    assert p["applied"] and p["gpu_ms_per_step"] == pytest.approx(work, rel=1e-3)
    assert p["busy_pct_unprofiled"] == pytest.approx(100 * work / 45, rel=1e-3)
    assert p["host_idle_factor"] == pytest.approx((45 - work) / (p["traced_step_ms"] - work), rel=1e-3)
    assert 0.3 < p["host_idle_factor"] < 0.7 and p["busy_pct_unprofiled"] < 80
    ev = next(f for f in d["reports"][0]["verdict"]["findings"] if f["id"] == "profiler_overhead")["evidence"]
    assert f"{p['comm_wait_ms']:.2f} ms per step of collective kernels waiting for other ranks" in ev[1]
    # the straggler's kernels hardly wait: its figure is its GPU work as traced
    assert d["reports"][1]["profiler"]["gpu_ms_per_step"] == pytest.approx(_work_without_waiting_ms(1), rel=1e-3)


def test_ddp_bucketing_is_offered_to_ddp_only_never_to_fsdp(runs):
    """bucket_cap_mb and gradient_as_bucket_view are DistributedDataParallel's: an FSDP job (all-gathers and
    reduce-scatters, FSDP:: ranges) gets no bucketing advice, a DDP job whose collectives are exposed does."""
    from gpucheckup.diagnosis.fixes import offer, uses_ddp

    fsdp, ddp = check_run(DATA / "fsdp"), check_run(DATA / "ddp_healthy")
    for c in fsdp.checkups:
        a = c.analysis
        assert {x["name"] for x in runs["fsdp"]["communication"]["collectives"]} == {"all_gather", "reduce_scatter"}
        assert a.communication.exposed_ms_per_step > 0  # exposed collectives: the other communication fixes hold
        assert not uses_ddp(a.trace) and offer(a, "ddp_buckets") == []
        assert [f.key for f in offer(a, "ddp_buckets", "nccl_check")] == ["nccl_check"]
    for rep in runs["fsdp"]["reports"]:
        assert not any("bucket" in f["action"].lower() for f in rep["fixes"])
    for c in ddp.checkups:
        a = c.analysis
        assert uses_ddp(a.trace) and a.communication.exposed_ms_per_step > 0
        assert [f.key for f in offer(a, "ddp_buckets")] == ["ddp_buckets"]

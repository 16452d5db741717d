"""Job labels (diagnosis/labels.py): every real fixture gets the label its verdict's nature implies.

The communication case is a synthetic trace for now: the lent single H200 cannot run the
socket-NCCL DDP job, so no real multi-GPU trace exists yet.
"""

from __future__ import annotations

import json

import pytest

from conftest import REPO, trace_path, write_trace, read_report
from gpucheckup.checkup.pipeline import check_path
from gpucheckup.cli import main
from gpucheckup.diagnosis.labels import INTENSIVE_PCT, classify

# The nature of each verdict: which shared resource a job with that verdict leans on.
NATURE = {"input_bound": "io", "copy_bound": "io", "communication_bound": "communication", "gpu_bound": "compute",
          "launch_bound": "compute", "sync_bound": "compute"}
SHARED = ["input_bound", "launch_bound", "launch_bound_stacks", "compute_bound", "moe_seed"]
REPO_CASES = ["sync_bound", "item_checks", "copy_bound", "alloc_churn", "no_step_markers", "bf16_transformer_run"]


def _path(case):
    if case in SHARED:
        return trace_path(case)
    p = REPO / "tests" / "data" / "h200" / case
    if not p.exists():
        pytest.skip(f"{p} missing")
    return p / "trace.json.gz" if (p / "trace.json.gz").exists() else p


@pytest.mark.parametrize("case", SHARED + REPO_CASES)
def test_label_matches_the_verdicts_nature(case):
    c = check_path(_path(case))[0]
    lab = c.report["labels"]
    assert lab["intensity"] == NATURE[c.diagnosis.primary], (case, c.diagnosis.primary, lab)
    # the shares are the verdict's scores regrouped: nothing counted twice, nothing invented
    sc = c.report["verdict"]["scores"]
    assert lab["io_pct"] == pytest.approx(sc["input_bound"] + sc["copy_bound"])
    assert lab["communication_pct"] == pytest.approx(sc["communication_bound"])
    assert lab["compute_pct"] == pytest.approx(sc["gpu_bound"])
    assert str(INTENSIVE_PCT).rstrip("0").rstrip(".") in lab["rule"]


def test_named_cases():
    """The issue's three: input_bound -> io, compute_bound -> compute (the DDP case is synthetic, below)."""
    assert check_path(trace_path("input_bound"))[0].report["labels"]["intensity"] == "io"
    assert check_path(trace_path("compute_bound"))[0].report["labels"]["intensity"] == "compute"


def _ddp_trace(tmp_path):
    """Three 1 ms steps: 300 us of GEMM, then a 600 us all-reduce of which 100 us overlaps it: 50% exposed."""
    def ev(cat, name, ts, dur, pid=1, tid=1, **args):
        return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}

    events, corr = [], 1
    for step in range(3):
        t0 = step * 1000.0
        events.append(ev("user_annotation", f"ProfilerStep#{step}", t0, 1000))
        for name, start, dur, stream in (("sm90_xmma_gemm_bf16", 10, 300, 7),
                                         ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 210, 600, 20)):
            events += [ev("cuda_runtime", "cudaLaunchKernel", t0 + corr % 2 + 1, 2, correlation=corr),
                       ev("kernel", name, t0 + start, dur, pid=0, tid=stream, device=0, stream=stream,
                          correlation=corr)]
            corr += 1
    return write_trace(tmp_path / "ddp.json", events)


def test_communication_label_on_a_synthetic_ddp_trace(tmp_path):
    c = check_path(_ddp_trace(tmp_path))[0]
    lab = c.report["labels"]
    assert c.diagnosis.primary == "communication_bound"
    assert lab["intensity"] == "communication"
    assert lab["communication_pct"] == pytest.approx(50.0, abs=0.5)  # 500 us exposed of 1000 us


def test_rule_boundaries():
    assert classify(80, INTENSIVE_PCT, 0).intensity == "io"
    assert classify(80, INTENSIVE_PCT - 0.1, 0).intensity == "compute"
    assert classify(50, 20, 30).intensity == "communication"
    assert classify(50, 30, 30).intensity == "io"  # a tie goes to io: data loading also loads the host
    assert classify(40, 0, INTENSIVE_PCT - 0.1, host_pct=60).intensity == "compute"


def test_label_in_json_and_terminal(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["analyze", str(trace_path("input_bound")), "--json", str(out)]) == 0
    assert read_report(out)["labels"]["intensity"] == "io"
    assert "io-intensive" in capsys.readouterr().out


@pytest.mark.parametrize("kind, label", [("input_bound", "io"), ("launch_bound", "compute")])
def test_label_in_run_directories(kind, label):
    from gpucheckup.checkup.pipeline import check_run

    runs = sorted((REPO / "tests" / "data" / "h200" / "runs").glob(f"*-{kind}"))
    if not runs:
        pytest.skip("run directories missing")
    rc = check_run(runs[0])
    assert [c.report["labels"]["intensity"] for c in rc.checkups] == [label]


def test_socket_nccl_ddp_job_is_communication_intensive():
    """The real two-H200 DDP run with NCCL forced onto sockets (tests/data/h200x2/ddp_sockets): every rank's
    exposed communication is most of its step, so the label is communication on both ranks."""
    from gpucheckup.checkup.pipeline import check

    run = REPO / "tests" / "data" / "h200x2" / "ddp_sockets"
    reports = check(run).reports()
    assert len(reports) == 2
    for r in reports:
        assert r["labels"]["intensity"] == "communication", r["labels"]
        assert r["labels"]["communication_pct"] >= 15.0

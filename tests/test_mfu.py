"""MFU end to end through the command line, checked against figures computed independently."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import fixtures_dir, raw_events, trace_path, write_trace, read_report
from independent import median_step_ms, step_windows
from test_cli import lookup, run_cli

H200_BF16_DENSE = 989.4  # TFLOP/s, NVIDIA H200 datasheet (1979 with sparsity)
MFU_KEYS = ["mfu.flops_per_step", "mfu.achieved_tflops", "mfu.peak_tflops", "mfu.pct", "mfu.source",
            "mfu.healthy_bands_pct", "mfu.reason", "roofline.ops"]


def _meta(case):
    base = fixtures_dir()
    if base is None:
        pytest.skip("shared H200 fixtures not available")
    return json.loads((base / case / "meta.json").read_text())


def _analyze(tmp_path, path, *opts):
    out = tmp_path / "r.json"
    res = run_cli("analyze", str(path), "--json", str(out), "--quiet", *opts,
                  env={"PATH": "/usr/bin:/bin", "XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert res.returncode == 0, res.stderr
    return read_report(out), res


def test_compute_bound_mfu_matches_hand_computation(tmp_path):
    flops = _meta("compute_bound")["flops_per_step"]
    path = trace_path("compute_bound")
    report, _ = _analyze(tmp_path, path, "--flops-per-step", str(flops))
    step_s = median_step_ms(step_windows(raw_events(path))) / 1000
    expected_pct = 100 * flops / step_s / 1e12 / H200_BF16_DENSE
    m = report["mfu"]
    assert m["source"] == "user" and m["flops_per_step"] == flops
    assert m["peak_tflops"] == H200_BF16_DENSE and m["dtype"] == "bf16"
    assert m["pct"] == pytest.approx(expected_pct, rel=0.01)
    assert m["achieved_tflops"] == pytest.approx(flops / step_s / 1e12, rel=0.01)
    assert 40 < m["pct"] < 50  # about 442 TFLOP/s: inside the dense pre-training band
    assert "within the dense" in m["assessment"]
    assert m["estimates"]["shapes"] == pytest.approx(flops, rel=0.025)


def test_every_report_has_the_mfu_keys(tmp_path):
    out = tmp_path / "demo.json"
    res = run_cli("demo", "--json", str(out), "--quiet", env={"PATH": "/usr/bin:/bin",
                                                              "XDG_CACHE_HOME": str(tmp_path)})
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    for case, report in zip(doc["cases"], doc["checkups"]):
        for key in MFU_KEYS:
            lookup(report, key)
        assert report["mfu"]["source"] == "shapes", case  # the bundled traces record shapes
        assert report["mfu"]["pct"] > 0


def test_moe_seed_fp32_is_low_mfu(tmp_path):
    report, res = _analyze(tmp_path, trace_path("moe_seed"))
    m = report["mfu"]
    assert m["gemm_dtype"] == "fp32" and m["dtype"] == "bf16"  # measured against the unused tensor cores
    assert m["pct"] < 5 and 30 < m["pct_of_gemm_dtype_peak"] < 60
    low = [f for f in report["verdict"]["findings"] if f["id"] == "low_mfu"]
    assert low and low[0]["severity"] == "warning"
    report2, _ = _analyze(tmp_path, trace_path("compute_bound"))
    assert not [f for f in report2["verdict"]["findings"] if f["id"] == "low_mfu"]


def test_no_flops_gives_nulls_with_a_reason(tmp_path):
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1, "dur": 2,
         "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": "ampere_bf16_s16816gemm", "pid": 0, "tid": 7, "ts": 5, "dur": 90,
         "args": {"device": 0, "stream": 7, "correlation": 1}},
    ]
    path = write_trace(tmp_path / "t.json", events)
    report, res = _analyze(tmp_path, path)
    m = report["mfu"]
    assert m["flops_per_step"] is None and m["pct"] is None and m["achieved_tflops"] is None
    assert "--flops-per-step" in m["reason"]
    report, _ = _analyze(tmp_path, path, "--params", "1e9", "--tokens-per-step", "4096")
    assert report["mfu"]["source"] == "formula"
    assert report["mfu"]["flops_per_step"] == 6 * 1e9 * 4096
    assert report["mfu"]["tokens_per_s"] == pytest.approx(4096 / 100e-6)
    report, _ = _analyze(tmp_path, path, "--params", "1e9", "--tokens-per-step", "4096", "--layers", "8",
                         "--d-model", "2048", "--seq-len", "2048")
    assert report["mfu"]["flops_per_step"] == (6 * 1e9 + 12 * 8 * 2048 * 2048) * 4096


def test_unknown_gpu_says_how_to_fix(tmp_path):
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0,
               "dur": 100},
              {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 5, "dur": 90,
               "args": {"device": 0, "stream": 7}}]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"deviceProperties": [{"id": 0, "name": "Mystery GPU 9000"}], "traceEvents": events}))
    report, _ = _analyze(tmp_path, path, "--flops-per-step", "1e9")
    assert report["mfu"]["pct"] is None and "--gpu" in report["mfu"]["reason"]
    report, _ = _analyze(tmp_path, path, "--flops-per-step", "1e9", "--gpu", "H100-SXM")
    assert report["mfu"]["pct"] == pytest.approx(100 * 1e9 / 100e-6 / 1e12 / 989.4)


def test_run_directory_flops_json_is_the_agent_source(tmp_path):
    run = tmp_path / "run"
    (run / "traces").mkdir(parents=True)
    shutil.copy(trace_path("moe_seed"), run / "traces" / "trace_rank0.json.gz")
    (run / "flops.json").write_text(json.dumps({"flops_per_step": 3e11, "how": "FlopCounterMode at step 3"}))
    report, _ = _analyze(tmp_path, run)
    m = report["mfu"]
    assert m["source"] == "agent" and m["flops_per_step"] == 3e11 and "FlopCounterMode" in m["source_detail"]
    assert m["estimates"]["shapes"] == pytest.approx(283333623808)
    report, _ = _analyze(tmp_path, run, "--flops-per-step", "2e11")  # an explicit option wins
    assert report["mfu"]["source"] == "user"
    (run / "flops.json").write_text("{not json")
    res = run_cli("analyze", str(run))
    assert res.returncode == 2 and "flops.json" in res.stderr and "Traceback" not in res.stderr


def test_measured_ceiling(tmp_path):
    base = fixtures_dir()
    if base is None:
        pytest.skip("shared H200 fixtures not available")
    report, _ = _analyze(tmp_path, trace_path("compute_bound"), "--ceilings", str(base / "ceilings.json"))
    m = report["mfu"]
    assert m["measured_tflops"] == 797.2
    assert m["pct_of_measured"] == pytest.approx(100 * m["achieved_tflops"] / 797.2)


def test_terminal_shows_mfu_and_roofline(tmp_path):
    res = run_cli("analyze", str(trace_path("compute_bound")), env={"PATH": "/usr/bin:/bin", "COLUMNS": "160",
                                                                    "XDG_CACHE_HOME": str(tmp_path)})
    assert res.returncode == 0, res.stderr
    assert "MFU" in res.stdout and "of 989.4 TFLOP/s" in res.stdout
    assert "dense pre-training 35-50%, MoE with FP8 20-32%" in res.stdout
    assert "against the roofline" in res.stdout


def test_bad_mfu_options_are_one_line_errors(tmp_path):
    for opts in (["--flops-per-step", "-5"], ["--params", "1e9"], ["--ceilings", str(tmp_path / "none.json")]):
        res = run_cli("analyze", str(trace_path("moe_seed")), *opts)
        assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, (opts, res.stderr)


def test_with_flops_annotations_are_a_source(tmp_path):
    """Edge case on a synthetic trace: annotated ops nested in annotated ops count once."""
    def op(name, ts, dur, flops=None, tid=1):
        args = {"External id": ts} | ({"flops": flops} if flops is not None else {})
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}
    events = []
    for step, t0 in enumerate((0, 1000)):
        events += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step + 1}", "pid": 1, "tid": 1, "ts": t0,
             "dur": 1000},
            op("aten::conv2d", t0 + 10, 100, 4e9),
            op("aten::mm", t0 + 20, 50, 1e9),  # inside conv2d on the same thread: not counted again
            op("aten::mm", t0 + 200, 50, 2e9, tid=2),  # another thread (autograd): counted
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t0 + 300,
             "dur": 2, "args": {"correlation": step + 1}},
            {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": t0 + 305, "dur": 600,
             "args": {"device": 0, "stream": 7, "correlation": step + 1}},
        ]
    report, _ = _analyze(tmp_path, write_trace(tmp_path / "f.json", events))
    m = report["mfu"]
    assert m["source"] == "annotations" and m["flops_per_step"] == 6e9
    assert m["achieved_tflops"] == pytest.approx(6e9 / 1000e-6 / 1e12)

"""Nsight Compute import: the real long-form CSV of moe_seed, a raw-page CSV made from its values,
classification by the stated thresholds, the join to the trace, and the ncu command line."""

from __future__ import annotations

import csv
import json
import shlex

import pytest
from conftest import REPO, SCHEMA, fixtures_dir, read_report, trace_path
from test_cli import run_cli

from gpucheckup.analysis.checkup import analyze
from gpucheckup.analysis.flops.ncu_bounds import BOUND_PCT, LATENCY_PCT, classify, memory_pct, ncu_bounds, tokens
from gpucheckup.errors import CheckupError
from gpucheckup.trace import read_trace
from gpucheckup.trace.ncu_csv import DRAM_PCT, MEM_PCT, SM_PCT, SOL_METRICS, parse_value, read_ncu_csv

RAW = REPO / "tests" / "data" / "ncu_raw_moe_seed.csv"  # 12 launches of the fixture, as `--page raw` lays them out


def _long_csv():
    base = fixtures_dir()
    if base is None or not (base / "ncu_moe_seed.csv").exists():
        pytest.skip("shared H200 fixtures not available")
    return base / "ncu_moe_seed.csv"


def _raw_figures(path):
    """SM % and DRAM % per launch ID, read with the csv module alone."""
    rows = list(csv.DictReader(line for line in open(path) if not line.startswith("==")))
    out = {}
    for r in rows:
        fig = out.setdefault(r["ID"], {"name": r["Kernel Name"]})
        fig[r["Metric Name"]] = float(r["Metric Value"].replace(",", ""))
    return out


def test_long_form_imports_every_launch():
    path = _long_csv()
    launches = read_ncu_csv(path)
    raw = _raw_figures(path)
    assert len(launches) == len(raw) == 94
    for x in launches:
        assert x.metrics[SM_PCT] == raw[x.id][SM_PCT] and x.metrics[DRAM_PCT] == raw[x.id][DRAM_PCT]
    assert launches[42].metrics["gpu__time_duration.sum"] == 1437408.0  # "1,437,408" ns


# (launch ID, kernel, expected bound). SM % and DRAM % come from the CSV in the test below.
EXPECTED = [
    ("42", "sm80_xmma_gemm_f32f32", "compute-bound"),  # MoE expert bmm: SM 92.05%, DRAM 3.86%
    ("44", "sm80_xmma_gemm_f32f32", "compute-bound"),  # SM 91.61%, DRAM 3.84%
    ("71", "sm80_xmma_gemm_f32f32", "compute-bound"),  # backward: SM 74.33%, DRAM 3.96%
    ("73", "sm80_xmma_gemm_f32f32", "compute-bound"),  # SM 81.38%, DRAM 4.04%
    ("92", "sm80_xmma_gemm_f32f32", "compute-bound"),  # small GEMM: SM 62.90%, DRAM 30.43%
    ("7", "sm80_xmma_gemm_f32f32", "balanced"),  # router GEMM: SM 58.21% < 60, DRAM 21.26%
    ("8", "sm80_xmma_gemm_f32f32", "latency-bound"),  # SM 8.29%, DRAM 17.35%: both < 40
    ("41", "index_put_kernel_impl", "compute-bound"),  # index_put_: SM 67.65%, DRAM 26.96% (LSU/address work)
    ("27", "index_kernel_impl", "latency-bound"),  # tiny index: SM 0.74%, DRAM 0.86%
    ("26", "vectorized_gather_kernel", "memory-bound"),  # SM 22.75%, DRAM 72.46%
    ("70", "indexing_backward_kernel", "memory-bound"),  # SM 42.89%, DRAM 80.69%
    ("50", "indexFuncLargeIndex", "balanced"),  # index_add_: SM 46.58%, DRAM 23.66%
    ("53", "_scatter_gather_elementwise_kernel", "compute-bound"),  # scatter: SM 81.08%, DRAM 26.57%
    ("11", "bitonicSortKVInPlace", "latency-bound"),  # argsort: SM 30.95%, DRAM 0.46%
]


@pytest.mark.parametrize("lid,kernel,bound", EXPECTED)
def test_moe_kernels_land_where_their_figures_say(lid, kernel, bound):
    path = _long_csv()
    fig = _raw_figures(path)[lid]
    assert kernel in fig["name"]
    sm, dram = fig[SM_PCT], fig[DRAM_PCT]
    # The thresholds, restated: bound by the larger unit at >= 60%, latency when both < 40%.
    if max(sm, dram) >= BOUND_PCT:
        independent = "compute-bound" if sm > dram else "memory-bound"
    elif sm < LATENCY_PCT and dram < LATENCY_PCT:
        independent = "latency-bound"
    else:
        independent = "balanced"
    assert independent == bound
    report = ncu_bounds(read_ncu_csv(path), None)
    got = {x["id"]: x["bound"] for x in report.per_launch}
    assert got[lid] == bound


def test_thresholds_and_memory_pct():
    assert classify(60.0, 10.0) == "compute-bound" and classify(10.0, 60.0) == "memory-bound"
    assert classify(39.9, 39.9) == "latency-bound" and classify(40.0, 5.0) == "balanced"
    assert classify(None, 5.0) is None
    assert memory_pct({DRAM_PCT: 20.0, MEM_PCT: 75.0}) == 75.0  # L1/L2-bound shows in memory throughput
    assert parse_value("1,437,408", "nsecond") == 1437408.0
    assert parse_value("1.5 msecond") == 1.5e6 and parse_value("12.5 %") == 12.5
    assert parse_value("n/a") is None and parse_value("") is None


def test_raw_page_parses_like_the_long_form():
    raw = {x.id: x for x in read_ncu_csv(RAW)}
    long_ = {x.id: x for x in read_ncu_csv(_long_csv())}
    assert len(raw) == 12
    for lid, x in raw.items():
        assert x.name == long_[lid].name
        assert x.metrics == long_[lid].metrics  # n/a columns dropped, "68,160" and "1.437408 msecond" in ns
    assert MEM_PCT not in raw["7"].metrics


def test_not_ncu_output_is_a_one_line_error(tmp_path):
    bad = tmp_path / "x.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(CheckupError, match="not Nsight Compute CSV"):
        read_ncu_csv(bad)


def test_join_to_trace_kernels():
    a = analyze(read_trace(trace_path("moe_seed")), ncu=read_ncu_csv(_long_csv()))
    n = a.ncu
    assert n.kernel_names == 46 and n.matched_to_trace >= 44
    by_name = {k["name"]: k for k in n.kernels}
    for k in n.kernels:  # a match shares the kernel's function name and its template tokens
        if k["trace_name"]:
            assert len(tokens(k["name"]) & tokens(k["trace_name"])) / len(tokens(k["name"]) | tokens(k["trace_name"])) >= 0.5
    index4 = [k for name, k in by_name.items() if "index_kernel_impl<native::OpaqueType<4>>" in name][0]
    index8 = [k for name, k in by_name.items() if "index_kernel_impl<native::OpaqueType<8>>" in name][0]
    assert "OpaqueType<4>" in index4["trace_name"] and "OpaqueType<8>" in index8["trace_name"]
    top = n.top[0]
    assert "sm80_xmma_gemm_f32f32" in top["name"] and top["bound"] == "compute-bound"
    assert n.trace_ms_by_bound["compute-bound"] > 0.7 * sum(n.trace_ms_by_bound.values())


def test_analyze_with_ncu_in_report_and_terminal(tmp_path):
    out = tmp_path / "r.json"
    res = run_cli("analyze", str(trace_path("moe_seed")), "--ncu", str(RAW), "--json", str(out),
                  env={"PATH": "/usr/bin:/bin", "COLUMNS": "160", "XDG_CACHE_HOME": str(tmp_path)})
    assert res.returncode == 0, res.stderr
    assert "Nsight Compute" in res.stdout and "compute-bound" in res.stdout
    report = read_report(out)
    assert report["ncu"]["launches"] == 12 and report["ncu"]["thresholds"]["latency-bound"]
    # the shipped schema gives the part and its rows key by key, every key written required (docs/schema.md)
    defs = json.loads(SCHEMA.read_text())["$defs"]
    part = next(x for x in defs["TraceReport"]["properties"]["ncu"]["anyOf"] if "$ref" in x)["$ref"].rsplit("/", 1)[1]
    rows = {"kernels": report["ncu"]["kernels"][0], "top": report["ncu"]["top"][0],
            "per_launch": report["ncu"]["per_launch"][0]}
    for name, written in [(part, report["ncu"])] + [(defs[part]["properties"][k]["items"]["$ref"].rsplit("/", 1)[1], row)
                                                    for k, row in rows.items()]:
        assert set(defs[name]["properties"]) == set(written) == set(defs[name]["required"]), name


def _ncu_args(line: str) -> dict:
    args = shlex.split(line)
    assert args[0] == "ncu"
    out, i = {}, 1
    while i < len(args) and args[i].startswith("--"):
        if args[i] == "--csv":
            out["--csv"] = True
            i += 1
        else:
            out[args[i]] = args[i + 1]
            i += 2
    out["command"] = args[i:]
    return out


def test_ncu_cmd_from_trace_and_from_report(tmp_path):
    res = run_cli("ncu-cmd", str(trace_path("moe_seed")), "--top", "3", "--command", "python train.py --steps 50")
    assert res.returncode == 0, res.stderr
    a = _ncu_args(res.stdout.strip())
    assert a["--kernel-name"].startswith("regex:^(sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8")
    assert a["--kernel-name-base"] == "function" and a["--clock-control"] == "none" and a["--csv"]
    assert set(a["--metrics"].split(",")) == set(SOL_METRICS)
    # Top 3 kernels: 12 + 5 + 5 launches over 5 steps -> 4 per step; skip 10 steps of them.
    assert a["--launch-count"] == "4" and a["--launch-skip"] == "40"
    assert a["command"] == ["python", "train.py", "--steps", "50"]
    report = tmp_path / "r.json"
    assert run_cli("analyze", str(trace_path("moe_seed")), "--json", str(report), "--quiet").returncode == 0
    res2 = run_cli("ncu-cmd", str(report), "--top", "3", "--command", "python train.py --steps 50")
    assert res2.returncode == 0 and res2.stdout == res.stdout

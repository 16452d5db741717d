"""`gpucheckup commbench` on CPUs (gloo): every collective measured, busbw = algbw x nccl-tests' factor."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gpucheckup.hardware import links


def test_commbench_on_gloo_writes_what_analyze_reads(tmp_path):
    pytest.importorskip("torch", reason="runs torch.distributed ranks")
    out = tmp_path / "cb.json"
    res = subprocess.run([sys.executable, "-m", "gpucheckup", "commbench", "--nproc", "2", "--max-mib", "1",
                          "--out", str(out)], capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stderr
    d = json.loads(out.read_text())
    assert d["format"] == links.COMMBENCH_FORMAT and d["backend"] == "gloo" and d["nranks"] == 2
    ops = {r["op"]: r for r in d["results"]}
    assert set(ops) | set(d["skipped"]) == {"all_reduce", "all_gather", "reduce_scatter", "all_to_all"}
    for op, r in ops.items():
        assert r["bytes"] == 1 << 20 and r["ms"] > 0
        algbw = r["bytes"] / (r["ms"] / 1e3) / 1e9
        assert r["algbw_gb_s"] == pytest.approx(algbw)
        assert r["busbw_gb_s"] == pytest.approx(algbw * (1.0 if op == "all_reduce" else 0.5))  # n = 2
    assert links.read_commbench(out) is not None and links.measured_link(d)[0] == ops["all_reduce"]["busbw_gb_s"]


def test_commbench_needs_two_ranks():
    res = subprocess.run([sys.executable, "-m", "gpucheckup", "commbench", "--nproc", "1"], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 2 and "at least 2 ranks" in res.stderr

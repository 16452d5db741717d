"""Measured ceilings: the stored format, lookup by device name, and the command without a GPU."""

from __future__ import annotations

import json

import pytest
from conftest import fixtures_dir, trace_path, read_report
from test_cli import run_cli

from gpucheckup.hardware import ceilings


def test_roundtrip_and_default_path(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    c = ceilings.Ceilings(device="NVIDIA H200", matmul_tflops={"bf16": 790.0, "fp32": 51.0},
                          copy_gb_s={"d2d": 4300.0, "h2d_pinned": 54.0}, skipped={"fp8": "RuntimeError: no"})
    path = ceilings.save(c, ceilings.default_path(c.device))
    assert path == tmp_path / "gpucheckup" / "ceilings-nvidia-h200.json"
    assert json.loads(path.read_text())["format"] == ceilings.FORMAT
    back, found = ceilings.find_for("NVIDIA H200")
    assert found == path and back.matmul_tflops == c.matmul_tflops and back.copy_gb_s == c.copy_gb_s
    assert ceilings.find_for("NVIDIA H100 PCIe") is None


def test_fixture_layout_is_read():
    base = fixtures_dir()
    if base is None:
        pytest.skip("shared H200 fixtures not available")
    c = ceilings.load(base / "ceilings.json")
    assert c.device == "NVIDIA H200" and c.matmul_tflops == {"bf16": 797.2}
    assert c.copy_gb_s == {"d2d": pytest.approx(4290.0), "h2d_pinned": 54.3, "h2d_pageable": 15.7}


def test_bad_ceilings_file(tmp_path):
    bad = tmp_path / "c.json"
    bad.write_text("[1, 2]")
    with pytest.raises(ceilings.CheckupError, match="not a ceilings file"):
        ceilings.load(bad)


def test_analyze_finds_stored_ceilings_by_device_name(tmp_path):
    ceilings_file = tmp_path / "gpucheckup" / "ceilings-nvidia-h200.json"
    ceilings_file.parent.mkdir(parents=True)
    ceilings_file.write_text(json.dumps({"format": ceilings.FORMAT, "device": "NVIDIA H200",
                                         "matmul_tflops": {"bf16": 800.0}, "copy_gb_s": {}}))
    out = tmp_path / "r.json"
    res = run_cli("analyze", str(trace_path("compute_bound")), "--json", str(out), "--quiet",
                  env={"PATH": "/usr/bin:/bin", "XDG_CACHE_HOME": str(tmp_path)})
    assert res.returncode == 0, res.stderr
    m = read_report(out)["mfu"]
    assert m["ceilings_path"] == str(ceilings_file) and m["measured_tflops"] == 800.0
    assert m["pct_of_measured"] == pytest.approx(100 * m["achieved_tflops"] / 800.0)


def test_ceilings_without_cuda_is_a_one_line_error(tmp_path):
    """No torch (CI) or a CPU-only torch: exit 2 and one line saying what is missing."""
    res = run_cli("ceilings", "--out", str(tmp_path / "c.json"))
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr
    assert "torch is not installed" in lines[0] or "sees none" in lines[0]
    assert not (tmp_path / "c.json").exists()

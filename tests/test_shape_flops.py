"""FLOPs from operator shapes against torch's FlopCounterMode, on real traces.

The H200 traces' meta.json holds FlopCounterMode's count of one step. Where the two conventions
differ, the difference is computed here by hand and must account for the gap exactly:
- SDPA backward: FlopCounterMode counts 5 matmuls (it includes recomputing the score matrix),
  gpucheckup 4 (model FLOPs, no recomputation): FlopCounterMode = ours + 0.5 x SDPA forward.
- grouped convolution weight gradient: FlopCounterMode counts it `groups` times too much.
- addbmm and the CPU SDPA op: FlopCounterMode registers no formula for them, gpucheckup counts them.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import REPO, fixtures_dir, trace_path

from gpucheckup.analysis.flops.shape_flops import conv_flops, matmul_flops, shape_flops
from gpucheckup.analysis.one_trace.steps import find_steps
from gpucheckup.trace import read_trace

CPU_SHAPES = REPO / "tests" / "data" / "cpu_shapes"


def _meta(case: str) -> dict:
    base = fixtures_dir()
    if base is None or not (base / case / "meta.json").exists():
        pytest.skip("shared H200 fixtures not available")
    return json.loads((base / case / "meta.json").read_text())


def _count(path):
    trace = read_trace(path)
    launch_rows = np.full(len(trace.gpu), -1)
    return shape_flops(trace, find_steps(trace, launch_rows))


@pytest.mark.parametrize("case", ["moe_seed", "input_bound", "launch_bound"])
def test_shapes_equal_flopcountermode_without_attention(case):
    fc = _count(trace_path(case))
    meta = _meta(case)
    assert fc.ops_skipped == 0
    assert fc.flops_per_step == pytest.approx(meta["flops_per_step"], rel=1e-9)
    assert len(set(fc.per_step)) == 1  # the same work every step


def test_compute_bound_differs_only_by_sdpa_recomputation():
    meta = _meta("compute_bound")
    cfg = meta["config"]
    fc = _count(trace_path("compute_bound"))
    b, s, d, layers = cfg["batch"], cfg["seq"], cfg["d"], cfg["layers"]
    sdpa_forward = 4 * b * s * s * d  # QK^T and PV: 2 matmuls of 2*B*H*S*S*(D/H) FLOPs each
    assert fc.by_kind["attention"] == pytest.approx(3 * layers * sdpa_forward, rel=1e-12)  # fwd + 2x fwd
    assert fc.flops_per_step + 0.5 * layers * sdpa_forward == pytest.approx(meta["flops_per_step"], rel=1e-12)
    assert fc.flops_per_step / meta["flops_per_step"] == pytest.approx(1, abs=0.025)  # 2.0% apart
    # Every matmul counted once: 8 layers x 4 linears + the head, forward and two backward GEMMs each.
    params_matmul = layers * 12 * d * d + 32000 * d
    assert fc.by_kind["matmul"] == pytest.approx(6 * params_matmul * b * s, rel=1e-12)


def test_nested_ops_are_counted_once():
    """autocast's linear -> linear -> matmul -> mm chain: only the outer linear is counted."""
    fc = _count(trace_path("compute_bound"))
    ops = {g["op"] for g in fc.groups}
    assert "aten::_cudnn_attention_forward" not in ops and "aten::_scaled_dot_product_cudnn_attention" not in ops
    linear = [g for g in fc.groups if g["op"] == "aten::linear"]
    assert linear and all(g["dtype"] == "bf16" for g in linear)  # dtype from the innermost op (autocast)
    assert sum(g["count"] for g in linear) == 5 * (8 * 4 + 1)


def test_cpu_convolutions_reconcile_with_flopcountermode():
    meta = json.loads((CPU_SHAPES / "meta.json").read_text())["convs"]
    fc = _count(CPU_SHAPES / "convs.json.gz")
    assert fc.ops_skipped == 0  # padding="same" is read from the convolution inside conv2d
    # Conv2d(16, 32, 3, padding=2, dilation=2, groups=4) on 2x16x16x16: FLOPs of one pass.
    grouped = 2 * 2 * 32 * (16 // 4) * 9 * 16 * 16
    assert fc.flops_per_step == meta["flops_per_step"] - (4 - 1) * grouped


def test_cpu_matmuls_reconcile_with_flopcountermode():
    meta = json.loads((CPU_SHAPES / "meta.json").read_text())["mats"]
    fc = _count(CPU_SHAPES / "mats.json.gz")
    addbmm = 2 * 4 * 10 * 64 * 48
    sdpa_forward = 2 * 2 * 4 * 4 * 10 * 10 * 16
    assert fc.flops_per_step == meta["flops_per_step"] + addbmm + sdpa_forward * 3


def test_formulas():
    assert matmul_flops("aten::matmul", [[7, 1, 5, 3], [4, 3, 2]])[0] == 2 * 7 * 4 * 5 * 3 * 2
    assert matmul_flops("aten::matmul", [[3], [3, 6]])[0] == 2 * 3 * 6
    assert matmul_flops("aten::linear", [[2, 5, 8], [16, 8], [16]])[0] == 2 * 10 * 8 * 16
    # ResNet stem: 7x7 stride 2 pad 3 on 160x160 -> 80x80.
    flops, _, out = conv_flops("aten::conv2d", [[128, 3, 160, 160], [64, 3, 7, 7]],
                               ["", "", "", "[2, 2]", "[3, 3]", "[1, 1]", "1"])
    assert out == [[128, 64, 80, 80]] and flops == 2 * 128 * 64 * 3 * 49 * 80 * 80
    # convolution_backward with only the weight gradient.
    flops, _, _ = conv_flops("aten::convolution_backward", [[1, 4, 6, 6], [1, 2, 8, 8], [4, 2, 3, 3]],
                             ["", "", "", "[0]", "[1, 1]", "[0, 0]", "[1, 1]", "False", "[0, 0]", "1",
                              "[False, True, False]"])
    assert flops == 2 * 1 * 4 * 2 * 9 * 36

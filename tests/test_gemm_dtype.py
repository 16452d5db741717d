"""GEMM dtype from kernel names and launching ops, on the real H200 traces."""

from __future__ import annotations

import pytest
from conftest import trace_path

from gpucheckup.analysis.checkup import analyze
from gpucheckup.analysis.flops.gemm_dtype import dtype_from_name, kernel_dtype
from gpucheckup.trace import read_trace


@pytest.mark.parametrize("name,dtype", [
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "bf16"),
    ("ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_tn", "fp16"),
    ("volta_h884gemm_64x64_ldg8_nn", "fp16"),
    ("cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4", "tf32"),
    ("ampere_sgemm_128x64_tn", "fp32"),
    ("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize64x128x8_stage3_warpsize1x4x1_ffma_aligna4", "fp32"),
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_64x64_8x5_tn_align1>(cutlass_80_simt_sgemm_64x64_8x5_tn_align1)",
     "fp32"),
    ("sm90_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_tilesize128x128x128", "fp8"),
    ("nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_NTN", ""),  # Hopper cuBLAS names carry no dtype
])
def test_dtype_from_name(name, dtype):
    assert dtype_from_name(name) == dtype


def test_nameless_kernels_take_the_ops_dtype():
    assert kernel_dtype("nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_NTN", "bf16") == "bf16"
    assert kernel_dtype("nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_NTN", "fp32") == "tf32"
    assert kernel_dtype("some_gemm", "") == "unknown"


@pytest.mark.parametrize("case,dtype", [("compute_bound", "bf16"), ("input_bound", "bf16"), ("moe_seed", "fp32"),
                                        ("launch_bound", "fp32")])
def test_dominant_dtype_on_real_traces(case, dtype):
    a = analyze(read_trace(trace_path(case)))
    shares = a.mfu.gemm_dtypes_pct
    assert max(shares, key=shares.get) == dtype
    assert shares[dtype] == pytest.approx(100.0)

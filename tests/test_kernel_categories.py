"""Kernel categories come from the names of what a kernel runs, never from its template's types: each case below
was miscategorised by a word in a type or a parameter (`index`, `Scan`, `cudnn`, `cublas`, `normal`) and is
classified here by hand from what the kernel does."""

from __future__ import annotations

import pytest

from conftest import REPO
from gpucheckup.analysis.one_trace.gpu.kernels import CATEGORIES, categorize

MTA = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
       "TensorListMetadata<2>, at::native::(anonymous namespace)::UnaryOpFunctor<float, 2, 1, 1>, {op} >"
       "(at::native::(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::"
       "UnaryOpFunctor<float, 2, 1, 1>, {op})")
BY_HAND = [
    # batch norm's backward: a reduction over the batch, whatever its accessors' types are called
    ("void at::native::batch_norm_backward_kernel<float, float, float, long>(at::GenericPackedTensorAccessor<float "
     "const, 3ul, at::DefaultPtrTraits, long>, at::native::IndexedAccessor<float>)", "reduction_norm"),
    # stream compaction (nonzero, masked_select): its policy's ScanTileState is not a scan of the data
    ("void at_cuda_detail::cub::detail::select::DeviceSelectSweepKernel<at_cuda_detail::cub::detail::select::"
     "policy_hub<long, bool, int, false, (at_cuda_detail::cub::SelectImpl)0>::Policy1000, at_cuda_detail::cub::"
     "ScanTileState<int, true>>(long*, int)", "data_movement"),
    # cuDNN's padding helper moves data; the cudnn in its template argument is a type
    ("void nhwcAddPaddingKernel<__nv_bfloat16, __nv_bfloat16, float, true, (cudnnKernelDataType_t)0>(int, int, "
     "__nv_bfloat16 const*, __nv_bfloat16*)", "data_movement"),
    # BLAS scal: scales a vector, elementwise; cublasTransposeParams is its parameter's type
    ("void scal_kernel<float, float, 1, true, 6, 5, 5, 3>(cublasTransposeParams<float>, float const*, float*, "
     "float const*)", "elementwise"),
    # random numbers: elementwise, though the distribution is called normal
    ("void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<float, 4, at::native::"
     "templates::cuda::normal_and_transform<float, float, at::CUDAGeneratorImpl*>(at::TensorBase const&)::"
     "{lambda(float)#1}>(long, at::PhiloxCudaState)", "elementwise"),
    # PyTorch's generic launchers: the work is the functor or op they are given
    (MTA.format(op="at::native::Copy<float, float>"), "data_movement"),
    (MTA.format(op="at::native::Sqrt<float>"), "elementwise"),
    ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::"
     "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda(float)#1}> >"
     "(int, at::native::gpu_kernel_impl_nocast<...>)", "data_movement"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >"
     "(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)", "elementwise"),
    # a CUTLASS kernel is named by its first template argument
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x128_8x4_nt_align1>(cutlass_80_simt_sgemm_128x128_8x4_nt_align1"
     "::Params)", "gemm_conv"),
]


@pytest.mark.parametrize("name,category", BY_HAND, ids=[c + str(i) for i, (_, c) in enumerate(BY_HAND)])
def test_a_kernel_is_categorised_by_what_it_runs(name, category):
    assert categorize(name) == category


def test_every_real_kernel_name_keeps_its_reviewed_category():
    listed = {}
    for line in (REPO / "tests" / "data" / "kernel_categories.tsv").read_text().splitlines():
        if line and not line.startswith("#"):
            cat, name = line.split("\t", 1)
            listed[name] = cat
    assert set(listed.values()) <= set(CATEGORIES) and len(listed) > 250
    moved = {n: (c, categorize(n)) for n, c in listed.items() if categorize(n) != c}
    assert not moved, moved
    assert {c for c in listed.values()} >= {"gemm_conv", "attention", "elementwise", "reduction_norm",
                                            "data_movement", "optimizer", "communication"}

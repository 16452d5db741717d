"""Kernel statistics (analysis/one_trace/gpu/kernels.py; docs/metrics.md "Kernels") against the raw events of a real
H200 trace read with the standard library: the kernels starting inside the analysis window, their count, total, mean,
median, small share (< 20 us), per-name table and launch delay (kernel start less its launching call's start).
The reader's clock is absolute microseconds in float64 (about 1.7e12 us: steps of 0.00024 us), so each duration
agrees to EPS_US, and a sum of n of them to n x EPS_US."""

from __future__ import annotations

import statistics
from collections import defaultdict

import pytest

import independent as ind
from conftest import raw_events, trace_path
from gpucheckup.analysis.checkup import analyze
from gpucheckup.trace import read_trace

CASES = ("moe_seed", "launch_bound")
EPS_US = 0.001


@pytest.fixture(scope="module", params=CASES)
def both(request):
    path = trace_path(request.param)
    return analyze(read_trace(path)).kernels.to_dict(), raw_events(path)


def raw_kernels(doc):
    windows = ind.step_windows(doc)
    lo, hi = windows[0][0], windows[-1][1]
    return [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel" and lo <= e["ts"] <= hi]


def test_counts_and_durations_are_the_kernels_in_the_window(both):
    k, doc = both
    ks = raw_kernels(doc)
    durs = [e["dur"] for e in ks]
    assert k["count"] == len(ks)
    assert k["total_ms"] == pytest.approx(sum(durs) / 1000, abs=len(durs) * EPS_US / 1000)
    assert k["mean_us"] == pytest.approx(statistics.mean(durs), abs=EPS_US)
    assert k["median_us"] == pytest.approx(statistics.median(durs), abs=EPS_US)
    # shorter than 20 us; a kernel of 20.000 us in the JSON may read a clock step either side of it
    surely, maybe = sum(d < 20.0 - EPS_US for d in durs), sum(d < 20.0 + EPS_US for d in durs)
    assert 100 * surely / len(durs) - 1e-9 <= k["small_pct"] <= 100 * maybe / len(durs) + 1e-9


def test_the_per_name_table_sums_each_names_kernels(both):
    k, doc = both
    ks = raw_kernels(doc)
    total = sum(e["dur"] for e in ks)
    us, n = defaultdict(float), defaultdict(int)
    for e in ks:
        us[e["name"]] += e["dur"]
        n[e["name"]] += 1
    rows = {r["name"]: r for r in k["by_name"]}
    assert set(rows) == set(us)
    for name, r in rows.items():
        assert r["count"] == n[name] and r["total_ms"] == pytest.approx(us[name] / 1000, abs=n[name] * EPS_US / 1000)
        assert r["mean_us"] == pytest.approx(us[name] / n[name], abs=EPS_US)
        assert r["pct"] == pytest.approx(100 * us[name] / total, abs=100 * n[name] * EPS_US / total)
    # largest total first; the top table is the first ten of it
    assert [r["total_ms"] for r in k["by_name"]] == sorted((r["total_ms"] for r in k["by_name"]), reverse=True)
    assert k["top"] == k["by_name"][:10] and len(k["top"]) == min(10, len(us))
    # the categories' shares add up to all kernel time, each the sum of its kernels'
    assert sum(k["categories"].values()) == pytest.approx(100.0)
    assert sum(k["categories_ms"].values()) == pytest.approx(total / 1000, abs=len(ks) * EPS_US / 1000)


def test_launch_delay_is_the_kernels_start_less_its_calls(both):
    k, doc = both
    calls = {e["args"]["correlation"]: e["ts"] for e in doc["traceEvents"] if e.get("ph") == "X"
             and e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    delays = [e["ts"] - calls[e["args"]["correlation"]] for e in raw_kernels(doc)
              if e["args"].get("correlation") in calls]
    assert k["launch_delay_median_us"] == pytest.approx(statistics.median(delays), abs=EPS_US)
    # the 90th percentile, interpolated between the two nearest delays (numpy's and the inclusive method's rule)
    p90 = statistics.quantiles(delays, n=10, method="inclusive")[8]
    assert k["launch_delay_p90_us"] == pytest.approx(p90, abs=EPS_US)


INDEX = ("void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<at::native::{impl}<"
         "at::native::OpaqueType<4> >(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>)::{{lambda(char*, char "
         "const*, long)#1}}>(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>, {{lambda}} const&)")


@pytest.mark.parametrize("name, label", [
    # the base name, then the op inside its template (names from the moe_seed trace), by hand
    (INDEX.format(impl="index_put_kernel_impl"), "index_elementwise_kernel (index_put_kernel_impl)"),
    (INDEX.format(impl="index_kernel_impl"), "index_elementwise_kernel (index_kernel_impl)"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >(int, "
     "at::native::FillFunctor<float>, std::array<char*, 1ul>)", "vectorized_elementwise_kernel (FillFunctor)"),
    ("void (anonymous namespace)::indexing_backward_kernel<float, 4>(long const*, long const*, float const*, float*, "
     "long, long, long, long, bool)", "indexing_backward_kernel"),
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x128_8x4_nt_align1>(cutlass_80_simt_sgemm_128x128_8x4_nt_align1"
     "::Params)", "cutlass_80_simt_sgemm_128x128_8x4_nt_align1"),
    ("void " + "a" * 100 + "<int>(int)", "a" * 69 + "..."),  # 72 characters at most
    # a word with a name after "Reduce" names the op from there; "Reduce" closing a word names none
    ("void my_kernel<BlockReduceSum>(float*)", "my_kernel (ReduceSum)"),
    ("void my_kernel<BlockReduce>(float*)", "my_kernel"),
])
def test_kernel_labels_by_hand(name, label):
    from gpucheckup.analysis.one_trace.gpu.kernels import kernel_label

    assert kernel_label(name) == label


def test_a_window_with_copies_and_no_kernel_has_empty_kernel_figures(tmp_path):
    from conftest import write_trace

    # one step [0, 1000] whose only GPU op is a 100 us copy launched at 10
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 1000,
               "args": {}},
              {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1, "ts": 10, "dur": 5,
               "args": {"correlation": 1}},
              {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "pid": 0, "tid": 7, "ts": 20,
               "dur": 100, "args": {"device": 0, "stream": 7, "correlation": 1, "bytes": 1000}}]
    k = analyze(read_trace(write_trace(tmp_path / "t.json", events))).kernels.to_dict()
    assert (k["count"], k["total_ms"], k["mean_us"], k["median_us"], k["small_pct"]) == (0, 0.0, 0.0, 0.0, 0.0)
    assert set(k["categories"].values()) == {0.0} and k["by_name"] == [] and k["data_movement"] == []
    assert k["launch_delay_median_us"] is None and k["launch_delay_p90_us"] is None


def test_without_launch_calls_the_optimizer_runs_what_starts_after_the_gpu_caught_up(tmp_path):
    """A trace with no launch call (a CUPTI light window): a kernel is `optimizer` when it starts inside the
    optimizer's own span [5000, 8000] after its device went idle there for >= 10 us. GPU 0: a GEMM [0, 4000], idle
    until 5500 (the gap [4000, 5500] reaches into the span): the elementwise kernels [5500, 5600] and [7900, 8000]
    start after it, inside the span: optimizer; [8100, 8200] starts after the span: elementwise. GPU 1 runs
    [0, 7000] then [7000, 7100] back to back, never idle in the span: its [7000, 7100] was queued before, not
    the optimizer's. Kernel time: 4000 + 100 x 3 (GPU 0) + 7000 + 100 (GPU 1) = 11400 us; optimizer 200 us."""
    from conftest import write_trace

    def host(name, ts, dur):
        return {"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": {}}

    def k(name, ts, dur, device):
        return {"ph": "X", "cat": "kernel", "name": name, "pid": device, "tid": 7, "ts": ts, "dur": dur,
                "args": {"device": device, "stream": 7}}

    events = [host("ProfilerStep#1", 0, 10000), host("Optimizer.step#AdamW.step", 5000, 3000),
              k("ampere_sgemm_128x64_nn", 0, 4000, 0), k("vectorized_elementwise_kernel_add", 5500, 100, 0),
              k("vectorized_elementwise_kernel_add", 7900, 100, 0),
              k("vectorized_elementwise_kernel_add", 8100, 100, 0),
              k("ampere_sgemm_128x64_nn", 0, 7000, 1), k("vectorized_elementwise_kernel_mul", 7000, 100, 1)]
    kd = analyze(read_trace(write_trace(tmp_path / "t.json", events))).kernels.to_dict()
    assert kd["count"] == 6 and kd["categories_ms"]["optimizer"] == pytest.approx(0.2)
    assert kd["categories_ms"]["elementwise"] == pytest.approx(0.2)  # GPU 0's [8100, 8200], GPU 1's [7000, 7100]
    assert kd["categories_ms"]["gemm_conv"] == pytest.approx(11.0)


@pytest.mark.parametrize("idle_us, optimizer", [(9.9, False), (10.0, True)])
def test_the_gpu_caught_up_after_10_us_idle(tmp_path, idle_us, optimizer):
    # GPU 0 busy [0, 5500 - idle], idle until 5500 inside the optimizer's span [5000, 8000], then a 100 us kernel:
    # the GPU caught up (idle >= 10 us, inclusive), so the kernel was launched inside the span
    from conftest import write_trace

    events = [{"ph": "X", "cat": "user_annotation", "name": n, "pid": 1, "tid": 1, "ts": ts, "dur": d, "args": {}}
              for n, ts, d in (("ProfilerStep#1", 0, 10000), ("Optimizer.step#AdamW.step", 5000, 3000))]
    events += [{"ph": "X", "cat": "kernel", "name": n, "pid": 0, "tid": 7, "ts": ts, "dur": d,
                "args": {"device": 0, "stream": 7}}
               for n, ts, d in (("ampere_sgemm_128x64_nn", 0, 5500 - idle_us), ("vectorized_elementwise_kernel_add",
                                                                              5500, 100))]
    kd = analyze(read_trace(write_trace(tmp_path / "t.json", events))).kernels.to_dict()
    assert kd["categories_ms"]["optimizer"] == pytest.approx(0.1 if optimizer else 0.0)


# the fused AdamW's kernel of a real trace, its arguments cut short
ADAM = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
        "FusedOptimizerTensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, "
        "(at::native::ADAM_MODE)1, false>, float const*, double, bool>(at::native::(anonymous namespace)::"
        "FusedOptimizerTensorListMetadata<4>, int)")


@pytest.mark.parametrize("name, words", [
    # the function's qualified name, then the functions and functors inside its template; its parameter list is
    # never read (a ReduceOp among the parameters does not make a reduction)
    ("void my_kernel<float>(at::native::ReduceOp<float> op)", "my_kernel"),
    # multi_tensor_apply's op is a template argument: the last name before each top-level argument's own template,
    # after the functors found inside; the cast "(at::native::ADAM_MODE)" inside one argument ends there
    (ADAM, "at::native::multi_tensor_apply_kernel FusedAdamMathFunctor FusedOptimizerTensorListMetadata const double "
           "bool"),
    # a name cut inside its template (no closing ">"): the template runs to the end, its arguments named as above
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
     "TensorListMetadata<2>, at::native::Copy<float, float", "at::native::multi_tensor_apply_kernel TensorListMetadata "
                                                            "Copy"),
])
def test_work_names_by_hand(name, words):
    from gpucheckup.analysis.one_trace.gpu.kernels import work_names

    assert work_names(name) == words


def test_data_movement_families_from_the_raw_events():
    # moe_seed's data-movement kernels by family (their names read by hand against the documented patterns: the
    # index/gather kernels of the routing, the radix and bitonic sorts, the scatter-gather and indexing backward, two
    # elementwise copies); each family's time, count and share of all kernel time from the raw events of its kernels
    path = trace_path("moe_seed")
    k = analyze(read_trace(path)).kernels.to_dict()
    ks = raw_kernels(raw_events(path))
    total = sum(e["dur"] for e in ks)
    fams = k["data_movement"]
    assert [f["family"] for f in fams] == ["index", "scatter", "gather", "sort", "copy"]
    assert [f["total_ms"] for f in fams] == sorted((f["total_ms"] for f in fams), reverse=True)  # largest first
    for f in fams:
        assert len(f["kernels"]) < 5  # each family lists all its kernel names (at most 5 are listed)
        mine = [e for e in ks if e["name"] in f["kernels"]]
        us = sum(e["dur"] for e in mine)
        assert f["count"] == len(mine) and f["total_ms"] == pytest.approx(us / 1000, abs=len(mine) * EPS_US / 1000)
        assert f["pct"] == pytest.approx(100 * us / total, abs=100 * len(mine) * EPS_US / total)
        by_name = defaultdict(float)
        for e in mine:
            by_name[e["name"]] += e["dur"]
        assert f["kernels"] == sorted(by_name, key=by_name.get, reverse=True)  # the largest kernel first
        from gpucheckup.analysis.one_trace.gpu.kernels import kernel_label  # pinned by test_kernel_labels_by_hand

        assert f["labels"] == [kernel_label(n) for n in f["kernels"]]

"""The fix catalogue's preconditions and saving models (diagnosis/fixes.py; docs/metrics.md "Fix catalogue"), each
worked out by hand on a real H200 analysis (compute_bound) with the figures a model reads set to round values; the
step is 100 ms so that ms and percent coincide."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
from msgspec.structs import replace

from conftest import trace_path
from gpucheckup.analysis.checkup import analyze
from gpucheckup.analysis.one_trace.host.gap_causes import CAUSES, GapSummary
from gpucheckup.analysis.one_trace.gpu.kernels import CATEGORIES
from gpucheckup.analysis.run_logs.run import RunAnalysis
from gpucheckup.analysis.one_trace.host.syncs import SyncCause
from gpucheckup.analysis.one_trace.timeline import Gaps
from gpucheckup.analysis.one_trace.window import Window
from gpucheckup.analysis.one_trace.host.optimizer_spans import optimizer_rows
from gpucheckup.diagnosis import fixes
from gpucheckup.whatif import compiled
from gpucheckup.trace import read_trace


@lru_cache(maxsize=None)
def base():
    a = analyze(read_trace(trace_path("compute_bound")))
    zero = {c: 0.0 for c in CAUSES}
    return replace(a, window=Window(100.0, "test", 100.0, a.window.length_us, 1, a.window.steps),
                   gaps_summary=GapSummary(dict(zero), dict(zero), dict(zero)),
                   copies=replace(a.copies, pageable_count=0, exposed_ms_per_step=0.0),
                   communication=replace(a.communication, exposed_ms_per_step=0.0),
                   dataloader=replace(a.dataloader, present=False, iterators=[]),
                   syncs=replace(a.syncs, count=0, by_cause=[]))


def idle(a=None, **ms):
    a = a or base()
    per = {c: ms.get(c, 0.0) for c in CAUSES}
    return replace(a, gaps_summary=GapSummary({c: 0.0 for c in CAUSES}, per, dict(per)))


def offered(a, *keys, cap_ms=None):
    return {f.key: f.saving_ms for f in fixes.offer(a, *keys, cap_ms=cap_ms)}


def gapped(a, gaps):
    """a with these GPU gaps: (start us, end us, {cause: us}) each; the per-step totals stay idle()'s."""
    start = np.array([g[0] for g in gaps], dtype=np.float64)
    end = np.array([g[1] for g in gaps], dtype=np.float64)
    time = np.array([[g[2].get(c, 0.0) for c in CAUSES] for g in gaps], dtype=np.float64)
    n = len(gaps)
    g = Gaps(np.zeros(n, dtype=np.int64), start, end, np.zeros(n, dtype=np.int64), np.zeros(n))
    return replace(a, timeline=replace(a.timeline, gaps=g), causes=replace(a.causes, time=time))


def unfused(a):
    """a with every kernel a GEMM: nothing for Inductor's fusion to fold (the graphs' and compile's fusion term 0)."""
    n = len(a.kernels.category_of_row)
    return replace(a, kernels=replace(a.kernels, category_of_row=np.full(n, CATEGORIES.index("gemm_conv"))))


def clear_of_the_optimizer(a, us: float) -> tuple[float, float]:
    """A stretch of `us` before the trace's first optimizer span or zero_grad range: outside all of them."""
    lo, _, _ = optimizer_rows(a.trace, zero_grad=True)
    return float(lo.min()) - 10 * us, float(lo.min()) - 9 * us


def test_launch_fixes_save_the_model_launch_idle_and_cuda_graphs_the_queued_too():
    """Graphs and fused layers change the model alone: the idle inside the optimizer's own spans (or zero_grad) stays.
    Here one gap clear of the optimizer holds 300 us of launch idle, 100 other host, 100 queued; one inside an
    optimizer span 500 us of launch idle. Per step: launch 6, other host 2, queued 1.5 ms."""
    a = unfused(idle(launch=6.0, other_host=2.0, queued=1.5, allocation=7.0))
    lo, hi, _ = optimizer_rows(a.trace, zero_grad=True)
    i = int(np.argmax(hi - lo))
    assert hi[i] - lo[i] > 500
    out0, out1 = clear_of_the_optimizer(a, 500.0)
    a = gapped(a, [(out0, out1, {"launch": 300.0, "other_host": 100.0, "queued": 100.0}),
                   (lo[i], lo[i] + 500.0, {"launch": 500.0})])
    got = offered(a, "cuda_graph", "fuse_layers")
    # graphs: 9.5 ms x 500 / 1000 of the idle outside; fused layers: 8 ms x 400 / 900 (launch and other host only)
    assert got == pytest.approx({"cuda_graph": 9.5 * 500 / 1000, "fuse_layers": 8.0 * 400 / 900})
    queued = gapped(unfused(idle(queued=1.0)), [(out0, out1, {"queued": 500.0})])
    assert offered(queued, "cuda_graph", "larger_batch", "fuse_layers") == {"cuda_graph": 1.0}
    assert offered(idle(allocation=7.0), "cuda_graph", "larger_batch", "fuse_layers") == {}


def test_graphs_leave_the_loops_code_outside_the_optimizers_closures(monkeypatch):
    """Where the trace records the optimizer's closures (the model runs inside them), idle outside every closure is
    the loop's: 400 us of a 1000 us gap clear of the optimizer lies inside a closure."""
    a = unfused(idle(launch=5.0))
    out0, out1 = clear_of_the_optimizer(a, 1000.0)
    a = gapped(a, [(out0, out1, {"launch": 1000.0})])
    assert offered(a, "cuda_graph") == pytest.approx({"cuda_graph": 5.0})
    monkeypatch.setattr(fixes, "closure_rows", lambda trace: (np.array([out0 + 100.0]), np.array([out0 + 500.0])))
    assert offered(a, "cuda_graph", "fuse_layers") == pytest.approx({"cuda_graph": 2.0, "fuse_layers": 2.0})


def test_a_larger_batch_saves_at_most_the_step_less_the_launch_work_over_the_factor():
    """Twice the batch keeps the host's launch work per step (at least the launch idle): per original batch it saves
    at most step - launch idle / 2, and never more than the launch idle (the step is 100 ms)."""
    assert offered(idle(launch=30.0, other_host=10.0), "larger_batch") == {"larger_batch": 40.0}
    assert offered(idle(launch=70.0, other_host=10.0, input=8.0), "larger_batch") == {"larger_batch": 60.0}
    assert offered(idle(launch=100.0), "larger_batch") == {"larger_batch": 50.0}


def test_savings_are_capped_by_the_findings_cost_and_never_negative():
    a = idle(launch=3.0, other_host=2.0)
    assert offered(a, "larger_batch", cap_ms=4.0) == {"larger_batch": 4.0}
    assert offered(a, "larger_batch", cap_ms=-1.0) == {"larger_batch": 0.0}
    assert offered(a, "larger_batch", cap_ms=9.0) == {"larger_batch": 5.0}


def test_compiles_folding_keeps_one_kernel_per_reduction_in_each_chain():
    """On one stream: a GEMM, then elementwise, elementwise, a norm, elementwise, a norm (a second reduction: a kernel
    of its own), elementwise, a GEMM, an elementwise kernel in the next step, and a sort (a library call Inductor does
    not generate): 4 kernels fold into another. On a second stream, two elementwise kernels: 1 more. Each fused
    kernel keeps its longest member's time: add 3 + mul 5 + layer_norm 9 + add 2 -> 9 (10 us go), softmax 4 + mul 1
    -> 4 (1 us goes), add 6 + add 8 -> 8 (6 us go)."""
    names = ["gemm", "add", "mul", "layer_norm", "add", "softmax", "mul", "gemm", "add", "sort_pairs", "add", "add"]
    cats = ["gemm_conv", "elementwise", "elementwise", "reduction_norm", "elementwise", "reduction_norm",
            "elementwise", "gemm_conv", "elementwise", "elementwise", "elementwise", "elementwise"]
    streams = np.array([7] * 10 + [8, 8])
    steps = np.array([0] * 8 + [1, 1, 0, 0])
    dur = np.array([50.0, 3, 5, 9, 2, 4, 1, 50, 7, 20, 6, 8])
    assert compiled.fused_in_gpu_order(names, cats, streams, steps, dur) == (4 + 1, pytest.approx(10 + 1 + 6))


def test_pinning_saves_the_pageable_time_less_the_same_bytes_at_25_gb_s():
    a = base()
    a = replace(a, copies=replace(a.copies, pageable_count=4, pageable_mb_per_step=50.0, pageable_ms_per_step=5.0))
    # 50 MB at 25 GB/s = 2 ms: 5 - 2 = 3 ms
    assert offered(a, "pin_memory", "pinned_reuse") == pytest.approx({"pin_memory": 3.0, "pinned_reuse": 3.0})
    a = replace(a, copies=replace(a.copies, pageable_ms_per_step=1.0))  # faster than pinned already: nothing
    assert offered(a, "pin_memory") == {"pin_memory": 0.0}
    assert offered(base(), "pin_memory", "pinned_reuse") == {}  # no pageable copy


def test_exposed_copies_and_communication_fixes():
    a = base()
    a = replace(a, copies=replace(a.copies, exposed_ms_per_step=4.0))
    assert offered(a, "prefetch_copies", "resident_data") == {"prefetch_copies": 4.0, "resident_data": 4.0}
    c = idle(communication=2.0)
    c = replace(c, communication=replace(c.communication, exposed_ms_per_step=3.0))
    got = offered(c, "ddp_buckets", "nccl_check", "overlap_comm", "reduce_traffic")
    assert got == {"nccl_check": 5.0, "overlap_comm": 5.0, "reduce_traffic": 5.0}  # no DDP in this trace
    assert offered(base(), "nccl_check", "overlap_comm") == {}


def test_loader_fixes_follow_the_iterator_kind():
    a = idle(input=6.0)
    single = replace(a, dataloader=replace(a.dataloader, present=True,
                                           iterators=["enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"]))
    multi = replace(a, dataloader=replace(a.dataloader, present=True,
                                          iterators=["enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"]))
    keys = ("dataloader_workers", "more_workers", "gpu_augment", "fast_storage")
    assert offered(single, *keys) == {"dataloader_workers": 6.0, "gpu_augment": 6.0, "fast_storage": 6.0}
    assert offered(multi, *keys) == {"more_workers": 6.0, "gpu_augment": 6.0, "fast_storage": 6.0}


def test_sync_fixes_save_their_ops_share_of_the_sync_idle():
    by_cause = [SyncCause("aten::item", None, None, [], 1, 0.0, 3.0, 1.0),
                SyncCause("aten::nonzero", "aten::_local_scalar_dense", None, [], 1, 0.0, 1.0, 1.0),
                SyncCause("aten::bincount", None, None, [], 1, 0.0, 4.0, 1.0)]  # op, inner op, ..., GPU idle ms
    a = idle(sync=10.0)
    a = replace(a, syncs=replace(a.syncs, count=3, by_cause=by_cause))
    # host reads: .item() and the nonzero's inner _local_scalar_dense, 4 of the 8 ms after syncs; data-dependent
    # shapes: nonzero and bincount, 5 of 8; each share of the 10 ms sync idle
    got = offered(a, "no_host_reads", "static_shapes", "sync_debug")
    assert got == pytest.approx({"no_host_reads": 10 * 4 / 8, "static_shapes": 10 * 5 / 8, "sync_debug": 0.0})


def test_graphs_are_not_offered_where_an_op_sets_its_output_size_from_gpu_values():
    """A CUDA graph replays fixed shapes. The H200 MoE example routes tokens with `torch.bincount`, which reads the GPU
    on the host to size its output (a cudaStreamSynchronize inside each aten::bincount, found here in the trace's
    JSON), so each step brings new shapes: the graphs are not offered (on the H200's MoE job mode="reduce-overhead"
    ran 62% slower, docs/validation.md 6p). The same analysis without those syncs offers them."""
    from conftest import raw_events
    from gpucheckup.checkup.pipeline import check_run

    run = next((Path(__file__).parent / "data" / "whatif_h200" / "moe").iterdir())
    ev = [e for e in raw_events(run / "traces" / "trace.json.gz")["traceEvents"] if e.get("ph") == "X"]
    sizing = [e for e in ev if e["name"] == "aten::bincount"]
    waits = [r for r in ev if r.get("cat") == "cuda_runtime" and r["name"] == "cudaStreamSynchronize"
             and any(b["tid"] == r["tid"] and b["ts"] <= r["ts"] <= b["ts"] + b["dur"] for b in sizing)]
    assert sizing and waits
    a = idle(check_run(run).checkups[0].analysis, launch=2.0, queued=1.0)
    assert any(g.op == "aten::bincount" for g in a.syncs.by_cause)
    assert offered(a, "cuda_graph") == {}
    assert "cuda_graph" in offered(replace(a, syncs=replace(a.syncs, by_cause=[])), "cuda_graph")


def test_fused_optimizer_from_5_percent_of_kernel_time_unless_already_fused():
    """compute_bound's AdamW runs torch's fused kernels (their names hold `FusedOptimizerTensorListMetadata`): the fix
    is in place, never offered. With those kernels out of the `optimizer` category and every other kernel in it (a
    for-each optimizer's), it is offered from 5% of kernel time."""
    a = idle(launch=4.0)
    k = a.kernels
    names = [a.trace.names[int(i)] for i in a.trace.gpu.name[k.rows].tolist()]
    fused = np.array(["FusedOptimizerTensorListMetadata" in n for n in names])
    opt = CATEGORIES.index("optimizer")
    assert fused.any() and (k.category_of_row[fused] == opt).all()
    foreach = replace(k, category_of_row=np.where(fused, CATEGORIES.index("elementwise"), opt).astype(np.int8))
    for pct, offered_ in ((4.99, False), (5.0, True)):
        for kernels, want in ((k, False), (foreach, offered_)):
            got = replace(kernels, categories_pct={**kernels.categories_pct, "optimizer": pct})
            assert ("fused_optimizer" in offered(replace(a, kernels=got), "fused_optimizer")) == want


def run_analysis(steps=None, loaders=None, nvml=None):
    return RunAnalysis(run=None, steps_key="main", steps=steps, nvml=nvml, cpu=None,
                       loaders=loaders or {"max_workers": 2, "workers_on_host": 0, "usable_cores": 0,
                                           "processes_on_host": 1})


def test_run_level_fixes():
    slow = {"count": 3, "period": 100, "extra_ms": 300.0}
    ra = run_analysis(steps={"warmup_steps": 12, "slow": slow, "plain_count": 150})
    got = {f.key: f for f in fixes.offer(ra, "async_periodic", "profile_later", "pin_memory", "cuda_graph")}
    assert set(got) == {"async_periodic", "profile_later"}  # the trace-level fixes are never offered on a run
    assert got["async_periodic"].saving_ms == pytest.approx(300 / 150)
    assert "--skip 17" in got["profile_later"].action  # warm-up + 5
    ra = run_analysis(steps={"warmup_steps": None, "slow": {**slow, "period": None}, "plain_count": 150})
    assert fixes.offer(ra, "async_periodic", "profile_later") == []
    busy = run_analysis(loaders={"max_workers": 0, "workers_on_host": 12, "usable_cores": 8, "processes_on_host": 2})
    got = {f.key: f for f in fixes.offer(busy, "fewer_workers", "dataloader_workers")}
    assert set(got) == {"fewer_workers", "dataloader_workers"}
    assert "num_workers to about 3 per process" in got["fewer_workers"].action  # 8 cores // 2 processes - 1
    ok = run_analysis(loaders={"max_workers": 2, "workers_on_host": 8, "usable_cores": 8, "processes_on_host": 1})
    assert fixes.offer(ok, "fewer_workers", "dataloader_workers") == []
    hot = run_analysis(nvml={"throttle": {"by_reason_pct": {"HW thermal slowdown": 3.0}}})
    assert [f.key for f in fixes.offer(hot, "check_cooling")] == ["check_cooling"]
    capped = run_analysis(nvml={"throttle": {"by_reason_pct": {"SW power cap": 30.0}}})
    assert fixes.offer(capped, "check_cooling") == []


def ms_of(a, us: float) -> float:
    """A GPU-side window total in ms per step, worked out from the window's definition (share x traced step)."""
    return us / (a.window.length_us * a.window.devices) * a.window.traced_step_ms


def test_loader_fixes_apply_with_a_loader_or_with_input_waits():
    a = base()
    present = replace(a, dataloader=replace(a.dataloader, present=True, iterators=[]))
    assert offered(present, "gpu_augment", "fast_storage") == {"gpu_augment": 0.0, "fast_storage": 0.0}
    assert offered(idle(input=2.0), "gpu_augment") == {"gpu_augment": 2.0}  # waits seen, no annotation
    assert offered(a, "gpu_augment") == {}


def test_compile_and_graphs_save_the_kernel_time_their_fusion_removes():
    """The model's launch idle times the share of its launches folded into another kernel, plus the kernel time the
    fusion removes. With no kernel of the trace fusable (all GEMMs) it saves nothing. With every kernel elementwise,
    each run of them in a step makes one chain and one kernel, broken by the kernels Inductor does not generate
    (CUB's sorts and scans, COMPILE_KEEPS): every kernel that joins its predecessor folds, and each chain keeps its
    longest kernel's time (counted here from the kernels' streams, steps, names and durations)."""
    a = idle(launch=4.0, other_host=2.0)
    out0, out1 = clear_of_the_optimizer(a, 100.0)
    a = gapped(a, [(out0, out1, {"launch": 100.0})])
    k = a.kernels
    n = len(k.category_of_row)
    us = {c: 0.0 for c in k.categories_us} | {"elementwise": 2000.0, "reduction_norm": 1000.0}
    gemms = replace(k, category_of_row=np.full(n, CATEGORIES.index("gemm_conv")), categories_us=us,
                    data_movement=[], count=n)
    assert offered(replace(a, kernels=gemms), "torch_compile") == {"torch_compile": 0.0}
    ew = replace(gemms, category_of_row=np.full(n, CATEGORIES.index("elementwise")))
    gpu, rows = a.trace.gpu, k.rows[np.argsort(a.trace.gpu.start[k.rows], kind="stable")]
    step = np.searchsorted(a.steps.start, gpu.start[rows], side="right")
    kept = [bool(compiled.COMPILE_KEEPS.search(a.trace.names[int(i)])) for i in gpu.name[rows].tolist()]  # CUB's sorts
    dur = (gpu.end[rows] - gpu.start[rows]).tolist()
    joins, chains, chain = 0, [], [dur[0]]  # one stream in this trace: chains of joined kernels, in order
    for j in range(1, n):
        if step[j] == step[j - 1] and not kept[j] and not kept[j - 1]:
            joins += 1
            chain.append(dur[j])
        else:
            chains.append(chain)
            chain = [dur[j]]
    chains.append(chain)
    assert len(set(gpu.stream[rows].tolist())) == 1 and 0 < joins < n
    removed = sum(sum(c) - max(c) for c in chains)
    want = 6.0 * joins / n + ms_of(a, removed)
    assert offered(replace(a, kernels=ew), "torch_compile") == {"torch_compile": pytest.approx(want)}
    # mode="reduce-overhead" compiles with Inductor first: the graphs save the model's idle and the same fused time
    assert offered(replace(a, kernels=ew), "cuda_graph") == {"cuda_graph": pytest.approx(6.0 + ms_of(a, removed))}


def test_moe_dispatch_needs_routing_grouping_and_movement_ops(tmp_path):
    from conftest import write_trace

    def trace_with(*ops):
        events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0,
                   "dur": 1000, "args": {}},
                  {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 0, "dur": 500,
                   "args": {"device": 0, "stream": 7}}]
        events += [{"ph": "X", "cat": "cpu_op", "name": op, "pid": 1, "tid": 1, "ts": 10 + i, "dur": 1, "args": {}}
                   for i, op in enumerate(ops)]
        return analyze(read_trace(write_trace(tmp_path / "t.json", events)))

    assert "moe_dispatch" in offered(trace_with("aten::topk", "aten::argsort", "aten::index_add_"), "moe_dispatch")
    for ops in (("aten::topk",), ("aten::topk", "aten::argsort"), ("aten::argsort", "aten::index_add_"),
                ("aten::topk", "aten::index_add_")):
        assert offered(trace_with(*ops), "moe_dispatch") == {}, ops


def renamed(a, names: dict[int, str], critical_us):
    """`a` with the kernel names of some rows changed (row index in a.kernels.rows -> new name, each row's name id
    renamed in the trace's name list) and each counted kernel's critical time set (us, per a.kernels.rows)."""
    trace_names = list(a.trace.names)
    for i, name in names.items():
        trace_names[int(a.trace.gpu.name[a.kernels.rows[i]])] = name
    return replace(a, trace=replace(a.trace, names=trace_names),
                   critical_us=np.broadcast_to(np.asarray(critical_us, dtype=float), a.kernels.rows.shape).copy())


def test_moe_dispatch_saves_the_sort_gather_scatter_and_index_kernels_on_the_critical_path():
    a = base()
    dm, gemm = CATEGORIES.index("data_movement"), CATEGORIES.index("gemm_conv")
    # three kernels renamed (each name id is shared by every launch of that kernel: take three distinct names) and
    # made data movement: a radix sort and an index_select gather count, a copy does not
    ids = a.trace.gpu.name[a.kernels.rows]
    first = [int(np.flatnonzero(ids == x)[0]) for x in list(dict.fromkeys(ids.tolist()))[:3]]
    b = renamed(a, {first[0]: "void cub::DeviceRadixSortOnesweepKernel<x>", first[1]: "void at::native::index_select",
                    first[2]: "void at::native::direct_copy_kernel_cuda"}, 3.0)
    cat = np.full(len(a.kernels.rows), gemm, dtype=np.int8)
    for i in first:
        cat[ids == ids[i]] = dm
    b = replace(b, kernels=replace(a.kernels, category_of_row=cat))
    n_moe = int(np.isin(ids, [ids[first[0]], ids[first[1]]]).sum())  # launches of the sort and the gather
    assert n_moe > 0
    assert fixes._moe_ms(b) == pytest.approx(ms_of(b, 3.0 * n_moe))  # 3 us of each on the critical path
    assert fixes._moe_ms(replace(b, critical_us=np.zeros(len(a.kernels.rows)))) == 0.0  # none waited for


def test_bigger_gemms_and_the_low_mfu_cost_below_35_percent():
    a = base()
    k = replace(a.kernels, categories_us={c: 0.0 for c in a.kernels.categories_us} | {"gemm_conv": 50_000.0},
                category_of_row=np.full(len(a.kernels.rows), CATEGORIES.index("gemm_conv"), dtype=np.int8))
    # every counted kernel a GEMM, 50 ms of them on the critical path over the window
    a = replace(a, critical_us=np.full(len(a.kernels.rows), 50_000.0 / len(a.kernels.rows)))
    for pct, want in ((35.0, None), (17.5, min(ms_of(a, 50_000.0) * 0.5, 100.0 * 0.5))):
        b = replace(a, kernels=k, mfu=replace(a.mfu, pct=pct))
        got = offered(b, "bigger_gemms")
        assert got == ({} if want is None else {"bigger_gemms": pytest.approx(want)}), pct
    b = replace(a, kernels=k, mfu=replace(a.mfu, pct=7.0))
    assert fixes._low_mfu_cost(b) == pytest.approx(100.0 * (1 - 7.0 / 35.0))  # the step above 35% MFU's


def test_cudnn_benchmark_from_convolutions_of_a_tenth_of_the_step():
    a = base()
    # window.ms(1000 x total_ms) = 10 ms (10% of the 100 ms step) when total_ms = length_us / 10_000 (one device)
    at = a.window.length_us / 10_000

    def with_conv(total_ms):
        return replace(a, kernels=replace(a.kernels, per_name=[{"name": "sm90_xmma_fprop_implicit_gemm",
                                                                "total_ms": total_ms}]))

    assert "cudnn_benchmark" in offered(with_conv(at), "cudnn_benchmark")
    assert offered(with_conv(at * 0.99), "cudnn_benchmark") == {}


def test_tf32_and_bf16_save_the_fp32_gemm_time_on_the_critical_path_less_its_share_at_the_faster_peak():
    # the H200 datasheet (src/gpucheckup/data/gpu_peaks.json): fp32 67, tf32 494.7, bf16 989.4 TFLOP/s
    a = base()
    assert a.trace.devices[0].name == "NVIDIA H200"
    ids = a.trace.gpu.name[a.kernels.rows]
    n = int((ids == ids[0]).sum())  # launches of the first counted kernel, renamed to a plain FP32 GEMM
    gemm = {"name": "ampere_sgemm_128x64_nn", "category": "gemm_conv", "count": n, "total_ms": 20.0,
            "mean_us": 20_000.0 / n, "pct": 50.0}
    crit = np.where(ids == ids[0], 1500.0 / n, 7.0)  # 1.5 ms of the GEMM on the critical path; others' 7 us each
    a = renamed(replace(a, kernels=replace(a.kernels, per_name=[gemm])), {0: gemm["name"]}, crit)
    fp32 = ms_of(a, 1500.0)
    got = offered(a, "tf32", "bf16_autocast")
    assert got == {"tf32": pytest.approx(fp32 * (1 - 67 / 494.7)),
                   "bf16_autocast": pytest.approx(fp32 * (1 - 67 / 989.4))}
    # the GEMM never waited for: offered (FP32 GEMMs run) with nothing to save
    idle_gemm = replace(a, critical_us=np.where(ids == ids[0], 0.0, 7.0))
    assert offered(idle_gemm, "tf32", "bf16_autocast") == {"tf32": 0.0, "bf16_autocast": 0.0}
    assert offered(replace(a, kernels=replace(a.kernels, per_name=[])), "tf32", "bf16_autocast") == {}


def test_more_threads_save_the_operators_time_they_would_split():
    from gpucheckup.analysis.run_logs.environment import ThreadBudget

    # 30 ms of operators per step on 1 thread of 4 usable cores: at best 1/4 of it is left, 30 x 3/4 = 22.5 ms
    # saved; on 3 threads of 4: 30 x 1/4 = 7.5 ms
    assert offered(ThreadBudget(30.0, 1, 4), "cpu_threads") == pytest.approx({"cpu_threads": 22.5})
    assert offered(ThreadBudget(30.0, 3, 4), "cpu_threads") == pytest.approx({"cpu_threads": 7.5})
    # as many threads as cores (or more, or none reported): nothing to offer
    assert offered(ThreadBudget(30.0, 4, 4), "cpu_threads") == {} == offered(ThreadBudget(30.0, 0, 4), "cpu_threads")
    assert "torch.set_num_threads(4)" in fixes.offer(ThreadBudget(30.0, 1, 4), "cpu_threads")[0].action


def test_a_fix_made_by_a_caller_keeps_the_callers_action():
    # the coarse check-up fills the worker advice itself ("N": sampled stacks give no per-batch cost)
    made = fixes.make("dataloader_workers", 0.0, "Load batches in worker processes: DataLoader(num_workers=N)")
    assert made.action == "Load batches in worker processes: DataLoader(num_workers=N)"
    # without one, the catalogue's action as written
    assert fixes.make("pin_memory", 1.5).action == fixes.BY_KEY["pin_memory"].action
    assert fixes.make("pin_memory", 1.5).saving_ms == 1.5

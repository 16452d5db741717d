"""What-if edits (whatif/edits.py) on one-step synthetic traces whose predicted step is worked out by hand from
the replay model (docs/metrics.md "Replay", "What-if"): the step is the later of the host's end and the GPU's."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import write_trace
from gpucheckup.whatif import replay, edits as whatif
from gpucheckup.trace import read_trace


def ev(cat, name, ts, dur, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def gpu(cat, name, ts, dur, corr, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
            "args": {"device": 0, "stream": 7, "correlation": corr, **args}}


def graph(tmp_path, events):
    return replay.build(read_trace(write_trace(tmp_path / "t.json", events)))


def test_removing_a_sync_lets_the_host_run_ahead(tmp_path):
    # step [0, 2000]: a 1000 us kernel launched at 10 runs [20, 1020]; cudaDeviceSynchronize from 20 returns at 1025
    # (5 us after the kernel: its own cost); the host then works 975 us to the step's end at 2000. Without the wait
    # the sync costs its 5 us (returns at 25), the host ends at 25 + 975 = 1000, the kernel at 1020: step 1020 us
    events = [ev("user_annotation", "ProfilerStep#1", 0, 2000), ev("cuda_runtime", "cudaLaunchKernel", 10, 5,
                                                                   correlation=1),
              gpu("kernel", "k", 20, 1000, 1), ev("cuda_runtime", "cudaDeviceSynchronize", 20, 1005)]
    g = graph(tmp_path, events)
    p = whatif.predict(g, "remove_syncs")
    assert p.step_ms_before == pytest.approx(2.0) and p.step_ms_after == pytest.approx(1.02)
    assert p.saving_ms == pytest.approx(0.98) and p.saving_pct == pytest.approx(49.0) and p.changed == 1
    assert p.transform == "1 sync calls no longer wait for the GPU"
    # a sync inside an operator not asked for stays
    assert whatif.predict(g, "remove_syncs", ops=frozenset({"aten::item"})).changed == 0


def test_pinning_a_pageable_copy_runs_it_at_the_pinned_rate(tmp_path):
    # step [0, 6000]: a 25 MB copy to the host from pageable memory takes [15, 5015] and its call [10, 5020] waits
    # for it; the host then works 980 us to 6000. Pinned at 25 GB/s it takes 1000 us: [15, 1015], the call returns
    # 5 us after it at 1020, the host ends at 2000
    events = [ev("user_annotation", "ProfilerStep#1", 0, 6000),
              ev("cuda_runtime", "cudaMemcpyAsync", 10, 5010, correlation=1),
              gpu("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", 15, 5000, 1, bytes=25_000_000)]
    g = graph(tmp_path, events)
    e = whatif.pin_memory(g)
    assert e.changed == 1 and e.graph.g_dur.tolist() == pytest.approx([1000.0])
    assert "1 pageable copies at 25 GB/s pinned, 0 to the GPU non_blocking" == e.what
    p = whatif.predict(g, "pin_memory")
    assert p.step_ms_before == pytest.approx(6.0) and p.step_ms_after == pytest.approx(2.0)
    assert whatif.pin_memory(g, pinned_gb_s=50.0).graph.g_dur.tolist() == pytest.approx([500.0])


def test_a_larger_batch_scales_the_gpu_work_and_saves_per_original_batch(tmp_path):
    # step [0, 1000]: one 800 us kernel [100, 900]; twice the batch: [100, 1700], a 1700 us step for two batches,
    # 850 us per batch
    events = [ev("user_annotation", "ProfilerStep#1", 0, 1000), ev("cuda_runtime", "cudaLaunchKernel", 90, 5,
                                                                   correlation=1), gpu("kernel", "k", 100, 800, 1)]
    p = whatif.predict(graph(tmp_path, events), "larger_batch")
    assert p.step_ms_before == pytest.approx(1.0) and p.step_ms_after == pytest.approx(0.85)


def test_unknown_fix_and_nothing_to_change(tmp_path):
    events = [ev("user_annotation", "ProfilerStep#1", 0, 1000), ev("cuda_runtime", "cudaLaunchKernel", 90, 5,
                                                                   correlation=1), gpu("kernel", "k", 100, 800, 1)]
    g = graph(tmp_path, events)
    with pytest.raises(KeyError, match="no transformation for fix 'nope'"):
        whatif.predict(g, "nope")
    for fix, why in (("remove_syncs", "0 sync calls"), ("pin_memory", "no pageable copies"),
                     ("comm_overlap", "no collective kernels"), ("dataloader_workers", "no DataLoader waits")):
        p = whatif.predict(g, fix)
        assert p.changed == 0 and p.step_ms_after == p.step_ms_before == pytest.approx(1.0) and why in p.transform


def test_the_pinned_rate_comes_from_pinned_copies_of_a_mebibyte_or_more(tmp_path):
    def trace_with(nbytes):
        events = [ev("user_annotation", "ProfilerStep#1", 0, 1000),
                  ev("cuda_runtime", "cudaMemcpyAsync", 10, 5, correlation=1),
                  gpu("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 20, 100, 1, bytes=nbytes)]
        return read_trace(write_trace(tmp_path / "t.json", events))

    # 1 MiB in 100 us: 10.48576 GB/s; one byte less does not measure the link
    assert whatif._pinned_rate(trace_with(1 << 20)) == pytest.approx(10.48576)
    assert whatif._pinned_rate(trace_with((1 << 20) - 1)) is None


def test_a_larger_batch_doubles_the_data_wait_too(tmp_path):
    # step [0, 1000]: the host waits in the DataLoader [0, 300], launches at 310 a 300 us kernel [320, 620] and works
    # to 1000. Twice the batch: a 600 us wait (all later host work 300 us later: it ends at 1300), the kernel
    # launched at 610 runs [620, 1220]: a 1300 us step for two batches, 650 us per batch
    loader = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    events = [ev("user_annotation", "ProfilerStep#1", 0, 1000), ev("user_annotation", loader, 0, 300),
              ev("cuda_runtime", "cudaLaunchKernel", 310, 5, correlation=1), gpu("kernel", "k", 320, 300, 1)]
    p = whatif.predict(graph(tmp_path, events), "larger_batch")
    assert p.step_ms_before == pytest.approx(1.0) and p.step_ms_after == pytest.approx(0.65)


NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
# a 5 us copy to the GPU on a second stream (8) running first, [12, 17] (launched at 5)
COPY_FIRST = [ev("cuda_runtime", "cudaMemcpyAsync", 5, 2, correlation=9),
              {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "pid": 0, "tid": 8,
               "ts": 12, "dur": 5, "args": {"device": 0, "stream": 8, "correlation": 9, "bytes": 4096}}]


def _overlap_graph(tmp_path, *first):
    """Step [0, 100] with `first` events, then kernels A [20, 120], the all-reduce C [120, 620] and B [620, 720],
    launched at 10, 15 and 20 on one stream."""
    events = [ev("user_annotation", "ProfilerStep#1", 0, 100), *first]
    for corr, (t, name, start, dur) in enumerate([(10, "a", 20, 100), (15, NCCL, 120, 500), (20, "b", 620, 100)], 1):
        events += [ev("cuda_runtime", "cudaLaunchKernel", t, 2, correlation=corr), gpu("kernel", name, start, dur, corr)]
    return graph(tmp_path, events)


@pytest.mark.parametrize("first", [[], COPY_FIRST], ids=["alone", "another_stream_first"])
def test_overlapping_a_collective_frees_the_compute_stream(tmp_path, first):
    # step [0, 100] on the host; the GPU runs A [20, 120] (launched at 10), an all-reduce C [120, 620] (launched at
    # 15, queued behind A) and B [620, 720] (launched at 20, queued behind C): step 720 us. With the collective on its
    # own stream, B runs right after A, [120, 220], and C no longer waits for A: it starts between its call (15) and
    # the trace's launch latency after it (A's, 10 us), so it ends between 515 and 525, and that ends the step.
    # With another stream's copy first in the trace, the collective's stream (7) is still the one whose chain is edited
    g = _overlap_graph(tmp_path, *first)
    p = whatif.predict(g, "comm_overlap")
    assert p.changed == 1 and p.step_ms_before == pytest.approx(0.72)
    assert 0.515 - 1e-9 <= p.step_ms_after <= 0.525 + 1e-9
    r = replay.replay(whatif.comm_overlap(g).graph)
    names = [g.trace.names[i] for i in g.trace.gpu.name]
    assert r.op_start[names.index("b")] == pytest.approx(120) and r.op_end[names.index("b")] == pytest.approx(220)


def _waiting_steps(iterator: str, step_us: float, wait_us: float) -> list[dict]:
    """Two steps of step_us, each waiting wait_us in a DataLoader (`iterator`) from 10 us after its start, then
    launching at 850 us a 95 us kernel."""
    loader = f"enumerate(DataLoader)#{iterator}.__next__"
    events = []
    for i, t in enumerate((0, step_us)):
        events += [ev("user_annotation", f"ProfilerStep#{i + 1}", t, step_us),
                   ev("user_annotation", loader, t + 10, wait_us),
                   ev("cuda_runtime", "cudaLaunchKernel", t + 850, 1, correlation=i + 1),
                   gpu("kernel", "k", t + 855, 95, i + 1)]
    return events


def test_more_dataloader_workers_cut_each_wait_to_the_loaders_throughput(tmp_path):
    # two steps of 1000 us, each waiting L = 800 us in an in-process DataLoader [10, 810] from 10 us after its start,
    # then launching at 850 a 95 us kernel. With 2 workers a batch comes every L / 2 = 400 us while the rest of the
    # step (1000 - 800 = 200 us) runs: the wait becomes 400 - 200 = 200 us, each step 1000 - 800 + 200 = 400 us
    # (the 10 us before the wait and the host time after it held)
    g = graph(tmp_path, _waiting_steps("_SingleProcessDataLoaderIter", 1000, 800))
    p = whatif.predict(g, "dataloader_workers", workers=2)
    assert p.changed == 2 and p.step_ms_before == pytest.approx(1.0) and p.step_ms_after == pytest.approx(0.4)
    assert "2 DataLoader waits cut to the loader's throughput with 2 workers" == p.transform
    # with 4 workers a batch every 200 us, within the rest of the step: no wait, 200 us steps
    assert whatif.predict(g, "dataloader_workers", workers=4).step_ms_after == pytest.approx(0.2)


def test_removing_a_copy_read_drops_the_hosts_work_on_the_copied_arrays(tmp_path):
    # step [0, 1000], one thread: a kernel [20, 350] launched at 10 (call [10, 15]); `.cpu()` (aten::to [300, 395])
    # copies to the host: call [310, 390], the copy [350, 385] queued behind the kernel; numpy work on the arrays
    # [395, 800]; aten::add [800, 850] launches at 820 (call [820, 825]) a kernel [830, 900]; the host ends at 1000.
    # Removing the read (no_host_reads: reads=True): the copy call loses the dispatch before it (aten::to's [300,
    # 310]: it starts at 15 + 285 = 300) and costs 0; the copy runs empty; the host's work after the read, up to
    # the next launch, keeps only operator dispatch (aten::to's [390, 395] and aten::add's [800, 820]: 25 us), so the
    # launch is at 325 (call to 330), its kernel 10 us later by the trace's launch latency but after the first
    # kernel: [350, 420]; the 175 us of host time after the launch end the step at 505
    events = [ev("user_annotation", "ProfilerStep#1", 0, 1000), ev("cuda_runtime", "cudaLaunchKernel", 10, 5,
                                                                   correlation=1),
              gpu("kernel", "k1", 20, 330, 1), ev("cpu_op", "aten::to", 300, 95),
              ev("cuda_runtime", "cudaMemcpyAsync", 310, 80, correlation=2),
              gpu("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", 350, 35, 2, bytes=4096),
              ev("cpu_op", "aten::add", 800, 50), ev("cuda_runtime", "cudaLaunchKernel", 820, 5, correlation=3),
              gpu("kernel", "k2", 830, 70, 3)]
    g = graph(tmp_path, events)
    p = whatif.predict(g, "remove_syncs", ops=frozenset({"aten::item"}), reads=True)
    assert p.changed == 1 and p.step_ms_before == pytest.approx(1.0) and p.step_ms_after == pytest.approx(0.505)
    # without reads the copy read stays (it is not inside aten::item)
    assert whatif.predict(g, "remove_syncs", ops=frozenset({"aten::item"})).changed == 0


def test_compile_does_not_fuse_across_a_sync_that_stays(tmp_path):
    # one thread launches three elementwise kernels back to back on one stream: k1 [20, 60] (launched at 10), then
    # aten::to [95, 120] copies an input to the GPU (cudaMemcpyAsync at 96, the copy [100, 104]) and waits for it
    # (cudaStreamSynchronize [100, 110]), then k2 [210, 250] (at 200) and k3 [270, 330] (at 260). Inductor's kernels
    # end at a sync (the host waits there): k1 stays 40 us, k2 and k3 fuse into one kernel of the longer's 60 us
    ew = "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>"
    events = [ev("user_annotation", "ProfilerStep#1", 0, 1000), ev("cpu_op", "aten::to", 95, 25),
              ev("cuda_runtime", "cudaMemcpyAsync", 96, 3, correlation=9),
              gpu("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 100, 4, 9),
              ev("cuda_runtime", "cudaStreamSynchronize", 100, 10)]
    for corr, (t, start, dur) in enumerate([(10, 20, 40), (200, 210, 40), (260, 270, 60)], 1):
        events += [ev("cuda_runtime", "cudaLaunchKernel", t, 5, correlation=corr), gpu("kernel", ew, start, dur, corr)]
    e = whatif.torch_compile(graph(tmp_path, events))
    assert e.changed == 1 and e.what.startswith("1 elementwise/normalisation/indexing/copy kernels fused into others")
    kernels = e.graph.trace.gpu.kind == 0
    assert sorted(e.graph.g_dur[kernels].tolist()) == pytest.approx([0, 40, 60])
    assert not e.unmodelled  # the forward reads no GPU value: an estimate


def test_a_read_in_the_forward_is_replayed_gone_and_the_saving_is_an_upper_bound(tmp_path):
    # the same three kernels with a read of a GPU value between k1 and k2 (cudaStreamSynchronize [100, 110], no
    # backward: before it): compiled code that skips the read (or the read removed) fuses all three into one kernel of
    # the longest's 60 us; where the read stays the graph breaks there, so the saving is said to be an upper bound
    ew = "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>"
    events = [ev("user_annotation", "ProfilerStep#1", 0, 1000), ev("cuda_runtime", "cudaStreamSynchronize", 100, 10)]
    for corr, (t, start, dur) in enumerate([(10, 20, 40), (200, 210, 40), (260, 270, 60)], 1):
        events += [ev("cuda_runtime", "cudaLaunchKernel", t, 5, correlation=corr), gpu("kernel", ew, start, dur, corr)]
    e = whatif.torch_compile(graph(tmp_path, events))
    assert e.changed == 2 and e.graph.g_dur.tolist() == pytest.approx([60, 0, 0])
    assert "reads GPU values on the host 1 time a step" in e.unmodelled and "upper bound" in e.unmodelled


def test_removed_time_is_the_largest_steps_own(tmp_path):
    # steps [1000, 2000] and [2000, 3000]; calls of 80 us at 100 (before the first step), 50 us at 1100 (step 1) and
    # 20 us at 2100 (step 2), each made 0 us by an edit: the most taken out of one step is step 1's 50 us (the call
    # before the steps belongs to none)
    events = [ev("user_annotation", "ProfilerStep#1", 1000, 1000), ev("user_annotation", "ProfilerStep#2", 2000, 1000),
              ev("cuda_runtime", "cudaMalloc", 100, 80), ev("cuda_runtime", "cudaMalloc", 1100, 50),
              ev("cuda_runtime", "cudaMalloc", 2100, 20)]
    g = graph(tmp_path, events)
    after = g.copy()
    calls = np.flatnonzero(g.h_kind == replay.CALL)
    assert g.h_dur[calls].tolist() == pytest.approx([80, 50, 20])
    after.h_dur[calls] = 0.0
    assert whatif.removed_ms(g, after) == pytest.approx(0.05)


def test_more_workers_for_a_multiprocess_loader_deliver_a_batch_per_step_over_the_factor(tmp_path):
    # two steps of 1001 us, each waiting 801 us [10, 811] in a multi-process DataLoader, then launching a kernel. Twice
    # the workers deliver a batch every 1001 / 2 = 500.5 us while the rest of the step (200 us) runs: the wait
    # becomes 300.5 us, each step 1001 - 801 + 300.5 = 500.5 us
    g = graph(tmp_path, _waiting_steps("_MultiProcessingDataLoaderIter", 1001, 801))
    p = whatif.predict(g, "dataloader_workers")
    assert p.step_ms_before == pytest.approx(1.001) and p.step_ms_after == pytest.approx(0.5005)
    assert p.transform == "2 DataLoader waits cut to the loader's throughput with 2x the workers"


def test_a_fused_optimizer_keeps_one_launch_without_its_dispatch(tmp_path):
    # step [0, 1000]; Optimizer.step [100, 400] runs aten::_foreach_add_ [150, 200] (launch [180, 185], a 60 us
    # kernel [190, 250]) and aten::_foreach_mul_ [250, 300] (launch [280, 285], a 60 us kernel [290, 350]); the host
    # works to 1000. Fused: the second launch, its call and the 95 us of host time before it go; the first keeps
    # its call but not the operator dispatch before it (150 to 180: 30 us); the kernels become one of 60 us (the
    # floor once, no work beyond it). The host ends 30 + 5 + 95 = 130 us earlier: step 870 us
    events = [ev("user_annotation", "ProfilerStep#1", 0, 1000), ev("user_annotation", "Optimizer.step#SGD.step", 100, 300),
              ev("cpu_op", "aten::_foreach_add_", 150, 50), ev("cuda_runtime", "cudaLaunchKernel", 180, 5, correlation=1),
              gpu("kernel", "k1", 190, 60, 1), ev("cpu_op", "aten::_foreach_mul_", 250, 50),
              ev("cuda_runtime", "cudaLaunchKernel", 280, 5, correlation=2), gpu("kernel", "k2", 290, 60, 2)]
    p = whatif.predict(graph(tmp_path, events), "fused_optimizer")
    assert p.changed == 1 and p.step_ms_before == pytest.approx(1.0) and p.step_ms_after == pytest.approx(0.87)


def test_overlapping_a_collective_keeps_the_optimizer_waiting_for_it(tmp_path):
    # as test_overlapping_a_collective_frees_the_compute_stream, with B launched inside Optimizer.step: the optimizer
    # reads the reduced gradients, so B still waits for the all-reduce C (which ends between 515 and 525 on its own
    # stream) and runs 100 us after it: the step ends between 615 and 625
    g = _overlap_graph(tmp_path, ev("user_annotation", "Optimizer.step#SGD.step", 18, 12))
    p = whatif.predict(g, "comm_overlap")
    assert p.step_ms_before == pytest.approx(0.72) and 0.615 - 1e-9 <= p.step_ms_after <= 0.625 + 1e-9
    r = replay.replay(whatif.comm_overlap(g).graph)
    names = [g.trace.names[i] for i in g.trace.gpu.name]
    assert r.op_start[names.index("b")] == pytest.approx(r.op_end[names.index(NCCL)])


def test_a_trace_whose_first_row_is_a_call_predicts_the_same(tmp_path):
    # test_a_fused_optimizer_keeps_one_launch_without_its_dispatch's events, a launch call first in the file: the
    # optimizer's nodes are found by time, whatever the rows' order: step 870 us as there
    events = [ev("cuda_runtime", "cudaLaunchKernel", 180, 5, correlation=1),
              ev("user_annotation", "ProfilerStep#1", 0, 1000), ev("user_annotation", "Optimizer.step#SGD.step", 100, 300),
              ev("cpu_op", "aten::_foreach_add_", 150, 50), gpu("kernel", "k1", 190, 60, 1),
              ev("cpu_op", "aten::_foreach_mul_", 250, 50), ev("cuda_runtime", "cudaLaunchKernel", 280, 5, correlation=2),
              gpu("kernel", "k2", 290, 60, 2)]
    g = graph(tmp_path, events)
    assert 0 in g.h_row.tolist()  # the file's first row is a node of the host chain
    p = whatif.predict(g, "fused_optimizer")
    assert p.changed == 1 and p.step_ms_before == pytest.approx(1.0) and p.step_ms_after == pytest.approx(0.87)


def test_the_loaders_own_calls_inside_its_wait_go_with_it(tmp_path):
    # as test_more_dataloader_workers_cut_each_wait_to_the_loaders_throughput, the in-process loader pinning each
    # batch inside its wait (a cudaHostAlloc [400, 450] after each step's start): that call is the loader's own work,
    # done by the workers, so with 2 workers the steps are 400 us as there, not 400 plus the call's time
    events = _waiting_steps("_SingleProcessDataLoaderIter", 1000, 800)
    events += [ev("cuda_runtime", "cudaHostAlloc", t + 400, 50) for t in (0, 1000)]
    p = whatif.predict(graph(tmp_path, events), "dataloader_workers", workers=2)
    assert p.step_ms_before == pytest.approx(1.0) and p.step_ms_after == pytest.approx(0.4)


def test_the_optimizers_cpu_operators_up_to_its_first_launch_go(tmp_path):
    # step [0, 1000]; Optimizer.step [100, 400] first runs aten::add_ [120, 180] on CPU tensors (a step counter),
    # which ends exactly when the first launch call starts (180; no operator around that launch, so no dispatch);
    # then aten::_foreach_mul_ [250, 300] launches at 280, its 95 us of host time before it as in
    # test_a_fused_optimizer_keeps_one_launch_without_its_dispatch. Fused: add_'s 60 us go (it ended by the launch's
    # start: it ran before it), the second launch's 5 us call and the 95 us before it go: step 1000 - 160 = 840 us
    events = [ev("user_annotation", "ProfilerStep#1", 0, 1000),
              ev("user_annotation", "Optimizer.step#SGD.step", 100, 300), ev("cpu_op", "aten::add_", 120, 60), ev("cuda_runtime", "cudaLaunchKernel", 180, 5, correlation=1),
              gpu("kernel", "k1", 190, 60, 1), ev("cpu_op", "aten::_foreach_mul_", 250, 50),
              ev("cuda_runtime", "cudaLaunchKernel", 280, 5, correlation=2), gpu("kernel", "k2", 290, 60, 2)]
    p = whatif.predict(graph(tmp_path, events), "fused_optimizer")
    assert p.step_ms_before == pytest.approx(1.0) and p.step_ms_after == pytest.approx(0.84)


def test_tf32_and_bf16_scale_fp32_gemms_by_the_datasheet_peak_ratio(tmp_path):
    # an H200 (the peak table's H200-SXM: fp32 67, tf32 494.7, bf16 989.4 dense TFLOP/s, NVIDIA's datasheet); one
    # fp32 GEMM (an sgemm kernel, 100 us) launched from aten::mm in a trace recorded without dtypes (the kernel's
    # name says fp32): under tf32 it takes 100 x 67 / 494.7 = 13.544 us, under bf16 100 x 67 / 989.4 = 6.772 us
    events = [ev("user_annotation", "ProfilerStep#1", 0, 1000), ev("cpu_op", "aten::mm", 10, 20),
              ev("cuda_runtime", "cudaLaunchKernel", 20, 5, correlation=1),
              gpu("kernel", "ampere_sgemm_128x64_nn", 40, 100, 1)]
    g = graph(tmp_path, events)
    k = [g.trace.names[i] for i in g.trace.gpu.name].index("ampere_sgemm_128x64_nn")
    e = whatif.tf32(g)
    assert e.changed == 1 and e.graph.g_dur[k] == pytest.approx(100 * 67 / 494.7)
    assert e.what == "1 fp32 GEMM kernels scaled by the H200-SXM peak ratio fp32/tf32 = 0.135"
    assert whatif.bf16(g).graph.g_dur[k] == pytest.approx(100 * 67 / 989.4)


def test_a_larger_batch_grows_the_loaders_own_time_not_another_threads_overlap(tmp_path):
    # as test_a_larger_batch_doubles_the_data_wait_too, with two calls inside the wait: cudaHostAlloc [100, 150] on
    # the loading thread and a call on thread 2 [149.5, 159.5] that starts 0.5 us before it ends. Twice the batch
    # doubles the loader's own time between calls (100 and 300 - 159.5 = 140.5 us), not the calls and not the
    # -0.5 us overlap: the wait ends at 2 x 100 + 50 - 0.5 + 10 + 2 x 140.5 = 540.5; the launch 10 us later at
    # 550.5, its 5 us call, the host's 685 us to the step's end: 1240.5 (the kernel, 10 us after the launch and
    # 600 us long, ends at 1160.5): 620.25 us per batch
    loader = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    events = [ev("user_annotation", "ProfilerStep#1", 0, 1000), ev("user_annotation", loader, 0, 300),
              ev("cuda_runtime", "cudaHostAlloc", 100, 50), ev("cuda_runtime", "cudaGetDevice", 149.5, 10, tid=2),
              ev("cuda_runtime", "cudaLaunchKernel", 310, 5, correlation=1), gpu("kernel", "k", 320, 300, 1)]
    p = whatif.predict(graph(tmp_path, events), "larger_batch")
    assert p.step_ms_before == pytest.approx(1.0) and p.step_ms_after == pytest.approx(0.62025)


def test_a_graph_replay_launches_at_the_typical_latency_from_the_traces_first_call(tmp_path):
    # step [0, 3000]; the first launch call starts at the step's very start (0: it sorts before the step's marker, so
    # it is the host chain's first node) and its kernel A starts 300 us later [300, 1800]; B and C, launched at 400
    # and 500 while A runs, queue behind it [1800, 1810], [1810, 1820]; D at 2100 onto the idle stream starts 10 us
    # after its call [2110, 2120]: the trace's typical launch latency, 10 us. Captured in a graph, every launched op
    # starts at most that after its call: A at 0 + 10
    events = [ev("cuda_runtime", "cudaLaunchKernel", 0, 5, correlation=1),
              ev("user_annotation", "ProfilerStep#1", 0, 3000), gpu("kernel", "a", 300, 1500, 1)]
    for i, (t, k) in enumerate(((400, 1800), (500, 1810), (2100, 2110))):
        events += [ev("cuda_runtime", "cudaLaunchKernel", t, 5, correlation=i + 2),
                   gpu("kernel", "bcd"[i], k, 10, i + 2)]
    g = graph(tmp_path, events)
    a = [g.trace.names[i] for i in g.trace.gpu.name].index("a")
    assert g.g_launch[a] == 0
    e = whatif.cuda_graphs(g).graph
    r = replay.replay(e)
    assert r.op_start[a] - r.node_start[0] == pytest.approx(10)


def test_a_graph_replay_runs_none_of_the_models_python_but_gradient_accumulation_stays(tmp_path):
    # one call of three launches (at 10, 110 and 210, 5 us each; kernels [20, 30], [120, 130], [220, 230]) with the
    # model's Python between them (95 us gaps), and autograd's accumulation of one gradient [140, 170] (30 us,
    # AccumulateGrad inside the engine's call of it) in the second gap. Replayed as a graph: the entry keeps the 10 us
    # before it, the second launch's 95 us go, the third keeps the 30 us of accumulation, which runs outside a graph
    acc = "torch::autograd::AccumulateGrad"
    ew = "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>"
    events = [ev("user_annotation", "ProfilerStep#1", 0, 1000),
              ev("cpu_op", f"autograd::engine::evaluate_function: {acc}", 140, 30), ev("cpu_op", acc, 145, 20)]
    for corr, t in enumerate([10, 110, 210], 1):
        events += [ev("cuda_runtime", "cudaLaunchKernel", t, 5, correlation=corr), gpu("kernel", ew, t + 10, 10, corr)]
    g = graph(tmp_path, events)
    launch = np.flatnonzero(g.h_kind == replay.CALL)
    assert g.h_gap[launch].tolist() == pytest.approx([10, 95, 95])
    e = whatif.cuda_graphs(g)
    assert e.graph.h_gap[launch].tolist() == pytest.approx([10, 0, 30])


def test_autocast_casts_each_gemm_operand_on_the_host_and_its_gradient_back(tmp_path):
    # the forward's aten::linear [10, 40] launches an fp32 GEMM at 20 (5 us, as every launch here: the typical launch
    # call); autograd's thread runs two backward GEMMs (launched at 110 and 210 inside the engine's calls). No dtypes
    # in the trace: nn.Linear's weight and bias, 2 casts of 3.6 launch calls before the forward GEMM (+36 us), and
    # in the same step 2 gradient casts back of 3.8 launch calls shared by the 2 backward launches (+19 us each)
    sgemm = "ampere_sgemm_128x64_nn"
    events = [ev("user_annotation", "ProfilerStep#1", 0, 1000), ev("cpu_op", "aten::linear", 10, 30),
              ev("cuda_runtime", "cudaLaunchKernel", 20, 5, correlation=1), gpu("kernel", sgemm, 30, 50, 1)]
    for corr, t in ((2, 110), (3, 210)):
        events += [ev("cpu_op", "autograd::engine::evaluate_function: AddmmBackward0", t - 5, 20, tid=2),
                   ev("cuda_runtime", "cudaLaunchKernel", t, 5, tid=2, correlation=corr),
                   gpu("kernel", sgemm, t + 10, 50, corr)]
    g = graph(tmp_path, events)
    e = whatif.bf16(g)
    launch = np.flatnonzero(g.h_kind == replay.CALL)
    added = (np.maximum(e.graph.h_gap, 0) - np.maximum(g.h_gap, 0))[launch]
    assert added.tolist() == pytest.approx([2 * 3.6 * 5, 2 * 3.8 * 5 / 2, 2 * 3.8 * 5 / 2])
    assert "2 operand casts a step by autocast" in e.what

"""Each transformation (whatif/edits.py) on a real H200 trace: the direction of the change and
bounds that follow from its mechanism (figures read from the trace, not fitted)."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest

from conftest import DEMO, REPO
from gpucheckup.analysis.one_trace.host import host_calls
from gpucheckup.whatif import replay, edits as whatif
from gpucheckup.whatif import compiled
from gpucheckup.analysis.one_trace.gpu.kernels import categorize
from gpucheckup.hardware import peaks
from gpucheckup.trace.reader import read_trace

H200 = REPO / "tests" / "data" / "h200"
PATHS = {"launch_bound": DEMO / "launch_bound/trace.json.gz", "compute_bound": DEMO / "compute_bound/trace.json.gz",
         "input_bound": DEMO / "input_bound/trace.json.gz", "moe_seed": DEMO / "moe_seed/trace.json.gz",
         "item_checks": H200 / "item_checks/trace.json.gz", "copy_bound": H200 / "copy_bound/trace.json.gz"}


@lru_cache(maxsize=None)
def _graph(case: str) -> replay.Graph:
    return replay.build(read_trace(PATHS[case]))  # uncalibrated: bounds below are the trace's own figures


def _predict(case: str, fix: str, **kw) -> whatif.Prediction:
    return whatif.predict(_graph(case), fix, **kw)


def _per_step(g: replay.Graph, values: np.ndarray, rows_step: np.ndarray) -> np.ndarray:
    """Sum of values per step window."""
    out = np.zeros(g.steps.count)
    ok = rows_step >= 0
    np.add.at(out, rows_step[ok], values[ok])
    return out


def _gpu_ms_per_step(g: replay.Graph, mask=None) -> np.ndarray:
    d = g.trace.gpu.dur if mask is None else np.where(mask, g.trace.gpu.dur, 0.0)
    return _per_step(g, d, g.g_step) / 1000


def _host_ms_per_step(g: replay.Graph, rows: np.ndarray) -> np.ndarray:
    host = g.trace.host
    return _per_step(g, host.dur[rows], g.steps.index_of(host.start[rows])) / 1000


def test_remove_syncs_saves_at_most_the_waits():
    g = _graph("item_checks")
    p = _predict("item_checks", "remove_syncs")
    waits = _host_ms_per_step(g, host_calls.sync_call_rows(g.trace, g.launch_rows))
    assert p.changed >= 33 * 5  # 33 syncs per step, 5 steps
    assert 0 < p.saving_ms <= waits.max()
    assert p.step_ms_after >= np.median(_gpu_ms_per_step(g)) * 0.95  # the GPU's work stays
    none = _predict("compute_bound", "remove_syncs")  # its only syncs are outside the steps
    assert abs(none.saving_pct) < 1


def test_fused_optimizer_saves_at_most_the_optimizer_step():
    g = _graph("launch_bound")
    p = _predict("launch_bound", "fused_optimizer")
    host = g.trace.host
    opt = np.flatnonzero(np.isin(host.name, g.trace.name_ids(lambda n: n.startswith("Optimizer.step#"))))
    assert 0 < p.saving_ms <= _host_ms_per_step(g, opt).max()
    none = _predict("moe_seed", "fused_optimizer")  # a forward-only script: no optimizer
    assert none.changed == 0 and none.saving_ms == 0


def test_pin_memory_moves_copies_at_the_pinned_rate():
    g = _graph("copy_bound")
    rate = 25.0
    p = _predict("copy_bound", "pin_memory", pinned_gb_s=rate)
    gpu = g.trace.gpu
    d2h = replay.copy_rows(g, "DtoH")
    d2h_ms = _per_step(g, np.where(np.isin(np.arange(len(gpu)), d2h), np.nan_to_num(gpu.bytes), 0.0),
                       g.g_step) / (rate * 1e9) * 1000
    assert p.saving_ms > 0
    assert p.step_ms_after >= np.median(d2h_ms) * 0.95  # copies to the host still block, at the pinned rate
    faster = _predict("copy_bound", "pin_memory", pinned_gb_s=2 * rate)
    assert faster.step_ms_after <= p.step_ms_after  # a faster link never makes it slower
    none = _predict("launch_bound", "pin_memory")
    assert none.changed == 0


def test_dataloader_workers_saves_at_most_the_wait():
    g = _graph("input_bound")
    p = _predict("input_bound", "dataloader_workers", workers=4)
    waits = _host_ms_per_step(g, host_calls.dataloader_rows(g.trace))
    assert 0 < p.saving_ms <= waits.max()
    more = _predict("input_bound", "dataloader_workers", workers=8)
    assert more.step_ms_after <= p.step_ms_after
    assert more.step_ms_after >= np.median(_gpu_ms_per_step(g)) * 0.95


def test_cuda_graphs_keeps_the_gpu_work():
    g = _graph("launch_bound")
    p = _predict("launch_bound", "cuda_graphs")
    assert p.saving_ms > 0
    assert p.step_ms_after >= np.median(_gpu_ms_per_step(g)) * 0.95  # the kernels still run
    # the GPU is busy: launches were hidden already, and what graphs save there is the kernels' fusion by Inductor
    # (mode="reduce-overhead" compiles too), no more
    gpu_bound = _predict("compute_bound", "cuda_graphs")
    assert gpu_bound.saving_pct <= _predict("compute_bound", "torch_compile").saving_pct + 0.5


def test_torch_compile_keeps_the_other_kernels():
    g = _graph("launch_bound")
    p = _predict("launch_bound", "torch_compile")
    names, gpu = g.trace.names, g.trace.gpu
    other = np.array([categorize(names[n]) not in compiled.COMPILE_FUSES for n in gpu.name])
    assert p.changed > 0 and p.saving_ms > 0
    assert p.step_ms_after >= np.median(_gpu_ms_per_step(g, other)) * 0.95


def test_tf32_saves_at_most_the_peak_ratio_of_fp32_gemm_time():
    g = _graph("moe_seed")  # fp32 bmm
    p = _predict("moe_seed", "tf32")
    peak = peaks.lookup(g.trace.devices[0].name)
    ratio = peak.peak("fp32") / peak.peak("tf32")
    gemm = np.array([categorize(g.trace.names[n]) == "gemm_conv" for n in g.trace.gpu.name])
    assert p.changed > 0
    assert 0 < p.saving_ms <= (1 - ratio) * _gpu_ms_per_step(g, gemm).max()
    bf16 = _predict("compute_bound", "tf32")  # bf16 autocast: no fp32 GEMM to move
    assert bf16.changed == 0 and bf16.saving_ms == 0


def test_comm_overlap_without_collectives_changes_nothing():
    # No fixture has collectives (all single-GPU): the transformation must find nothing to move.
    for case in ("compute_bound", "launch_bound"):
        p = _predict(case, "comm_overlap")
        assert p.changed == 0 and p.step_ms_after == p.step_ms_before


def test_larger_batch_per_batch_time_between_linear_and_unchanged():
    for case in ("launch_bound", "compute_bound"):
        p = _predict(case, "larger_batch", factor=2.0)
        assert p.step_ms_before / 2 * 0.95 <= p.step_ms_after <= p.step_ms_before * 1.001
    host_bound = _predict("launch_bound", "larger_batch", factor=2.0)
    gpu_bound = _predict("compute_bound", "larger_batch", factor=2.0)
    assert host_bound.saving_pct > 3 * gpu_bound.saving_pct  # idle GPU time absorbs the larger batch


def test_predict_all_keys_and_unknown_fix():
    trace = read_trace(PATHS["moe_seed"])
    preds = whatif.predict_all(trace, unprofiled_step_ms=9.25)
    assert set(preds) == set(whatif.TRANSFORMS)
    for p in preds.values():
        assert p.step_ms_before == pytest.approx(9.25, rel=0.05)
        assert p.transform
    with pytest.raises(KeyError):
        whatif.predict(_graph("moe_seed"), "more_cowbell")

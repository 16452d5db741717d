"""static_shapes (whatif/edits.py): the data-dependent syncs go and the work the data sized is padded to a
static bound. Real H200 traces (the bundled moe_seed with record_shapes; the MoE example's validation baseline
without) and small synthetic traces for the edge cases; expected figures computed here from the raw events."""

from __future__ import annotations

import json
from functools import lru_cache

import numpy as np
import pytest

from conftest import DEMO, REPO, raw_events, write_trace
from gpucheckup.whatif import replay, edits as whatif
from gpucheckup.diagnosis.fixes import BY_KEY, DATA_DEPENDENT_OPS
from gpucheckup.trace.reader import read_trace

SEED = DEMO / "moe_seed" / "trace.json.gz"
EXAMPLE = REPO / "tests/data/whatif_h200/moe/20261130-172136-python3/traces/trace.json.gz"  # no record_shapes
SHAPES = REPO / "tests/data/whatif_h200/moe_shapes/20261130-210532-python3"  # the same example, with record_shapes
INDEXING = {"aten::index", "aten::index_put_", "aten::_index_put_impl_"}  # the seed's ops that index the buffer


@lru_cache(maxsize=None)
def _graph(path) -> replay.Graph:
    return replay.build(read_trace(path))


def _edit(path, **kw) -> whatif.Edit:
    return whatif.static_shapes(_graph(path), ops=DATA_DEPENDENT_OPS, **kw)


def _floor(events) -> float:
    """The trace's shortest kernel, from the raw events."""
    return min(e["dur"] for e in events if e.get("cat") == "kernel" and e["dur"] > 0)


def _seed_padded_kernels(size: int, path=SEED) -> list[dict]:
    """The seed's kernels whose operator (same External id) has `size` in its first input's shape and does not
    index: counted from the raw JSON, inside the ProfilerStep# windows."""
    events = raw_events(path)["traceEvents"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name", "").startswith("ProfilerStep#")
             and e.get("cat") == "user_annotation"]
    ops = {}
    for e in events:
        if e.get("cat") == "cpu_op" and "External id" in e.get("args", {}):
            dims = e["args"].get("Input Dims") or []
            first = dims[0] if dims and isinstance(dims[0], list) else []
            inside = any(a <= e["ts"] <= b for a, b in steps)
            ops[e["args"]["External id"]] = inside and size in first and e["name"] not in INDEXING
    return [e for e in events if e.get("cat") == "kernel" and ops.get(e["args"].get("External id"))]


def test_seed_padding_to_the_flags_bound_scales_the_kernels_the_read_size_set():
    events = raw_events(SEED)["traceEvents"]
    kernels = _seed_padded_kernels(2107)  # the seed's int(counts.max()): 2107 in every step (the same tokens)
    assert len(kernels) == 8 * 5  # per step: 2 fills, 2 bmm, relu, threshold_backward, 2 backward bmm
    floor = _floor(events)
    before = sum(k["dur"] for k in kernels)
    after = sum(floor + (k["dur"] - floor) * 2560 / 2107 for k in kernels)
    e = _edit(SEED, bound=2560)
    assert f"{len(kernels)} kernels" in e.what and "the size the host read, 2107" in e.what
    assert f"{before / 1000:.2f} -> {after / 1000:.2f} ms" in e.what
    sync_only = whatif.remove_syncs(_graph(SEED), ops=DATA_DEPENDENT_OPS)  # it also drops the reads' copies
    changed = np.flatnonzero(e.graph.g_dur != sync_only.graph.g_dur)
    assert len(changed) == len(kernels)
    assert e.graph.g_dur[changed].sum() == pytest.approx(after, rel=1e-6)  # durations as end - start
    assert e.changed == sync_only.changed + len(kernels)
    assert (e.graph.h_kind == sync_only.graph.h_kind).all()  # the same syncs go
    # padding 21% more rows into GEMMs that are most of the step costs more than the syncs saved
    g = _graph(SEED)
    p = whatif.predict(g, "static_shapes", ops=DATA_DEPENDENT_OPS, bound=2560)
    assert p.saving_ms < 0
    assert -p.saving_ms <= (after - before) / 5 / 1000 * 1.05  # at most the added kernel time per step


def test_seed_default_bound_is_the_largest_seen_so_constant_sizes_pad_nothing():
    e = _edit(SEED)  # bound_factor 1: the largest size seen, which every step had
    sync_only = whatif.remove_syncs(_graph(SEED), ops=DATA_DEPENDENT_OPS)
    assert "x1.000 to x1.000" in e.what
    assert np.array_equal(e.graph.g_dur, sync_only.graph.g_dur)
    g = _graph(SEED)
    assert whatif.predict(g, "static_shapes", ops=DATA_DEPENDENT_OPS).step_ms_after == pytest.approx(
        whatif.predict(g, "remove_syncs", ops=DATA_DEPENDENT_OPS).step_ms_after)
    half = _edit(SEED, bound_factor=0.5)  # a bound below the size seen drops rows: the kernels shrink
    assert half.graph.g_dur.sum() < sync_only.graph.g_dur.sum()


def test_example_baseline_with_shapes_pads_the_expert_work_to_the_flags_bound():
    """The MoE example's H200 baseline captured with --record-shapes (docs/validation.md section 7, call 6): the
    expert size is the bmm operators' dimension that is none of the layer's widths (experts 8, d 2048, hidden 1024);
    the padded kernels and their time at the flag's bound are counted here from the raw JSON."""
    trace = SHAPES / "traces" / "trace.json.gz"
    events = raw_events(trace)["traceEvents"]
    dims = {x for e in events if e.get("name") == "aten::bmm" for shape in e["args"]["Input Dims"] for x in shape}
    (size,) = dims - {8, 2048, 1024}
    kernels = _seed_padded_kernels(size, trace)
    floor = _floor(events)
    before = sum(k["dur"] for k in kernels)
    after = sum(floor + (k["dur"] - floor) * 2560 / size for k in kernels)
    e = _edit(trace, bound=2560)
    assert f"{len(kernels)} kernels" in e.what and f"the size the host read, {size}" in e.what
    assert f"{before / 1000:.2f} -> {after / 1000:.2f} ms" in e.what
    # the check-up's own graph (calibrated on the run's unprofiled steps): the padding costs more than the syncs save
    from gpucheckup.checkup import pipeline
    a = pipeline.check(SHAPES).checkups[0].analysis
    g = replay.build(a.trace, a.steps, a.launch_rows)
    replay.calibrate(g, a.profiler.unprofiled_step_ms)
    assert whatif.predict(g, "static_shapes", ops=DATA_DEPENDENT_OPS, bound=2560).saving_ms < 0
    assert whatif.predict(g, "remove_syncs", ops=DATA_DEPENDENT_OPS).saving_ms > 0


def test_example_baseline_without_shapes_is_the_sync_removal_alone():
    assert not read_trace(EXAMPLE).record_shapes
    e = _edit(EXAMPLE, bound=2560)
    sync_only = whatif.remove_syncs(_graph(EXAMPLE), ops=DATA_DEPENDENT_OPS)
    assert "no recorded shapes: nothing padded (the sync removal alone)" in e.what
    assert np.array_equal(e.graph.g_dur, sync_only.graph.g_dur) and e.changed == sync_only.changed


def test_catalogue_entry_replays_static_shapes():
    assert BY_KEY["static_shapes"].replay is whatif.static_shapes
    assert whatif.TRANSFORMS["static_shapes"] is whatif.static_shapes


# --- synthetic traces: one MoE-like step (route, bincount with its sync, the buffer sized by the read, a GEMM on
# it, an indexing op on it) repeated, the size C per step given; edge cases only


def _ev(cat, name, ts, dur, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _moe_like(sizes: list[int], shapes: bool = True, late_read: bool = False) -> list[dict]:
    """Steps of 1000 us; step s's data-set size is sizes[s]; kernel times linear in it (GEMM 2 us per row); with
    late_read the bincount (and its sync) comes after the other operators."""
    events, corr, ext = [], 1, 1
    for s, c in enumerate(sizes):
        t0 = s * 1000.0
        events.append(_ev("user_annotation", f"ProfilerStep#{s}", t0, 950))

        def op(name, ts, dur, dims, concrete=None, kernel=None, sync=None):
            nonlocal corr, ext
            args = {"External id": ext}
            if shapes:
                args["Input Dims"] = dims
                if concrete is not None:
                    args["Concrete Inputs"] = concrete
            events.append(_ev("cpu_op", name, ts, dur, **args))
            if kernel:
                kname, kdur = kernel
                events.append(_ev("cuda_runtime", "cudaLaunchKernel", ts + 1, 2, correlation=corr, **{
                    "External id": ext}))
                events.append({"ph": "X", "cat": "kernel", "name": kname, "pid": 0, "tid": 7, "ts": ts + 4,
                               "dur": kdur, "args": {"device": 0, "stream": 7, "correlation": corr,
                                                     "External id": ext}})
                corr += 1
            if sync:
                events.append(_ev("cuda_runtime", "cudaStreamSynchronize", ts + sync[0], sync[1]))
            ext += 1

        op("aten::mm", t0 + 5, 10, [[256, 64], [64, 8]], kernel=("gemm_gate", 5.0))
        op("aten::bincount", t0 + (180 if late_read else 20), 40, [[512], [], []], kernel=("histogram", 30.0),
           sync=(6, 30))
        op("aten::zeros", t0 + 70, 4, [[], [], [], [], []], concrete=["[8, %d, 64]" % c, "6", "", "", "False"])
        op("aten::fill_", t0 + 75, 10, [[8, c, 64], []], kernel=("fill", 0.1 * c))
        op("aten::bmm", t0 + 100, 10, [[8, c, 64], [8, 64, 32]], kernel=("gemm_expert", 2.0 * c))
        op("aten::index", t0 + 120, 10, [[8, c, 64], []], kernel=("gather", 20.0))
        op("aten::relu", t0 + 140, 10, [[256, 64]], kernel=("relu", 3.0))
        op("aten::mm", t0 + 160, 10, [[256, 64], [64, 32]], kernel=("gemm_out", 6.0))
    return events


def _synthetic(tmp_path, sizes, shapes=True, record=True, late_read=False) -> replay.Graph:
    path = write_trace(tmp_path / "t.json", _moe_like(sizes, shapes, late_read),
                       **({"record_shapes": 1} if record else {}))
    return replay.build(read_trace(path))


def _expected(g: replay.Graph, sizes: list[int], bound: float) -> np.ndarray:
    """Each padded kernel's time by hand: fill and the expert GEMM of step s scaled by bound / sizes[s] above the
    floor (the shortest kernel: the relu's 3 us)."""
    names = [g.trace.names[i] for i in g.trace.gpu.name]
    out = g.g_dur.copy()
    step = 0
    for i, n in enumerate(names):
        if n == "gemm_gate":
            step = int(round(g.trace.gpu.start[i] - g.trace.gpu.start[0])) // 1000
        if n in ("fill", "gemm_expert"):
            out[i] = 3.0 + (out[i] - 3.0) * bound / sizes[step]
    return out


def test_synthetic_varying_sizes_are_padded_to_the_largest_seen(tmp_path):
    sizes = [100, 120, 90, 110]
    g = _synthetic(tmp_path, sizes)
    e = whatif.static_shapes(g, ops=DATA_DEPENDENT_OPS)
    assert "3 of 8 operator positions change shape across 4 steps" in e.what  # fill_, bmm, index
    assert "8 kernels" in e.what  # fill and the expert GEMM in 4 steps; the gather is the index's work
    assert np.allclose(e.graph.g_dur, _expected(g, sizes, 120))
    assert e.changed == 4 + 8  # the 4 bincount syncs and the 8 kernels
    stated = whatif.static_shapes(g, ops=DATA_DEPENDENT_OPS, bound=150)  # the bound a flag states
    assert np.allclose(stated.graph.g_dur, _expected(g, sizes, 150))
    p = whatif.predict(g, "static_shapes", ops=DATA_DEPENDENT_OPS)
    assert p.step_ms_after >= whatif.predict(g, "remove_syncs", ops=DATA_DEPENDENT_OPS).step_ms_after  # host-bound


def test_synthetic_constant_sizes_use_the_size_the_host_read(tmp_path):
    sizes = [100, 100, 100]
    g = _synthetic(tmp_path, sizes)
    e = whatif.static_shapes(g, ops=DATA_DEPENDENT_OPS, bound=125)
    assert "the size the host read, 100, in 3 steps" in e.what and "6 kernels" in e.what
    assert np.allclose(e.graph.g_dur, _expected(g, sizes, 125))
    same = whatif.static_shapes(g, ops=DATA_DEPENDENT_OPS)  # the largest seen: nothing grows
    assert np.allclose(same.graph.g_dur, g.g_dur)


def test_synthetic_without_shapes_or_with_one_step_is_the_sync_removal_alone(tmp_path):
    g = _synthetic(tmp_path, [100, 120, 90], shapes=False, record=False)
    e = whatif.static_shapes(g, ops=DATA_DEPENDENT_OPS, bound=200)
    assert e.what.endswith("no recorded shapes: nothing padded (the sync removal alone)")
    assert np.array_equal(e.graph.g_dur, g.g_dur) and e.changed == 3
    one = _synthetic(tmp_path, [100])  # one step: nothing varies; the read size is still found
    assert "the size the host read, 100, in 1 steps" in whatif.static_shapes(one, ops=DATA_DEPENDENT_OPS).what


def test_synthetic_no_data_dependent_read_and_constant_shapes_pads_nothing(tmp_path):
    g = _synthetic(tmp_path, [100, 100])
    e = whatif.static_shapes(g, ops=frozenset({"aten::nonzero"}), bound=200)  # no sync inside it: no read
    assert "no data-dependent reads: nothing padded" in e.what and e.changed == 0
    assert np.array_equal(e.graph.g_dur, g.g_dur)
    every = whatif.static_shapes(g)  # no operators named: every sync goes, nothing is taken as a size read
    assert "no data-dependent operators named: nothing padded" in every.what and every.changed == 2
    for sizes in ([100, 100], [100, 120]):  # the read comes after the buffer: nothing it read sized the buffer
        late = whatif.static_shapes(_synthetic(tmp_path, sizes, late_read=True), ops=DATA_DEPENDENT_OPS, bound=200)
        assert "no shapes set by the data-dependent reads: nothing padded" in late.what and late.changed == 2
    assert json.dumps(e.what)  # one plain sentence


def test_synthetic_padding_scales_kernels_not_the_memsets_of_the_same_operators(tmp_path):
    # as the varying case, but fill_ zeroes the buffer with a memset (cudaMemsetAsync), not a kernel: a memset is
    # not a kernel whose rows scale with the bound, so it keeps its time; only the 4 expert GEMMs are padded
    sizes = [100, 120, 90, 110]
    events = _moe_like(sizes)
    fill = {e["args"]["correlation"] for e in events if e.get("cat") == "kernel" and e["name"] == "fill"}
    for e in events:
        if e.get("args", {}).get("correlation") in fill:
            e["cat"], e["name"] = (("gpu_memset", "Memset (Device)") if e["cat"] == "kernel"
                                   else ("cuda_runtime", "cudaMemsetAsync"))
    g = replay.build(read_trace(write_trace(tmp_path / "t.json", events, record_shapes=1)))
    e = whatif.static_shapes(g, ops=DATA_DEPENDENT_OPS)
    assert "3 of 8 operator positions change shape across 4 steps" in e.what and "4 kernels" in e.what
    assert np.allclose(e.graph.g_dur, _expected(g, sizes, 120))  # fill's memsets (renamed) as they were
    assert e.changed == 4 + 4


def test_synthetic_annotations_with_shapes_are_not_operators(tmp_path):
    # as the varying case, with a gloo collective's annotation (user_annotation rows carry Input Dims too) in each
    # step after the operators: not an operator, so the steps still have 8 operator positions, 3 changing shape
    sizes = [100, 120, 90, 110]
    events = _moe_like(sizes)
    for s, c in enumerate(sizes):
        events.append(_ev("user_annotation", "gloo:all_reduce", s * 1000.0 + 185, 5, **{"Input Dims": [[8, c, 64]]}))
    g = replay.build(read_trace(write_trace(tmp_path / "t.json", events, record_shapes=1)))
    e = whatif.static_shapes(g, ops=DATA_DEPENDENT_OPS)
    assert "3 of 8 operator positions change shape across 4 steps" in e.what and "8 kernels" in e.what
    assert np.allclose(e.graph.g_dur, _expected(g, sizes, 120))


def test_synthetic_operators_between_steps_are_in_no_step(tmp_path):
    # as the varying case, with an operator after each step's ProfilerStep range ([s, s + 950]) ends, at s + 960
    # (logging or a hook between steps): outside every step's host window, it is no operator position of a step.
    # They come first in the file (host rows keep file order), so that a step index not dropped with its row would
    # shift every operator's step
    sizes = [100, 120, 90, 110]
    events = [_ev("cpu_op", "aten::add_", s * 1000.0 + 960, 5, **{"Input Dims": [[256, 64], [256, 64], []],
                                                                   "External id": 1000 + s}) for s in range(len(sizes))]
    events += _moe_like(sizes)
    g = replay.build(read_trace(write_trace(tmp_path / "t.json", events, record_shapes=1)))
    e = whatif.static_shapes(g, ops=DATA_DEPENDENT_OPS)
    assert "3 of 8 operator positions change shape across 4 steps" in e.what and "8 kernels" in e.what
    assert np.allclose(e.graph.g_dur, _expected(g, sizes, 120))

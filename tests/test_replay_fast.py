"""The replay's speed-ups give the same answers: the calibration's ITP search finds the k a bisection
finds, the cached replay order follows edits of the graph's structure, and
the fp32 GEMMs classified per (kernel name, op dtypes) are those a per-row classification finds."""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import DEMO, REPO, fixtures_dir
from gpucheckup.analysis.one_trace import launches
from gpucheckup.whatif import replay, edits as whatif
from gpucheckup.analysis.flops.gemm_dtype import dtype_from_name, is_tensor_core
from gpucheckup.analysis.one_trace.gpu.kernels import categorize
from gpucheckup.analysis.flops.shape_flops import first_float_dtype
from gpucheckup.trace.reader import read_trace
from gpucheckup.trace.tables import KERNEL

BISECTION = 24  # the bisection of [0, 1] the calibration used before: a bracket of 2^-24


def _bisect(f, target):
    """The largest k in [0, 1] with f(k) <= target, by BISECTION halvings (the reference)."""
    lo, hi = 0.0, 1.0
    for _ in range(BISECTION):
        mid = (lo + hi) / 2
        if f(mid) <= target:
            lo = mid
        else:
            hi = mid
    return lo


def _traces() -> list[Path]:
    found = sorted(DEMO.glob("*/trace.json.gz")) + sorted((REPO / "tests" / "data" / "h200").glob("**/*.json.gz"))
    shared = fixtures_dir()
    return found + (sorted(shared.glob("*/trace.json.gz")) if shared is not None else [])


def _unprofiled_ms(path: Path) -> float | None:
    for d in (path.parent, path.parent.parent):
        if (d / "meta.json").exists():
            s = json.loads((d / "meta.json").read_text()).get("step_s_unprofiled")
            return s * 1000 if s else None
    return None


@lru_cache(maxsize=None)
def _trace(path: str):
    return read_trace(path)


def test_scale_tolerance_is_the_old_bisections_bracket():
    assert replay.SCALE_TOLERANCE == 2.0 ** -BISECTION


@settings(max_examples=200, deadline=None)
@given(knots=st.lists(st.tuples(st.floats(0.0, 1.0), st.floats(0.0, 50.0)), min_size=1, max_size=8),
       quantum=st.sampled_from([0.0, 1e-6, 1e-3, 0.5]), where=st.floats(0.0, 1.0))
def test_itp_finds_the_bisections_k(knots, quantum, where):
    """On monotone piecewise-linear functions (with flat parts, kinks, and values rounded to a quantum as
    float timestamps round a replayed median), the search ends at the bisection's k, whose value is within
    target, in at most bisection's evaluations plus ITP_N0."""
    xs = np.concatenate(([0.0], np.sort([k for k, _ in knots]), [1.0]))
    ys = np.concatenate(([1.0], 1.0 + np.cumsum([v for _, v in knots]), [1.0 + sum(v for _, v in knots) + 5.0]))

    def f(k):
        v = float(np.interp(k, xs, ys))
        return round(v / quantum) * quantum if quantum else v

    target = f(0.0) + where * (f(1.0) - f(0.0))
    calls = []

    def counted(k):
        calls.append(k)
        return f(k)

    k, fk = replay.largest_within(counted, target, f(0.0), f(1.0))
    assert fk == f(k) <= target
    if f(1.0) <= target:
        assert k == 1.0
        return
    assert k == _bisect(f, target)  # the same grid point: the boundary of a monotone predicate
    assert f(k + replay.SCALE_TOLERANCE) > target or k + replay.SCALE_TOLERANCE == 1.0
    assert len(calls) <= BISECTION + replay.ITP_N0


def test_itp_needs_few_replays_on_a_smooth_function():
    """Interpolation pays off where the function is linear: far fewer evaluations than bisection."""
    calls = []

    def f(k):
        calls.append(k)
        return 3.0 + 20.0 * k

    k, _ = replay.largest_within(f, 11.5, 3.0, 23.0)
    assert abs(k - 8.5 / 20.0) <= replay.SCALE_TOLERANCE
    assert len(calls) <= BISECTION // 2


@pytest.mark.parametrize("path", [p for p in _traces() if _unprofiled_ms(p)],
                         ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}")
def test_calibration_matches_bisection_on_real_traces(path, monkeypatch):
    trace = _trace(str(path))
    g = replay.build(trace)
    unprofiled = _unprofiled_ms(path)
    real = replay.replay
    count = []
    monkeypatch.setattr(replay, "replay", lambda gr: count.append(1) or real(gr))
    c = replay.calibrate(g, unprofiled)
    monkeypatch.setattr(replay, "replay", real)
    if not c.applied:
        return
    assert len(count) <= 2 + BISECTION + replay.ITP_N0  # the traced step, the floor, the search
    h = replay.build(trace)

    def at(k):
        h.host_scale = k
        return real(h).median_ms

    floor = at(0.0)
    target = max(unprofiled, floor * (1 + replay.CALIBRATION_FLOOR))
    assert c.host_scale == _bisect(at, target)
    assert c.replayed_ms == at(c.host_scale)
    assert g.host_scale == c.host_scale


def _fresh(g: replay.Graph) -> replay.Replayed:
    h = g.copy()
    h.order_cache = None
    return replay.replay(h)


def _same(a: replay.Replayed, b: replay.Replayed) -> bool:
    return all(np.array_equal(getattr(a, f), getattr(b, f), equal_nan=True)
               for f in ("start", "end", "node_start", "node_end", "op_start", "op_end"))


def test_cached_order_follows_structure_edits():
    """Edits of durations reuse the cached order; edits of the structure (a stream predecessor, an extra
    dependency, a launching node) rebuild it, and each replays as a graph with no cache does."""
    path = REPO / "tests" / "data" / "h200x2" / "ddp_healthy" / "traces" / "rank0.json.gz"
    if not path.exists():
        pytest.skip("no multi-stream fixture")
    g = replay.build(_trace(str(path)))
    base = replay.replay(g)
    assert len(np.unique(g.g_stream)) > 1 and _same(base, _fresh(g))
    e = whatif.larger_batch(g)  # durations only
    assert _same(replay.replay(e.graph), _fresh(e.graph)) and e.graph.order_cache is g.order_cache
    comm = int(np.flatnonzero(g.g_stream != g.g_stream[0])[-1])  # an op on the other stream
    later = np.flatnonzero((g.g_stream == g.g_stream[0]) & (g.g_launch > g.g_launch[comm]))
    edits = {
        "g_prev": lambda h: h.g_prev.__setitem__(int(np.flatnonzero(h.g_prev >= 0)[len(h.g_prev) // 2]), -1),
        "g_dep": lambda h: h.g_dep.__setitem__(int(later[len(later) // 2]), comm),
        "g_launch": lambda h: h.g_launch.__setitem__(int(later[0]), int(h.g_launch[later[-1]])),
    }
    for what, edit in edits.items():
        h = g.copy()
        edit(h)
        r = replay.replay(h)
        assert h.order_cache is not g.order_cache, what  # rebuilt
        assert _same(r, _fresh(h)), what
        assert not np.isnan(r.op_end).any(), what
    assert _same(replay.replay(g), base)  # the original graph keeps its order


def test_fp32_gemms_match_a_per_row_classification():
    """Every GEMM kernel row classified on its own (the kernel_dtype rule written out here) gives the same rows."""
    path = REPO / "tests" / "data" / "h200" / "light" / "launch_bound" / "traces" / "trace.json.gz"
    trace = _trace(str(path))
    g = replay.build(trace)
    gpu, host, names = trace.gpu, trace.host, trace.names
    rows = [r for r in range(len(gpu)) if gpu.kind[r] == KERNEL
            and categorize(names[gpu.name[r]]) in ("gemm_conv", "attention")]
    ops = launches.op_rows(trace, np.array(rows, dtype=np.int64)).tolist()
    want = []
    for r, op in zip(rows, ops):
        name, dt = names[gpu.name[r]], ""
        if op >= 0 and host.dtypes[op] is not None:
            try:
                dt = first_float_dtype(msgspec.json.decode(host.dtypes[op]))
            except msgspec.DecodeError:
                dt = ""
        by_name = dtype_from_name(name)
        if (by_name or ("tf32" if dt == "fp32" and is_tensor_core(name) else dt)) == "fp32":
            want.append(r)
    got = whatif._fp32_gemms(g)
    assert len(want) > 100 and got.tolist() == want
    assert whatif._fp32_gemms(g.copy()) is got  # once per trace: the copies share it
    assert math.isfinite(whatif.tf32(g).graph.g_dur.sum())

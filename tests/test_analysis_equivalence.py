"""Analyses rewritten for speed give what their plain definitions give, on every real trace: the many-row
sweeps against the one-row function they stand for (independent of the sweep's stack and its pruning)."""

from __future__ import annotations

import numpy as np
import pytest

from test_reader_equivalence import real_traces
from gpucheckup.analysis.one_trace.host import host_calls, syncs
from gpucheckup.analysis.one_trace import launches
from gpucheckup.trace import read_trace
from gpucheckup.trace.tables import CPU_OP, PYTHON


@pytest.mark.parametrize("path", real_traces(), ids=lambda p: str(p.relative_to(p.parents[2])))
def test_enclosing_all_equals_enclosing_row_by_row(path):
    trace = read_trace(path)
    if not len(trace.host.start):
        pytest.skip("no host events")
    rows = host_calls.sync_call_rows(trace, launches.launch_rows(trace))
    rng = np.random.default_rng(0)  # and host rows of any kind: launches, operators, Python frames
    rows = np.union1d(rows, rng.choice(len(trace.host.start), min(200, len(trace.host.start)), replace=False))
    for cats in ((CPU_OP,), (PYTHON,)):
        got = syncs._enclosing_all(trace, rows, cats)
        assert sorted(got) == sorted(int(r) for r in rows)
        for r in rows.tolist():
            assert got[r] == [int(c) for c in host_calls.enclosing(trace, r, cats)], f"{path.name}: row {r}"


@pytest.mark.parametrize("case", ["launch_bound_stacks", "moe_seed"])
def test_raw_column_take_equals_row_by_row(case):
    from conftest import trace_path

    host = read_trace(trace_path(case)).host
    rows = np.flatnonzero(host.shapes.present())
    assert len(rows) > 100
    rows = np.concatenate([rows[:500], np.arange(min(500, len(host.start)))])  # rows with and without
    for col in (host.shapes, host.dtypes, host.concrete):
        assert col.take(rows) == [col[int(r)] for r in rows]


def _user_frame_brute(trace, pid, tid, t0, t1):
    """The plain definition: the frames on that thread that hold [t0, t1], outermost first, then the innermost
    one outside torch (host_calls.innermost_user_frame)."""
    host = trace.host
    m = (host.cat == PYTHON) & (host.pid == pid) & (host.tid == tid) & (host.start <= t0) & (host.end >= t1)
    found = np.flatnonzero(m)
    found = found[np.lexsort((-host.end[found], host.start[found]))]
    return host_calls.innermost_user_frame([trace.names[host.name[f]] for f in found])


def test_user_frames_equal_the_plain_definition():
    """The vectorized frame search (a sparse table over the frames' ends) against each row's enclosing frames,
    on the real trace with Python stacks: launches, operators and instants between them."""
    from conftest import trace_path

    trace = read_trace(trace_path("launch_bound_stacks"))
    host = trace.host
    rng = np.random.default_rng(1)
    rows = np.sort(rng.choice(np.flatnonzero(host.cat != PYTHON), 400, replace=False))  # a frame holds itself
    got = host_calls.user_frames(trace, rows)
    assert sum(g is not None for g in got) > 50  # most rows run under some Python frame
    for r, g in zip(rows.tolist(), got):
        assert g == host_calls.user_frame(trace, r), f"row {r}"
    mid = rng.uniform(host.start[rows], host.end[rows] + 50.0)  # instants, some past the row's end
    got = host_calls.user_frames_during(trace, host.pid[rows], host.tid[rows], mid, mid)
    for r, t, g in zip(rows.tolist(), mid.tolist(), got):
        assert g == _user_frame_brute(trace, host.pid[r], host.tid[r], t, t), f"row {r} at {t}"


def _parents_by_stack(starts, ends):
    """The plain definition: per frame, the latest earlier frame that has not ended before it starts."""
    out = []
    for i in range(len(starts)):
        earlier = [j for j in range(i) if ends[j] >= starts[i]]
        out.append(earlier[-1] if earlier else -1)
    return out


@pytest.mark.parametrize("block", [1, 5, 1 << 16])  # frames taken together between points where none is open
@pytest.mark.parametrize("searched", [0, 10**9])  # frames outside the tree: the stack walk, or each searched
@pytest.mark.parametrize("seed", range(6))
def test_frame_parents_nested_and_overlapping(seed, searched, block, monkeypatch):
    """Nested call trees (the fast path) and the same trees with some frames ending a little after their parent
    (rounding in real traces; the walk), touching frames and ties included."""
    rng = np.random.default_rng(seed)
    starts, ends = [], []

    def call(t0, t1, depth):
        starts.append(t0)
        ends.append(t1)
        t = t0
        while depth < 6 and t < t1 and rng.random() < 0.7:
            a = t + float(rng.integers(0, 3))
            b = min(t1, a + float(rng.integers(0, 8)))
            if a > t1:
                break
            call(a, b, depth + 1)
            t = b
    for root in range(4):  # several call trees one after another, some touching, some overlapping their neighbour
        call(250.0 * root - (root == 3) * 60.0, 250.0 * root + 200.0 + (root == 1) * 50.0, 0)
    starts, ends = np.array(starts), np.array(ends)
    if seed % 2:  # some frames overlap their parent's end
        bump = rng.random(len(ends)) < 0.05
        ends = ends + bump * 0.5
    order = np.lexsort((-ends, starts))
    starts, ends = starts[order], ends[order]
    monkeypatch.setattr(host_calls, "MAX_SEARCHED_FRAMES", searched)
    monkeypatch.setattr(host_calls, "BLOCK_FRAMES", block)
    assert host_calls.frame_parents(starts, ends).tolist() == _parents_by_stack(starts.tolist(), ends.tolist())


@pytest.mark.parametrize("block", [1, 3, 1 << 16])
@pytest.mark.parametrize("seed", range(4))
def test_frame_parents_any_intervals(seed, block, monkeypatch):
    """Intervals with no nesting at all (the stack walk) and a few overlapping ones in a nested tree."""
    monkeypatch.setattr(host_calls, "BLOCK_FRAMES", block)
    rng = np.random.default_rng(seed)
    starts = np.sort(rng.integers(0, 300, 400)).astype(float)
    ends = starts + rng.integers(0, 40, 400)
    order = np.lexsort((-ends, starts))
    starts, ends = starts[order], ends[order]
    assert host_calls.frame_parents(starts, ends).tolist() == _parents_by_stack(starts.tolist(), ends.tolist())


def test_frame_parents_far_back():
    """A frame whose parent (by the definition) lies a thousand frames back, past frames outside the tree."""
    leaves = np.arange(1000) * 0.09 + 1.0
    starts = np.concatenate([[0.0, 0.5], leaves, [100.2]])
    ends = np.concatenate([[100.0, 100.5], leaves + 0.05, [100.3]])
    got = host_calls.frame_parents(starts, ends).tolist()
    assert got == _parents_by_stack(starts.tolist(), ends.tolist())
    assert got[-1] == 1  # open at 100.2: only the second frame


def _categorize_by_definition(name: str) -> str:
    """The plain definition: the first of CATEGORY_RULES (re.IGNORECASE) found in the names of what it runs."""
    from gpucheckup.analysis.one_trace.gpu.kernels import CATEGORY_RULES, work_names

    return next((cat for cat, pattern in CATEGORY_RULES if pattern.search(work_names(name))), "other")


def test_categorize_equals_its_definition():
    from gpucheckup.analysis.one_trace.gpu.kernels import categorize

    names = {n for p in real_traces() for n in read_trace(p).names}
    assert len(names) > 500
    made = ["NCCL_AllReduce", "FlashAttn", "GEMM", "Adam", "CatArrayBatchedCopy", "cat_kernel", "with_index",
            "WITH_INDEX", "xIndex", "Welford", "SCAN", "Triton_Poi", "Kelvin_\u212aernel", "\u017fort_kernel",
            "splitKreduce", "SPLITKREDUCE", "concat", "no rule here", ""]
    for name in sorted(names) + made + [n.upper() for n in made] + [n.swapcase() for n in sorted(names)[:300]]:
        assert categorize(name) == _categorize_by_definition(name), name


@pytest.mark.parametrize("seed", range(6))
def test_inside_any_equals_a_pass_per_interval(seed):
    """Points inside intervals on their thread, by sorted search, against one pass over all points per interval
    (the plain definition): nested, overlapping, touching, empty and NaN intervals, NaN points, several threads."""
    from gpucheckup.analysis.intervals import inside_any

    rng = np.random.default_rng(seed)
    m, n = int(rng.integers(0, 120)), 2000
    starts = rng.integers(0, 500, m).astype(float)
    ends = starts + rng.integers(-2, 60, m)
    ends[rng.random(m) < 0.05] = np.nan
    threads = rng.integers(0, 3, m)
    t = np.concatenate([rng.integers(0, 560, n).astype(float), starts, ends, [np.nan]])
    thread = rng.integers(0, 4, len(t))
    expect = np.zeros(len(t), dtype=bool)
    for s, e, th in zip(starts, ends, threads):
        expect |= (t >= s) & (t <= e) & (thread == th)
    assert inside_any(t, thread, starts, ends, threads).tolist() == expect.tolist()


def test_optimizer_kernels_equal_the_plain_definition():
    """Kernels launched inside an `Optimizer.step#` annotation on the real trace: the sorted search against a
    pass per annotation."""
    from conftest import trace_path

    from gpucheckup.analysis.one_trace.gpu import kernels
    from gpucheckup.trace.tables import USER_ANNOTATION

    trace = read_trace(trace_path("launch_bound_stacks"))
    host, rows = trace.host, launches.launch_rows(trace)
    ann = [a for a in np.flatnonzero(host.cat == USER_ANNOTATION).tolist()
           if trace.names[host.name[a]].startswith("Optimizer.step#")]
    assert ann
    ok = rows >= 0
    expect = np.zeros(len(rows), dtype=bool)
    for a in ann:
        expect[ok] |= ((host.start[rows[ok]] >= host.start[a]) & (host.start[rows[ok]] <= host.end[a])
                       & (host.tid[rows[ok]] == host.tid[a]))
    got = kernels._launched_in_optimizer(trace, rows)
    assert got.any() and got.tolist() == expect.tolist()


def test_kernels_started_in_optimizer_equal_a_pass_per_span():
    """Without launch calls, kernels that started in an optimizer span after their device caught up: the sorted
    search against a pass over all rows per span (the plain definition), on the real CUPTI traces and with the
    spans shifted so that they start inside and before gaps."""
    from test_light_cupti import H200_LIGHT

    from gpucheckup.analysis.one_trace.gpu import kernels

    def plain(t, rows, span_lo, span_hi):
        out = np.zeros(len(rows), dtype=bool)
        starts = t.gpu.start[rows]
        for dev in np.unique(t.gpu.device[rows]).tolist():
            on = np.flatnonzero((t.gpu.device == dev) & np.isfinite(t.gpu.start) & np.isfinite(t.gpu.end))
            bs, be = kernels._busy_spans(t.gpu.start[on], t.gpu.end[on])
            gs, ge = be[:-1], bs[1:]
            long = ge - gs >= kernels.CAUGHT_UP_US
            gs, ge = gs[long], ge[long]
            mine = t.gpu.device[rows] == dev
            for lo, hi in zip(span_lo.tolist(), span_hi.tolist()):
                if len(bs) == 0 or lo < bs[0]:
                    continue
                j = np.searchsorted(ge, lo, side="right")
                if j < len(gs) and gs[j] < hi:
                    out |= mine & (starts >= max(gs[j], lo)) & (starts <= hi)
        return out

    checked = 0
    for name in ("launch_bound_cupti", "gpu_bound_cupti"):
        t = read_trace(H200_LIGHT / name / "traces" / "trace.json.gz")
        rows = np.arange(len(t.gpu.start))
        lo, hi, tid = kernels.optimizer_rows(t)
        for shift in (0.0, -40.0, 25.0):
            s, h = lo + shift, hi + shift
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(kernels, "optimizer_rows", lambda trace, s=s, h=h, tid=tid: (s, h, tid))
                got = kernels._started_in_optimizer(t, rows)
            expect = plain(t, rows, s, h)
            assert got.tolist() == expect.tolist(), (name, shift)
            checked += int(expect.sum())
    assert checked > 0


@pytest.mark.parametrize("seed", range(4))
def test_pair_ids_rank_pairs_in_their_order(seed):
    """A dense id per (a, b) pair, numbered in (a, b) order (callers rely on it: the first thread wins ties),
    against each pair's place in the sorted distinct pairs; few threads, many pairs (more than a sample of the
    rows holds), extreme ints (no single key fits: a sort of both), unsigned, one row, none."""
    from gpucheckup.analysis.groups import pair_ids

    rng = np.random.default_rng(seed)
    n = 20_000
    cases = [(rng.choice([7, -1, 1234567], n), rng.choice([1234590, 140234567890, 7, -2], n)),
             (rng.integers(-50, 50, n), rng.integers(0, 300, n)),
             (rng.choice([-(2**62), 2**62], 300), rng.choice([-(2**62), 0, 2**62 + 5], 300)),
             (rng.integers(0, 5, 100).astype(np.uint64), rng.integers(0, 3, 100).astype(np.uint32)),
             (np.array([3]), np.array([-4])), (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))]
    for a, b in cases:
        pairs = list(zip(a.tolist(), b.tolist()))
        rank = {p: i for i, p in enumerate(sorted(set(pairs)))}
        assert pair_ids(a, b).tolist() == [rank[p] for p in pairs]


@pytest.mark.parametrize("seed", range(4))
def test_latest_optimizer_span_start_equals_a_pass_over_every_span(seed):
    """The fused-optimizer edit's span search (whatif.edits._latest_span_start): the latest start among a thread's
    spans holding a time, against the plain definition (a mask over every span: the pass per step it replaced);
    nested, overlapping, touching, unknown (nan) ends and starts, several threads, times at the ends exactly."""
    from gpucheckup.whatif.edits import _latest_span_start, _span_index

    rng = np.random.default_rng(seed)
    n = 300
    lo = np.round(rng.uniform(0, 1000, n), 1)
    hi = lo + np.round(rng.choice([0.0, 0.5, 3.0, 40.0, 400.0], n), 1)
    hi[rng.random(n) < 0.05] = np.nan
    lo[rng.random(n) < 0.03] = np.nan
    tids = rng.choice([11, 12, -3], n)
    index = _span_index((lo, hi, tids))
    times = np.concatenate([rng.uniform(-10, 1500, 400), lo[:50], hi[:50]])
    for tid in (11, 12, -3, 99):
        for t in times.tolist():
            mine = np.flatnonzero((tids == tid) & (lo <= t) & (hi >= t))
            want = float(lo[mine].max()) if len(mine) else None
            assert _latest_span_start(index, np.int64(tid), t) == want

"""Analyses rewritten for speed give what their plain definitions give, on every real trace: the many-row
sweeps against the one-row function they stand for (independent of the sweep's stack and its pruning)."""

from __future__ import annotations

import numpy as np
import pytest

from test_reader_equivalence import real_traces
from gpucheckup.analysis import host_calls, launches, syncs
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

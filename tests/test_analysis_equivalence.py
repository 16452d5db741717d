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

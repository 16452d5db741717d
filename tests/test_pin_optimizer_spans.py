"""The optimizer's own span (analysis/one_trace/host/optimizer_spans.py; docs/metrics.md "optimizer's own span") on a
small synthetic trace whose spans are worked out by hand from the definition: each `Optimizer.step#` range from the
end of the last closure work starting inside it (an `Optimizer.closure#` range, or a backward operator of the same
process on any thread) to the range's end; `Optimizer.zero_grad#` ranges only when asked for."""

from __future__ import annotations

import pytest

from conftest import write_trace
from gpucheckup.analysis.one_trace.host.optimizer_spans import optimizer_rows
from gpucheckup.trace import read_trace


def ev(cat, name, ts, dur, tid=1, pid=1):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": {}}


BACKWARD = "autograd::engine::evaluate_function: AddmmBackward0"


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    events = [
        ev("user_annotation", "ProfilerStep#1", 0, 20000),
        ev("user_annotation", "Optimizer.zero_grad#SGD.zero_grad", 100, 200),       # [100, 300]
        # a backward operator that starts before the first range: not the closure's
        ev("cpu_op", BACKWARD, 900, 300, tid=2),                                     # [900, 1200]
        # range 1 [1000, 5000]: a closure [1100, 2000], then the backward on autograd's thread [2100, 3000]
        ev("user_annotation", "Optimizer.step#SGD.step", 1000, 4000),
        ev("user_annotation", "Optimizer.closure#SGD.step", 1100, 900),
        ev("cpu_op", BACKWARD, 2100, 900, tid=2),
        # range 2 [6000, 7000]: no closure work of its process (process 2's backward [6200, 6500] is not): the whole
        # range
        ev("user_annotation", "Optimizer.step#SGD.step", 6000, 1000),
        ev("cpu_op", BACKWARD, 6200, 300, tid=3, pid=2),
        # range 3 [8000, 9000]: a closure running past its end leaves an empty span [9000, 9000]
        ev("user_annotation", "Optimizer.step#SGD.step", 8000, 1000),
        ev("user_annotation", "Optimizer.closure#SGD.step", 8100, 1500),
        # range 4 [10000, 12000], another process: its own backward [10500, 11000] cuts it; process 1's backward
        # [11200, 11500] inside the same interval does not
        ev("user_annotation", "Optimizer.step#SGD.step", 10000, 2000, pid=2),
        ev("cpu_op", BACKWARD, 10500, 500, tid=3, pid=2),
        ev("cpu_op", BACKWARD, 11200, 300, tid=2),
    ]
    return read_trace(write_trace(tmp_path_factory.mktemp("opt") / "t.json", events))


def spans(trace, *zero_grad):
    lo, hi, _ = optimizer_rows(trace, *zero_grad)  # the default as callers use it, or the flag given
    return sorted(zip(lo.tolist(), hi.tolist()))


def test_each_range_starts_after_its_last_closure_work(trace):
    # relative to the trace's first event at 0 (the reader keeps microseconds)
    assert spans(trace) == [(3000.0, 5000.0), (6000.0, 7000.0), (9000.0, 9000.0), (11000.0, 12000.0)]


def test_zero_grad_ranges_only_when_asked_for(trace):
    # the default leaves the zero_grad range out (the kernel categories and the fused optimizer's saving read it)
    assert (100.0, 300.0) not in spans(trace)
    assert spans(trace, True) == [(100.0, 300.0), (3000.0, 5000.0), (6000.0, 7000.0), (9000.0, 9000.0),
                                            (11000.0, 12000.0)]


def test_only_the_annotation_is_an_optimizer_range(tmp_path):
    # torch's profiler marks the step with a user annotation; an operator and a Python function that happen to carry
    # the same name (before and after it in category order) are no range: the one span is the annotation's [1000, 2000];
    # likewise only autograd's backward operator is closure work, not a Python function carrying its name
    events = [ev("user_annotation", "ProfilerStep#1", 0, 5000),
              ev("cpu_op", "Optimizer.step#SGD.step", 200, 300),
              ev("user_annotation", "Optimizer.step#SGD.step", 1000, 1000),
              ev("python_function", BACKWARD, 1200, 300),
              ev("python_function", "Optimizer.step#SGD.step", 3000, 500)]
    tr = read_trace(write_trace(tmp_path / "t.json", events))
    assert spans(tr) == [(1000.0, 2000.0)]


def test_a_process_with_one_closure_call_is_cut_after_it(tmp_path):
    # one range [1000, 5000] and one closure [1100, 2000] in it, the process's only closure work: the span [2000, 5000]
    events = [ev("user_annotation", "ProfilerStep#1", 0, 6000),
              ev("user_annotation", "Optimizer.step#SGD.step", 1000, 4000),
              ev("user_annotation", "Optimizer.closure#SGD.step", 1100, 900)]
    tr = read_trace(write_trace(tmp_path / "t.json", events))
    assert spans(tr) == [(2000.0, 5000.0)]

"""A large trace's what-if edits replayed on two cores (diagnosis/savings.py with trace/child.py's `each` mode):
the child's results arrive one by one, a child that fails ends its results, and the predictions are those a
replay in one process gives, whichever process replayed each edit."""

from __future__ import annotations

import os
import time

import pytest

from conftest import trace_path
from gpucheckup.analysis import whatif
from gpucheckup.analysis.checkup import analyze
from gpucheckup.analysis.mfu import MfuInputs
from gpucheckup.diagnosis import savings
from gpucheckup.trace import child
from gpucheckup.trace.reader import read_trace


def _three_slowly():
    for i in range(3):
        time.sleep(0.05)
        yield {"edit": i, "saving": [i] * 3}


def _one_then_fail():
    yield "first"
    raise ValueError("the edit failed")


def _all_arrived(c: child.Child, timeout: float = 30.0) -> list:
    """Everything a child sends, polling as replay_edits does, until it has sent its last."""
    got, end = [], time.monotonic() + timeout
    while c.fd >= 0 and time.monotonic() < end:
        got += c.arrived()
        time.sleep(0.01)
    return got


def test_each_result_arrives_as_the_child_sends_it():
    c = child.start(_three_slowly, each=True)
    assert c is not None
    assert c.arrived() == []  # nothing sent yet: no waiting
    assert _all_arrived(c) == [{"edit": i, "saving": [i] * 3} for i in range(3)]
    assert c.fd < 0 and c.arrived() == []  # the end of its results closes it


def test_a_child_that_fails_ends_its_results_after_those_it_sent():
    c = child.start(_one_then_fail, each=True)
    assert _all_arrived(c) == ["first"]


@pytest.fixture(scope="module")
def analysis():
    return analyze(read_trace(trace_path("launch_bound")), MfuInputs())


def _forks(monkeypatch, ok: bool = True) -> list:
    """Let every graph fork (the small fixture is under PARALLEL_REPLAY_WORK) on a machine with idle cores;
    the list collects the children started."""
    started = []
    real = child.start

    def start(fn, each=False):
        c = real(fn, each) if ok else None
        started.append(c)
        return c

    monkeypatch.setattr(savings, "PARALLEL_REPLAY_WORK", 0)
    monkeypatch.setattr(savings.parallel, "cores", lambda: 2)
    monkeypatch.setattr(savings.parallel, "idle_cores", lambda: 2.0)
    monkeypatch.setattr(child, "start", start)
    return started


def _keys(p: savings.Predictions) -> set[str]:
    return {e.key for e in p.pending[3]}


def test_the_childs_replays_are_the_ones_this_process_makes(analysis, monkeypatch):
    serial = savings.predict(analysis)
    keys = _keys(serial)
    assert len({(e.replay, e.replay_params) for e in serial.pending[3]}) >= 2
    serial.replay_edits(keys)
    started = _forks(monkeypatch)
    forked = savings.predict(analysis, fork=True)
    assert len(started) == 1 and forked.helper is started[0]
    os.waitpid(forked.helper.pid, 0)  # it has replayed every edit: all its results wait in the pipe

    def not_here(*args, **kwargs):
        raise AssertionError("replayed in this process although the child had sent it")

    monkeypatch.setattr(whatif, "predict", not_here)
    forked.replay_edits(keys)
    assert forked.by_key == serial.by_key and forked.note == serial.note == ""
    assert set(forked.by_key) == keys and forked.helper is None


def test_the_edit_the_child_is_replaying_is_waited_for_the_others_replayed_here(analysis, monkeypatch):
    serial = savings.predict(analysis)
    keys = _keys(serial)
    n = len({(e.replay, e.replay_params) for e in serial.pending[3]})
    serial.replay_edits(keys)
    real = whatif.predict

    def slowly(*args, **kwargs):  # the child's replays: one second each, so it is on the last edit throughout
        time.sleep(1.0)
        return real(*args, **kwargs)

    _forks(monkeypatch)
    monkeypatch.setattr(whatif, "predict", slowly)
    forked = savings.predict(analysis, fork=True)
    here = []

    def counted(*args, **kwargs):
        here.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(whatif, "predict", counted)
    forked.replay_edits(keys)
    assert forked.by_key == serial.by_key and n >= 2
    assert len(here) == n - 1  # every edit but the child's first (the catalogue's last), which it was replaying


def test_edits_the_child_has_not_sent_are_replayed_here(analysis, monkeypatch):
    serial = savings.predict(analysis)
    keys = _keys(serial)
    serial.replay_edits(keys)
    _forks(monkeypatch, ok=False)  # no child could start
    alone = savings.predict(analysis, fork=True)
    assert alone.helper is None
    alone.replay_edits(keys)
    assert alone.by_key == serial.by_key


def test_no_fork_for_a_small_graph_one_core_a_busy_machine_or_workers(analysis, monkeypatch):
    started = _forks(monkeypatch)
    monkeypatch.setattr(savings, "PARALLEL_REPLAY_WORK", 10**9)  # the fixture's graph is small
    savings.predict(analysis, fork=True)
    monkeypatch.setattr(savings, "PARALLEL_REPLAY_WORK", 0)
    monkeypatch.setattr(savings.parallel, "cores", lambda: 1)
    savings.predict(analysis, fork=True)
    monkeypatch.setattr(savings.parallel, "cores", lambda: 2)
    monkeypatch.setattr(savings.parallel, "idle_cores", lambda: 0.4)  # other work keeps the cores busy
    savings.predict(analysis, fork=True)
    monkeypatch.setattr(savings.parallel, "idle_cores", lambda: 2.0)
    savings.predict(analysis)  # a worker of a folder's check-up, or --jobs 1
    assert started == []
    p = savings.predict(analysis, fork=True)
    assert len(started) == 1
    p.replay_edits(set())  # none wanted: the child is stopped all the same
    assert p.helper is None and started[0].fd < 0

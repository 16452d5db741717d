"""A large trace's fixes predicted in a forked child (diagnosis/savings.predict(a, fork=True)) while the rules run:
the predictions, the notes and a failed edit's note are those of one process; the child's result is used when it
comes, and a child that fails or hangs leaves the work to this process."""

from __future__ import annotations

import time

import pytest

from conftest import trace_path
from gpucheckup.whatif import replay, edits as whatif
from gpucheckup.analysis.checkup import analyze
from gpucheckup.analysis.flops.mfu import MfuInputs
from gpucheckup.diagnosis import savings
from gpucheckup.trace import child
from gpucheckup.trace.reader import read_trace


@pytest.fixture(scope="module", params=[None, 12.0], ids=["per-event", "unprofiled-step"])
def analysis(request):
    """launch_bound, calibrated by the profiler's per-event cost, and by a given step without the profiler."""
    return analyze(read_trace(trace_path("launch_bound")), MfuInputs(unprofiled_step_ms=request.param,
                                                                     unprofiled_from="test" if request.param else ""))


@pytest.fixture
def forks(monkeypatch):
    """Every trace forks (the fixture is under FORK_EVENTS) on a machine with idle cores; the children started."""
    started = []
    real = child.start

    def start(fn):
        c = real(fn)
        started.append(c)
        return c

    monkeypatch.setattr(savings, "FORK_EVENTS", 0)
    monkeypatch.setattr(savings.parallel, "cores", lambda: 2)
    monkeypatch.setattr(savings.parallel, "idle_cores", lambda: 2.0)
    monkeypatch.setattr(child, "start", start)
    return started


def _all_keys(a) -> set[str]:
    return {e.key for e in savings.CATALOGUE if e.replay and e.applies(a)}


def _serial(a, keys) -> savings.Predictions:
    p = savings.predict(a)
    p.replay_edits(keys)
    return p


def _not_here(*args, **kwargs):
    raise AssertionError("predicted in this process although the child sent its result")


def test_the_childs_predictions_are_this_process_s(analysis, forks, monkeypatch):
    keys = _all_keys(analysis)
    assert len(keys) >= 2
    serial = _serial(analysis, keys)
    p = savings.predict(analysis, fork=True)
    assert len(forks) == 1 and p.helper is forks[0] and p.pending[0] is None
    monkeypatch.setattr(whatif, "predict", _not_here)  # this process neither replays nor calibrates now
    monkeypatch.setattr(replay, "calibrate", _not_here)
    p.replay_edits(keys)
    assert p.by_key == serial.by_key and set(p.by_key) == keys
    assert (p.note, p.host_scale) == (serial.note, serial.host_scale) and p.helper is None


def test_only_the_asked_keys_are_kept(analysis, forks):
    keys = set(sorted(_all_keys(analysis))[:1])
    p = savings.predict(analysis, fork=True)
    p.replay_edits(keys)
    assert p.by_key == _serial(analysis, keys).by_key and set(p.by_key) == keys


def test_an_edit_that_cannot_be_replayed_says_so_as_in_one_process(analysis, forks, monkeypatch):
    real = whatif.predict
    broken = sorted({e.replay for e in savings.CATALOGUE if e.replay and e.applies(analysis)},
                    key=lambda f: f.__name__)[0]

    def fails_once(g, edit, before, **params):
        if edit is broken:
            raise ValueError("an edit that breaks")
        return real(g, edit, before, **params)

    monkeypatch.setattr(whatif, "predict", fails_once)  # the child inherits it
    keys = _all_keys(analysis)
    serial = _serial(analysis, keys)
    assert serial.by_key == {} and "ValueError: an edit that breaks" in serial.note
    p = savings.predict(analysis, fork=True)
    p.replay_edits(keys)
    assert (p.by_key, p.note) == (serial.by_key, serial.note)
    others = {e.key for e in savings.CATALOGUE if e.replay and e.replay != broken and e.applies(analysis)}
    if others:  # the broken edit not asked for: the others' predictions, no note (the child replayed it anyway)
        p = savings.predict(analysis, fork=True)
        p.replay_edits(others)
        assert p.by_key == _serial(analysis, others).by_key and p.note == ""


def _fails(a, wanted):
    raise RuntimeError("the child failed")


def _hangs(a, wanted):
    time.sleep(600)


@pytest.mark.parametrize("work", [_fails, _hangs])
def test_a_child_that_fails_or_hangs_leaves_the_work_here(analysis, forks, monkeypatch, work):
    keys = _all_keys(analysis)
    serial = _serial(analysis, keys)
    monkeypatch.setattr(savings, "_calibrated_and_replayed", work)
    monkeypatch.setattr(savings, "CHILD_WAIT_S", 0.5)
    t = time.monotonic()
    p = savings.predict(analysis, fork=True)
    p.replay_edits(keys)
    assert (p.by_key, p.note, p.host_scale) == (serial.by_key, serial.note, serial.host_scale)
    assert time.monotonic() - t < 30 and len(forks) == 1
    child._reap(0)  # the hung child was killed: it can be reaped at once
    assert child._unreaped == []


def test_no_fork_for_a_small_trace_one_core_a_busy_machine_or_a_worker(analysis, forks, monkeypatch):
    monkeypatch.setattr(savings, "FORK_EVENTS", 10**9)  # the fixture: 14k events
    assert savings.predict(analysis, fork=True).helper is None
    monkeypatch.setattr(savings, "FORK_EVENTS", 0)
    monkeypatch.setattr(savings.parallel, "cores", lambda: 1)
    assert savings.predict(analysis, fork=True).helper is None
    monkeypatch.setattr(savings.parallel, "cores", lambda: 2)
    monkeypatch.setattr(savings.parallel, "idle_cores", lambda: 0.4)  # other work keeps the cores busy
    assert savings.predict(analysis, fork=True).helper is None
    monkeypatch.setattr(savings.parallel, "idle_cores", lambda: 2.0)
    assert savings.predict(analysis).helper is None  # a folder's worker, or --jobs 1
    assert forks == []

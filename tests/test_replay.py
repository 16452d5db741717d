"""Replay (whatif/replay.py): the unchanged graph gives back every fixture's step times, the
profiler calibration reaches the unprofiled step, and the graph's dependencies respond the way
the mechanism says."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

from conftest import DEMO, REPO, fixtures_dir
from gpucheckup.whatif import replay
from gpucheckup.trace.reader import read_trace


def _all_traces() -> list[Path]:
    found = sorted(DEMO.glob("*/trace.json.gz")) + sorted((REPO / "tests" / "data" / "h200").glob("**/*.json.gz"))
    shared = fixtures_dir()
    if shared is not None:
        found += sorted(shared.glob("*/trace.json.gz"))
    return found


def _meta(path: Path) -> dict:
    for d in (path.parent, path.parent.parent):
        if (d / "meta.json").exists():
            return json.loads((d / "meta.json").read_text())
    return {}


@lru_cache(maxsize=None)
def _trace(path: str):
    return read_trace(path)


@pytest.mark.parametrize("path", _all_traces(), ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}")
def test_unchanged_replay_reproduces_each_step(path):
    trace = _trace(str(path))
    g = replay.build(trace)
    r = replay.replay(g)
    measured = g.steps.duration
    assert len(r.duration) == len(measured)
    # within 5% of each measured step (docs/metrics.md), written as a number: a looser REPRODUCE_TOLERANCE in the
    # module must not loosen the test
    assert np.all(np.abs(r.duration / measured - 1) <= 0.05), (r.duration, measured)
    # every GPU op was placed, none before its launch
    assert not np.isnan(r.op_start).any()
    linked = g.g_launch >= 0
    assert np.all(r.op_start[linked] >= r.node_start[g.g_launch[linked]] - 1e-6)


@pytest.mark.parametrize("path", [p for p in _all_traces() if _meta(p).get("step_s_unprofiled")],
                         ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}")
def test_calibration_reaches_the_unprofiled_step(path):
    trace = _trace(str(path))
    g = replay.build(trace)
    unprofiled = _meta(path)["step_s_unprofiled"] * 1000
    c = replay.calibrate(g, unprofiled)
    if not g.steps.marked:  # one window over several steps: no per-step figure to compare
        assert not c.applied and c.host_scale == 1.0
        return
    assert 0.0 <= c.host_scale <= 1.0
    if not c.applied:  # the trace is within MIN_INFLATION_PCT of the unprofiled step already
        assert c.traced_ms <= unprofiled * 1.05
        return
    g.host_scale = 0.0
    gpu_floor = replay.replay(g).median_ms  # no host time at all: the GPU's own work and waits
    # the unprofiled step, or 1% above the all-GPU floor (docs/metrics.md), written as a number
    assert c.replayed_ms == pytest.approx(max(unprofiled, gpu_floor * 1.01), rel=0.05)
    assert c.replayed_ms <= c.traced_ms


def test_dependencies_respond_as_the_mechanism_says():
    """Doubling every kernel's time nearly doubles a GPU-bound step and barely moves a host-bound one."""
    def doubled(case):
        g = replay.build(_trace(str(DEMO / case / "trace.json.gz")))
        before = replay.replay(g).median_ms
        g.g_dur *= 2
        return replay.replay(g).median_ms / before

    assert doubled("compute_bound") > 1.9  # the GPU is busy ~99% of its step
    assert doubled("launch_bound") < 1.3  # the GPU is busy ~10%: the host sets the pace

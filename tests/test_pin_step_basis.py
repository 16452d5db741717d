"""The step time's basis (analysis/step_basis.py; docs/metrics.md "The step time") on figures worked out by hand:
total time over steps (unmeasured steps left out), a run's unprofiled steps before its late median, the slowest rank
of a job."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucheckup.analysis.step_basis import job_step, run_step, throughput_ms
from gpucheckup.document import Step, StepStats


def test_throughput_is_total_time_over_steps_not_a_median():
    # loader workers out of phase: 30 and 300 ms in turn run one step per (30 + 300) / 2 = 165 ms
    assert throughput_ms([30.0, 300.0, 30.0, 300.0]) == pytest.approx(165.0)
    # an unmeasured step (NaN) is left out, not counted as 0: (10 + 20) / 2
    assert throughput_ms([10.0, float("nan"), 20.0]) == pytest.approx(15.0)
    assert math.isnan(throughput_ms([])) and math.isnan(throughput_ms([float("nan")]))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.floats(0.001, 1e4), st.just(float("nan"))), max_size=30))
def test_throughput_matches_a_plain_loop(ms):
    seen = [x for x in ms if not math.isnan(x)]
    total = 0.0
    for x in seen:
        total += x
    got = throughput_ms(ms)
    assert (math.isnan(got) and not seen) or got == pytest.approx(total / len(seen), rel=1e-9)


def stats(**changed) -> StepStats:
    """A run's step figures: steps 6-40 unprofiled at 12.5 ms a step, the second half's median 99 ms."""
    base = dict(count=40, last_step=40, plain_count=35, profiled_steps=None, profiled_median_ms=None,
                instrumented_steps={}, total_s=1.0, late_median_ms=99.0, settled=True, steady_median_ms=None,
                steady_ms=None, warmup_steps=None, cv_pct=None, slow=None, profiler_overhead_pct=None,
                unprofiled_ms=12.5, unprofiled_steps=[6, 40], unprofiled_basis="35 steps")
    return StepStats(**{**base, **changed})


def test_a_runs_step_is_its_unprofiled_steps_throughput_first():
    s = run_step(stats(), "steps.csv")
    assert s.ms == 12.5
    assert s.basis == "steps.csv: total time over the run's unprofiled steps 6-40 (35 steps)"


def test_a_run_that_never_settled_gives_its_second_halfs_median():
    s = run_step(stats(unprofiled_ms=None), "steps.csv")
    assert s.ms == 99.0 and "median of the second half's steps" in s.basis
    assert run_step(stats(unprofiled_ms=None, late_median_ms=None), "steps.csv") is None
    assert run_step(None, "steps.csv") is None


def test_a_jobs_step_is_its_slowest_ranks():
    a, b, c = Step(ms=10.0, basis="median of 5"), Step(ms=12.0, basis="median of 4"), Step(ms=None, basis="none")
    s = job_step([("rank 0", a), ("rank 1", b), ("rank 2", c), ("rank 3", None)])
    # two ranks have a step: the slower, 12 ms, named with its basis
    assert s.ms == 12.0
    assert s.basis == "the slowest of 2 ranks, rank 1 (every rank waits for it): median of 4"
    # one rank with a step: its own, unchanged; none: None
    assert job_step([("rank 0", a), ("rank 1", c)]) is a
    assert job_step([("rank 0", c), ("rank 1", None)]) is None and job_step([]) is None

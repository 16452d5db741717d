"""The verdict's two rules at their thresholds (docs/metrics.md): the GPU-bound busy share (80%, inclusive) and
the replayed saving that names the bound (5% of the step, inclusive). The rule is arithmetic over the scores,
so the cases are built by hand and by hypothesis, and the expected verdict comes from a second, plain
implementation of the written rule below, not from diagnosis/verdict.py."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gpucheckup.diagnosis import verdict

CAUSES = ("input", "launch", "allocation", "other_host", "sync", "communication")
ORDER = ("input_bound", "launch_bound", "sync_bound", "communication_bound", "copy_bound")


def analysis(busy: float, copy: float = 0.0, comm: float = 0.0, profiler: bool = False, **idle: float):
    """A stand-in for TraceAnalysis with only the fields the verdict reads."""
    pct = {c: idle.get(c, 0.0) for c in CAUSES}
    return NS(busy_pct=busy, gaps_summary=NS(pct_of_step=pct), copies=NS(exposed_pct_of_step=copy),
              communication=NS(exposed_pct_of_step=comm), profiler=NS(applied=True) if profiler else None)


def rule(busy: float, copy: float, comm: float, idle: dict) -> str:
    """The rule from scores as docs/metrics.md states it, written a second time."""
    s = {"input_bound": idle["input"], "launch_bound": idle["launch"] + idle["allocation"] + idle["other_host"],
         "sync_bound": idle["sync"], "communication_bound": comm + idle["communication"], "copy_bound": copy}
    if busy >= 80:
        compute = max(busy - copy - comm, 0)
        pick = {"gpu_bound": compute, "copy_bound": copy, "communication_bound": s["communication_bound"]}
    else:
        pick = s
    return max(pick, key=lambda k: pick[k])


@pytest.mark.parametrize("busy,want", [(80.0, "gpu_bound"), (79.999, "sync_bound"), (100.0, "gpu_bound")])
def test_gpu_bound_from_80_percent_busy_inclusive(busy, want):
    a = analysis(busy, sync=100 - busy)
    got, reason, _ = verdict.primary(a)
    assert got == want
    if want == "gpu_bound":
        assert reason.startswith(f"GPU busy {busy:.1f}% of step time (>= 80%)") and "gpu bound explains" in reason
    else:
        assert reason.startswith("GPU busy only 80.0% of step time; sync bound explains 20.0%")


def test_busy_gpu_with_more_exposed_copies_than_compute_is_copy_bound():
    # busy 90: 50 of it exposed copies, 5 exposed communication; compute = 90 - 50 - 5 = 35
    got, reason, sc = verdict.primary(analysis(90.0, copy=50.0, comm=5.0, sync=10.0))
    assert got == "copy_bound" and "copy bound explains 50.0%" in reason
    assert sc["gpu_bound"] == pytest.approx(35.0) and sc["communication_bound"] == pytest.approx(5.0)


def test_busy_gpu_with_exposed_communication_plus_waits():
    # exposed comm 30 + 20 idle waiting on collectives = 50 < compute 85 - 30 = 55
    got, _, sc = verdict.primary(analysis(85.0, comm=30.0, communication=20.0))
    assert sc["communication_bound"] == pytest.approx(50.0) and got == "gpu_bound"
    got, _, _ = verdict.primary(analysis(85.0, comm=40.0, communication=20.0))  # 60 > 45
    assert got == "communication_bound"


def test_idle_gpu_never_gpu_bound_and_launch_sums_three_causes():
    # launch 10 + allocation 10 + other_host 10 = 30 beats input 25 and sync 29, though each part is smaller
    got, reason, sc = verdict.primary(analysis(5.0, input=25.0, launch=10.0, allocation=10.0, other_host=10.0,
                                               sync=29.0))
    assert got == "launch_bound" and sc["launch_bound"] == pytest.approx(30.0)
    assert reason == "GPU busy only 5.0% of step time; launch bound explains 30.0% of it"
    assert verdict.primary(analysis(5.0))[0] != "gpu_bound"  # nothing explains the step: still not gpu_bound


def test_compute_score_floors_at_zero():
    assert verdict.scores(analysis(10.0, copy=8.0, comm=7.0))["gpu_bound"] == 0.0


def test_reason_says_without_the_profiler_when_corrected():
    assert "of step time without the profiler (>= 80%)" in verdict.primary(analysis(90.0, profiler=True))[1]
    assert "without the profiler" not in verdict.primary(analysis(90.0))[1]
    assert "only 50.0% of step time without the profiler;" in verdict.primary(analysis(50.0, profiler=True,
                                                                                         sync=1.0))[1]


pcts = st.floats(0, 100, allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(busy=pcts, copy=st.floats(0, 40), comm=st.floats(0, 40), idle=st.fixed_dictionaries({c: pcts for c in CAUSES}))
def test_verdict_matches_the_written_rule(busy, copy, comm, idle):
    want = rule(busy, copy, comm, idle)
    s = verdict.scores(analysis(busy, copy, comm, **idle))
    top = sorted(s.values(), reverse=True)
    assume(top[0] - top[1] > 1e-9)  # no ties: the rule does not say which of two equal scores wins
    assert verdict.primary(analysis(busy, copy, comm, **idle))[0] == want


# ---- the rule from savings ----

def fix(key: str, saving_ms: float, step_ms: float = 100.0, predicted: bool = True, upper_bound: bool = False):
    """A stand-in for a catalogue Fix with a replayed prediction."""
    p = (NS(saving_ms=saving_ms, saving_pct=100 * saving_ms / step_ms, transform="t", upper_bound=upper_bound)
         if predicted else None)
    return NS(key=key, predicted=p)


def test_a_saving_of_exactly_5_percent_names_the_bound():
    assert verdict.from_savings([fix("pin_memory", 5.0)], 100.0)[0] == "copy_bound"
    assert verdict.from_savings([fix("pin_memory", 4.99)], 100.0) is None
    assert verdict.from_savings([fix("pin_memory", 9.99)], 100.0)[0] == "copy_bound"  # not a 10% threshold


def test_the_largest_saving_wins_and_ties_keep_the_first_offered():
    fixes = [fix("pin_memory", 6.0), fix("dataloader_workers", 30.0), fix("cuda_graph", 12.0)]
    got, reason = verdict.from_savings(fixes, 100.0)
    assert got == "input_bound"
    assert reason == ("of the fixes that remove one bottleneck, the one that saves the most in the replay addresses it: "
                      "dataloader_workers saves 30.00 "
                      "ms/step (30.0%) of the 100.00 ms step (t edit)")
    assert verdict.from_savings([fix("pin_memory", 7.0), fix("cuda_graph", 7.0)], 100.0)[0] == "copy_bound"
    assert verdict.from_savings([fix("cuda_graph", 7.0), fix("pin_memory", 7.0)], 100.0)[0] == "launch_bound"


def test_fixes_that_name_no_bound_or_have_no_prediction_do_not_count():
    fixes = [fix("larger_batch", 60.0), fix("torch_compile", 50.0), fix("dataloader_workers", 90.0, predicted=False),
             fix("pin_memory", 5.5)]
    assert verdict.from_savings(fixes, 100.0)[0] == "copy_bound"
    assert verdict.from_savings(fixes[:3], 100.0) is None
    assert verdict.from_savings([], 100.0) is None


def test_a_saving_that_is_only_an_upper_bound_names_no_verdict():
    # CUDA graphs replayed at 30% on a model whose forward reads the GPU on the host (graph breaks not modelled):
    # a bound, so the reads' estimated 20% names the verdict
    fixes = [fix("cuda_graph", 30.0, upper_bound=True), fix("no_host_reads", 20.0)]
    assert verdict.from_savings(fixes, 100.0)[0] == "sync_bound"
    assert verdict.from_savings(fixes[:1], 100.0) is None

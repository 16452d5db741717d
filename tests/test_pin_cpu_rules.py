"""The CPU-side check-up's rules (diagnosis/cpu_rules.py; docs/metrics.md "CPU-side check-up") on hand-built
profiles: each threshold at its boundary (DataLoader wait 10%, Python between operators 30%, operators' share of the
main thread 20%, all inclusive), each cost worked out by hand from the profile's figures, the costliest critical."""

from __future__ import annotations

import pytest

from gpucheckup.analysis.one_trace.host.cpu_profile import CpuProfile, ThreadRow
from gpucheckup.analysis.run_logs.environment import ThreadBudget
from gpucheckup.diagnosis.cpu_rules import cpu_findings
from gpucheckup.diagnosis.fixes import advised_workers

SINGLE = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
MULTI = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"


def profile(loader_ms=0.0, python_ms=0.0, busy_pct=50.0, span_ms=1000.0, steps=10, step_ms=None,
            iterators=(SINGLE,)) -> CpuProfile:
    """A 1000 ms span over 10 ProfilerStep windows (100 ms a step) with the figures the rules read."""
    main = ThreadRow(pid=1, tid=1, name="main", ops=10, busy_ms=busy_pct / 100 * span_ms, busy_pct=busy_pct)
    pct = (lambda ms: 100 * ms / span_ms) if span_ms else (lambda ms: 0.0)
    return CpuProfile(ops_count=10, self_ms=main.busy_ms, span_ms=span_ms, main_thread=main,
                      python_between_ms=python_ms, python_between_pct=pct(python_ms),
                      dataloader_ms=loader_ms, dataloader_pct=pct(loader_ms), steps=steps,
                      step_median_ms=span_ms / steps, top_ops=[], threads=[main], summary="",
                      python_outside_loader_ms=python_ms, loader_iterators=list(iterators), step_ms=step_ms)


def by_id(p, budget=None):
    return {f.id: f for f in cpu_findings(p, budget)}


@pytest.mark.parametrize("loader_ms, fires", [(99.9, False), (100.0, True)])
def test_input_pipeline_fires_from_a_tenth_of_the_span(loader_ms, fires):
    # 100 ms of a 1000 ms span is 10%: the threshold, inclusive
    assert ("input_pipeline" in by_id(profile(loader_ms=loader_ms))) is fires


def test_input_pipelines_cost_is_the_wait_per_step_and_its_fixes_are_capped_by_it():
    f = by_id(profile(loader_ms=200.0))["input_pipeline"]
    # 200 ms of waiting over 10 steps: 20 ms per step, 20% of the span
    assert f.cost_ms_per_step == pytest.approx(20.0) and f.cost_pct_of_step == pytest.approx(20.0)
    assert f.severity == "critical"  # the only finding is the costliest
    assert {x.key: x.saving_ms for x in f.fixes} == pytest.approx({"dataloader_workers": 20.0, "fast_storage": 20.0})
    assert "_SingleProcessDataLoaderIter.__next__" in f.evidence[1]
    # a loader with workers gets the raise-the-workers fix instead
    f = by_id(profile(loader_ms=200.0, iterators=(MULTI,)))["input_pipeline"]
    assert {x.key for x in f.fixes} == {"more_workers", "fast_storage"}


def test_the_cost_is_the_share_of_the_unprofiled_step_when_the_run_measured_it():
    # 200 ms of a 1000 ms span is 20%; of a 40 ms step measured without the profiler: 8 ms per step
    f = by_id(profile(loader_ms=200.0, step_ms=40.0))["input_pipeline"]
    assert f.cost_ms_per_step == pytest.approx(8.0)
    assert "40.00 ms step without the profiler" in f.evidence[0]


@pytest.mark.parametrize("python_ms, fires", [(299.9, False), (300.0, True)])
def test_python_overhead_fires_from_three_tenths_of_the_span(python_ms, fires):
    assert ("python_overhead" in by_id(profile(python_ms=python_ms))) is fires


def test_python_overheads_cost_and_fixes():
    f = by_id(profile(python_ms=400.0))["python_overhead"]
    # 400 ms over 10 steps: 40 ms per step, 40% of the span; both fixes save at most that
    assert f.cost_ms_per_step == pytest.approx(40.0) and f.cost_pct_of_step == pytest.approx(40.0)
    assert {x.key: x.saving_ms for x in f.fixes} == pytest.approx({"compile_cpu": 40.0, "python_off_loop": 40.0})
    assert "40.0% of the span" in f.evidence[0] and "busy 50.0% of the span" in f.evidence[1]


def test_an_empty_span_has_no_python_overhead():
    # Python time recorded but no span to share it over (a trace of zero length): no share, no finding, no error
    assert by_id(profile(python_ms=5.0, span_ms=0.0, busy_pct=0.0)) == {}


@pytest.mark.parametrize("busy_pct, fires", [(19.9, False), (20.0, True)])
def test_few_threads_fires_from_a_fifth_of_the_main_thread_busy(busy_pct, fires):
    budget = ThreadBudget(busy_ms_per_step=30.0, threads=1, cores_per_process=4)
    assert ("few_threads" in by_id(profile(busy_pct=busy_pct), budget)) is fires


def test_few_threads_costs_what_the_cores_could_take_off_the_operators():
    budget = ThreadBudget(busy_ms_per_step=30.0, threads=1, cores_per_process=4)
    f = by_id(profile(busy_pct=50.0), budget)["few_threads"]
    # 30 ms of operators per step on 1 thread of 4 usable cores: 30 x (1 - 1/4) = 22.5 ms, of a 100 ms step
    assert f.cost_ms_per_step == pytest.approx(22.5) and f.cost_pct_of_step == pytest.approx(22.5)
    assert f.title == "Operators run on 1 thread while 4 cores per process are usable"
    two = by_id(profile(busy_pct=50.0), ThreadBudget(30.0, 2, 4))["few_threads"]
    assert two.title.startswith("Operators run on 2 threads") and two.cost_ms_per_step == pytest.approx(15.0)
    # as many threads as cores: nothing to offer, no finding; no budget (a bare trace): no finding
    assert "few_threads" not in by_id(profile(busy_pct=50.0), ThreadBudget(30.0, 4, 4))
    assert "few_threads" not in by_id(profile(busy_pct=50.0))


def test_the_costliest_finding_is_critical_the_others_warnings():
    budget = ThreadBudget(busy_ms_per_step=30.0, threads=1, cores_per_process=4)  # 22.5 ms
    found = cpu_findings(profile(loader_ms=150.0, python_ms=350.0, busy_pct=50.0), budget)
    # python 35 ms, few_threads 22.5 ms, input 15 ms per step: in that order, the first critical
    assert [(f.id, f.severity) for f in found] == [("python_overhead", "critical"), ("few_threads", "warning"),
                                                  ("input_pipeline", "warning")]
    assert [f.cost_ms_per_step for f in found] == pytest.approx([35.0, 22.5, 15.0])


@pytest.mark.parametrize("loader_ms, workers", [(800.0, 4), (200.0, 1), (0.0, 1)])
def test_the_worker_advice_on_a_cpu_profile_names_at_least_one_worker(loader_ms, workers):
    # 10 steps of 100 ms: 800 ms of waiting is 80 ms loading a batch and 20 ms of the rest, ceil(80 / 20) = 4 workers;
    # 200 ms is 20 ms against 80 ms, ceil(0.25) = 1; a loader that never made the loop wait still gets one worker
    # (what `try dataloader_workers` starts from), never DataLoader(num_workers=0)
    assert advised_workers(profile(loader_ms=loader_ms)) == workers


def test_the_worker_fixs_how_names_the_count_and_its_reason():
    # 800 ms of waiting over 10 steps of 100 ms: 80 ms loading a batch, 20 ms the rest, ceil(80 / 20) = 4 workers
    f = by_id(profile(loader_ms=800.0))["input_pipeline"]
    how = {x.key: x.how for x in f.fixes}["dataloader_workers"]
    assert how.startswith("DataLoader(dataset, num_workers=4, persistent_workers=True): loading takes 80.0 ms a "
                          "batch in the training process and the rest of the step 20.0 ms, so 4 workers keep pace")
    assert "{" not in how  # no placeholder left unfilled

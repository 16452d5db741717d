"""Each rule's threshold at its boundary (diagnosis/rules.py; docs/metrics.md's rule table): a real H200 analysis
(compute_bound: busy, little idle) with one metric set exactly at the documented threshold, and just below it.
The step time is set to 100 ms so that a cost of x ms is x% of the step, exactly."""

from __future__ import annotations

import re
from functools import lru_cache

import pytest
from msgspec.structs import replace

from conftest import trace_path
from gpucheckup.analysis.checkup import analyze
from gpucheckup.analysis.one_trace.host.gap_causes import CAUSES, GapSummary
from gpucheckup.analysis.one_trace.window import Window
from gpucheckup.diagnosis import rules
from gpucheckup.trace import read_trace

STEP_MS = 100.0


@lru_cache(maxsize=None)
def base():
    a = analyze(read_trace(trace_path("compute_bound")))
    w = Window(STEP_MS, "test", STEP_MS, a.window.length_us, 1, a.window.steps)
    zero = {c: 0.0 for c in CAUSES}
    return replace(a, window=w, gaps_summary=GapSummary(dict(zero), dict(zero), dict(zero)),
                   copies=replace(a.copies, pageable_count=0, exposed_ms_per_step=0.0),
                   communication=replace(a.communication, exposed_ms_per_step=0.0),
                   dataloader=replace(a.dataloader, pct_of_step=0.0))


def idle(**ms):
    """The base analysis with these gap causes' idle ms per step (= percent of the 100 ms step)."""
    a = base()
    per = {c: ms.get(c, 0.0) for c in CAUSES}
    return replace(a, gaps_summary=GapSummary({c: 0.0 for c in CAUSES}, per, dict(per)))


# rule, gap causes it sums, threshold, critical threshold (None: one severity)
IDLE_RULES = [
    (rules.input_pipeline, ("input",), 5.0, 20.0),
    (rules.launch_overhead, ("launch", "other_host", "allocation"), 10.0, 30.0),
    (rules.synchronizations, ("sync",), 2.0, 15.0),
    (rules.allocations, ("allocation",), 2.0, None),
    (rules.gpu_side_gaps, ("queued",), 10.0, None),
    (rules.exposed_communication, ("communication",), 5.0, 20.0),
]


@pytest.mark.parametrize("rule,causes,thr,critical", IDLE_RULES, ids=lambda x: getattr(x, "__name__", None))
def test_idle_rules_fire_from_their_threshold_inclusive(rule, causes, thr, critical):
    n = len(causes)
    assert rule(idle(**{c: (thr - 0.01) / n for c in causes})) is None
    f = rule(idle(**{c: thr / n for c in causes}))
    assert f is not None and f.cost_ms_per_step == pytest.approx(thr) and f.cost_pct_of_step == pytest.approx(thr)
    assert f"{thr:g}%" in f.rule
    if critical is not None:
        assert f.severity == "warning"
        assert rule(idle(**{c: (critical - 0.01) / n for c in causes})).severity == "warning"
        assert rule(idle(**{c: critical / n for c in causes})).severity == "critical"
        assert rule(idle(**{c: (critical + 10) / n for c in causes})).severity == "critical"
    # one cause alone carries the sum (launch overhead: any of its three)
    if n > 1:
        for c in causes:
            assert rule(idle(**{c: thr})) is not None


def test_a_cost_never_exceeds_the_step():
    f = rules.launch_overhead(idle(launch=80.0, other_host=50.0))
    assert f.cost_ms_per_step == STEP_MS and f.cost_pct_of_step == 100.0


def test_input_rule_also_fires_on_dataloader_time_alone():
    a = base()
    assert rules.input_pipeline(replace(a, dataloader=replace(a.dataloader, pct_of_step=9.99))) is None
    f = rules.input_pipeline(replace(a, dataloader=replace(a.dataloader, pct_of_step=10.0)))
    assert f is not None and f.severity == "warning"


def test_exposed_copies_and_communication_kernels():
    a = base()
    assert rules.exposed_copies(replace(a, copies=replace(a.copies, exposed_ms_per_step=4.99))) is None
    assert rules.exposed_copies(replace(a, copies=replace(a.copies, exposed_ms_per_step=5.0))) is not None
    comm = replace(a.communication, exposed_ms_per_step=3.0)
    assert rules.exposed_communication(replace(idle(communication=1.99), communication=comm)) is None
    f = rules.exposed_communication(replace(idle(communication=2.0), communication=comm))  # 3 exposed + 2 waiting
    assert f.cost_ms_per_step == pytest.approx(5.0) and f.severity == "warning"


def test_pageable_copies_from_one_mb_per_step_and_warning_from_one_percent():
    a = base()

    def with_copies(count, mb, ms):
        return replace(a, copies=replace(a.copies, pageable_count=count, pageable_mb_per_step=mb,
                                         pageable_ms_per_step=ms))

    assert rules.pageable_copies(with_copies(3, 0.99, 5.0)) is None
    assert rules.pageable_copies(with_copies(0, 5.0, 5.0)) is None
    assert rules.pageable_copies(with_copies(3, 1.0, 0.99)).severity == "info"
    assert rules.pageable_copies(with_copies(3, 1.0, 1.0)).severity == "warning"
    # the evidence's pinned time: 50 MB per step at 25 GB/s (docs/metrics.md) is 50 / 25 = 2 ms per step
    f = rules.pageable_copies(with_copies(4, 50.0, 5.0))
    assert f.evidence[0].startswith("4 copies touch pageable host memory (50.0 MB, 5.00 ms per step)")
    assert f.evidence[1] == "the same bytes take 2.00 ms per step pinned at 25 GB/s"
    # where to look: the pageable copies only; the compute_bound trace has none (its 156 copies are device to
    # device), so the figures set by hand point at no event rather than at the device-to-device copies
    assert f.events == []


def test_exposed_copies_list_each_direction_from_the_raw_events():
    import independent as ind
    from conftest import raw_events

    a = base()
    f = rules.exposed_copies(replace(a, copies=replace(a.copies, exposed_ms_per_step=5.0)))
    doc = raw_events(trace_path("compute_bound"))
    windows = ind.step_windows(doc)
    lo, hi = windows[0][0], windows[-1][1]
    dtod = [e for e in doc["traceEvents"] if e.get("cat") == "gpu_memcpy" and lo <= e["ts"] <= hi]
    assert {e["name"] for e in dtod} == {"Memcpy DtoD (Device -> Device)"}
    mb = sum(e["args"]["bytes"] for e in dtod) / 1e6
    assert len(f.evidence) == 2  # the overall line, then one line per direction: here one
    assert f.evidence[1].startswith(f"DtoD: {len(dtod)} copies, {mb:.1f} MB")


@pytest.mark.parametrize("waiting_ms, line", [(0.0, False), (2.0, True)])
def test_exposed_communication_says_the_host_waits_only_when_it_does(waiting_ms, line):
    a = base()
    comm = replace(a.communication, exposed_ms_per_step=6.0)
    f = rules.exposed_communication(replace(idle(communication=waiting_ms), communication=comm))
    said = [x for x in f.evidence if "while the host waits on collectives" in x]
    assert said == (["the GPU idles 2.00 ms per step while the host waits on collectives"] if line else [])


@pytest.mark.parametrize("count,cv,fires", [(3, 20.0, True), (3, 19.99, False), (2, 50.0, False), (10, 20.0, True)])
def test_unstable_steps_from_20_percent_cv_over_3_steps(count, cv, fires):
    a = base()
    f = rules.unstable_steps(replace(a, step_summary=replace(a.step_summary, count=count, cv_pct=cv)))
    assert (f is not None) == fires
    if fires:
        assert f.severity == "info" and f.cost_ms_per_step == 0.0


@pytest.mark.parametrize("cat_pct,fires", [(15.0, True), (14.99, False)])
def test_data_movement_from_15_percent_of_kernel_time(cat_pct, fires):
    a = base()
    k = replace(a.kernels, categories_pct={**a.kernels.categories_pct, "data_movement": cat_pct})
    assert (rules.data_movement(replace(a, kernels=k)) is not None) == fires


def test_code_lines_evidence_keeps_lines_of_half_a_percent_or_more():
    # weights in us: 996 + 4 on lines, 0 off them: the 0.4% line is left out; shares of the total
    assert rules._by_line({"a.py:1": 996.0, "b.py:2": 4.0}, "idle") == ["idle by line of your code: a.py:1 (100%)"]
    assert rules._by_line({"a.py:1": 0.3, "b.py:2": 0.2}, "idle") == [
        "idle by line of your code: a.py:1 (60%), b.py:2 (40%)"]
    assert rules._by_line({None: 5.0}, "idle") == [
        "idle: none under a Python frame (autograd's backward thread has none)"]
    assert rules._by_line({}, "idle") == []


# ---- evidence lines on real traces, against figures computed here from the raw events ----

def test_gpu_bound_evidence_gives_the_median_launch_delay():
    import statistics

    import independent as ind
    from conftest import raw_events
    from gpucheckup.checkup.pipeline import check_path

    doc = raw_events(trace_path("compute_bound"))
    windows = ind.step_windows(doc)
    lo, hi = windows[0][0], windows[-1][1]
    ev = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    launch = {e["args"]["correlation"]: e["ts"] for e in ev
              if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    delays = [e["ts"] - launch[e["args"]["correlation"]] for e in ev
              if e.get("cat") == "kernel" and lo <= e["ts"] <= hi and e["args"].get("correlation") in launch]
    med = statistics.median(delays)
    assert med > 1000  # queued: over a millisecond
    f = {x.id: x for x in check_path(trace_path("compute_bound"))[0].diagnosis.findings}["gpu_bound"]
    assert f"median launch-to-start delay {med / 1000:.1f} ms: kernels wait in the queue behind earlier work" in \
        f.evidence


def test_with_python_stacks_the_idle_and_the_launches_are_put_on_lines_of_code():
    from gpucheckup.checkup.pipeline import check_path

    f = {x.id: x for x in check_path(trace_path("launch_bound_stacks"))[0].diagnosis.findings}["launch_overhead"]
    for what in ("the idle time", "kernel launches"):
        (line,) = [e for e in f.evidence if e.startswith(f"{what} by line of your code: ")]
        shares = [int(x) for x in re.findall(r"\((\d+)%\)", line)]
        rest = int(re.search(r"; (\d+)% on threads with no Python frame", line)[1])
        assert shares and 95 <= sum(shares) + rest <= 101, line  # rounded shares of one whole


def test_data_movement_events_are_data_movement_kernels():
    from gpucheckup.analysis.one_trace.gpu.kernels import categorize
    from gpucheckup.checkup.pipeline import check_path

    f = {x.id: x for x in check_path(trace_path("moe_seed"))[0].diagnosis.findings}["data_movement"]
    assert f.events and all(categorize(e.name) == "data_movement" for e in f.events)


def test_the_profiler_finding_mentions_collectives_only_when_they_waited():
    import json

    from conftest import DEMO
    from gpucheckup.analysis.flops.mfu import MfuInputs

    case = DEMO / "launch_bound"
    unprofiled = json.loads((case / "meta.json").read_text())["step_s_unprofiled"] * 1000
    a = analyze(read_trace(case / "trace.json.gz"), MfuInputs(unprofiled_step_ms=unprofiled))
    f = rules.profiler_overhead(a)
    assert f is not None and a.profiler.comm_wait_ms == 0
    assert not any("collective" in e for e in f.evidence)
    assert f"against {unprofiled:.2f} ms without the profiler" in f.evidence[0]


def test_low_mfu_names_the_gemms_dtype():
    # moe_seed: the first article's MoE layer in fp32 (README's table): every GEMM kernel is fp32
    from gpucheckup.checkup.pipeline import check_path

    f = {x.id: x for x in check_path(trace_path("moe_seed"))[0].diagnosis.findings}["low_mfu"]
    assert "GEMM kernel time by dtype: fp32 100%" in f.evidence and f.severity == "warning"


def test_lock_contention_costs_the_slow_calls_host_time(tmp_path):
    # one 10 ms step; one launch takes 800 us while another thread allocates: 800 us of the 10 ms window on the
    # host, 0.8 ms of the 10 ms step
    from conftest import write_trace

    def e(cat, name, ts, dur, tid=1, **args):
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}

    events, t = [e("user_annotation", "ProfilerStep#1", 0, 10_000)], 10.0
    for corr in range(1, 41):
        events += [e("cuda_runtime", "cudaLaunchKernel", t, 5, correlation=corr),
                   {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": t + 6, "dur": 100,
                    "args": {"device": 0, "stream": 7, "correlation": corr}}]
        t += 110
    events += [e("cuda_runtime", "cudaHostAlloc", t - 50, 900, tid=2), e("cuda_runtime", "cudaLaunchKernel", t, 800,
                                                                         correlation=41),
               {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": t + 801, "dur": 100,
                "args": {"device": 0, "stream": 7, "correlation": 41}}]
    f = rules.lock_contention(analyze(read_trace(write_trace(tmp_path / "t.json", events))))
    assert f.cost_ms_per_step == pytest.approx(0.8) and f.cost_pct_of_step == pytest.approx(8.0)


@pytest.mark.parametrize("delay_us, meaning", [
    (49.9, "starved rather than queued"),
    (50.0, "between starved (< 50 us) and queued (> 1 ms)"),
    (1000.0, "between starved (< 50 us) and queued (> 1 ms)"),
    (1000.1, "most kernels wait in a queue"),
])
def test_launch_delay_reads_starved_under_50_us_and_queued_over_1_ms(delay_us, meaning):
    # docs/metrics.md: a median launch delay under 50 us is starved, over 1 ms queued (both exclusive)
    a = idle(launch=20.0)
    a = replace(a, kernels=replace(a.kernels, launch_delay_median_us=delay_us))
    line = next(x for x in rules.launch_overhead(a).evidence if x.startswith("median launch-to-start delay"))
    assert line.startswith(f"median launch-to-start delay {delay_us:.1f} us: ") and meaning in line
    queued = [x for x in rules.gpu_bound_finding(a, 90.0).evidence if "kernels wait in the queue" in x]
    assert queued == ([f"median launch-to-start delay {delay_us / 1000:.1f} ms: kernels wait in the queue behind "
                       "earlier work"] if delay_us > 1000 else [])

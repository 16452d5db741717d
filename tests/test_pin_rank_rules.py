"""The rules over ranks side by side (diagnosis/rank_rules.py; docs/metrics.md "Ranks") on hand-built cross-rank
figures: the straggler's cause named from half its lateness (inclusive), its severity from 20% of the step, the slow
link below 25% of the link's bandwidth over collectives of 1 MiB or more, and a waiting rank's communication finding
and scores with the wait taken out. The step is 100 ms so that ms and percent coincide."""

from __future__ import annotations

import pytest

from gpucheckup.analysis.job.ranks import CollectiveRow, RankRow, RanksAnalysis
from gpucheckup.diagnosis.findings import Diagnosis, Finding, Fix
from gpucheckup.diagnosis.rank_rules import discount_wait, drop_comm_tuning, slow_link_finding, straggler_finding

MIB = 1 << 20


def row(rank, step_ms=100.0):
    return RankRow(rank=rank, step_ms=step_ms, compute_ms=50.0, transfer_ms=5.0, wait_ms=10.0, exposed_wait_ms=8.0,
                   idle_ms=5.0, late_ms=0.0, last_pct=0.0, offset_us=0.0)


def ranks(waited_ms=10.0, late_ms=8.0, straggler=1, collectives=(), on_gpu=True, slowest=100.0):
    return RanksAnalysis(ranks=[0, 1], on_gpu=on_gpu, steps=5, matched=20, unmatched=0,
                         table=[row(0, 90.0), row(1, slowest)], collectives=list(collectives), busbw_gb_s=None,
                         straggler=straggler, straggler_late_ms=late_ms, straggler_last_pct=95.0, waited_ms=waited_ms)


@pytest.mark.parametrize("excess_ms, named", [(3.99, False), (4.0, True)])
def test_the_cause_is_named_from_half_the_lateness(excess_ms, named):
    # 8 ms late per step: an excess of 4 ms (half) names the cause, 3.99 does not
    f = straggler_finding(ranks(late_ms=8.0), "input", excess_ms, {"input": excess_ms}, None)
    assert ("waiting for its DataLoader" in f.title) is named
    assert ("with no single cause" in f.title) is not named
    assert [x.key for x in f.fixes] == (["dataloader_workers"] if named else [""])


@pytest.mark.parametrize("cause, fix_words, title_words", [
    ("sync", "host-GPU synchronizations", "in host-GPU synchronizations"),
    ("outside_ops", "extra host work", "in host work between operators (Python, launches)"),
    ("gpu_compute", "Balance the work", "in GPU compute"),
])
def test_each_named_cause_gets_its_fix(cause, fix_words, title_words):
    f = straggler_finding(ranks(), cause, 8.0, {cause: 8.0}, None)
    assert fix_words in f.fixes[0].action and title_words in f.title
    assert f.fixes[0].saving_ms == 10.0  # the others' wait per step
    cpu = straggler_finding(ranks(on_gpu=False), cause, 8.0, {cause: 8.0}, None)
    assert "launches" not in cpu.title and "GPU compute" not in cpu.title  # a CPU job's wording


@pytest.mark.parametrize("waited_ms, severity", [(19.99, "warning"), (20.0, "critical")])
def test_the_straggler_is_critical_from_a_fifth_of_the_slowest_step(waited_ms, severity):
    # the slowest rank's step is 100 ms: a 20 ms wait is 20%
    f = straggler_finding(ranks(waited_ms=waited_ms), "input", 8.0, {"input": 8.0}, "rank 1's GPU throttled")
    assert f.severity == severity
    assert f.cost_ms_per_step == waited_ms and f.cost_pct_of_step == pytest.approx(waited_ms)
    assert f.evidence[-1] == "rank 1's GPU throttled"
    assert f"they wait {waited_ms:.2f} ms per step" in f.evidence[0]
    assert f"beside it ({waited_ms:.0f}% of the step)" in f.evidence[0]  # of the slowest rank's 100 ms step


def test_no_straggler_no_finding():
    assert straggler_finding(ranks(straggler=None), "input", 8.0, {}, None) is None


def coll(nbytes, busbw, transfer_ms):
    return CollectiveRow(name="nccl:all_reduce", bytes=nbytes, count=5, transfer_ms=transfer_ms, wait_ms=0.0,
                         busbw_gb_s=busbw, group_size=2)


def test_the_slow_link_is_the_byte_weighted_busbw_below_a_quarter_of_the_link():
    # 1 MiB at 20 GB/s for 3 ms and 4 MiB at 40 GB/s for 1 ms: (20 x 3 + 40 x 1) / 4 = 25 GB/s; the 1 MiB - 1 byte
    # collective (1 GB/s) is left out. Of a 100 GB/s link that is 25%: not below, no finding
    cs = [coll(MIB, 20.0, 3.0), coll(4 * MIB, 40.0, 1.0), coll(MIB - 1, 1.0, 50.0)]
    assert slow_link_finding(ranks(collectives=cs), 100.0, "NVLink", {}) is None
    # of a 100.1 GB/s link it is below 25%: the transfer time 4 ms x (1 - 25 / 100.1) is the saving
    f = slow_link_finding(ranks(collectives=cs), 100.1, "NVLink", {"NCCL_P2P_DISABLE": "1", "PATH": "/bin"})
    saving = 4.0 * (1 - 25.0 / 100.1)
    assert f.cost_ms_per_step == pytest.approx(saving) and f.cost_pct_of_step == pytest.approx(saving)
    assert f.fixes[0].saving_ms == pytest.approx(saving) and f.fixes[0].how == "unset NCCL_P2P_DISABLE"
    assert f.evidence[0] == ("collectives of >= 1 MiB reach 25.0 GB/s bus bandwidth, 25.0% of the link's 100 GB/s "
                             "(NVLink); rule: below 25%")  # 100 x 25 / 100.1 = 24.98%
    assert "their transfer takes 4.00 ms" in f.evidence[1]
    assert f.evidence[2] == "transport variables set: NCCL_P2P_DISABLE=1"
    # collectives of 1 MiB whose transfer took no measurable time weigh nothing: a bandwidth of 0 is reported
    f = slow_link_finding(ranks(collectives=[coll(MIB, 20.0, 0.0)]), 100.0, "NVLink", {})
    assert f.cost_ms_per_step == 0.0 and "reach 0.0 GB/s bus bandwidth" in f.evidence[0]
    # no link figure, or no collective of 1 MiB: nothing to compare
    assert slow_link_finding(ranks(collectives=cs), None, "", {}) is None
    assert slow_link_finding(ranks(collectives=[coll(MIB - 1, 1.0, 5.0)]), 100.0, "NVLink", {}) is None
    # no transport variable set: the advice is to read NCCL's own log
    assert "NCCL_DEBUG=INFO" in slow_link_finding(ranks(collectives=cs), 200.0, "NVLink", {}).fixes[0].how


def comm_diagnosis(cost_ms, fixes=()):
    f = Finding(id="exposed_communication", severity="warning", title="t", rule="r", cost_ms_per_step=cost_ms,
                cost_pct_of_step=cost_ms, fixes=list(fixes) or [Fix("Tune DDP bucketing", "config", cost_ms)])
    other = Finding(id="launch_overhead", severity="warning", title="t", rule="r", cost_ms_per_step=3.0,
                    cost_pct_of_step=3.0)
    return Diagnosis(primary="communication_bound", reason="communication", findings=[f, other],
                     scores={"communication_bound": 30.0, "gpu_bound": 60.0, "launch_bound": 10.0})


def test_a_waiting_rank_keeps_at_most_its_transfer_time():
    d = comm_diagnosis(20.0)
    discount_wait(d, wait_ms=8.0, straggler=1, step_ms=100.0, transfer_ms=6.0)
    f = d.findings[0]
    # 20 ms exposed less 8 ms of waiting: 12 ms, at most its 6 ms of transfer: 6 ms, 6% (>= 5%: kept)
    assert f.cost_ms_per_step == pytest.approx(6.0) and f.cost_pct_of_step == pytest.approx(6.0)
    assert f.fixes[0].saving_ms == pytest.approx(6.0) and "8.00 ms per step of it is waiting" in f.evidence[-1]
    assert d.findings[1].id == "launch_overhead"
    # the scores lose the wait's 8%: communication 22, gpu 52; the waiting score is 8%; gpu_bound is now the largest
    assert d.scores == pytest.approx({"communication_bound": 22.0, "gpu_bound": 52.0, "launch_bound": 10.0,
                                      "waiting": 8.0})
    assert d.primary == "gpu_bound" and "waiting for rank 1" in d.reason


@pytest.mark.parametrize("transfer_ms, kept", [(4.99, False), (5.0, True)])
def test_a_waiting_ranks_communication_finding_goes_under_its_threshold(transfer_ms, kept):
    # what is left is its transfer time: 5 ms of a 100 ms step is the 5% threshold, inclusive
    d = comm_diagnosis(20.0)
    discount_wait(d, wait_ms=8.0, straggler=1, step_ms=100.0, transfer_ms=transfer_ms)
    assert ("exposed_communication" in [f.id for f in d.findings]) is kept
    assert any("waiting for rank 1 (skew, not transfer)" in n for n in d.notes) is not kept


def test_when_the_wait_is_the_largest_share_the_verdict_is_waiting():
    d = comm_diagnosis(50.0)
    d.scores = {"communication_bound": 50.0, "gpu_bound": 45.0}
    discount_wait(d, wait_ms=40.0, straggler=1, step_ms=100.0, transfer_ms=2.0)
    # communication 10, gpu 5, waiting 40
    assert d.scores == pytest.approx({"communication_bound": 10.0, "gpu_bound": 5.0, "waiting": 40.0})
    assert d.primary == "waiting"


def test_a_verdict_the_wait_no_longer_supports_goes_to_the_next_largest_score():
    d = comm_diagnosis(20.0)
    d.primary, d.scores = "gpu_bound", {"gpu_bound": 50.0, "copy_bound": 40.0, "communication_bound": 10.0}
    discount_wait(d, wait_ms=20.0, straggler=1, step_ms=100.0, transfer_ms=6.0)
    # gpu 50 - 20 = 30, communication max(10 - 20, 0) = 0, waiting 20: copy_bound's 40 is now the largest
    assert d.scores == pytest.approx({"gpu_bound": 30.0, "copy_bound": 40.0, "communication_bound": 0.0,
                                      "waiting": 20.0})
    assert d.primary == "copy_bound" and "20.00 ms per step (20%) of it is waiting for rank 1" in d.reason


def test_no_wait_changes_nothing():
    d = comm_diagnosis(20.0)
    discount_wait(d, wait_ms=0.0, straggler=1, step_ms=100.0, transfer_ms=6.0)
    discount_wait(d, wait_ms=5.0, straggler=1, step_ms=0.0, transfer_ms=6.0)
    assert d.findings[0].cost_ms_per_step == 20.0 and "waiting" not in d.scores and d.notes == []


def test_a_slow_link_drops_the_tuning_fixes_only():
    d = comm_diagnosis(20.0, [Fix("Tune DDP bucketing: bucket_cap_mb", "config", 5.0),
                              Fix("Check NCCL's transport", "config", 5.0), Fix("Overlap", "code", 5.0)])
    drop_comm_tuning(d)
    assert [x.action for x in d.findings[0].fixes] == ["Overlap"]

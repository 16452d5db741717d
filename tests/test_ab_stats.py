"""A/B statistics (analysis/comparison/ab_stats.py): the verdict rule on real step times of identical CPU
processes (tests/data/ab/identical_cpu.json, validation/ab_null_capture.py) and its mechanism."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import REPO
from gpucheckup.analysis.comparison import ab_stats

NULL = REPO / "tests" / "data" / "ab" / "identical_cpu.json"


def _null_rounds():
    data = json.loads(NULL.read_text())
    return [np.array(r["ms"]) for r in data["rounds"]], [r["side"] for r in data["rounds"]]


def test_identical_processes_show_no_difference_in_nine_of_ten_repetitions():
    rounds, sides = _null_rounds()
    reps = len(rounds) // 6  # each repetition: 3 A and 3 B processes, interleaved as captured, none reused
    assert reps >= 10
    verdicts = []
    for i in range(10):
        block = list(zip(sides[6 * i:6 * i + 6], rounds[6 * i:6 * i + 6]))
        a = [r for s, r in block if s == "A"]
        b = [r for s, r in block if s == "B"]
        verdicts.append(ab_stats.compare(a, b).verdict)
    assert verdicts.count("same") >= 9, verdicts


def test_a_real_slowdown_beyond_the_rounds_spread_is_named():
    rounds, _ = _null_rounds()
    a = rounds[:3]
    steps = np.concatenate(a)
    factor = 2 * steps.max() / steps.min()  # every B step slower than every A step: beyond any noise in A
    slower = [r * factor for r in a]
    res = ab_stats.compare(a, slower)
    assert res.verdict == "slower" and res.lo_pct > 0 and res.change_pct == pytest.approx(100 * (factor - 1))
    res = ab_stats.compare(slower, a)
    assert res.verdict == "faster" and res.sentence.startswith("B is faster than A by")
    same_spread = ab_stats.compare(a, [r * 1.01 for r in a])  # 1% slower: far inside the rounds' spread
    assert same_spread.verdict == "same"


def test_the_sentence_follows_the_interval_even_when_the_rounds_are_noisy():
    """An A whose three real processes include one slow one (medians 104.1, 250.6 and 110.0 ms: noise 141%) against
    a B of two of its fast processes at half the time, the second twice: the interval lies below 0, so B is faster;
    before, the noise overrode the interval: "No difference beyond noise: ... (95% interval -93.9% to -2.5%)"."""
    rounds, _ = _null_rounds()
    a = rounds[:3]
    b = [rounds[0] * 0.5, rounds[2] * 0.5, rounds[0] * 0.5]
    res = ab_stats.compare(a, b)
    # by hand: A's median of round medians is 109.987 ms (round 2's); B's is 104.107 / 2 = 52.05 ms: -52.7%
    assert res.hi_pct < 0
    assert res.verdict == "faster"
    assert res.sentence.startswith("B is faster than A by 52.7% per step (95% interval")
    assert "more --rounds would narrow the interval" in res.sentence  # the noise is said, not obeyed
    assert "excludes 0" in res.to_dict()["rule"]


def test_verdict_and_interval_never_disagree():
    """Over the real null rounds, scaled by factors from 0.3 to 3: faster exactly when the interval lies below 0,
    slower exactly when above, no difference exactly when it holds 0."""
    rounds, _ = _null_rounds()
    for i in range(0, 30, 3):
        a = rounds[i:i + 3]
        for f in (0.3, 0.5, 0.8, 1.0, 1.25, 2.0, 3.0):
            res = ab_stats.compare(a, [r * f for r in rounds[i + 30:i + 33]])
            expect = "faster" if res.hi_pct < 0 else "slower" if res.lo_pct > 0 else "same"
            assert res.verdict == expect, res.sentence
            assert res.sentence.startswith({"faster": "B is faster", "slower": "B is slower",
                                            "same": "No difference measured"}[expect])


def test_interval_contains_the_change_and_throughput_is_its_inverse():
    rounds, _ = _null_rounds()
    res = ab_stats.compare(rounds[0:6:2], rounds[1:6:2], samples_per_step=32)
    assert res.lo_pct <= res.change_pct <= res.hi_pct
    for s in (res.a, res.b):
        assert s.lo_ms <= s.median_ms <= s.hi_ms
        assert s.per_s == pytest.approx(32 * 1000 / s.median_ms)
        assert s.median_ms == pytest.approx(np.median(s.round_ms))


def test_too_little_data_is_refused():
    with pytest.raises(ValueError, match="rounds"):
        ab_stats.compare([np.ones(10)], [np.ones(10), np.ones(10)])
    with pytest.raises(ValueError, match="measured steps"):
        ab_stats.compare([np.ones(2), np.ones(10)], [np.ones(10), np.ones(10)])


def test_a_side_runs_ahead_when_its_queue_grows_by_more_than_the_share_of_the_gpu_time():
    # over a round the host's intervals sum to H, the GPU's to G: the queue grew by G - H
    host = [np.full(20, 9.0), np.full(20, 10.0)]
    kept_pace = [np.full(20, 9.0 / (1 - ab_stats.RUN_AHEAD_SHARE) - 0.01), np.full(20, 10.0)]  # G - H just under
    ahead = [np.full(20, 9.0 / (1 - ab_stats.RUN_AHEAD_SHARE) + 0.01), np.full(20, 10.0)]  # just over, in round 1
    assert ab_stats.ran_ahead("A", host, kept_pace) is None
    r = ab_stats.ran_ahead("A", host, ahead)
    assert r is not None and r.share == pytest.approx(1 - 9.0 / ahead[0][0])
    assert ab_stats.ran_ahead("A", host, None) is None  # no GPU times: nothing to tell
    assert ab_stats.ran_ahead("A", host, [h * 0.5 for h in host]) is None  # the GPU waits for the host
    a, b, why = ab_stats.choose_clock("A", host, kept_pace, "B", host, ahead)
    assert a is kept_pace and b is ahead and [x.label for x in why] == ["B"]
    a, b, why = ab_stats.choose_clock("A", host, kept_pace, "B", host, kept_pace)
    assert a is host and b is host and why == []
    with pytest.raises(ValueError, match="B ran ahead of its GPU.*A has no GPU step times"):
        ab_stats.choose_clock("A", host, None, "B", host, ahead)

"""Advice that fits (issue 12, item 5): a periodic cause's fix only for periodic slow steps."""

from __future__ import annotations

from test_run_analysis import analyze_json, make_run_dir


def _slow_steps_run(tmp_path, slow: set[int]) -> dict:
    steps = [900.0 if i in slow else 300.0 for i in range(120)]
    return analyze_json(make_run_dir(tmp_path, "input_bound", steps_ms=steps), tmp_path)


def _slow_finding(r: dict) -> dict:
    return next(f for f in r["verdict"]["findings"] if f["id"] == "periodic_slow_steps")


def test_irregular_slow_steps_get_no_async_checkpointing(tmp_path):
    r = _slow_steps_run(tmp_path, {23, 29, 61, 62, 97, 104})  # no common spacing: contention, not a schedule
    f = _slow_finding(r)
    assert "irregularly" in f["title"]
    keys = {x["key"] for x in f["fix"]} | {x["key"] for x in r["fixes"]}
    assert "async_periodic" not in keys
    assert not any("checkpoint" in x["action"] for x in r["fixes"])


def test_periodic_slow_steps_get_async_checkpointing(tmp_path):
    r = _slow_steps_run(tmp_path, {20, 40, 60, 80, 100})
    f = _slow_finding(r)
    assert "every 20 steps" in f["title"]
    assert "async_periodic" in {x["key"] for x in f["fix"]}

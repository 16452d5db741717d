"""A folder of ranks checked up in worker processes gives the same reports as in one process, and only
reports (no trace tables) come back from the workers."""

from __future__ import annotations

import shutil

import msgspec

from conftest import trace_path
from gpucheckup.checkup.pipeline import check, check_path
from gpucheckup.trace import parallel


def test_workers_give_the_same_reports_as_one_process(tmp_path, monkeypatch):
    for rank, case in enumerate(["launch_bound", "input_bound", "moe_seed"]):
        shutil.copy(trace_path(case), tmp_path / f"trace_rank{rank}.json.gz")
    (tmp_path / "trace_rank3.json").write_text('{"traceEvents": [')  # a bad rank is skipped, not fatal
    monkeypatch.setattr(parallel, "MIN_BYTES", 0)
    assert parallel.worth_it(sorted(tmp_path.iterdir()), jobs=2)
    one = check_path(tmp_path, jobs=1)
    two = check_path(tmp_path, jobs=2)
    assert [c.analysis is None for c in two] == [True] * 3  # the trace tables stayed in the workers
    assert [c.report["trace"]["rank"] for c in two] == [0, 1, 2]
    for a, b in zip(one, two):
        assert msgspec.json.encode(a.report) == msgspec.json.encode(b.report)
        assert a.diagnosis == b.diagnosis
    assert any("trace_rank3.json" in n for n in two[0].diagnosis.notes)  # the folder's note, in its diagnosis
    # and in the finished reports, which build their notes from the diagnosis last (checkup/pipeline.py `_finish`)
    done = check(tmp_path, jobs=2).checkups
    assert [c.analysis is None for c in done] == [True] * 3
    assert all(any("trace_rank3.json" in n for n in c.report["notes"]) for c in done)


def test_small_folders_and_single_cores_stay_in_process(tmp_path):
    shutil.copy(trace_path("moe_seed"), tmp_path / "a.json.gz")
    shutil.copy(trace_path("moe_seed"), tmp_path / "b.json.gz")
    files = sorted(tmp_path.iterdir())
    assert not parallel.worth_it(files)  # 0.2 MB: starting workers would cost more than it saves
    assert not parallel.worth_it(files[:1], jobs=8)
    assert not parallel.worth_it(files, jobs=1)

"""A trace read in two processes (reader.read_trace(split=True): a forked child reads the events before the
split point, this process the rest) gives exactly the tables one read gives, field by field, on every real trace
and at split points across the file; and whatever goes wrong in the child (bad JSON, fields of unexpected types,
a split point inside a string, a crash, a hang, no fork) ends in the one-process read: the same tables, or the
same one-line error."""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import time
from pathlib import Path

import msgspec
import numpy as np
import pytest

from conftest import trace_path, write_trace
from test_reader_equivalence import _tricky_events, real_traces
from gpucheckup.errors import CheckupError
from gpucheckup.trace import child, chunks, parallel, read_trace, reader
from gpucheckup.trace.tables import RawColumn


def assert_same(a, b, where: str = "trace") -> None:
    """Every field of two read traces equal: arrays by dtype and value, raw columns by bytes and offsets, dicts
    in the same order."""
    if isinstance(a, RawColumn):
        assert type(a.data) is type(b.data) and a.data == b.data, where
        assert a.offsets.dtype == b.offsets.dtype and np.array_equal(a.offsets, b.offsets), where
    elif dataclasses.is_dataclass(a) or isinstance(a, msgspec.Struct):  # the tables are msgspec Structs
        assert type(a) is type(b), where
        for f in a.__struct_fields__ if isinstance(a, msgspec.Struct) else [f.name for f in dataclasses.fields(a)]:
            assert_same(getattr(a, f), getattr(b, f), f"{where}.{f}")
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True), where
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, dict):
        assert list(a.items()) == list(b.items()), where
    else:
        assert type(a) is type(b) and (a == b or (a != a and b != b)), (where, a, b)


@pytest.fixture
def splits(monkeypatch) -> list[bool]:
    """Split every file, however small; the list records, per read asked to split, whether it did."""
    monkeypatch.setattr(reader, "SPLIT_BYTES", 0)
    monkeypatch.setattr(reader.parallel, "cores", lambda: 2)
    monkeypatch.setattr(reader.parallel, "idle_cores", lambda: 2.0)
    done: list[bool] = []
    real = reader._read_split

    def recorded(path):
        got = real(path)
        done.append(got is not None)
        return got

    monkeypatch.setattr(reader, "_read_split", recorded)
    return done


def read_both(path: Path) -> tuple:
    return reader.read_trace(path), reader.read_trace(path, split=True)


@pytest.mark.parametrize("path", real_traces(), ids=lambda p: str(p.relative_to(p.parents[2])))
def test_split_read_gives_the_same_trace(path, splits):
    one, two = read_both(path)
    assert splits == [True]
    assert_same(one, two)


@pytest.mark.parametrize("at", [0.0, 0.1, 0.7, 0.97])
@pytest.mark.parametrize("case", ["compute_bound", "fsdp"])
def test_split_anywhere_in_small_chunks(case, at, splits, monkeypatch):
    """Names first seen on either side, collective calls' host rows, and the command-buffer-full sum (633
    events in compute_bound) are joined as one read gives them, wherever the file is split."""
    path = (trace_path(case) if case != "fsdp" else
            Path(__file__).parent / "data" / "h200x2" / "fsdp" / "traces" / "rank0.json.gz")
    monkeypatch.setattr(reader, "SPLIT_AT", at)
    monkeypatch.setattr(chunks, "CHUNK_BYTES", 200_000)
    one, two = read_both(path)
    assert splits == [True]
    assert_same(one, two)
    assert (one.comms is not None) == (case == "fsdp")
    assert one.command_buffer_full_count == (633 if case == "compute_bound" else 0)


def test_a_split_point_inside_a_string_is_refused(tmp_path, splits, monkeypatch):
    """Event names and nested arguments holding `}, {`: the child's last chunk proves its cut or the read is one."""
    doc = {"schemaVersion": 1, "traceEvents": _tricky_events(400)}
    path = tmp_path / "tricky.json"
    path.write_text(json.dumps(doc, indent=1))
    monkeypatch.setattr(chunks, "CHUNK_BYTES", 3_000)
    monkeypatch.setattr(chunks, "READ_BYTES", 1_000)
    size = path.stat().st_size
    for at in range(size // 3, size // 3 + 400, 7):  # split points inside names, arguments, between events
        monkeypatch.setattr(reader, "SPLIT_AT", at / size)
        assert_same(*read_both(path))
    assert True in splits and False in splits


def test_string_ids_met_in_another_order_read_in_one(tmp_path, splits, monkeypatch):
    """String pids ("Spans") take ids in order of first sight: a later part meeting them in the same order is
    joined, one meeting them in another order is not (a number could be one of their ids): read in one."""
    events = [{"ph": "X", "cat": "cpu_op", "name": f"op{i % 7}", "tid": 1, "ts": float(i), "dur": 0.5,
               "pid": ("A" if i < 500 or i >= 700 else "B") if i % 2 else 1} for i in range(1000)]
    events += [{"ph": "X", "cat": "cpu_op", "name": "late", "pid": "C", "tid": "A", "ts": 2000.0, "dur": 1.0}]
    path = write_trace(tmp_path / "t.json", events)
    monkeypatch.setattr(chunks, "CHUNK_BYTES", 5_000)
    for at in (0.1, 0.5, 0.9):  # the later part meets: A, B, C (as one read); B before A; A, C but not B
        monkeypatch.setattr(reader, "SPLIT_AT", at)
        one, two = read_both(path)
        assert_same(one, two)
        assert sorted(set(one.host.pid.tolist())) == [-3, -2, -1, 1]
    assert splits == [True, False, False]


def test_fields_of_unexpected_types_read_in_one(tmp_path, splits, monkeypatch):
    """A chunk that decodes only loosely (a string duration) drops its bad events where one read drops them."""
    events = [{"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": float(i),
               "dur": "x" if i == 900 else 0.5, "args": {"Input Dims": [[i, 2]]}} for i in range(1000)]
    path = write_trace(tmp_path / "t.json", events)
    monkeypatch.setattr(chunks, "CHUNK_BYTES", 5_000)
    for at in (0.1, 0.9):
        monkeypatch.setattr(reader, "SPLIT_AT", at)
        one, two = read_both(path)
        assert_same(one, two)
        assert len(one.host) == 999 and "1 events with fields of unexpected types" in one.warnings[0]
    assert splits == [False, False]


@pytest.mark.parametrize("where", [0.2, 0.8])
def test_bad_json_on_either_side_is_the_one_line_error(tmp_path, splits, monkeypatch, where):
    events = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": float(i), "dur": 0.5,
               "args": {"device": 0, "stream": 7, "correlation": i}} for i in range(2000)]
    text = json.dumps({"schemaVersion": 1, "traceEvents": events}, indent=1)
    cut = text.index('"ph"', int(len(text) * where))
    path = tmp_path / "bad.json.gz"
    path.write_bytes(gzip.compress((text[:cut] + '"ph": X' + text[cut + 4 :]).encode()))
    monkeypatch.setattr(chunks, "CHUNK_BYTES", 5_000)
    with pytest.raises(CheckupError) as one:
        reader.read_trace(path)
    with pytest.raises(CheckupError) as two:
        reader.read_trace(path, split=True)
    assert str(one.value) == str(two.value) and "not valid JSON" in str(two.value)
    assert splits == [False]


def _fail(path, at):
    raise RuntimeError("the child failed")


def _crash(path, at):
    os._exit(3)


def _hang(path, at):
    time.sleep(600)


@pytest.mark.parametrize("first_part", [_fail, _crash, _hang])
def test_a_child_that_fails_dies_or_hangs_is_read_without(first_part, splits, monkeypatch):
    path = trace_path("launch_bound")
    monkeypatch.setattr(reader, "_first_part", first_part)
    monkeypatch.setattr(reader, "SPLIT_WAIT_S", 0.5)
    t = time.monotonic()
    assert_same(*read_both(path))
    assert splits == [False] and time.monotonic() - t < 30
    child._reap(0)  # the hung child was killed: it can be reaped at once
    assert child._unreaped == []


def test_no_fork_is_read_in_one_process(splits, monkeypatch):
    def no_fork():
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(os, "fork", no_fork)
    assert_same(*read_both(trace_path("launch_bound")))
    assert splits == [False]


def test_not_split_when_small_on_one_core_or_a_busy_machine(monkeypatch):
    started = []
    monkeypatch.setattr(child, "start", lambda fn: started.append(fn))
    path = trace_path("launch_bound")  # 6 MB of JSON
    assert reader.json_bytes(path) == len(gzip.decompress(path.read_bytes())) < reader.SPLIT_BYTES
    reader.read_trace(path, split=True)
    monkeypatch.setattr(reader, "SPLIT_BYTES", 0)
    monkeypatch.setattr(reader.parallel, "cores", lambda: 1)
    reader.read_trace(path, split=True)
    monkeypatch.setattr(reader.parallel, "cores", lambda: 2)
    monkeypatch.setattr(reader.parallel, "idle_cores", lambda: 0.4)  # the machine busy with other work
    reader.read_trace(path, split=True)
    assert started == []


@pytest.mark.parametrize("idle, threads", [(0.5, 0), (2.0, 1)])
def test_gunzip_runs_ahead_on_a_thread_only_where_a_processor_is_idle(tmp_path, monkeypatch, idle, threads):
    """Beside other work a thread gunzipping ahead gains no wall time and its hand-offs cost CPU: the read
    starts one only where a processor is idle for it; the tables are the same either way."""
    started = []
    real = chunks.prefetched
    monkeypatch.setattr(chunks, "prefetched", lambda items, *a: started.append(1) or real(items, *a))
    monkeypatch.setattr(parallel, "cores", lambda: 2)
    monkeypatch.setattr(parallel, "idle_cores", lambda: idle)
    path = write_trace(tmp_path / "t.json.gz", [
        {"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 0, "tid": 7, "ts": i, "dur": 1, "args": {}}
        for i in range(50)])
    trace = read_trace(path)
    assert len(started) == threads
    assert len(trace.gpu) == 50 and trace.names[:2] == ["k0", "k1"]

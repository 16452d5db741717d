"""The streaming reader's tables equal the plain per-event reader's (tests/legacy_reader.py), column by
column, on every real trace in the repository and the shared fixtures, read in one chunk and in many.
(An argument column is compared on the rows of the categories it is declared for, reader.HOST_COLUMNS.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, fixtures_dir
from legacy_reader import legacy_tables
from gpucheckup.trace import chunks, read_trace
from gpucheckup.trace.reader import HOST_COLUMNS


def real_traces() -> list[Path]:
    found = set((REPO / "tests" / "data").rglob("*.json.gz"))
    found |= set((REPO / "src" / "gpucheckup" / "data").rglob("*.json.gz"))
    base = fixtures_dir()
    if base is not None:
        found |= set(base.rglob("*.json.gz"))
    return sorted(found)


def assert_same_tables(path: Path) -> None:
    new, old = read_trace(path), legacy_tables(path)
    assert new.names == old["names"]
    assert new.thread_names == old["thread_names"]
    assert (new.command_buffer_full_count, new.command_buffer_full_us) == old["command_buffer_full"]
    declared = {c.field: c for c in HOST_COLUMNS if c.cats is not None}
    outside = {f: ~np.isin(old["host"]["cat"], c.cats) for f, c in declared.items()}
    for f, rows in outside.items():  # the reader reads each argument from the rows that use it only
        want = old["host"][f]
        if isinstance(want, list):
            old["host"][f] = [None if o else w for w, o in zip(want, rows)]
        else:
            want[rows] = declared[f].fill
    for table in ("gpu", "host"):
        for column, want in old[table].items():
            got = getattr(getattr(new, table), column)
            if isinstance(want, list):  # raw JSON arguments, one per row
                assert list(got) == want, f"{path.name}: {table}.{column}"
            else:
                assert np.array_equal(got, want, equal_nan=True), f"{path.name}: {table}.{column}"
                assert got.dtype.kind == want.dtype.kind, f"{path.name}: {table}.{column} dtype {got.dtype}"


@pytest.mark.parametrize("path", real_traces(), ids=lambda p: str(p.relative_to(p.parents[2])))
def test_same_tables_as_the_plain_reader(path):
    assert_same_tables(path)


@pytest.mark.parametrize("path", [p for p in real_traces() if p.stat().st_size > 300_000][:3],
                         ids=lambda p: str(p.relative_to(p.parents[2])))
def test_same_tables_when_cut_into_many_small_chunks(path, monkeypatch):
    monkeypatch.setattr(chunks, "CHUNK_BYTES", 50_000)  # hundreds of cuts, each proven by decoding
    monkeypatch.setattr(chunks, "READ_BYTES", 7_000)
    assert_same_tables(path)


def test_there_are_real_traces_to_compare():
    assert len(real_traces()) >= 10


def _tricky_events(n: int) -> list[dict]:
    """Events whose text holds the cut pattern `}, {` inside strings and nested objects in their args."""
    out = []
    for i in range(n):
        out.append({"ph": "X", "cat": "cpu_op", "name": f'op}}, {{"x": {i}', "pid": 1, "tid": 1, "ts": 10.0 * i,
                    "dur": 5.0, "args": {"External id": i, "nested": [{"a": 1}, {"b": [{"c": "}, {"}]}],
                                         "Input Dims": [[i, 2], [2, 3]], "Input type": ["float", "float"]}})
        out.append({"ph": "X", "cat": "kernel", "name": "k}, {", "pid": 0, "tid": 7, "ts": 10.0 * i + 1, "dur": 2.0,
                    "args": {"device": 0, "stream": 7, "correlation": i, "External id": i}})
    return out


@pytest.mark.parametrize("layout", ["events last", "events first", "a nested traceEvents key first"])
def test_cuts_inside_strings_and_nested_objects_are_refused_and_retried(tmp_path, monkeypatch, layout):
    import json

    events = _tricky_events(400)
    top = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H200", "numSms": 132}]}
    if layout == "events last":
        doc = {**top, "traceEvents": events}
    elif layout == "events first":
        doc = {"traceEvents": events, **top, "baseTimeNanoseconds": 5}
    else:  # the stream finds the nested key first, sees its top level is wrong, and reads the file whole
        doc = {"meta": {"traceEvents": [{"ph": "X"}]}, **top, "traceEvents": events}
    path = tmp_path / "tricky.json"
    path.write_text(json.dumps(doc, indent=1))
    monkeypatch.setattr(chunks, "CHUNK_BYTES", 3_000)
    monkeypatch.setattr(chunks, "READ_BYTES", 1_000)
    assert_same_tables(path)
    tr = read_trace(path)
    assert len(tr.gpu) == 400 and len(tr.host) == 400 and tr.devices[0].sm_count == 132
    assert json.loads(tr.host.shapes[399]) == [[399, 2], [2, 3]]

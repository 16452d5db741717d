"""Reading edge cases on small synthetic traces (the real ones are covered in test_verdicts)."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import trace_path, write_trace
from gpucheckup.analysis.checkup import analyze
from gpucheckup.diagnosis import diagnose
from gpucheckup.errors import CheckupError
from gpucheckup.trace import read_trace
from gpucheckup.trace.tables import KERNEL, MEMCPY


def test_real_trace_tables():
    tr = read_trace(trace_path("input_bound"))
    assert tr.devices[0].name == "NVIDIA H200" and tr.devices[0].sm_count == 132
    assert tr.base_time_ns == 1790857026000000000
    assert tr.record_shapes
    assert (tr.gpu.kind == KERNEL).sum() == 1800
    assert (tr.gpu.kind == MEMCPY).sum() == 15
    assert np.all(np.diff(tr.gpu.start) >= 0)
    assert tr.thread_names[(449, 491)].endswith("(pt_autograd_0)")


def ev(cat, name, ts, dur, pid=1, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def test_two_devices_and_streams_and_string_ids(tmp_path):
    events = [
        ev("user_annotation", "ProfilerStep#1", 0, 100),
        ev("cuda_runtime", "cudaLaunchKernel", 1, 2, correlation=1),
        ev("kernel", "gemm_a", 10, 40, pid=0, tid=7, device=0, stream=7, correlation=1),
        ev("cuda_runtime", "cudaLaunchKernel", 3, 2, correlation=2),
        ev("kernel", "gemm_b", 30, 40, pid=0, tid=9, device=0, stream=9, correlation=2),
        ev("cuda_runtime", "cudaLaunchKernel", 5, 2, correlation=3),
        ev("kernel", "gemm_c", 10, 20, pid=1, tid=7, device=1, stream=7, correlation=3),
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler",
         "ts": 0, "dur": 100},
    ]
    tr = read_trace(write_trace(tmp_path / "multi.json", events))
    a = analyze(tr)
    # device 0: union of [10,50] and [30,70] = 60 us of 100; device 1: 20 of 100; mean 40%
    assert a.timeline.busy_us(0) == pytest.approx(60)
    assert a.timeline.busy_us(1) == pytest.approx(20)
    assert a.timeline.busy_pct == pytest.approx(40)
    assert a.timeline.busy_by_stream[(0, 9)] == pytest.approx(40)


def test_no_profiler_steps_means_one_window_and_a_note(tmp_path):
    events = [
        ev("cuda_runtime", "cudaLaunchKernel", 0, 2, correlation=1),
        ev("kernel", "k", 10, 30, pid=0, tid=7, device=0, stream=7, correlation=1),
        ev("cpu_op", "aten::mm", 0, 50),
    ]
    a = analyze(read_trace(write_trace(tmp_path / "nosteps.json.gz", events)))
    assert not a.steps.marked and a.steps.count == 1
    assert a.timeline.busy_pct == pytest.approx(100 * 30 / 50)
    d = diagnose(a)
    assert any("no ProfilerStep#" in n for n in d.notes)


def test_integer_microsecond_timestamps(tmp_path):
    events = [
        ev("user_annotation", "ProfilerStep#7", 1000, 100),
        ev("cuda_runtime", "cudaLaunchKernel", 1001, 2, correlation=5),
        ev("kernel", "k", 1010, 50, pid=0, tid=7, device=0, stream=7, correlation=5),
    ]
    a = analyze(read_trace(write_trace(tmp_path / "ints.json", events)))
    assert a.step_summary.median_ms == pytest.approx(0.1)
    assert a.timeline.busy_pct == pytest.approx(50)


def test_rank_from_distributed_info_or_name(tmp_path):
    events = [ev("kernel", "k", 10, 30, pid=0, tid=7, device=0, stream=7)]
    tr = read_trace(write_trace(tmp_path / "a.json", events, distributedInfo={"rank": 3, "world_size": 8}))
    assert (tr.rank, tr.world_size) == (3, 8)
    assert read_trace(write_trace(tmp_path / "worker_rank5.json", events)).rank == 5


# Reader-level classes of the fuzzing audit (issue 11): each minimal input reads correctly or gives one clear line.

def _kernel_trace(tmp_path, name, extra_event=None, raw=None):
    events = [ev("cuda_runtime", "cudaLaunchKernel", 1, 2, correlation=1),
              ev("kernel", "k", 10, 40, pid=0, tid=7, device=0, stream=7, correlation=1)]
    path = tmp_path / name
    if raw is not None:  # JSON text that the json module cannot write (huge literals, deep nesting)
        head = write_trace(tmp_path / "base.json", events).read_text()
        path.write_text(head[: head.rindex("]")] + ", " + raw + "]}")
        return path
    return write_trace(path, events + ([extra_event] if extra_event else []))


def test_nesting_1000_levels_deep_is_one_clear_error(tmp_path):
    deep = '{"ph": "X", "cat": "kernel", "name": "d", "ts": 1, "dur": 1, "args": {"x": ' + "[" * 1000 + "]" * 1000 + "}}"
    path = _kernel_trace(tmp_path, "deep.json", raw=deep)
    with pytest.raises(CheckupError, match="nested too deeply"):
        read_trace(path)


@pytest.mark.parametrize("field", ["ts", "dur", "correlation", "pid"])
def test_400_digit_integers_drop_the_event_with_a_warning(tmp_path, field):
    big = "1" * 400
    fields = {"ph": '"X"', "cat": '"kernel"', "name": '"huge"', "pid": "0", "tid": "7", "ts": "60", "dur": "5"}
    args = '{"device": 0, "stream": 7, "correlation": ' + (big if field == "correlation" else "2") + "}"
    fields[field if field != "correlation" else "name"] = big if field != "correlation" else '"huge"'
    raw = "{" + ", ".join(f'"{k}": {v}' for k, v in fields.items()) + ', "args": ' + args + "}"
    tr = read_trace(_kernel_trace(tmp_path, "big.json", raw=raw))
    assert len(tr.gpu) == 1 and tr.names[tr.gpu.name[0]] == "k"
    assert any("1 events with fields of unexpected types" in w for w in tr.warnings)


@pytest.mark.parametrize("ts, dur", [(1.7e308, 1.0), (1.0e17, 5.0), (5.0, 1.7e308), ("1e999", 5.0)])
def test_absurd_timestamps_drop_the_event_with_a_warning(tmp_path, ts, dur):
    raw = ('{"ph": "X", "cat": "kernel", "name": "far", "pid": 0, "tid": 7, '
           f'"ts": {ts}, "dur": {dur}, "args": {{"device": 0, "stream": 7}}}}')
    tr = read_trace(_kernel_trace(tmp_path, "far.json", raw=raw))
    assert len(tr.gpu) == 1 and tr.names == ["cudaLaunchKernel", "k"]
    assert len(tr.warnings) == 1 and "out-of-range timestamp" in tr.warnings[0]
    a = analyze(tr)
    assert a.timeline.busy_pct == pytest.approx(100 * 40 / 49)  # the kept events' window only


def test_nan_and_infinity_literals_are_invalid_json(tmp_path):
    for word in ("NaN", "Infinity", "-Infinity"):
        raw = '{"ph": "X", "cat": "kernel", "name": "n", "pid": 0, "tid": 7, "ts": ' + word + ', "dur": 1}'
        with pytest.raises(CheckupError, match="not valid JSON"):
            read_trace(_kernel_trace(tmp_path, f"{word}.json", raw=raw))


def test_non_integer_dims_and_null_input_type_are_read_as_raw_arguments(tmp_path):
    gemm = ev("cpu_op", "aten::mm", 0, 50, **{"Input Dims": [[2.5, "x"], [None, 4]], "Input type": None,
                                              "External id": 9})
    tr = read_trace(_kernel_trace(tmp_path, "dims.json", extra_event=gemm))
    row = tr.names.index("aten::mm")
    r = int(np.flatnonzero(tr.host.name == row)[0])
    assert tr.host.shapes[r] == b'[[2.5, "x"], [null, 4]]' and tr.host.dtypes[r] == b"null"
    assert tr.host.external_id[r] == 9


@pytest.mark.parametrize("chunk_bytes", [None, 300])
def test_names_and_string_ids_are_numbered_in_order_of_first_sight(tmp_path, monkeypatch, chunk_bytes):
    """Names number in the order the kept rows first show them (a row of a bad time or an ignored event
    numbers none); string pids and tids get -1, -2, ... in the order a chunk's host pids, then its tids, first
    show them; the same (ph, cat, name, pid, tid) seen again reads the same ids, in one chunk or many."""
    from gpucheckup.trace import chunks

    if chunk_bytes:
        monkeypatch.setattr(chunks, "CHUNK_BYTES", chunk_bytes)  # a few events per chunk
        monkeypatch.setattr(chunks, "READ_BYTES", 200)
    events = [
        {"ph": "s", "cat": "ac2g", "name": "flow_only", "pid": "P0", "tid": "T0", "ts": 0, "id": 1},  # ignored
        ev("cpu_op", "bad_time_only", 0, -5, pid="P1", tid="T1"),  # a negative duration: dropped
        ev("python_function", "f", 1, 1, pid="P2", tid="T2"),
        ev("cpu_op", "aten::mm", 2, 1, pid="P2", tid=5),
        ev("kernel", "k", 3, 1, pid=0, tid=7, device=0, stream=7),
        ev("python_function", "f", 4, 1, pid="P2", tid="T2"),  # the first kind again
        ev("cpu_op", "aten::mm", 5, 1, pid="P3", tid="T2"),
        ev("cpu_op", "bad_time_only", 6, 1, pid="P2", tid="T2"),  # kept this time: named after the others
        ev("python_function", "f", 7, 1, pid="P2", tid="T2"),
    ]
    tr = read_trace(write_trace(tmp_path / "order.json", events))
    assert tr.names == ["f", "aten::mm", "k", "bad_time_only"]
    # host rows in file order: f, aten::mm, f, aten::mm, bad_time_only, f
    assert [tr.names[i] for i in tr.host.name] == ["f", "aten::mm", "f", "aten::mm", "bad_time_only", "f"]
    # one chunk: its host pids first (P2 -1, P3 -2), then its tids (T2 -3); chunks of two or three events: P2
    # and T2 in the chunk of the first kept `f` (-1, -2), P3 four events later, in another chunk (-3). P0, T0
    # (an ignored event) and P1, T1 (a dropped row) are numbered in neither.
    p2, p3, t2 = (-1, -2, -3) if chunk_bytes is None else (-1, -3, -2)
    assert tr.host.pid.tolist() == [p2, p2, p2, p3, p2, p2]
    assert tr.host.tid.tolist() == [t2, 5, t2, t2, t2, t2]


def test_a_trace_of_distinct_events_grows_its_kinds_a_few_times_not_per_chunk(tmp_path, monkeypatch):
    """Every event a kind of its own (a name with a counter in it), read in ~400 chunks: the arrays by kind
    grow at least 2x at a time, so 6000 kinds take about log2(6000 / 64) + 1 = 8 growths of each of the 4
    arrays (code, name, pid, tid), where growing them for each chunk's new kinds copies them ~400 times (quadratic
    in the kinds); the names still come in file order."""
    from gpucheckup.trace import chunks, reader

    monkeypatch.setattr(chunks, "CHUNK_BYTES", 1500)  # ~15 events per chunk
    monkeypatch.setattr(chunks, "READ_BYTES", 1000)
    grown = []
    real = reader._grown
    monkeypatch.setattr(reader, "_grown", lambda a, size, fill: grown.append(size) or real(a, size, fill))
    n = 6000
    events = [ev("cpu_op", f"op#{i}", i, 1) for i in range(n)]
    tr = read_trace(write_trace(tmp_path / "distinct.json", events))
    assert tr.names == [f"op#{i}" for i in range(n)]
    assert tr.host.name.tolist() == list(range(n))
    assert 4 <= len(grown) <= 4 * 9

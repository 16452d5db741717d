"""One rank's collective calls (analysis/one_trace/gpu/collectives.py) against a second, plain implementation over
the raw JSON of a real 2-GPU H200 DDP trace, and gloo's annotations on a synthetic CPU trace worked out by hand."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from conftest import write_trace
from gpucheckup.analysis.one_trace.gpu import collectives
from gpucheckup.analysis.one_trace import launches, steps
from gpucheckup.trace import read_trace

RANK0 = Path(__file__).resolve().parent / "data" / "h200x2" / "ddp_healthy" / "traces" / "rank0.json.gz"
BYTES = {"float": 4, "bfloat16": 2, "half": 2}


def plain_calls(doc: dict) -> list[tuple]:
    """(issue time, kernel start, kernel end, bytes, group size, step label) of each NCCL kernel whose launch lies
    inside a record_param_comms op on the launching thread (the innermost, latest-starting one), in issue order."""
    ev = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    calls = {e["args"]["correlation"]: e for e in ev
             if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    ops = [e for e in ev if e.get("name") == "record_param_comms"]
    marks = sorted((e["ts"], e["ts"] + e["dur"], e["name"]) for e in ev
                   if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#"))
    out = []
    for k in ev:
        if k.get("cat") != "kernel" or "nccl" not in k["name"].lower() or k["args"]["correlation"] not in calls:
            continue
        c = calls[k["args"]["correlation"]]
        around = [o for o in ops if o["tid"] == c["tid"] and o["ts"] <= c["ts"] <= o["ts"] + o["dur"]]
        if not around:
            continue
        o = max(around, key=lambda o: o["ts"])
        a = o["args"]
        nbytes = max(a["In msg nelems"], a["Out msg nelems"]) * BYTES[a["dtype"].lower()]
        label = next((m[2] for m in reversed(marks) if m[0] <= o["ts"]), None)
        out.append((o["ts"], k["ts"], k["ts"] + k["dur"], nbytes, a["Group size"], label))
    return sorted(out)


def test_nccl_calls_match_a_plain_reading_of_the_raw_events():
    with gzip.open(RANK0, "rt") as f:
        want = plain_calls(json.load(f))
    tr = read_trace(RANK0)
    rows = launches.launch_rows(tr)
    got = collectives.collective_calls(tr, steps.find_steps(tr, rows), rows)
    assert got.on_gpu and len(got) == len(want) > 0
    assert got.start.tolist() == pytest.approx([w[1] for w in want], abs=1e-3)
    assert got.end.tolist() == pytest.approx([w[2] for w in want], abs=1e-3)
    assert got.nbytes.tolist() == [w[3] for w in want]
    assert got.group_size.tolist() == [w[4] for w in want]
    assert set(got.collective) == {"all_reduce"} and {k[0] for k in got.keys} == {"0"}  # the default group, "0"
    # keys: (group, collective, step, index within that step and group), numbered from 0 in each step
    seen = {}
    for key, w in zip(got.keys, want):
        label = w[5] or "outside steps"
        assert key[2] == label and key[3] == seen.get(label, 0), (key, w)
        seen[label] = seen.get(label, 0) + 1


def gloo(name, ts, dur, dims, types):
    return {"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": 9, "ts": ts, "dur": dur,
            "args": {"Input Dims": dims, "Input type": types}}


def test_gloo_annotations_are_the_calls_on_cpus(tmp_path):
    ev = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1, "ts": 1000 * i,
           "dur": 1000, "args": {}} for i in (1, 2)]
    ev += [gloo("gloo:all_reduce", 1100, 50, [[256, 4]], ["float"]),  # 1024 floats: 4096 bytes
           # a list: its first tensor, in its first input's dtype (not the scalar after it), x 2 ranks
           gloo("gloo:all_gather", 1300, 20, [[[10]], [[10]]], ["c10::BFloat16", "Scalar"]),
           gloo("gloo:broadcast", 2100, 10, [], []),  # no shapes recorded: 0 bytes
           gloo("gloo:all_reduce", 2200, 30, [[8]], ["double"])]
    # an event of another kind with such a name is no annotation, no call
    ev += [{**gloo("gloo:all_reduce", 1500, 40, [], []), "cat": "python_function"}]
    ev += [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1000, "dur": 10,
            "args": {"device": 0, "stream": 7}}]
    tr = read_trace(write_trace(tmp_path / "t.json", ev, distributedInfo={"rank": 0, "world_size": 2}))
    rows = launches.launch_rows(tr)
    got = collectives.collective_calls(tr, steps.find_steps(tr, rows), rows)
    assert not got.on_gpu and got.row is None
    assert got.collective == ["all_reduce", "all_gather", "broadcast", "all_reduce"]
    assert got.nbytes.tolist() == [4096.0, 10 * 2 * 2, 0.0, 64.0]
    assert got.start.tolist() == [1100, 1300, 2100, 2200] and got.end.tolist() == [1150, 1320, 2110, 2230]
    assert got.group_size.tolist() == [2.0] * 4
    assert got.keys == [("default", "all_reduce", "ProfilerStep#1", 0), ("default", "all_gather", "ProfilerStep#1", 1),
                        ("default", "broadcast", "ProfilerStep#2", 0), ("default", "all_reduce", "ProfilerStep#2", 1)]


@pytest.mark.parametrize("name,size", [("Float", 4), ("c10::BFloat16", 2), ("double", 8), ("unknown", 4),
                                       (" long int ", 8), ("bool", 1)])
def test_dtype_bytes(name, size):
    assert collectives.dtype_bytes(name) == size


def test_no_world_size_leaves_group_size_unknown(tmp_path):
    ev = [gloo("gloo:all_gather", 100, 20, [[4]], ["float"]),
          {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 0, "dur": 10,
           "args": {"device": 0, "stream": 7}}]
    tr = read_trace(write_trace(tmp_path / "t.json", ev))
    rows = launches.launch_rows(tr)
    got = collectives.collective_calls(tr, steps.find_steps(tr, rows), rows)
    assert np.isnan(got.group_size).all() and got.nbytes.tolist() == [16.0]  # not multiplied by an unknown size
    assert got.keys == [("default", "all_gather", "whole trace", 0)]


def test_every_dtype_size_is_the_element_size():
    # numpy's item sizes for the C and numpy names; bfloat16 and the float8 formats by their bit widths
    c_names = {"float": np.float32, "float32": np.float32, "double": np.float64, "float64": np.float64,
               "half": np.float16, "c10::half": np.float16, "float16": np.float16, "long": np.int64,
               "long int": np.int64, "int64": np.int64, "int": np.int32, "int32": np.int32, "short": np.int16,
               "char": np.int8, "signed char": np.int8, "unsigned char": np.uint8, "bool": np.bool_, "byte": np.uint8}
    by_bits = {"bfloat16": 16, "c10::bfloat16": 16, "float8_e4m3fn": 8, "float8_e5m2": 8, "c10::float8_e4m3fn": 8,
               "c10::float8_e5m2": 8}
    assert set(collectives.DTYPE_BYTES) == set(c_names) | set(by_bits)
    for name, t in c_names.items():
        assert collectives.dtype_bytes(name) == np.dtype(t).itemsize, name
    for name, bits in by_bits.items():
        assert collectives.dtype_bytes(name) == bits // 8, name


def test_a_collective_launched_by_the_files_first_host_event_is_counted(tmp_path):
    # the same trace with one NCCL kernel's launch call moved to the front of the file: the host table keeps file
    # order, so that call is host row 0, and its kernel is still a call (the plain reading does not depend on order)
    with gzip.open(RANK0, "rt") as f:
        doc = json.load(f)
    want = plain_calls(doc)
    ev = doc["traceEvents"]
    nccl = {e["args"]["correlation"] for e in ev if e.get("cat") == "kernel" and "nccl" in e["name"].lower()}
    i = next(i for i, e in enumerate(ev) if e.get("cat") in ("cuda_runtime", "cuda_driver")
             and e.get("args", {}).get("correlation") in nccl)
    top = {k: v for k, v in doc.items() if k != "traceEvents"}
    tr = read_trace(write_trace(tmp_path / "first.json", [ev[i]] + ev[:i] + ev[i + 1:], **top))
    assert tr.names[tr.host.name[0]] == ev[i]["name"]
    rows = launches.launch_rows(tr)
    got = collectives.collective_calls(tr, steps.find_steps(tr, rows), rows)
    assert len(got) == len(want) and got.start.tolist() == pytest.approx([w[1] for w in want], abs=1e-3)


def test_a_call_without_message_sizes_moves_no_bytes(tmp_path):
    # the same trace with every record_param_comms' message sizes removed: the calls stay, their bytes are unknown,
    # counted as 0 (no bandwidth is claimed for them), never as some bytes
    with gzip.open(RANK0, "rt") as f:
        doc = json.load(f)
    want = plain_calls(doc)
    for e in doc["traceEvents"]:
        if e.get("name") == "record_param_comms":
            e["args"].pop("In msg nelems", None)
            e["args"].pop("Out msg nelems", None)
    top = {k: v for k, v in doc.items() if k != "traceEvents"}
    tr = read_trace(write_trace(tmp_path / "sizes.json", doc["traceEvents"], **top))
    rows = launches.launch_rows(tr)
    got = collectives.collective_calls(tr, steps.find_steps(tr, rows), rows)
    assert len(got) == len(want) > 0 and got.nbytes.tolist() == [0.0] * len(want)


def test_an_nccl_kernel_launched_outside_every_collective_op_is_not_a_call(tmp_path):
    # the same trace plus one NCCL kernel whose launch comes 50 us after the launching thread's last
    # record_param_comms ended: no op encloses its launch, so it is no call (the plain reading skips it too)
    with gzip.open(RANK0, "rt") as f:
        doc = json.load(f)
    want = plain_calls(doc)
    ev = doc["traceEvents"]
    nccl = {e["args"]["correlation"]: e for e in ev if e.get("cat") == "kernel" and "nccl" in e["name"].lower()}
    call = next(e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")
                and e.get("args", {}).get("correlation") in nccl)
    t = max(e["ts"] + e["dur"] for e in ev if e.get("name") == "record_param_comms" and e["tid"] == call["tid"]) + 50
    corr = max(e.get("args", {}).get("correlation", 0) for e in ev) + 1
    kernel = nccl[call["args"]["correlation"]]
    ev += [{**call, "ts": t, "args": {**call["args"], "correlation": corr}},
           {**kernel, "ts": t + 100, "args": {**kernel["args"], "correlation": corr}}]
    assert plain_calls(doc) == want
    top = {k: v for k, v in doc.items() if k != "traceEvents"}
    tr = read_trace(write_trace(tmp_path / "outside.json", ev, **top))
    rows = launches.launch_rows(tr)
    got = collectives.collective_calls(tr, steps.find_steps(tr, rows), rows)
    assert len(got) == len(want) and got.start.tolist() == pytest.approx([w[1] for w in want], abs=1e-3)

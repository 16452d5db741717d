"""The reader as it was before streaming (a plain loop per event), kept as an oracle: the streaming
reader's tables must equal these, column by column, on every real trace (test_reader_equivalence.py)."""

from __future__ import annotations

import gzip
import math

import msgspec
import numpy as np

Number = int | float
_NO_RAW = msgspec.Raw(b"")

GPU_CATS = {"kernel": 0, "gpu_memcpy": 1, "gpu_memset": 2, "Kernel": 0, "Memcpy": 1, "Memset": 2,
            "mtia_ccp_events": 0}  # MTIA's device work reads as kernels (issue 12)
HOST_CATS = {"cpu_op": 0, "Operator": 0, "user_annotation": 1, "cuda_runtime": 2, "Runtime": 2, "cuda_driver": 3,
             "python_function": 4, "mtia_runtime": 2}
MAX_EVENT_US = 24 * 3600 * 1e6


class Args(msgspec.Struct, gc=False):
    correlation: int | None = None
    external_id: int | None = msgspec.field(default=None, name="External id")
    device: int | None = None
    stream: int | None = None
    bytes: Number | None = None
    python_id: int | None = msgspec.field(default=None, name="Python id")
    python_parent_id: int | None = msgspec.field(default=None, name="Python parent id")
    flops: Number | None = None
    input_dims: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input type")
    concrete_inputs: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Concrete Inputs")
    name: str | None = None


class Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: Number = 0.0
    dur: Number = 0.0
    args: Args | None = None


class Top(msgspec.Struct):
    traceEvents: list[Event] | None = None


_EMPTY_ARGS = Args()


def legacy_tables(path) -> dict:
    """The tables the old reader built from a well-formed trace, as plain columns."""
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    try:
        events = msgspec.json.decode(data, type=Top).traceEvents
    except msgspec.ValidationError:  # the old loose route: convert event by event, dropping what does not
        events = []
        for ev in msgspec.json.decode(data)["traceEvents"]:
            try:
                events.append(msgspec.convert(ev, Event, strict=False))
            except msgspec.ValidationError:
                pass
    name_ids, names, str_ids, thread_names = {}, [], {}, {}
    g_rows, h_rows, shapes, dtypes, concrete = [], [], [], [], []
    bad_time = cbf_count = 0
    cbf_us = 0.0

    def num_id(v):
        return v if v.__class__ is int else str_ids.setdefault(v, -1 - len(str_ids))

    for ev in events:
        if ev.ph != "X":
            if ev.ph == "M" and ev.name == "thread_name" and ev.args is not None and ev.args.name:
                thread_names[(num_id(ev.pid), num_id(ev.tid))] = ev.args.name
            continue
        gk = GPU_CATS.get(ev.cat)
        hk = HOST_CATS.get(ev.cat) if gk is None else None
        if gk is None and hk is None:
            if ev.cat == "overhead" and ev.name == "Command Buffer Full":
                cbf_count += 1
                cbf_us += float(ev.dur)
            continue
        ts, dur = ev.ts, ev.dur
        if not (math.isfinite(ts) and math.isfinite(dur)) or dur < 0 or dur > MAX_EVENT_US:
            bad_time += 1
            continue
        name = name_ids.get(ev.name)
        if name is None:
            name = name_ids[ev.name] = len(names)
            names.append(ev.name)
        a = ev.args if ev.args is not None else _EMPTY_ARGS
        if gk is not None:
            dev = a.device if a.device is not None else ev.pid
            stream = a.stream if a.stream is not None else ev.tid
            g_rows.append((gk, name, dev if dev.__class__ is int else 0, num_id(stream), ts, ts + dur,
                           -1 if a.correlation is None else a.correlation,
                           -1 if a.external_id is None else a.external_id,
                           math.nan if a.bytes is None else a.bytes))
        else:
            h_rows.append((hk, name, num_id(ev.pid), num_id(ev.tid), ts, ts + dur,
                           -1 if a.correlation is None else a.correlation,
                           -1 if a.external_id is None else a.external_id,
                           -1 if a.python_id is None else a.python_id,
                           -1 if a.python_parent_id is None else a.python_parent_id,
                           math.nan if a.flops is None else a.flops))
            shapes.append(bytes(a.input_dims) or None)
            dtypes.append(bytes(a.input_type) or None)
            concrete.append(bytes(a.concrete_inputs) or None)

    def cols(rows, fields, ints):
        table = np.array(rows, dtype=np.float64).reshape(len(rows), len(fields))
        return {f: table[:, i].astype(np.int64) if f in ints else table[:, i] for i, f in enumerate(fields)}

    gpu = cols(g_rows, ("kind", "name", "device", "stream", "start", "end", "correlation", "external_id", "bytes"),
               {"kind", "name", "device", "stream", "correlation", "external_id"})
    order = np.argsort(gpu["start"], kind="stable")
    gpu = {k: v[order] for k, v in gpu.items()}
    host = cols(h_rows, ("cat", "name", "pid", "tid", "start", "end", "correlation", "external_id", "python_id",
                         "python_parent_id", "flops"),
                {"cat", "name", "pid", "tid", "correlation", "external_id", "python_id", "python_parent_id"})
    del host["python_id"], host["python_parent_id"]  # read by no analysis: the reader no longer keeps them
    host.update(shapes=shapes, dtypes=dtypes, concrete=concrete)
    return {"names": names, "gpu": gpu, "host": host, "thread_names": thread_names, "bad_time": bad_time,
            "command_buffer_full": (cbf_count, cbf_us)}

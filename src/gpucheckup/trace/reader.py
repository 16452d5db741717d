"""Read Kineto JSON traces (`.json` or `.json.gz`) into columnar tables.

Decoding goes through msgspec typed structs (see `schema.py`); a trace whose fields have
unexpected types is decoded again loosely, dropping only the events that cannot be read, and
the report says how many. Bad files raise `CheckupError` with a one-line reason.
"""

from __future__ import annotations

import gc
import gzip
import math
import re
import zlib
from pathlib import Path

import msgspec
import numpy as np

from gpucheckup.errors import CheckupError
from gpucheckup.trace import schema
from gpucheckup.trace.tables import (
    CPU_OP,
    DRIVER,
    CommArgs,
    KERNEL,
    MEMCPY,
    MEMSET,
    PYTHON,
    RUNTIME,
    USER_ANNOTATION,
    Device,
    GpuOps,
    HostEvents,
    Trace,
)

# Category names as Kineto writes them today, and as PyTorch 1.x wrote them.
GPU_CATS = {"kernel": KERNEL, "gpu_memcpy": MEMCPY, "gpu_memset": MEMSET,
            "Kernel": KERNEL, "Memcpy": MEMCPY, "Memset": MEMSET}
HOST_CATS = {
    "cpu_op": CPU_OP,
    "Operator": CPU_OP,
    "user_annotation": USER_ANNOTATION,
    "cuda_runtime": RUNTIME,
    "Runtime": RUNTIME,
    "cuda_driver": DRIVER,
    "python_function": PYTHON,
}
SUPPORTED_SCHEMA_VERSIONS = {1}
MAX_EVENT_US = 24 * 3600 * 1e6  # a single event longer than a day is not a real measurement
TRACE_SUFFIXES = (".json", ".json.gz")

_DECODER = msgspec.json.Decoder(schema.KinetoTrace)


def is_trace_file(path: Path) -> bool:
    """Whether a file name looks like a JSON trace (`.json` or `.json.gz`)."""
    return path.name.endswith(TRACE_SUFFIXES)


def read_bytes(path: Path) -> bytes:
    """The file's bytes, gunzipped when it is gzip (by magic number, whatever its name)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise CheckupError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise CheckupError(f"{path}: is a folder, expected a trace file") from None
    except OSError as e:
        raise CheckupError(f"{path}: cannot read ({e.strerror})") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(raw)
        except (EOFError, gzip.BadGzipFile, zlib.error) as e:
            raise CheckupError(f"{path}: gzip data is truncated or corrupt ({e})") from None
    if path.name.endswith(".gz"):
        raise CheckupError(f"{path}: named .gz but is not gzip data")
    return raw


def decode(path: Path, data: bytes) -> tuple[schema.KinetoTrace, int]:
    """Decode trace JSON, strictly first, then loosely when types are off; also the events dropped."""
    if not data.strip():
        raise CheckupError(f"{path}: file is empty")
    try:
        return _DECODER.decode(data), 0
    except msgspec.ValidationError:
        pass
    except msgspec.DecodeError as e:
        raise CheckupError(f"{path}: not valid JSON ({_short(e)}); the trace may be truncated or corrupt") from None
    return _decode_loosely(path, data)


def _decode_loosely(path: Path, data: bytes) -> tuple[schema.KinetoTrace, int]:
    """Decode untyped, then convert event by event, dropping those that cannot be read."""
    try:
        obj = msgspec.json.decode(data)
    except msgspec.DecodeError as e:
        raise CheckupError(f"{path}: not valid JSON ({_short(e)})") from None
    if not isinstance(obj, dict):
        raise CheckupError(f"{path}: not a trace (top level is a JSON {type(obj).__name__}, expected an object)")
    events = obj.pop("traceEvents", None)
    top = {}
    for key, value in obj.items():  # keep the top-level fields that convert, drop the others
        try:
            top.update(msgspec.to_builtins(msgspec.convert({key: value}, schema.KinetoTrace, strict=False)))
        except msgspec.ValidationError:
            continue
    trace = msgspec.convert(top, schema.KinetoTrace, strict=False)
    if events is None:
        return trace, 0
    if not isinstance(events, list):
        raise CheckupError(f"{path}: `traceEvents` is a JSON {type(events).__name__}, expected a list")
    good, dropped = [], 0
    for ev in events:
        try:
            good.append(msgspec.convert(ev, schema.Event, strict=False))
        except msgspec.ValidationError:
            dropped += 1
    trace.traceEvents = good
    return trace, dropped


def _short(err: Exception) -> str:
    return str(err).splitlines()[0][:160]


_EMPTY_ARGS = schema.Args()


def _columns(rows: list[tuple], width: int) -> list[np.ndarray]:
    """Rows of numbers as float64 columns (ids stay exact: they are far below 2**53)."""
    if not rows:
        return [np.zeros(0) for _ in range(width)]
    table = np.array(rows, dtype=np.float64)
    return [table[:, i] for i in range(width)]


def build_tables(path: Path, kt: schema.KinetoTrace, dropped: int = 0) -> Trace:
    """Turn decoded events into a `Trace` of numpy columns."""
    if kt.traceEvents is None:
        raise CheckupError(f"{path}: not a PyTorch profiler trace (no `traceEvents` list)")
    if kt.schemaVersion is not None and kt.schemaVersion not in SUPPORTED_SCHEMA_VERSIONS:
        raise CheckupError(
            f"{path}: unknown Kineto schemaVersion {kt.schemaVersion} (gpucheckup reads "
            f"{', '.join(map(str, sorted(SUPPORTED_SCHEMA_VERSIONS)))})"
        )
    name_ids: dict[str, int] = {}
    names: list[str] = []
    warnings: list[str] = []
    g_rows: list[tuple] = []  # kind, name, device, stream, start, end, correlation, external id, bytes
    h_rows: list[tuple] = []  # cat, name, pid, tid, start, end, correlation, external id, py id, py parent, flops
    shapes: list = []
    dtypes: list = []
    concrete: list = []
    thread_names: dict[tuple[int, int], str] = {}
    str_ids: dict[str, int] = {}
    bad_time = 0
    comm_rows: list[tuple] = []  # many GPUs (issue 9): host row, collective, pg, group size, in, out, dtype
    cbf_count, cbf_us = 0, 0.0
    nan = math.nan
    isfinite = math.isfinite

    def num_id(v) -> int:
        """Kineto ids are ints; a few (`"Spans"`) are strings: give those stable negative ids."""
        if v.__class__ is int:
            return v
        return str_ids.setdefault(v, -1 - len(str_ids))

    for ev in kt.traceEvents:
        if ev.ph != "X":
            if ev.ph == "M" and ev.name == "thread_name" and ev.args is not None and ev.args.name:
                thread_names[(num_id(ev.pid), num_id(ev.tid))] = ev.args.name
            continue
        cat = ev.cat
        gk = GPU_CATS.get(cat)
        hk = HOST_CATS.get(cat) if gk is None else None
        if gk is None and hk is None:
            if cat == "overhead" and ev.name == "Command Buffer Full":
                cbf_count += 1
                cbf_us += float(ev.dur)
            continue
        ts, dur = ev.ts, ev.dur
        if not (isfinite(ts) and isfinite(dur)) or dur < 0 or dur > MAX_EVENT_US:
            bad_time += 1
            continue
        name = name_ids.get(ev.name)
        if name is None:
            name = name_ids[ev.name] = len(names)
            names.append(ev.name)
        a = ev.args
        if gk is not None:
            if a is None:
                a = _EMPTY_ARGS
            dev = a.device if a.device is not None else ev.pid
            stream = a.stream if a.stream is not None else ev.tid
            g_rows.append((
                gk,
                name,
                dev if dev.__class__ is int else 0,
                num_id(stream),
                ts,
                ts + dur,
                a.correlation if a.correlation is not None else -1,
                a.external_id if a.external_id is not None else -1,
                a.bytes if a.bytes is not None else nan,
            ))
        elif a is None:
            h_rows.append((hk, name, num_id(ev.pid), num_id(ev.tid), ts, ts + dur, -1, -1, -1, -1, nan))
            shapes.append(None)
            dtypes.append(None)
            concrete.append(None)
        else:
            h_rows.append((
                hk,
                name,
                num_id(ev.pid),
                num_id(ev.tid),
                ts,
                ts + dur,
                a.correlation if a.correlation is not None else -1,
                a.external_id if a.external_id is not None else -1,
                a.python_id if a.python_id is not None else -1,
                a.python_parent_id if a.python_parent_id is not None else -1,
                a.flops if a.flops is not None else nan,
            ))
            shapes.append(bytes(a.input_dims) or None)
            dtypes.append(bytes(a.input_type) or None)
            concrete.append(bytes(a.concrete_inputs) or None)
            if a.collective_name is not None:  # many GPUs (issue 9)
                comm_rows.append((len(h_rows) - 1, a.collective_name, a.pg_name or "", a.group_size, a.in_msg_nelems,
                                  a.out_msg_nelems, a.dtype or ""))

    if bad_time:
        warnings.append(f"{bad_time} events with a negative, non-finite or over-a-day duration were ignored")
    if dropped:
        warnings.append(f"{dropped} events with fields of unexpected types could not be read and were ignored")

    g = _columns(g_rows, 9)
    gpu = GpuOps(
        kind=g[0].astype(np.int8),
        name=g[1].astype(np.int32),
        device=g[2].astype(np.int32),
        stream=g[3].astype(np.int64),
        start=g[4],
        end=g[5],
        correlation=g[6].astype(np.int64),
        external_id=g[7].astype(np.int64),
        bytes=g[8],
    )
    gpu = gpu.take(np.argsort(gpu.start, kind="stable"))
    h = _columns(h_rows, 11)
    host = HostEvents(
        cat=h[0].astype(np.int8),
        name=h[1].astype(np.int32),
        pid=h[2].astype(np.int64),
        tid=h[3].astype(np.int64),
        start=h[4],
        end=h[5],
        correlation=h[6].astype(np.int64),
        external_id=h[7].astype(np.int64),
        python_id=h[8].astype(np.int64),
        python_parent_id=h[9].astype(np.int64),
        flops=h[10],
        shapes=shapes,
        dtypes=dtypes,
        concrete=concrete,
    )
    devices = [
        Device(
            id=d.id,
            name=d.name,
            sm_count=d.numSms,
            total_memory=d.totalGlobalMem,
            compute_capability=f"{d.computeMajor}.{d.computeMinor}" if d.computeMajor else "",
        )
        for d in (kt.deviceProperties or [])
    ]
    dist = kt.distributedInfo
    if len(gpu) == 0 and len(host) == 0:
        raise CheckupError(f"{path}: the trace holds no profiler events (empty `traceEvents`)")
    return Trace(
        path=str(path),
        names=names,
        gpu=gpu,
        host=host,
        devices=devices,
        thread_names=thread_names,
        base_time_ns=kt.baseTimeNanoseconds,
        schema_version=kt.schemaVersion,
        rank=dist.rank if dist is not None else None,
        world_size=dist.world_size if dist is not None else None,
        with_stack=bool(kt.with_stack),
        record_shapes=bool(kt.record_shapes),
        cuda_runtime_version=kt.cuda_runtime_version,
        cuda_driver_version=kt.cuda_driver_version,
        command_buffer_full_count=cbf_count,
        command_buffer_full_us=cbf_us,
        warnings=warnings,
        comms=_comm_args(comm_rows),
    )


def _comm_args(rows: list[tuple]) -> CommArgs | None:
    """The collective calls' arguments as a table (many GPUs, issue 9)."""
    if not rows:
        return None
    num = np.array([[np.nan if v is None else v for v in r[3:6]] for r in rows], dtype=np.float64)
    return CommArgs(host_row=np.array([r[0] for r in rows], dtype=np.int64), collective=[r[1] for r in rows],
                    pg=[r[2] for r in rows], group_size=num[:, 0], in_nelems=num[:, 1], out_nelems=num[:, 2],
                    dtype=[r[6] for r in rows])


def read_trace(path: str | Path) -> Trace:
    """Read one trace file into a `Trace`."""
    path = Path(path)
    data = read_bytes(path)
    gc_was_on = gc.isenabled()
    gc.disable()  # hundreds of thousands of acyclic objects: the cycle collector only costs time here
    try:
        trace = build_tables(path, *decode(path, data))
    finally:
        if gc_was_on:
            gc.enable()
    if trace.rank is None:
        m = re.search(r"rank[_-]?(\d+)", path.name)
        if m:
            trace.rank = int(m.group(1))
    return trace


SNIFF_BYTES = 4 << 20  # "traceEvents" appears in a Kineto trace's first few kilobytes


def looks_like_trace(path: Path) -> bool:
    """Whether a JSON file's first megabytes name `traceEvents` (configuration and metadata files do not)."""
    try:
        with open(path, "rb") as f:
            gz = f.read(2) == b"\x1f\x8b"
        with (gzip.open(path, "rb") if gz else open(path, "rb")) as f:
            return b'"traceEvents"' in f.read(SNIFF_BYTES)
    except (OSError, EOFError, zlib.error):
        return True  # unreadable: let read_trace say why in one line


def find_trace_files(folder: Path) -> list[Path]:
    """The trace files of a folder: those in its `traces/` subfolder when it has one, else the JSON files
    directly in it that look like traces (so meta.json, env.json or manifest.json beside them are skipped)."""
    sub = folder / "traces"
    if sub.is_dir():
        found = sorted(p for p in sub.iterdir() if p.is_file() and is_trace_file(p))
        if found:
            return found
    return sorted(p for p in folder.iterdir() if p.is_file() and is_trace_file(p) and looks_like_trace(p))

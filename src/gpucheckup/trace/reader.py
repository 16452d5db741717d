"""Read Kineto JSON traces (`.json` or `.json.gz`) into columnar tables.

The file is streamed: gunzipped block by block and cut into chunks of whole events
(`chunks.py`), each chunk decoded into typed msgspec structs (`schema.py`) and turned into numpy
columns by C-level passes over the chunk (no Python code runs per event), then dropped. Memory
is the finished tables plus a few chunks, whatever the file's size. A chunk whose fields have
unexpected types is decoded again loosely, dropping only the events that cannot be read, and the
report says how many. Bad files raise `CheckupError` with a one-line reason.

The argument columns read, and from which rows, are declared in `GPU_COLUMNS` and `HOST_COLUMNS` below.
"""

from __future__ import annotations

import functools
import gc
import gzip
import re
import sys
import time
import zlib
from operator import attrgetter, itemgetter
from pathlib import Path

import msgspec
import numpy as np

from gpucheckup.errors import CheckupError
from gpucheckup.trace import chunks, parallel, schema
from gpucheckup.trace.columns import Columns
from gpucheckup.files import check_regular
from gpucheckup.trace.tables import (
    CPU_OP,
    DRIVER,
    CommArgs,
    Counters,
    KERNEL,
    MEMCPY,
    MEMSET,
    PYTHON,
    RUNTIME,
    USER_ANNOTATION,
    Device,
    GpuOps,
    HostEvents,
    RawColumn,
    Trace,
)

# Category names as Kineto writes them today, and as PyTorch 1.x wrote them; other accelerators' device
# work (MTIA's command processor events) reads as device work too.
GPU_CATS = {"kernel": KERNEL, "gpu_memcpy": MEMCPY, "gpu_memset": MEMSET,
            "Kernel": KERNEL, "Memcpy": MEMCPY, "Memset": MEMSET,
            "mtia_ccp_events": KERNEL}
HOST_CATS = {
    "cpu_op": CPU_OP,
    "Operator": CPU_OP,
    "user_annotation": USER_ANNOTATION,
    "cuda_runtime": RUNTIME,
    "Runtime": RUNTIME,
    "mtia_runtime": RUNTIME,
    "cuda_driver": DRIVER,
    "python_function": PYTHON,
}
SUPPORTED_SCHEMA_VERSIONS = {1}
MAX_EVENT_US = 24 * 3600 * 1e6  # a single event longer than a day is not a real measurement
MAX_TS_US = float(2**53)  # beyond 2**53 us (285 years) a float64 timestamp no longer resolves a microsecond
TRACE_SUFFIXES = (".json", ".json.gz")


class Column(msgspec.Struct, frozen=True):
    """One argument column: the table field, the `schema.Args` field it comes from, its dtype (None: raw
    JSON bytes, a `RawColumn`) and fill, and the host categories whose rows read it (None: every row)."""

    field: str
    arg: str
    dtype: type | None
    fill: float = 0
    cats: tuple[int, ...] | None = None


# What the analyses use, and from which rows: other rows hold the fill (-1, nan, no bytes). Host
# categories are CPU_OP..PYTHON; GPU columns take GPU_BASE + KERNEL/MEMCPY/MEMSET (None: every row).
GPU_COLUMNS = (
    Column("correlation", "correlation", np.int64, -1),
    Column("external_id", "external_id", np.int64, -1),
    Column("bytes", "bytes", np.float64, np.nan),
)
HOST_COLUMNS = (
    Column("correlation", "correlation", np.int64, -1, (RUNTIME, DRIVER)),
    Column("external_id", "external_id", np.int64, -1, (CPU_OP, USER_ANNOTATION)),
    Column("flops", "flops", np.float64, np.nan, (CPU_OP,)),
    Column("shapes", "input_dims", None, cats=(CPU_OP, USER_ANNOTATION)),  # annotations: gloo's collectives
    Column("dtypes", "input_type", None, cats=(CPU_OP, USER_ANNOTATION)),
    Column("concrete", "concrete_inputs", None, cats=(CPU_OP,)),
)

# Event codes: host categories 0..4, GPU kinds GPU_BASE + 0..2, then the few events read one by one.
GPU_BASE, META, OVERHEAD, IGNORED, NO_PHASE = 8, 16, 17, -1, -2
_EVENTS = msgspec.json.Decoder(list[schema.Event])
_TOP = msgspec.json.Decoder(schema.KinetoTrace)
_LOOSE = msgspec.json.Decoder(float_hook=float)  # untyped; 1e999 reads as inf (a bad time) instead of failing
_KIND = attrgetter("ph", "cat", "name", "pid", "tid")
_PH_CAT = itemgetter(0, 1)  # of a kind
_TS, _DUR, _PID, _TID = (attrgetter(a) for a in ("ts", "dur", "pid", "tid"))
_ARGS, _DEVICE, _STREAM = attrgetter("args"), attrgetter("device"), attrgetter("stream")  # device, stream: of args
_COLLECTIVE = attrgetter("collective_name")
EVENTS_PER_PASS = 1 << 16  # events turned into columns at a time when a file is read whole
SPLIT_BYTES = 16 << 20  # JSON at least this large is read in two processes when the caller allows it
SPLIT_AT = 0.46  # the share of the JSON the forked child reads (the first part; this process reads the rest): a bit
# under half, as the child also pays the fork and sends its columns (launch_bound_stacks split at half: the
# child's part took 0.21 s of CPU, this process's 0.19 s with the skipped half gunzipped; docs/performance.md)
SPLIT_IDLE_CORES = 1.5  # split only where this many processors are idle now (this process's own counted as idle):
# beside other work that keeps a core busy the second process gains no wall time and costs ~10-20% more CPU
PREFETCH_IDLE_CORES = 1.5  # gunzip on a thread ahead of the decode only where this many processors are idle now:
# beside other work the thread gains no wall time and its hand-offs cost CPU (the 4x read, loaded: 2-10% more)
SPLIT_WAIT_S = 30.0  # how long the child may take beyond 5x this process's own part before it is given up on


def is_trace_file(path: Path) -> bool:
    """Whether a file name looks like a JSON trace (`.json` or `.json.gz`)."""
    return path.name.endswith(TRACE_SUFFIXES)


def read_bytes(path: Path, limit: int | None = None) -> bytearray:
    """The file's bytes, gunzipped when it is gzip (by magic number, whatever its name), gathered in one buffer
    (never a list of blocks and their join: the file is held once); CheckupError past `limit` bytes."""
    data = bytearray()
    for block in chunks.blocks(path):
        data += block
        if limit is not None and len(data) > limit:
            raise CheckupError(f"{path}: over {limit >> 20} MiB of JSON that cannot be cut into events")
    return data


def _short(err: Exception) -> str:
    return str(err).splitlines()[0][:160]


class _Codes(dict):
    """(ph, cat) -> event code; filled on first sight of each pair, so lookups stay in C."""

    def __missing__(self, key: tuple[str, str]) -> int:
        ph, cat = key
        if ph == "":  # every Chrome-trace event has a phase: what has none is not an event
            code = NO_PHASE
        elif ph == "X" and cat in GPU_CATS:
            code = GPU_BASE + GPU_CATS[cat]
        elif ph == "X":
            code = HOST_CATS.get(cat, OVERHEAD if cat == "overhead" else IGNORED)
        else:
            code = META if ph == "M" else IGNORED
        self[key] = code
        return code


def _take(items, index: np.ndarray) -> list | tuple:
    """items[i] for each i of an index array, gathered in C."""
    if len(index) == len(items):
        return items
    if len(index) == 0:
        return []
    if len(index) == 1:
        return [items[index[0]]]
    return itemgetter(*index.tolist())(items)


def _numbers(items: list, getter, dtype, fill) -> np.ndarray:
    """One numeric field of every item as a column; None (a JSON null) reads as `fill`."""
    try:
        return np.fromiter(map(getter, items), dtype, len(items))
    except TypeError:
        return np.array([fill if v is None else v for v in map(getter, items)], dtype=dtype)


class _NameIds(dict):
    """Event name -> its index in `names`, a name first seen appended (so lookups stay in C)."""

    def __init__(self, names: list[str]):
        super().__init__()
        self.names = names

    def __missing__(self, name: str) -> int:
        self[name] = i = len(self.names)
        self.names.append(name)
        return i


class _Ids(dict):
    """pid/tid/stream value -> int64 id: a number is itself, a string gets `num_id`'s stable negative id;
    filled on first sight of each value, so lookups stay in C."""

    def __init__(self, num_id):
        super().__init__()
        self.num_id = num_id

    def __missing__(self, v) -> int:
        code = v if v.__class__ is int else self.num_id(v)
        self[v] = code
        return code


class _Kinds(dict):
    """(ph, cat, name, pid, tid) -> a dense id: the few hundred kinds of event a trace repeats. One lookup per
    event gives its code, and its name's and pid's and tid's ids once those are resolved, from arrays by kind
    (one C-level pass where a pass per field cost ~0.2 us more per event). Filled on first sight of each kind."""

    UNSET = -(2**63)  # an id not resolved yet (`resolve`; a pid or tid of this value is only looked up again)

    def __init__(self) -> None:
        super().__init__()
        self.codes = _Codes()
        self.keys: list[tuple] = []
        self.filled = 0  # kinds whose code is in `code` (the arrays' first rows; the rest is room to grow)
        self.code = np.zeros(0, dtype=np.int8)
        self.name, self.pid, self.tid = (np.zeros(0, dtype=np.int64) for _ in range(3))

    def __missing__(self, key: tuple) -> int:
        self[key] = i = len(self.keys)
        self.keys.append(key)
        return i

    def ids(self, events: list[schema.Event]) -> np.ndarray:
        """Each event's kind, the arrays by kind grown to hold the kinds seen (at least doubling: a trace whose
        every event is a kind of its own, say a name with a counter in it, still costs linear time)."""
        kind = np.fromiter(map(self.__getitem__, map(_KIND, events)), np.intp, len(events))
        if (have := self.filled) < len(self.keys):
            if len(self.keys) > len(self.code):
                size = max(len(self.keys), 2 * len(self.code), 64)
                self.code = _grown(self.code, size, 0)
                self.name, self.pid, self.tid = (_grown(a, size, self.UNSET) for a in (self.name, self.pid, self.tid))
            self.code[have : len(self.keys)] = list(map(self.codes.__getitem__, map(_PH_CAT, self.keys[have:])))
            self.filled = len(self.keys)
        return kind

    def resolve(self, kind: np.ndarray, by_kind: np.ndarray, lookup: dict, field: int) -> np.ndarray:
        """The ids (`lookup[key[field]]`, which numbers values on first sight) of rows of these kinds, looked up
        only for kinds not resolved yet, in row order: every value's first sight, so the same numbering, as a
        lookup of every row in turn."""
        got = by_kind[kind]
        unset = got == self.UNSET
        if unset.any():
            new = list(dict.fromkeys(kind[unset].tolist()))  # each kind once, in order of its first row
            values = map(itemgetter(field), map(self.keys.__getitem__, new))
            by_kind[new] = np.fromiter(map(lookup.__getitem__, values), np.int64, len(new))
            got = by_kind[kind]
        return got


def _grown(a: np.ndarray, size: int, fill: int) -> np.ndarray:
    """A copy of `a` with room for `size` items, the new ones `fill`."""
    out = np.full(size, fill, dtype=a.dtype)
    out[: len(a)] = a
    return out


class NotSplit(Exception):
    """A trace read in two processes cannot be joined into exactly what one read gives: read it in one."""


class Part(msgspec.Struct):
    """The first part of a trace's events as another process read it: its column pieces joined, and what
    numbers them (names and string ids in order of first sight), for `_Builder.after`."""

    gpu: list[dict]
    host: list[dict]
    names: list[str]
    str_ids: dict[str, int]
    thread_names: dict[tuple[int, int], str]
    bad_time: int
    cbf_count: int
    cbf_us: float
    host_rows: int
    comm: list[tuple]


class _Builder:
    """Accumulates the columns of a trace's events, chunk by chunk, in file order."""

    def __init__(self, path: Path):
        self.path = path
        self.kinds = _Kinds()
        self.names: list[str] = []
        self.name_id = _NameIds(self.names)
        self.str_ids: dict[str, int] = {}
        self.id_of = _Ids(self.num_id)
        self.thread_names: dict[tuple[int, int], str] = {}
        self.gpu, self.host = Columns(), Columns()
        self.bad_time = 0
        self.dropped = 0
        self.cbf_count, self.cbf_us = 0, 0.0
        self.cbf_durations: list[float] = []  # each one, in order: a part read after another adds them to its sum
        self.host_rows = 0  # host rows so far: the row of a chunk's event i is host_rows + i
        self.comm: list[tuple] = []  # collective calls: host row, collective, pg, group size, in, out, dtype
        self.events_end: int | None = None  # a streamed read: where the events array's `]` is (Trace.events_end)
        self.seen = 0  # events given to add so far (read or dropped)
        self.json_total = 0  # bytes of JSON this builder's chunks are expected to add up to (0: not known) ...
        self.json_seen = 0  # ... and those seen so far: together, the rows each table is expected to reach

    def num_id(self, v) -> int:
        """Kineto ids are ints; a few (`"Spans"`) are strings: give those stable negative ids."""
        if v.__class__ is int:
            return v
        return self.str_ids.setdefault(v, -1 - len(self.str_ids))

    def ids(self, values) -> np.ndarray:
        """pid/tid/stream values (an iterable of ints and strings) as int64, strings mapped by `num_id`."""
        values = list(values)
        return np.fromiter(map(self.id_of.__getitem__, values), np.int64, len(values))

    def expect(self, rows: int) -> int:
        """The rows a table is expected to hold at the end once it holds `rows`, from the share of the JSON seen
        (0: not known); 2% over, so that a steady trace's columns grow once or twice (columns.capacity)."""
        if not self.json_total or not self.json_seen:
            return 0
        return int(rows * 1.02 * max(self.json_total, self.json_seen) / self.json_seen)

    def add(self, events: list[schema.Event], dropped: int = 0, size: int = 0) -> None:
        """Turn one chunk of decoded events (`size`: its bytes of JSON, 0 when not known) into column pieces."""
        self.dropped += dropped
        self.json_seen += size
        n = len(events)
        self.seen += n + dropped
        if n == 0:
            return
        combo = self.kinds.ids(events)
        codes = self.kinds.code[combo]
        if codes[0] == NO_PHASE and (codes == NO_PHASE).all():
            raise CheckupError(f"{self.path}: not a trace: events {self.seen - n - dropped + 1} to {self.seen} have "
                               "no phase (`ph`), which every trace event has (a stream of empty objects?)")
        for i in np.flatnonzero(codes >= META).tolist():
            self._one(events[i], codes[i])
        keep = np.flatnonzero((codes >= 0) & (codes < META))
        kept = _take(events, keep)
        codes, combo = codes[keep], combo[keep]
        ts = np.fromiter(map(_TS, kept), np.float64, len(kept))
        dur = np.fromiter(map(_DUR, kept), np.float64, len(kept))
        end = ts + dur
        ok = np.isfinite(end) & (dur >= 0) & (dur <= MAX_EVENT_US) & (np.abs(ts) <= MAX_TS_US)
        if not ok.all():
            self.bad_time += int((~ok).sum())
            good = np.flatnonzero(ok)
            kept, codes, combo, ts, end = _take(kept, good), codes[good], combo[good], ts[good], end[good]
        names = self.kinds.resolve(combo, self.kinds.name, self.name_id, 2)
        on_gpu = codes >= GPU_BASE
        g, h = np.flatnonzero(on_gpu), np.flatnonzero(~on_gpu)
        if len(g):
            self.gpu.append(self._gpu(_take(kept, g), codes[g], names[g], ts[g], end[g]),
                            self.expect(len(self.gpu) + len(g)))
        if len(h):
            self.host.append(self._host(_take(kept, h), codes[h], names[h], ts[h], end[h], combo[h]),
                             self.expect(len(self.host) + len(h)))

    def _one(self, ev: schema.Event, code: int) -> None:
        """A metadata or overhead event: the few read one by one."""
        if code == META:
            if ev.name == "thread_name" and ev.args.name:
                self.thread_names[(self.num_id(ev.pid), self.num_id(ev.tid))] = ev.args.name
        elif ev.name == "Command Buffer Full":
            self.cbf_count += 1
            self.cbf_us += float(ev.dur)
            self.cbf_durations.append(float(ev.dur))

    def _gpu(self, evs: list, codes, names, start, end) -> dict:
        args = list(map(_ARGS, evs))
        device = _numbers(args, _DEVICE, np.int64, schema.NO_INT)
        absent = np.flatnonzero(device == schema.NO_INT)
        if len(absent):  # no `device` argument: the pid, when it is a number
            pids = list(map(_PID, _take(evs, absent)))
            device[absent] = [p if p.__class__ is int else 0 for p in pids]
        stream = _numbers(args, _STREAM, np.int64, schema.NO_INT)
        absent = np.flatnonzero(stream == schema.NO_INT)
        if len(absent):  # no `stream` argument: the tid
            stream[absent] = self.ids(map(_TID, _take(evs, absent)))
        cols = {"kind": (codes - GPU_BASE).astype(np.int8), "name": names.astype(np.int32),
                "device": device.astype(np.int32), "stream": stream, "start": start, "end": end}
        _arg_columns(args, codes, GPU_COLUMNS, cols)
        return cols

    def _host(self, evs: list, codes, names, start, end, combo) -> dict:
        n, kinds = len(evs), self.kinds
        args = list(map(_ARGS, evs))
        pid = kinds.resolve(combo, kinds.pid, self.id_of, 3)  # all pids before the tids: string ids in that order
        cols = {"cat": codes.astype(np.int8), "name": names.astype(np.int32), "pid": pid,
                "tid": kinds.resolve(combo, kinds.tid, self.id_of, 4), "start": start, "end": end}
        _arg_columns(args, codes, HOST_COLUMNS, cols)
        collective = list(map(_COLLECTIVE, args))
        if collective.count(None) < n:  # the few collective calls, one by one
            for i in np.flatnonzero(np.array(collective, dtype=object) != None).tolist():  # noqa: E711
                a = args[i]
                self.comm.append((self.host_rows + i, collective[i], a.pg_name or "", a.group_size,
                                  a.in_msg_nelems, a.out_msg_nelems, a.dtype or ""))
        self.host_rows += len(evs)
        return cols

    def part(self) -> Part:
        """What this builder read, to be joined before the rest of the trace (read by another builder)."""
        return Part(_piece(self.gpu), _piece(self.host), self.names, self.str_ids, self.thread_names,
                    self.bad_time, self.cbf_count, self.cbf_us, self.host_rows, self.comm)

    def after(self, p: Part) -> None:
        """Put part p (the events before this builder's) first, as one read of both gives: p's names and
        string ids keep their numbers, this builder's are renumbered after them (NotSplit where a string id
        would move: its pid/tid values could not all be told from numbers)."""
        str_ids = dict(p.str_ids)
        for v, old in self.str_ids.items():
            if str_ids.setdefault(v, -1 - len(str_ids)) != old:
                raise NotSplit("string ids first seen in a different order")
        name_id = _NameIds(list(p.names))
        name_id.update(zip(p.names, range(len(p.names))))
        rename = np.fromiter(map(name_id.__getitem__, self.names), np.int32, len(self.names))
        if np.any(rename != np.arange(len(rename))):
            for table in (self.gpu, self.host):
                if len(table):
                    names = table.column("name")
                    names[:] = rename[names]
        self.names[:] = name_id.names
        self.str_ids = str_ids
        self.thread_names = {**p.thread_names, **self.thread_names}
        for pieces, table in ((p.gpu, self.gpu), (p.host, self.host)):
            while pieces:  # at most one; each column joined and its sources freed in turn
                table.prepend(pieces.pop())
        self.bad_time += p.bad_time
        self.cbf_count += p.cbf_count
        us = p.cbf_us
        for d in self.cbf_durations:  # in file order, as one read adds them
            us += d
        self.cbf_us = us
        self.comm = p.comm + [(row + p.host_rows, *rest) for row, *rest in self.comm]
        self.host_rows += p.host_rows

    def gpu_table(self) -> GpuOps:
        """The GPU columns, sorted by start."""
        cols = _finished(self.gpu, ("kind", "name", "device", "stream", "start", "end"), GPU_COLUMNS)
        gpu = GpuOps(**cols)
        order = np.argsort(gpu.start, kind="stable")
        return gpu if np.all(order[1:] > order[:-1]) else gpu.take(order)

    def host_table(self) -> HostEvents:
        """The host columns, in file order."""
        return HostEvents(**_finished(self.host, ("cat", "name", "pid", "tid", "start", "end"), HOST_COLUMNS))


@functools.cache
def _of_cats(cats: tuple[int, ...]) -> np.ndarray:
    """A lookup table: event code -> whether it is one of these categories."""
    table = np.zeros(META, dtype=bool)
    table[list(cats)] = True
    return table


def _arg_columns(args: list, codes: np.ndarray, columns: tuple[Column, ...], cols: dict) -> None:
    """Add the declared argument columns of a chunk's rows (the events' `args`, event codes `codes`) to `cols`."""
    rows_of: dict = {}
    for c in columns:
        if c.cats not in rows_of:  # the rows of these categories, and their events
            rows = np.flatnonzero(_of_cats(c.cats)[codes]) if c.cats is not None else np.arange(len(args))
            rows_of[c.cats] = rows, _take(args, rows)
        rows, sub = rows_of[c.cats]
        get = attrgetter(c.arg)
        if c.dtype is None:  # raw JSON: one byte string and the length of each row's part
            raws = list(map(get, sub))
            lengths = np.zeros(len(args), dtype=np.int64)
            lengths[rows] = np.fromiter(map(len, raws), np.int64, len(raws))
            cols[c.field] = (b"".join(raws), lengths)
        elif len(rows) == len(args):
            cols[c.field] = _numbers(sub, get, c.dtype, c.fill)
        else:
            col = np.full(len(args), c.fill, dtype=c.dtype)
            col[rows] = _numbers(sub, get, c.dtype, c.fill)
            cols[c.field] = col


_DTYPES = {"kind": np.int8, "cat": np.int8, "name": np.int32, "device": np.int32, "stream": np.int64,
           "pid": np.int64, "tid": np.int64, "start": np.float64, "end": np.float64}


def _column_dtype(field: str) -> type:
    """The dtype of a table column, for an empty table."""
    declared = {c.field: c.dtype for c in GPU_COLUMNS + HOST_COLUMNS}
    return _DTYPES.get(field) or declared[field]


def _finished(table: Columns, fixed: tuple[str, ...], args: tuple[Column, ...]) -> dict:
    """A table's finished columns by field (raw ones as `RawColumn`s); `table` is emptied."""
    numeric = fixed + tuple(c.field for c in args if c.dtype is not None)
    raw = tuple(c.field for c in args if c.dtype is None)
    cols = table.take(numeric, raw, {f: _column_dtype(f) for f in numeric})
    for f in raw:
        cols[f] = RawColumn(*cols[f])
    return cols


def _piece(table: Columns) -> list[dict]:
    """A table's rows so far as at most one piece (`Columns.append`'s format), to send to another process: views
    of its buffers (the process sends them, then ends)."""
    piece = table.piece(copy=False)
    return [piece] if piece is not None else []


def _decode_events(data: bytes) -> tuple[list[schema.Event], int]:
    """One chunk's events, strictly, else loosely (dropping what cannot be read); also the number dropped."""
    try:
        return _EVENTS.decode(data), 0
    except msgspec.ValidationError:
        pass
    objs = _LOOSE.decode(data)  # a DecodeError here means the chunk is not whole JSON
    return _convert_loosely(objs)


_RAW_ARGS = [f.encode_name for f in msgspec.structs.fields(schema.Args) if f.type is msgspec.Raw]


def _convert_loosely(objs: list) -> tuple[list[schema.Event], int]:
    """Untyped events as `schema.Event`s, converting what converts ("12" -> 12); also the number dropped."""
    good, dropped = [], 0
    for ev in objs:
        if not isinstance(ev, dict):  # not an event (and converting it would raise, ~3 us each)
            dropped += 1
            continue
        args = ev.get("args")
        if isinstance(args, dict):  # raw arguments were decoded: back to JSON bytes
            for k in _RAW_ARGS:
                if k in args:
                    args[k] = msgspec.Raw(msgspec.json.encode(args[k]))
        try:
            good.append(msgspec.convert(ev, schema.Event, strict=False))
        except msgspec.ValidationError:
            dropped += 1
    return good, dropped


def _decode_top(path: Path, data: bytes, why: str | None = None) -> tuple[schema.KinetoTrace, object]:
    """The top-level object, strictly, else field by field (dropping those that cannot be read), and its raw
    `traceEvents` when the loose route had to be taken (a whole read, `why` given: only up to LOOSE_READ_BYTES)."""
    try:
        return _TOP.decode(data), None
    except msgspec.ValidationError as e:
        if why is not None and len(data) > chunks.LOOSE_READ_BYTES:
            raise CheckupError(f"{path}: not read: it cannot be cut into events ({why}), its JSON is not a trace's "
                               f"({_short(e)}) and is over {chunks.LOOSE_READ_BYTES >> 20} MiB, too much to read "
                               "untyped") from None
    except msgspec.DecodeError as e:
        raise CheckupError(f"{path}: not valid JSON ({_short(e)}); the trace may be truncated or corrupt") from None
    try:
        obj = _LOOSE.decode(data)
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
    return msgspec.convert(top, schema.KinetoTrace, strict=False), events


def _read_streaming(path: Path, b: _Builder) -> schema.KinetoTrace:
    """Read chunk by chunk; `chunks.StreamError` when the file cannot be cut (then read it whole)."""
    stream = _event_chunks(path)
    b.json_total = json_bytes(path)
    stream.feed(lambda chunk: b.add(*_decode_events(chunk), size=len(chunk)))
    kt, events = _decode_top(path, stream.top)
    if kt.traceEvents != [] or events not in (None, []):
        raise chunks.StreamError("the traceEvents found is not the top-level one")
    b.events_end = stream.array_end
    return kt


def _read_whole(path: Path, b: _Builder, why: str = "") -> schema.KinetoTrace:
    """Read the whole file at once (a file the stream could not cut: unusual layout, or bad JSON), when it holds
    at most chunks.WHOLE_READ_BYTES of JSON (else one line, with `why` the stream could not cut it)."""
    try:
        data = read_bytes(path, chunks.WHOLE_READ_BYTES)
    except CheckupError as e:
        if "cannot be cut" not in str(e):
            raise
        raise CheckupError(f"{path}: not read: it cannot be cut into events ({why}) and holds over "
                           f"{chunks.WHOLE_READ_BYTES >> 20} MiB of JSON, too much to read whole") from None
    if not chunks.has_text(data):  # not data.strip(): that is a second copy of up to WHOLE_READ_BYTES
        raise CheckupError(f"{path}: file is empty")
    kt, events = _decode_top(path, data, why)
    if events is not None:
        if not isinstance(events, list):
            raise CheckupError(f"{path}: `traceEvents` is a JSON {type(events).__name__}, expected a list")
        kt.traceEvents = []
        for i in range(0, len(events), EVENTS_PER_PASS):
            b.add(*_convert_loosely(events[i : i + EVENTS_PER_PASS]))
    elif kt.traceEvents is not None:
        for i in range(0, len(kt.traceEvents), EVENTS_PER_PASS):
            b.add(kt.traceEvents[i : i + EVENTS_PER_PASS])
        kt.traceEvents = []
    return kt


def _add_strict(b: _Builder, chunk: memoryview) -> None:
    """One chunk of a split read: a chunk that only reads loosely makes NotSplit (dropped events and raw
    arguments written again depend on where the chunks were cut: the one-process read decides those)."""
    try:
        events = _EVENTS.decode(chunk)
    except msgspec.ValidationError:
        raise NotSplit("a chunk with fields of unexpected types") from None
    b.add(events, size=len(chunk))


def _first_part(path: Path, at: int) -> Part | None:
    """In the forked child: the events before the split point of offset `at` (chunks.EventChunks.feed)."""
    b = _Builder(path)
    b.json_total = at
    stream = _event_chunks(path)
    return b.part() if stream.feed(functools.partial(_add_strict, b), stop=at) else None


def _event_chunks(path: Path) -> chunks.EventChunks:
    """The file's chunks of events, gunzipped ahead on a thread where a processor is idle for it."""
    source = chunks.blocks(path)
    if parallel.cores() >= 2 and parallel.idle_cores() >= PREFETCH_IDLE_CORES:
        source = chunks.prefetched(source)
    return chunks.EventChunks(path, source)


def json_bytes(path: Path) -> int:
    """The file's JSON size (a gzip file's, from its trailer: exact below 4 GiB, else at least the file's size)."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            f.seek(0)
            if f.read(2) != b"\x1f\x8b" or size < 18:
                return size
            f.seek(-4, 2)
            isize = int.from_bytes(f.read(4), "little")
    except OSError:
        return 0
    while isize < size:  # the trailer holds the size modulo 4 GiB
        isize += 1 << 32
    return isize


def _read_split(path: Path) -> tuple[_Builder, schema.KinetoTrace] | None:
    """Read a large file in two processes: a forked child the events before the middle, this process the rest,
    joined into exactly what one read gives. None (read it in one) when it is small, there is one core, the
    child cannot start or fails, or anything is unusual (bad JSON or types, a cut the child cannot prove)."""
    size = json_bytes(path)
    if size < SPLIT_BYTES or parallel.cores() < 2 or parallel.idle_cores() < SPLIT_IDLE_CORES:
        return None
    if (ratio := chunks.ratio_limit()) is not None and size > ratio * path.stat().st_size + chunks.RATIO_FLOOR:
        return None  # a compressed bomb by its trailer: the one-process read refuses it, at once
    from gpucheckup.trace import child  # the fork and the pipe: only for a split read

    at = int(size * SPLIT_AT)
    first = child.start(functools.partial(_first_part, path, at))
    if first is None:
        return None
    try:
        t0 = time.monotonic()
        b = _Builder(path)
        b.json_total = size - at
        stream = _event_chunks(path)
        stream.feed(functools.partial(_add_strict, b), start=at)
        kt, events = _decode_top(path, stream.top)
        if kt.traceEvents != [] or events not in (None, []):
            return None
        part = first.result(SPLIT_WAIT_S + 5 * (time.monotonic() - t0))
        if part is None:
            return None
        b.after(part)
        b.events_end = stream.array_end
        return b, kt
    except Exception:  # noqa: BLE001 - whatever it is, the one-process read says it (or reads the file)
        return None
    finally:
        first.close()


def read_tables(path: Path, split: bool = False) -> tuple[_Builder, schema.KinetoTrace]:
    """Stream the file into column pieces and its top-level fields (`split`: a large file in two processes)."""
    check_regular(path)
    try:
        try:
            if split and (got := _read_split(path)) is not None:
                return got
            b = _Builder(path)
            return b, _read_streaming(path, b)
        except chunks.StreamError as e:
            why = str(e)  # the whole read comes after this block: its traceback held the stream's buffer (64 MiB)
        b = _Builder(path)
        return b, _read_whole(path, b, why)
    except RecursionError:
        raise CheckupError(f"{path}: JSON nested too deeply (over about {sys.getrecursionlimit()} levels): "
                           "not a profiler trace") from None


def build_trace(path: Path, b: _Builder, kt: schema.KinetoTrace) -> Trace:
    """The `Trace` of a file's columns and top-level fields."""
    if kt.traceEvents is None:
        raise CheckupError(f"{path}: not a PyTorch profiler trace (no `traceEvents` list)")
    if kt.schemaVersion is not None and kt.schemaVersion not in SUPPORTED_SCHEMA_VERSIONS:
        raise CheckupError(
            f"{path}: unknown Kineto schemaVersion {kt.schemaVersion} (gpucheckup reads "
            f"{', '.join(map(str, sorted(SUPPORTED_SCHEMA_VERSIONS)))})"
        )
    warnings: list[str] = []
    if b.bad_time:
        warnings.append(f"{b.bad_time} events with a negative, non-finite or over-a-day duration "
                        "or an out-of-range timestamp were ignored")
    if b.dropped:
        warnings.append(f"{b.dropped} events with fields of unexpected types could not be read and were ignored")
    gpu, host = b.gpu_table(), b.host_table()
    if len(gpu) == 0 and len(host) == 0:
        raise CheckupError(f"{path}: the trace holds no profiler events (empty `traceEvents`)")
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
    return Trace(
        path=str(path),
        names=b.names,
        gpu=gpu,
        host=host,
        devices=devices,
        thread_names=b.thread_names,
        base_time_ns=kt.baseTimeNanoseconds,
        schema_version=kt.schemaVersion,
        rank=dist.rank if dist is not None else None,
        world_size=dist.world_size if dist is not None else None,
        with_stack=bool(kt.with_stack),
        record_shapes=bool(kt.record_shapes),
        cuda_runtime_version=kt.cuda_runtime_version,
        cuda_driver_version=kt.cuda_driver_version,
        command_buffer_full_count=b.cbf_count,
        command_buffer_full_us=b.cbf_us,
        warnings=warnings,
        comms=_comm_args(b.comm),
        light_activities=_light_activities(kt.gpucheckup_light),
        counters=_counters(kt.gpucheckup_light),
        events_end=b.events_end,
    )


def _light_activities(info: schema.LightInfo | None) -> tuple[str, ...] | None:
    """A CUPTI light window's recorded kinds, from its `gpucheckup_light` block (None: not such a trace)."""
    if info is None or info.activities is None:
        return None
    return tuple(info.activities)


def _counters(info: schema.LightInfo | None) -> Counters | None:
    """A light window's counter steps and samples as a table; None where it has none. Samples with a bad time (not
    finite, a negative duration) or a share outside 0..100 are left out."""
    c = info.counters if info is not None else None
    if c is None or not c.steps:
        return None
    smp = c.samples
    n = min(len(smp.ts), len(smp.dur), len(smp.busy_pct))
    start = np.asarray(smp.ts[:n], dtype=np.float64)
    dur = np.asarray(smp.dur[:n], dtype=np.float64)
    busy = np.asarray(smp.busy_pct[:n], dtype=np.float64)
    launches = np.full(n, np.nan)
    if len(smp.launches) >= n:
        launches = np.asarray(smp.launches[:n], dtype=np.float64)
    ok = np.isfinite(start) & np.isfinite(dur) & (dur >= 0) & (busy >= 0) & (busy <= 100)
    steps = np.asarray(c.steps, dtype=np.float64).reshape(-1, 2)
    steps = steps[np.isfinite(steps).all(axis=1) & (steps[:, 1] >= steps[:, 0])]
    if not len(steps):
        return None
    return Counters(device=int(c.device), metrics=list(c.metrics), interval_us=c.interval_ns / 1000.0,
                    step_start=steps[:, 0], step_end=steps[:, 1], start=start[ok], end=start[ok] + dur[ok],
                    busy_pct=busy[ok], launches=launches[ok])


def _comm_args(rows: list[tuple]) -> CommArgs | None:
    """The collective calls' arguments as a table (many GPUs, issue 9)."""
    if not rows:
        return None
    num = np.array([[np.nan if v is None else v for v in r[3:6]] for r in rows], dtype=np.float64)
    return CommArgs(host_row=np.array([r[0] for r in rows], dtype=np.int64), collective=[r[1] for r in rows],
                    pg=[r[2] for r in rows], group_size=num[:, 0], in_nelems=num[:, 1], out_nelems=num[:, 2],
                    dtype=[r[6] for r in rows])


def read_trace(path: str | Path, split: bool = False) -> Trace:
    """Read one trace file into a `Trace` (`split`: a large file in two processes, where this process is not
    itself one of several workers)."""
    path = Path(path)
    gc_was_on = gc.isenabled()
    gc.disable()  # hundreds of thousands of acyclic objects: the cycle collector only costs time here
    try:
        trace = build_trace(path, *read_tables(path, split))
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
    """Whether a JSON file's first megabytes name `traceEvents` (configuration and metadata files do not), or are
    not JSON at all (zeros, binary: a damaged or hostile trace, which read_trace names and says why)."""
    try:
        with open(path, "rb") as f:
            gz = f.read(2) == b"\x1f\x8b"
        with (gzip.open(path, "rb") if gz else open(path, "rb")) as f:
            head = f.read(SNIFF_BYTES)
    except (OSError, EOFError, zlib.error):
        return True  # unreadable: let read_trace say why in one line
    if b'"traceEvents"' in head:
        return True
    first = head.lstrip()[:1]
    return first != b"" and first not in b"{[\"-0123456789tfn"  # any JSON text starts with one of these


def find_trace_files(folder: Path) -> list[Path]:
    """The trace files of a folder: those in its `traces/` subfolder when it has one, else the JSON files
    directly in it that look like traces (so meta.json, env.json or manifest.json beside them are skipped)."""
    sub = folder / "traces"
    if sub.is_dir():
        found = sorted(p for p in sub.iterdir() if p.is_file() and is_trace_file(p))
        if found:
            return found
    return sorted(p for p in folder.iterdir() if p.is_file() and is_trace_file(p) and looks_like_trace(p))

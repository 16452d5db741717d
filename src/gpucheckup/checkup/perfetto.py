"""The annotated trace: the original trace with gpucheckup's tracks added, for ui.perfetto.dev.

The original file is streamed through, never held whole: the reader noted where its top-level
`traceEvents` array ends (`Trace.events_end`, proven as it cut the array into chunks), and the
file's decompressed bytes are written unchanged up to that `]`, then gpucheckup's events, then the
rest of the file; a gzip output is compressed on the way (ISA-L's deflate where `isal` is
installed). A file the reader could not stream (read whole) is re-read whole, untyped
(`msgspec.Raw`): every top-level value and every byte of the array written back unchanged, our
events appended to it. They live in a process of their own (a pid the trace does
not use, named "gpucheckup" with a process_name "M" event), one thread per track:

- "steps" (X slices): each step window, named by its ProfilerStep label, with its busy share
  and idle time by cause in args;
- "idle gaps: GPU d" (X slices): each idle gap of device d, named `idle: <cause>` after the
  cause holding most of it, with the time of every cause in args;
- "sync points" (thread-scoped "i" instants): each host-GPU sync point, named after its op;
- "GPU busy per step" ("C" counter): the step's GPU busy percent, one sample at each step's start;
- findings: one global instant ("i", "s": "g") per finding at its first trace pointer (or the
  window's start), and each trace pointer with a duration as an async slice ("b"/"e" with an
  id), since pointers of different findings may overlap.

Timestamps are microseconds on the trace's own clock, rounded to the nanosecond. Slices on one
track never overlap: where one ends exactly where the next begins (gaps cut at a step
boundary, consecutive steps), it is shortened by 1 ns so that a reader that rounds or
truncates to integer nanoseconds still sees them as siblings.
"""

from __future__ import annotations

import math
import zlib
from pathlib import Path

import msgspec
import numpy as np

from gpucheckup.analysis.checkup import TraceAnalysis
from gpucheckup.analysis.distinct import unique
from gpucheckup.analysis.one_trace.host.gap_causes import CAUSES
from gpucheckup.atomic import open_atomic
from gpucheckup.checkup.trace_report import _clean
from gpucheckup.diagnosis import Diagnosis
from gpucheckup.errors import CheckupError
from gpucheckup.safe_text import json_escaped
from gpucheckup.trace import chunks
from gpucheckup.trace.reader import read_bytes

try:  # ISA-L's deflate: gzip output at a fraction of zlib's CPU (docs/performance.md)
    from isal.isal_zlib import compressobj as _compressobj
    GZIP_LEVEL = 2
except ImportError:  # a platform without its wheel: the standard library's
    _compressobj = zlib.compressobj
    GZIP_LEVEL = 1

PID_BASE = 1_000_000_001  # first pid tried for gpucheckup's process; the next free one is taken
TID_STEPS, TID_SYNCS, TID_FINDINGS, TID_GAPS = 1, 2, 3, 100  # gap track of device d: TID_GAPS + d
CAT = "gpucheckup"
COUNTER = "GPU busy per step"


def annotations(a: TraceAnalysis, d: Diagnosis) -> list[dict]:
    """gpucheckup's events for one trace (its analysis and diagnosis): metadata, steps, gaps, syncs, busy counter,
    findings."""
    used = set(unique(a.trace.host.pid).tolist()) | set(unique(a.trace.gpu.device).tolist())
    pid = PID_BASE
    while pid in used:
        pid += 1
    st = a.steps
    ev: list[dict] = [
        _meta(pid, 0, "process_name", name="gpucheckup"),
        _meta(pid, 0, "process_sort_index", sort_index=-1),
        _meta(pid, TID_STEPS, "thread_name", name="steps"),
        _meta(pid, TID_SYNCS, "thread_name", name="sync points"),
        _meta(pid, TID_FINDINGS, "thread_name", name="findings"),
    ]
    for k, tid in enumerate((TID_STEPS, TID_SYNCS, TID_FINDINGS)):
        ev.append(_meta(pid, tid, "thread_sort_index", sort_index=k))
    busy = _clean([float(x) for x in a.timeline.step_busy_pct])  # as the report gives them
    ev += _step_track(a, pid, busy)
    ev += _gap_tracks(a, pid)
    for p in _clean(msgspec.to_builtins(a.syncs.points)):
        ev.append({"ph": "i", "s": "t", "name": p["op"], "cat": CAT, "pid": pid, "tid": TID_SYNCS,
                   "ts": _us(_ns(p["t_us"])),
                   "args": {"inner_op": p.get("inner_op"), "user_frame": p.get("frame"),
                            "host_blocked_us": round(p["blocked_us"], 3), "gpu_idle_us": round(p["gpu_idle_us"], 3)}})
    for i in range(st.count):
        ev.append({"ph": "C", "name": COUNTER, "cat": CAT, "pid": pid, "ts": _us(_ns(st.start[i])),
                   "args": {"busy_pct": round(busy[i], 3)}})
    return ev + _finding_marks(_clean([f.to_dict() for f in d.findings]), pid, st.start)


def _step_track(a: TraceAnalysis, pid: int, busy: list[float]) -> list[dict]:
    """The steps track: one slice per step with its GPU busy, time and idle time by cause."""
    st = a.steps
    idle_by_step = _idle_by_step(a)
    steps = []
    step_us = st.duration  # once: a new array each time (per step it was steps x steps)
    for i in range(st.count):
        steps.append((_ns(st.start[i]), _ns(st.end[i]), st.labels[i], {
            "step": i, "gpu_busy_pct": round(busy[i], 3), "step_ms": round(float(step_us[i]) / 1000, 6),
            **{f"idle_ms_{c}": round(v, 6) for c, v in idle_by_step[i].items() if v > 0}}))
    return _x_track(pid, TID_STEPS, steps)


def _gap_tracks(a: TraceAnalysis, pid: int) -> list[dict]:
    """One idle-gap track per device: each gap a slice named by its main cause, its time by cause in its args."""
    st, g = a.steps, a.timeline.gaps
    gap_us = g.dur  # once: a new array each time
    ev: list[dict] = []
    dom = a.causes.dominant()
    by_device = np.argsort(g.device, kind="stable")  # one sort, not a mask per device
    devs = g.device[by_device]
    cut = np.flatnonzero(np.r_[True, devs[1:] != devs[:-1], True]) if len(devs) else np.zeros(1, dtype=np.int64)
    for dev, gap_rows in zip(devs[cut[:-1]].tolist(), np.split(by_device, cut[1:-1])):
        tid = TID_GAPS + int(dev)
        ev.append(_meta(pid, tid, "thread_name", name=f"idle gaps: GPU {dev}"))
        ev.append(_meta(pid, tid, "thread_sort_index", sort_index=10 + int(dev)))
        slices = []
        rows = (a.causes.time[gap_rows].tolist(), g.step[gap_rows].tolist(), gap_us[gap_rows].tolist(),
                g.position[gap_rows].tolist(), g.start[gap_rows].tolist(), g.end[gap_rows].tolist(),
                dom[gap_rows].tolist())  # Python numbers once, not a numpy scalar per gap and cause
        for times, step, dur, position, start, end, cause in zip(*rows):
            args = {f"{c}_us": round(v, 3) for c, v in zip(CAUSES, times) if v > 0}
            args.update(gap_us=round(dur, 3), step=st.labels[step] if step >= 0 else None,
                        position_in_step=round(position, 4))
            slices.append((_ns(start), _ns(end), f"idle: {CAUSES[cause]}", args))
        ev += _x_track(pid, tid, sorted(slices, key=lambda s: s[0]))
    return ev


def _finding_marks(findings: list[dict], pid: int, step_starts: np.ndarray) -> list[dict]:
    """The findings track: a mark per finding (at its first event, else the first step), and a slice per event."""
    ev: list[dict] = []
    next_id = 1
    for f in findings:
        pointers = [e for e in f.get("events", []) if e.get("t_us") is not None]
        t0 = min((e["t_us"] for e in pointers), default=step_starts[0])
        ev.append({"ph": "i", "s": "g", "name": f"{f['severity']}: {f['title']}", "cat": CAT, "pid": pid,
                   "tid": TID_FINDINGS, "ts": _us(_ns(t0)),
                   "args": {"finding": f["id"], "rule": f["rule"], "cost_ms_per_step":
                            None if f["cost_ms_per_step"] is None else round(f["cost_ms_per_step"], 4),
                            "evidence": f["evidence"]}})
        for e in pointers:
            if not e.get("dur_ms"):
                continue
            start = _ns(e["t_us"])
            common = {"cat": f"{CAT}.finding", "name": f"{f['id']}: {e['name']}", "id": next_id, "pid": pid,
                      "tid": TID_FINDINGS}
            ev.append({"ph": "b", "ts": _us(start), **common, "args": {"finding": f["title"]}})
            ev.append({"ph": "e", "ts": _us(max(start + 1, _ns(e["t_us"] + 1000 * e["dur_ms"]))), **common})
            next_id += 1
    return ev


def _idle_by_step(a: TraceAnalysis) -> list[dict[str, float]]:
    """Idle ms per cause in each step window, all devices together."""
    out = np.zeros((a.steps.count, len(CAUSES)))
    ok = a.timeline.gaps.step >= 0
    if ok.any():
        np.add.at(out, a.timeline.gaps.step[ok], a.causes.time[ok])
    return [{c: float(out[i, k]) / 1000 for k, c in enumerate(CAUSES)} for i in range(a.steps.count)]


def _ns(t_us: float) -> int:
    ns = float(t_us) * 1000
    if not math.isfinite(ns):  # a trace time near 1e308 us: no nanosecond timestamp holds it
        raise CheckupError(f"a time of {float(t_us):g} us cannot be placed in the annotated trace")
    return int(round(ns))


def _us(ns: int) -> float:
    return ns / 1000


def _meta(pid: int, tid: int, kind: str, **args) -> dict:
    """A metadata event: process_name, thread_name, or a sort index."""
    return {"ph": "M", "name": kind, "pid": pid, "tid": tid, "args": args}


def _x_track(pid: int, tid: int, slices: list[tuple[int, int, str, dict]]) -> list[dict]:
    """Complete events for sorted, non-overlapping slices; touching ones are cut 1 ns short."""
    out = []
    for k, (s, e, name, args) in enumerate(slices):
        if k + 1 < len(slices):
            e = min(e, slices[k + 1][0] - 1)
        if e <= s:
            continue
        out.append({"ph": "X", "name": name, "cat": CAT, "pid": pid, "tid": tid, "ts": _us(s), "dur": _us(e - s),
                    "args": args})
    return out


def annotated_trace(raw: bytes, events: list[dict], source: str = "trace") -> bytes:
    """The original JSON with `events` appended to its traceEvents array, every original byte kept."""
    return _annotated_whole(raw, _encoded(events), source)


def _annotated_whole(raw: bytes, ours: bytes, source: str) -> bytes:
    """The original JSON, read whole, with the encoded elements `ours` appended to its traceEvents array."""
    try:
        doc = msgspec.json.decode(raw, type=dict[str, msgspec.Raw])
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise CheckupError(f"{source}: cannot re-read the trace to annotate it ({str(e).splitlines()[0]})") from None
    parts = []
    for key, value in doc.items():
        v = bytes(value)
        if key == "traceEvents":
            v = _append(v, ours, source)
        parts.append(msgspec.json.encode(key) + b":" + v)
    if "traceEvents" not in doc:
        parts.append(b'"traceEvents":[' + ours + b"]")
    return b"{" + b",\n".join(parts) + b"}\n"


def _encoded(events: list[dict]) -> bytes:
    """gpucheckup's events as the JSON elements to append (every string we write passes here)."""
    return b",\n".join(msgspec.json.encode(e) for e in events)


def _append(array: bytes, ours: bytes, source: str) -> bytes:
    """A JSON array's bytes with more elements at its end."""
    array = array.strip()
    if not (array.startswith(b"[") and array.endswith(b"]")):
        raise CheckupError(f"{source}: traceEvents is not a JSON array, cannot annotate it")
    if not ours:
        return array
    if not array[1:-1].strip():
        return b"[" + ours + b"]"
    return array[:-1].rstrip() + b",\n" + ours + b"]"


def write(a: TraceAnalysis, d: Diagnosis, out: Path) -> None:
    """Write the annotated trace to `out` (atomically), gzip-compressed when its name ends in .gz."""
    path = Path(a.trace.path)
    ours = _encoded(annotations(a, d))
    end = a.trace.events_end
    with open_atomic(out) as f:
        gz = _Gzip(f) if out.name.endswith(".gz") else None
        sink = _Escaped(gz or f)  # DEL, C1 and bidi characters of kernel names as \u escapes: inert in a viewer
        if end is None:
            sink.write(_annotated_whole(read_bytes(path), ours, str(path)))
        else:
            _splice(path, end, ours, sink)
        sink.close()
        if gz is not None:
            gz.close()


def _splice(path: Path, end: int, ours: bytes, sink) -> None:
    """Copy the decompressed file to `sink` block by block, with `ours` appended inside the array whose `]` is at
    offset `end`: the whitespace before that `]` is dropped, a comma added unless the array is empty."""
    at, held = 0, b""  # the offset of the next block; whitespace not yet written (it may end the array)
    last = b""  # the last byte before `end` that is not whitespace
    for block in chunks.blocks(path):
        cut = min(max(end - at, 0), len(block))  # the block's bytes before the `]`
        if cut:
            body = block[:cut].rstrip() if cut < len(block) else block.rstrip()
            if body:
                sink.write(held)
                sink.write(body)
                last, held = body[-1:], block[len(body):cut]
            else:
                held += block[:cut]
        if cut < len(block):
            if at + cut == end:
                if block[cut:cut + 1] != b"]":
                    raise CheckupError(f"{path}: the trace changed while it was being annotated")
                if ours:
                    sink.write((b"" if last == b"[" else b",\n") + ours)
            sink.write(block[cut:] if cut else block)
        at += len(block)
    if at <= end:
        raise CheckupError(f"{path}: the trace changed while it was being annotated")


class _Escaped:
    """A sink that writes JSON through safe_text.json_escaped, block by block: a block's last bytes that may begin
    an unsafe character (a lead byte C2 or E2, or E2 80 / E2 81) wait for the next block."""

    def __init__(self, sink):
        self.sink, self.held = sink, b""

    def write(self, data: bytes) -> None:
        if self.held:
            data = self.held + data
        keep = 2 if data[-2:] in (b"\xe2\x80", b"\xe2\x81") else 1 if data[-1:] in (b"\xc2", b"\xe2") else 0
        self.held = data[len(data) - keep:] if keep else b""
        body = data[:len(data) - keep] if keep else data
        # Most blocks hold no byte that can begin an unsafe character: three memchr scans pass them on as they are
        # (the regex over every block took 0.23 s of CPU for the 64 MB of JSON of launch_bound_stacks, these 0.006).
        self.sink.write(json_escaped(body) if b"\x7f" in body or b"\xc2" in body or b"\xe2" in body else body)

    def close(self) -> None:
        self.sink.write(json_escaped(self.held))
        self.held = b""


class _Gzip:
    """A gzip stream written through to a file: ISA-L's deflate at level 2 where `isal` is installed (~1.5 GB/s
    of JSON on one core: a file ~30% larger than zlib's level 6 gives, for a fifteenth of its CPU), else zlib's
    level 1."""

    def __init__(self, f):
        self.f = f
        self.z = _compressobj(GZIP_LEVEL, wbits=31)

    def write(self, data: bytes) -> None:
        self.f.write(self.z.compress(data))

    def close(self) -> None:
        self.f.write(self.z.flush())

"""The annotated trace: the original trace with gpucheckup's tracks added, for ui.perfetto.dev.

The original file is re-read untyped (`msgspec.Raw`): every top-level value and every byte of
the original `traceEvents` array is written back unchanged, and gpucheckup's events are
appended at the end of that array. They live in a process of their own (a pid the trace does
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

import gzip
import math
from pathlib import Path

import msgspec
import numpy as np

from gpucheckup.analysis.checkup import TraceAnalysis
from gpucheckup.analysis.distinct import unique
from gpucheckup.analysis.gap_causes import CAUSES
from gpucheckup.errors import CheckupError
from gpucheckup.safe_text import json_escaped
from gpucheckup.trace.reader import read_bytes

PID_BASE = 1_000_000_001  # first pid tried for gpucheckup's process; the next free one is taken
TID_STEPS, TID_SYNCS, TID_FINDINGS, TID_GAPS = 1, 2, 3, 100  # gap track of device d: TID_GAPS + d
CAT = "gpucheckup"
COUNTER = "GPU busy per step"


def annotations(a: TraceAnalysis, report: dict) -> list[dict]:
    """gpucheckup's events for one trace: metadata, steps, gaps, syncs, busy counter, findings."""
    used = set(unique(a.trace.host.pid).tolist()) | set(unique(a.trace.gpu.device).tolist())
    pid = PID_BASE
    while pid in used:
        pid += 1
    st, g = a.steps, a.timeline.gaps
    ev: list[dict] = [
        _meta(pid, 0, "process_name", name="gpucheckup"),
        _meta(pid, 0, "process_sort_index", sort_index=-1),
        _meta(pid, TID_STEPS, "thread_name", name="steps"),
        _meta(pid, TID_SYNCS, "thread_name", name="sync points"),
        _meta(pid, TID_FINDINGS, "thread_name", name="findings"),
    ]
    for k, tid in enumerate((TID_STEPS, TID_SYNCS, TID_FINDINGS)):
        ev.append(_meta(pid, tid, "thread_sort_index", sort_index=k))

    busy = report["gpu"]["step_busy_pct"]
    idle_by_step = _idle_by_step(a)
    steps = []
    step_us, gap_us = st.duration, g.dur  # once: each is a new array (per step or gap it was steps x steps)
    for i in range(st.count):
        steps.append((_ns(st.start[i]), _ns(st.end[i]), st.labels[i], {
            "step": i, "gpu_busy_pct": round(busy[i], 3), "step_ms": round(float(step_us[i]) / 1000, 6),
            **{f"idle_ms_{c}": round(v, 6) for c, v in idle_by_step[i].items() if v > 0}}))
    ev += _x_track(pid, TID_STEPS, steps)

    dom = a.causes.dominant()
    by_device = np.argsort(g.device, kind="stable")  # one sort, not a mask per device
    devs = g.device[by_device]
    cut = np.flatnonzero(np.r_[True, devs[1:] != devs[:-1], True]) if len(devs) else np.zeros(1, dtype=np.int64)
    for dev, gap_rows in zip(devs[cut[:-1]].tolist(), np.split(by_device, cut[1:-1])):
        tid = TID_GAPS + int(dev)
        ev.append(_meta(pid, tid, "thread_name", name=f"idle gaps: GPU {dev}"))
        ev.append(_meta(pid, tid, "thread_sort_index", sort_index=10 + int(dev)))
        slices = []
        for j in gap_rows:
            args = {f"{c}_us": round(float(a.causes.time[j, k]), 3) for k, c in enumerate(CAUSES)
                    if a.causes.time[j, k] > 0}
            step = int(g.step[j])
            args.update(gap_us=round(float(gap_us[j]), 3), step=st.labels[step] if step >= 0 else None,
                        position_in_step=round(float(g.position[j]), 4))
            slices.append((_ns(g.start[j]), _ns(g.end[j]), f"idle: {CAUSES[int(dom[j])]}", args))
        ev += _x_track(pid, tid, sorted(slices, key=lambda s: s[0]))

    for p in report["sync"].get("points", []):
        ev.append({"ph": "i", "s": "t", "name": p["op"], "cat": CAT, "pid": pid, "tid": TID_SYNCS,
                   "ts": _us(_ns(p["t_us"])),
                   "args": {"inner_op": p.get("inner_op"), "user_frame": p.get("frame"),
                            "host_blocked_us": round(p["blocked_us"], 3), "gpu_idle_us": round(p["gpu_idle_us"], 3)}})

    for i in range(st.count):
        ev.append({"ph": "C", "name": COUNTER, "cat": CAT, "pid": pid, "ts": _us(_ns(st.start[i])),
                   "args": {"busy_pct": round(busy[i], 3)}})

    next_id = 1
    for f in report["verdict"]["findings"]:
        pointers = [e for e in f.get("events", []) if e.get("t_us") is not None]
        t0 = min((e["t_us"] for e in pointers), default=st.start[0])
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
    try:
        doc = msgspec.json.decode(raw, type=dict[str, msgspec.Raw])
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise CheckupError(f"{source}: cannot re-read the trace to annotate it ({str(e).splitlines()[0]})") from None
    ours = b",\n".join(msgspec.json.encode(e) for e in events)
    parts = []
    for key, value in doc.items():
        v = bytes(value)
        if key == "traceEvents":
            v = _append(v, ours, source)
        parts.append(msgspec.json.encode(key) + b":" + v)
    if "traceEvents" not in doc:
        parts.append(b'"traceEvents":[' + ours + b"]")
    return b"{" + b",\n".join(parts) + b"}\n"


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


def render(a: TraceAnalysis, report: dict, out_name: str) -> bytes:
    """The annotated trace file's bytes, gzip-compressed when the output name ends in .gz."""
    path = Path(a.trace.path)
    data = json_escaped(annotated_trace(read_bytes(path), annotations(a, report), str(path)))  # C1, bidi: inert
    if out_name.endswith(".gz"):
        return gzip.compress(data, compresslevel=6, mtime=0)
    return data

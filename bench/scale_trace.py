"""Tile a real trace K times: a K-times longer run with the same per-step behaviour.

Copy i of every timed event is shifted by i x (the trace's span + 1 ms); every id that links events
(correlation, External id, Python id / parent id, flow `id`, Ev Idx) is offset by i x (the largest
id + 1), so launches still pair with their own kernels; `ProfilerStep#N` becomes N + i x steps.
Metadata events (ph "M") are kept once. The output is written as it is built (one copy at a time).

Usage: python bench/scale_trace.py TRACE K OUT   (OUT ending in .json or .json.gz)
"""

from __future__ import annotations

import gzip
import re
import sys
from pathlib import Path

import msgspec

ARG_IDS = ("correlation", "External id", "Python id", "Python parent id", "Ev Idx")
STEP = re.compile(r"^ProfilerStep#(\d+)$")


def _load(path: Path) -> dict:
    data = path.read_bytes()
    return msgspec.json.decode(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)


def scale(src: Path, k: int, out: Path) -> int:
    """Write the K-times tiled trace; the number of events written."""
    doc = _load(src)
    events = doc.pop("traceEvents")
    meta = [e for e in events if e.get("ph") == "M"]
    timed = [e for e in events if e.get("ph") != "M"]
    xs = [e for e in timed if isinstance(e.get("ts"), (int, float))]
    t0 = min(e["ts"] for e in xs)
    t1 = max(e["ts"] + (e.get("dur") or 0) for e in xs)
    shift = (t1 - t0) + 1000.0
    top_id = 0
    for e in timed:
        if isinstance(e.get("id"), int):
            top_id = max(top_id, e["id"])
        a = e.get("args")
        if isinstance(a, dict):
            top_id = max([top_id] + [a[f] for f in ARG_IDS if isinstance(a.get(f), int)])
    steps = [int(m.group(1)) for e in timed if (m := STEP.match(str(e.get("name", ""))))]
    step_span = (max(steps) - min(steps) + 1) if steps else 0
    enc = msgspec.json.Encoder()
    opener = gzip.open(out, "wb", compresslevel=1) if out.name.endswith(".gz") else open(out, "wb")
    n = 0
    with opener as f:
        head = enc.encode(doc)
        f.write(head[:-1] + (b', "traceEvents": [' if len(doc) else b'"traceEvents": ['))
        f.write(b",\n".join(enc.encode(e) for e in meta))
        n += len(meta)
        for i in range(k):
            if i:  # shift this copy in place: time, ids, step numbers
                for e in timed:
                    if isinstance(e.get("ts"), (int, float)):
                        e["ts"] += shift
                    if isinstance(e.get("id"), int):
                        e["id"] += top_id + 1
                    a = e.get("args")
                    if isinstance(a, dict):
                        for fld in ARG_IDS:
                            if isinstance(a.get(fld), int):
                                a[fld] += top_id + 1
                    m = STEP.match(str(e.get("name", "")))
                    if m:
                        e["name"] = f"ProfilerStep#{int(m.group(1)) + step_span}"
            body = enc.encode(timed)[1:-1]
            if body:
                f.write(b",\n" if n else b"")
                f.write(body)
                n += len(timed)
        f.write(b"]}\n")
    return n


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    n = scale(Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]))
    print(f"{sys.argv[3]}: {n} events")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The annotated Perfetto trace: the original events kept exactly, gpucheckup's tracks added and well formed."""

from __future__ import annotations

import gzip
import json
import math
import shutil
import subprocess
import sys
from collections import Counter, defaultdict

import msgspec
import pytest
from conftest import raw_events, trace_path, read_report
from independent import GPU_CATS, step_windows, union_length

from gpucheckup.checkup.perfetto import annotated_trace


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "gpucheckup", *args], capture_output=True, text=True, timeout=300)


def load(path) -> dict:
    data = path.read_bytes()
    if path.name.endswith(".gz"):
        assert data[:2] == b"\x1f\x8b", "a .gz name must hold gzip data"
        data = gzip.decompress(data)
    return json.loads(data)


def ours(doc: dict, n_orig: int) -> tuple[int, list[dict]]:
    """gpucheckup's pid and events: everything after the original events."""
    added = doc["traceEvents"][n_orig:]
    (pid,) = {e["pid"] for e in added if e["ph"] == "M" and e["name"] == "process_name"
              and e["args"]["name"] == "gpucheckup"}
    assert all(e["pid"] == pid for e in added)
    return pid, added


def check_nesting(events: list[dict]) -> None:
    """X events on each (pid, tid) nest properly, with timestamps as integer ns rounded or truncated."""
    for to_ns in (lambda us: round(us * 1000), lambda us: math.floor(us * 1000)):
        tracks = defaultdict(list)
        for e in events:
            if e["ph"] == "X":
                s = to_ns(e["ts"])
                tracks[(e["pid"], e["tid"])].append((s, s + to_ns(e["dur"])))
        for key, spans in tracks.items():
            stack = []
            for s, e in sorted(spans, key=lambda x: (x[0], -x[1])):
                while stack and stack[-1] <= s:
                    stack.pop()
                assert not stack or e <= stack[-1], f"slice [{s}, {e}] overlaps its parent on track {key}"
                stack.append(e)


@pytest.mark.parametrize("case,suffix", [("moe_seed", ".json.gz"), ("input_bound", ".json")])
def test_annotated_trace_keeps_the_original_and_adds_tracks(tmp_path, case, suffix):
    src = trace_path(case)
    out = tmp_path / f"annotated{suffix}"
    report_json = tmp_path / "report.json"
    res = run_cli("analyze", str(src), "--quiet", "--json", str(report_json), "--perfetto", str(out))
    assert res.returncode == 0, res.stderr
    report = read_report(report_json)
    orig = raw_events(src)
    doc = load(out)

    # Every original event, in order and equal; every other top-level field unchanged.
    n = len(orig["traceEvents"])
    assert doc["traceEvents"][:n] == orig["traceEvents"]
    assert {k: v for k, v in doc.items() if k != "traceEvents"} == {
        k: v for k, v in orig.items() if k != "traceEvents"}
    # Byte for byte: the original array's text, up to its last event, is in the output verbatim.
    raw = gzip.decompress(src.read_bytes())
    array = bytes(msgspec.json.decode(raw, type=dict[str, msgspec.Raw])["traceEvents"]).strip()
    written = gzip.decompress(out.read_bytes()) if suffix == ".json.gz" else out.read_bytes()
    assert array[:-1].rstrip() in written

    pid, added = ours(doc, n)
    assert pid not in {e.get("pid") for e in orig["traceEvents"]}
    names = {(e["tid"], e["args"]["name"]) for e in added if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {name for _, name in names} >= {"steps", "sync points", "findings", "idle gaps: GPU 0"}
    tid = {name: t for t, name in names}

    # Steps: the step windows, computed independently from the raw JSON.
    windows = step_windows(orig)
    steps = [e for e in added if e["ph"] == "X" and e["tid"] == tid["steps"]]
    assert len(steps) == len(windows) == report["steps"]["count"]
    for e, (a, b) in zip(steps, windows):
        assert abs(e["ts"] - a) < 0.002 and abs(e["ts"] + e["dur"] - b) < 0.003
        assert e["name"].startswith("ProfilerStep#")

    # Gaps: one slice per idle gap; their total is the window minus the union of GPU work (independent).
    gaps = [e for e in added if e["ph"] == "X" and e["tid"] == tid["idle gaps: GPU 0"]]
    assert len(gaps) == report["gaps"]["pattern"]["gap_count"]
    lo, hi = windows[0][0], windows[-1][1]
    busy = union_length([(max(e["ts"], lo), min(e["ts"] + e["dur"], hi)) for e in orig["traceEvents"]
                         if e.get("ph") == "X" and e.get("cat") in GPU_CATS and e["ts"] + e["dur"] > lo
                         and e["ts"] < hi])
    idle = sum(e["dur"] for e in gaps)
    assert abs(idle - ((hi - lo) - busy)) < 0.002 * len(gaps) + 0.01
    causes = Counter(e["name"] for e in gaps)
    assert set(causes) <= {f"idle: {c}" for c in report["gaps"]["by_cause_ms"]}
    by_cause_us = defaultdict(float)
    for e in gaps:
        for k, v in e["args"].items():
            if k.endswith("_us") and k != "gap_us":
                by_cause_us[k[:-3]] += v
    for cause, ms in report["gaps"]["by_cause_ms"].items():
        assert abs(by_cause_us[cause] / 1000 - ms) < 0.001 + 1e-6 * len(gaps)

    # Syncs: one instant per sync point, named after its op.
    syncs = [e for e in added if e["ph"] == "i" and e["tid"] == tid["sync points"]]
    assert len(syncs) == report["sync"]["count"]
    assert Counter(e["name"] for e in syncs) == Counter(p["op"] for p in report["sync"]["points"])
    assert all(e["s"] == "t" for e in syncs)

    # GPU busy counter: one sample per step, the step's busy %.
    counter = [e for e in added if e["ph"] == "C"]
    assert len(counter) == len(windows)
    gpu = [(e["ts"], e["ts"] + e["dur"]) for e in orig["traceEvents"]
           if e.get("ph") == "X" and e.get("cat") in GPU_CATS]
    for e, (a, b) in zip(counter, windows):
        step_busy = union_length([(max(s, a), min(t, b)) for s, t in gpu if t > a and s < b])
        assert abs(e["args"]["busy_pct"] - 100 * step_busy / (b - a)) < 0.01
    assert [e["ts"] for e in counter] == [e["ts"] for e in steps]

    # Findings: one global instant each; trace pointers as balanced async slices.
    findings = [e for e in added if e["ph"] == "i" and e.get("s") == "g"]
    assert len(findings) == len(report["verdict"]["findings"])
    assert [e["args"]["finding"] for e in findings] == [f["id"] for f in report["verdict"]["findings"]]
    begins = {e["id"]: e for e in added if e["ph"] == "b"}
    ends = {e["id"]: e for e in added if e["ph"] == "e"}
    assert begins.keys() == ends.keys()
    assert len(begins) == sum(1 for f in report["verdict"]["findings"] for p in f["events"] if p.get("dur_ms"))
    for i, b in begins.items():
        assert ends[i]["ts"] > b["ts"] and ends[i]["name"] == b["name"] and ends[i]["cat"] == b["cat"]

    check_nesting(added)
    for e in added:
        assert e["ph"] in {"X", "i", "C", "M", "b", "e"}
        assert isinstance(e["pid"], int) and ("ts" in e or e["ph"] == "M")


def test_folder_of_ranks_gets_one_annotated_trace_each(tmp_path):
    runs = tmp_path / "run"
    runs.mkdir()
    for rank, case in ((0, "moe_seed"), (1, "launch_bound")):
        shutil.copy(trace_path(case), runs / f"trace_rank{rank}.json.gz")
    res = run_cli("analyze", str(runs), "--quiet", "--perfetto", str(tmp_path / "out.json.gz"))
    assert res.returncode == 0, res.stderr
    for rank, case in ((0, "moe_seed"), (1, "launch_bound")):
        doc = load(tmp_path / f"out.rank{rank}.json.gz")
        n = len(raw_events(trace_path(case))["traceEvents"])
        assert doc["traceEvents"][:n] == raw_events(trace_path(case))["traceEvents"]
        ours(doc, n)


def test_splice_edge_cases():
    extra = [{"ph": "i", "s": "g", "name": "x", "pid": 9, "tid": 1, "ts": 1.0}]
    assert json.loads(annotated_trace(b'{"traceEvents": [ ]}', extra))["traceEvents"] == extra
    doc = json.loads(annotated_trace(b'{"a": 1, "traceEvents": [\n{"ph": "M"}\n]\n, "b": [2]}', extra))
    assert doc == {"a": 1, "traceEvents": [{"ph": "M"}, *extra], "b": [2]}
    assert json.loads(annotated_trace(b'{"schemaVersion": 1}', extra))["traceEvents"] == extra


def test_streamed_output_is_the_original_file_with_our_events_spliced_in(tmp_path):
    """The annotated file is the original's bytes up to the events array's `]` (its whitespace before it dropped),
    our events, then the original's bytes from that `]` on: top-level fields and their layout kept exactly."""
    src = trace_path("moe_seed")
    raw = gzip.decompress(src.read_bytes())
    array = bytes(msgspec.json.decode(raw, type=dict[str, msgspec.Raw])["traceEvents"]).strip()
    close = raw.index(array) + len(array) - 1  # the array's `]` in the original
    out = tmp_path / "annotated.json"
    res = run_cli("analyze", str(src), "--quiet", "--perfetto", str(out))
    assert res.returncode == 0, res.stderr
    written = out.read_bytes()
    head = raw[:close].rstrip()
    assert written.startswith(head + b",\n") and written.endswith(raw[close:])
    added = json.loads(b"[" + written[len(head) + 2: len(written) - len(raw[close:])] + b"]")
    assert added == json.loads(written)["traceEvents"][len(json.loads(raw)["traceEvents"]):]
    assert added and all(e["cat"].startswith("gpucheckup") for e in added if "cat" in e)


def test_a_file_the_stream_cannot_cut_is_annotated_whole(tmp_path):
    """A `traceEvents` key nested before the top-level one (the stream finds the nested one first): the file is
    read whole, and the output still holds every original field and event, ours appended to the top-level array."""
    raw = gzip.decompress(trace_path("moe_seed").read_bytes())
    assert raw.lstrip().startswith(b"{")
    odd = raw.replace(b"{", b'{"meta": {"traceEvents": [], "n": 1}, ', 1)
    src = tmp_path / "odd.json"
    src.write_bytes(odd)
    out = tmp_path / "annotated.json.gz"
    res = run_cli("analyze", str(src), "--quiet", "--perfetto", str(out))
    assert res.returncode == 0, res.stderr
    orig, doc = json.loads(odd), load(out)
    n = len(orig["traceEvents"])
    assert doc["traceEvents"][:n] == orig["traceEvents"] and doc["meta"] == {"traceEvents": [], "n": 1}
    ours(doc, n)


def test_escaping_sink_equals_escaping_the_whole_document():
    """The annotated trace is escaped block by block as it streams: DEL, C1 and bidi characters cut at any byte
    between two blocks, and blocks with none of them (passed on unscanned), give what escaping the whole
    document at once gives."""
    from gpucheckup.checkup.perfetto import _Escaped
    from gpucheckup.safe_text import json_escaped

    class Sink:
        def __init__(self):
            self.parts = []

        def write(self, data):
            self.parts.append(bytes(data))

    doc = ('{"traceEvents":[{"name":"k\u202eernel\u0085\u007f\u2066x","ph":"X"},{"name":"plain ascii"},'
           '{"name":"caf\u00e9 \u2014 \u00c2\u0080 \u200f\u2069"}]}').encode()
    assert json_escaped(doc) != doc
    for size in range(1, len(doc) + 1):
        for first in range(0, min(size, 7)):  # blocks of `size` bytes after a first one of `first`
            sink = Sink()
            esc = _Escaped(sink)
            cuts = [0, first] + list(range(first + size, len(doc), size)) + [len(doc)]
            for a, b in zip(cuts[:-1], cuts[1:]):
                if b > a:
                    esc.write(doc[a:b])
            esc.close()
            assert b"".join(sink.parts) == json_escaped(doc), (size, first)

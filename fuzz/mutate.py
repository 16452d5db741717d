"""Mutation operators for the fuzzer: structural ones on a decoded trace (events dropped, duplicated,
reordered, fields of the wrong type, absurd numbers, deep nesting, hostile names, ...), ones on a
run directory's CSV and JSON files, and byte and gzip damage on the written files.

A case is built from a seed corpus item (fuzz/corpus/) and a `random.Random`: `build_case` picks the
item, the operators and the command-line options; `write_case` writes it under a folder and returns
the argv for `gpucheckup analyze`. Everything is determined by the Random, so a case is reproduced
from its seed and number alone.
"""

from __future__ import annotations

import functools
import gzip
import json
import math
import os
import random
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

CORPUS = Path(__file__).resolve().parent / "corpus"

# Values that have broken parsers and arithmetic before: absurd magnitudes, non-finite floats, wrong types.
HUGE_INT = 10 ** 400
WEIRD_NUMBERS = [0, -1, -1e9, 1e308, -1e308, 1.7e308, 2 ** 63, 2 ** 64, -2 ** 63, 1e-320, 6e-10, 0.5,
                 math.nan, math.inf, -math.inf, HUGE_INT, -HUGE_INT]
WEIRD_VALUES = [None, True, False, "", "x", "NaN", "1e308", [], {}, [1, 2], {"a": 1}, "\x1b[2J"]
HOSTILE_TEXT = ["\x1b[2J\x1b[?1049h", "\x1b]8;;https://evil.example/\x07click\x1b]8;;\x07", "\x1b]0;title",
                "\x07\x08\x08", "\u009b31m", "\u202eevil\u202c", "[bold red]markup[/]", "[link=x]y[/link]",
                "\x00", "\r\n", "\ufeff", "%s%d{}", "<script>alert(1)</script>", "../../etc/passwd"]
FIELDS = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "args"]
ARG_FIELDS = ["correlation", "External id", "device", "stream", "bytes", "Python id", "Python parent id",
              "grid", "block", "flops", "Input Dims", "Input type", "Concrete Inputs", "name", "labels", "rank"]
TOP_FIELDS = ["traceEvents", "schemaVersion", "deviceProperties", "distributedInfo", "baseTimeNanoseconds",
              "displayTimeUnit", "record_shapes", "with_flops", "cuda_driver_version"]


def weird(rnd: random.Random):
    """A value of a surprising type or magnitude."""
    r = rnd.random()
    if r < 0.55:
        return rnd.choice(WEIRD_NUMBERS)
    if r < 0.85:
        return rnd.choice(WEIRD_VALUES)
    return hostile(rnd)


def hostile(rnd: random.Random) -> str:
    """A name with control characters, markup, bidi overrides, or of absurd length."""
    parts = [rnd.choice(HOSTILE_TEXT) for _ in range(rnd.randint(1, 3))]
    if rnd.random() < 0.3:
        parts.append(rnd.choice("ab<(,") * rnd.choice([300, 3000, 9000]))
    return "".join(parts)


def nested(depth: int):
    """A list nested `depth` levels deep."""
    v: list = []
    for _ in range(depth):
        v = [v]
    return v


# ---- structural operators on a decoded trace: op(doc, rnd) ----

def _events(doc) -> list:
    ev = doc.get("traceEvents") if isinstance(doc, dict) else None
    return ev if isinstance(ev, list) else []


def _pick(doc, rnd, kind=None) -> dict | None:
    ev = [e for e in _events(doc) if isinstance(e, dict) and (kind is None or e.get("cat") == kind)]
    return rnd.choice(ev) if ev else None


def op_drop_events(doc, rnd):
    ev = _events(doc)
    p = rnd.choice([0.01, 0.1, 0.5, 0.9, 1.0])
    ev[:] = [e for e in ev if rnd.random() >= p]


def op_duplicate_events(doc, rnd):
    ev = _events(doc)
    for _ in range(rnd.randint(1, 50)):
        if ev:
            ev.insert(rnd.randrange(len(ev) + 1), dict(rnd.choice(ev)) if isinstance(ev[0], dict) else ev[0])


def op_reorder_events(doc, rnd):
    rnd.shuffle(_events(doc))


def op_drop_field(doc, rnd):
    for _ in range(rnd.randint(1, 20)):
        e = _pick(doc, rnd)
        if e:
            e.pop(rnd.choice(FIELDS), None)


def op_wrong_type(doc, rnd):
    for _ in range(rnd.randint(1, 10)):
        e = _pick(doc, rnd)
        if e:
            e[rnd.choice(FIELDS)] = weird(rnd)


def op_null_field(doc, rnd):
    for _ in range(rnd.randint(1, 10)):
        e = _pick(doc, rnd)
        if e:
            e[rnd.choice(FIELDS)] = None


def op_absurd_time(doc, rnd):
    """ts/dur absurd: huge, negative, non-finite, 400 digits."""
    for _ in range(rnd.randint(1, 5)):
        e = _pick(doc, rnd)
        if e:
            e[rnd.choice(["ts", "dur"])] = rnd.choice(WEIRD_NUMBERS)


def op_arg_wrong(doc, rnd):
    for _ in range(rnd.randint(1, 10)):
        e = _pick(doc, rnd)
        if e:
            args = e.setdefault("args", {})
            if isinstance(args, dict):
                args[rnd.choice(ARG_FIELDS)] = weird(rnd)


def op_shapes(doc, rnd):
    """Input Dims / Input type / Concrete Inputs of the operators made strange (GEMMs first)."""
    ops = [e for e in _events(doc) if isinstance(e, dict) and isinstance(e.get("args"), dict)
           and "Input Dims" in e["args"]]
    gemms = [e for e in ops if any(k in str(e.get("name")) for k in ("mm", "linear", "matmul", "conv"))]
    for _ in range(rnd.randint(1, 6)):
        pool = gemms if gemms and rnd.random() < 0.7 else ops
        if not pool:
            return
        a = rnd.choice(pool)["args"]
        r = rnd.random()
        if r < 0.25:
            a["Input type"] = rnd.choice([None, [None, None], ["c10::BFloat16", None], "float", [1, 2], [[]]])
        if r < 0.5 or rnd.random() < 0.3:
            dims = a.get("Input Dims")
            if isinstance(dims, list):
                for i, d in enumerate(dims):
                    if isinstance(d, list) and d and rnd.random() < 0.7:
                        d[rnd.randrange(len(d))] = weird(rnd)
                    elif rnd.random() < 0.2:
                        dims[i] = weird(rnd)
            else:
                a["Input Dims"] = weird(rnd)
        if rnd.random() < 0.3:
            a["Input Dims"] = rnd.choice([[[1e308, 1e308], [1e308, 1e308]], [[2.5, 3.5], [3.5, 4.5]],
                                          [["a", "b"], ["c", "d"]], [[-4, 8], [8, -4]], None, [[HUGE_INT, 1], [1, 1]]])
        if rnd.random() < 0.2:
            a["Concrete Inputs"] = weird(rnd)


def op_deep_nesting(doc, rnd):
    e = _pick(doc, rnd)
    if e:
        e.setdefault("args", {})
        if isinstance(e["args"], dict):
            e["args"][rnd.choice(ARG_FIELDS)] = nested(rnd.choice([50, 200, 1000, 3000]))


def op_hostile_names(doc, rnd):
    """Names with escape sequences, bidi overrides, markup and absurd length, on every kind of event."""
    for _ in range(rnd.randint(1, 8)):
        e = _pick(doc, rnd, rnd.choice([None, "kernel", "cpu_op", "cuda_runtime", "python_function",
                                        "user_annotation"]))
        if e is None:
            continue
        if rnd.random() < 0.8:
            e["name"] = (str(e.get("name")) if rnd.random() < 0.5 else "") + hostile(rnd)
        else:
            e["name"] = "void at::native::kernel<" + rnd.choice(["a", "a<", "(", "a,", "<b>"]) * rnd.choice(
                [2000, 8000])
    if rnd.random() < 0.3:  # thread and process names
        for e in _events(doc):
            if isinstance(e, dict) and e.get("ph") == "M" and isinstance(e.get("args"), dict):
                e["args"]["name"] = hostile(rnd)
                break


def op_gpu_name(doc, rnd):
    dp = doc.get("deviceProperties") if isinstance(doc, dict) else None
    if isinstance(dp, list) and dp and isinstance(dp[0], dict):
        dp[0][rnd.choice(["name", "name", "numSms", "totalGlobalMem", "id", "computeMajor"])] = rnd.choice([
            "NVIDIA H200" + "x" * 300, "NVIDIA H200 " + "é" * 200, hostile(rnd), weird(rnd), "A" * 5000, "../../x"])
    elif isinstance(doc, dict):
        doc["deviceProperties"] = weird(rnd)


def op_top_level(doc, rnd):
    if isinstance(doc, dict):
        doc[rnd.choice(TOP_FIELDS)] = rnd.choice([weird(rnd), {"rank": weird(rnd), "world_size": weird(rnd)}])


def op_tiny_gaps(doc, rnd):
    """Events a hair apart or at the same instant (durations and spans near zero)."""
    ev = [e for e in _events(doc) if isinstance(e, dict) and e.get("ph") == "X"]
    if not ev:
        return
    t0 = ev[0].get("ts") if isinstance(ev[0].get("ts"), (int, float)) else 0.0
    gap = rnd.choice([0.0, 6e-10, 1e-6, 1e-3])
    share = rnd.choice([0.05, 0.5, 1.0])
    for i, e in enumerate(ev):
        if rnd.random() < share:
            e["ts"] = t0 + i * gap
            if rnd.random() < 0.5:
                e["dur"] = rnd.choice([0.0, gap, 6e-10])


def op_category(doc, rnd):
    for _ in range(rnd.randint(1, 20)):
        e = _pick(doc, rnd)
        if e:
            if rnd.random() < 0.5:
                e["cat"] = rnd.choice(["kernel", "cpu_op", "cuda_runtime", "gpu_memcpy", "gpu_memset", "Kernel",
                                       "user_annotation", "python_function", "cuda_driver", "ac2g", "???", ""])
            else:
                e["ph"] = rnd.choice(["X", "B", "E", "i", "s", "f", "M", "C", "", "XX"])


def op_ids(doc, rnd):
    """Correlation and flow ids made to collide, go missing or point nowhere."""
    ev = [e for e in _events(doc) if isinstance(e, dict) and isinstance(e.get("args"), dict)]
    mode = rnd.choice(["same", "shuffle", "drop", "weird"])
    vals = [e["args"].get("correlation") for e in ev]
    rnd.shuffle(vals)
    for e, v in zip(ev, vals):
        if mode == "same":
            e["args"]["correlation"] = 1
        elif mode == "shuffle":
            e["args"]["correlation"] = v
        elif mode == "drop":
            e["args"].pop("correlation", None)
        elif rnd.random() < 0.1:
            e["args"][rnd.choice(["correlation", "External id"])] = weird(rnd)
    for e in _events(doc):
        if isinstance(e, dict) and e.get("ph") in ("s", "f") and rnd.random() < 0.3:
            e["id"] = weird(rnd)


def op_pid_tid(doc, rnd):
    for _ in range(rnd.randint(1, 20)):
        e = _pick(doc, rnd)
        if e:
            e[rnd.choice(["pid", "tid"])] = rnd.choice([weird(rnd), "stream 7", 0, -1, 2 ** 40])


def op_many_steps(doc, rnd):
    """Many short steps, each with one kernel (and optionally a sync): the shape that made analyses quadratic."""
    if not isinstance(doc, dict):
        return
    n = rnd.choice([200, 1000, 3000])
    ev = [e for e in _events(doc) if isinstance(e, dict) and e.get("ph") == "M"]
    sync = rnd.random() < 0.5
    for i in range(n):
        t = 1000.0 + i * 100.0
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1, "ts": t,
                   "dur": 90.0})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t + 1,
                   "dur": 5.0, "args": {"correlation": i + 1}})
        ev.append({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": t + 10, "dur": 20.0,
                   "args": {"correlation": i + 1, "device": 0, "stream": 7}})
        if sync:
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 1, "tid": 1,
                       "ts": t + 7, "dur": 30.0, "args": {"correlation": n + i + 1}})
    doc["traceEvents"] = ev


OPERATORS = [op_drop_events, op_duplicate_events, op_reorder_events, op_drop_field, op_wrong_type, op_null_field,
             op_absurd_time, op_arg_wrong, op_shapes, op_deep_nesting, op_hostile_names, op_gpu_name, op_top_level,
             op_tiny_gaps, op_category, op_ids, op_pid_tid, op_many_steps]
# How often each is drawn (the slow and the reader-level ones less often).
WEIGHTS = {op_many_steps: 0.15, op_deep_nesting: 0.3, op_reorder_events: 0.5}


# ---- operators on a run directory's text files ----

CSV_CELLS = ["nan", "NaN", "inf", "-inf", "Infinity", "", "1e308", "-1e308", "-1", "0", "abc", str(HUGE_INT),
             "6e-10", "1e-320", "\x1b[2J", "1,2"]


def mutate_csv(text: str, rnd: random.Random) -> str:
    """Cells replaced by non-finite, absurd or non-numeric values; rows duplicated, shuffled, cut; columns lost."""
    lines = text.splitlines()
    if len(lines) < 2:
        return text + "\n" + rnd.choice(CSV_CELLS)
    head, rows = lines[0], [ln.split(",") for ln in lines[1:]]
    r = rnd.random()
    if r < 0.6:
        for _ in range(rnd.randint(1, 10)):
            row = rnd.choice(rows)
            row[rnd.randrange(len(row))] = rnd.choice(CSV_CELLS)
    elif r < 0.7:
        col = rnd.randrange(len(rows[0]))
        for row in rows:
            if col < len(row):
                row[col] = rnd.choice(["nan", "inf", "-inf", "", "1e308"])
    elif r < 0.8:
        rnd.shuffle(rows)
        rows += rows[: rnd.randint(1, len(rows))]
    elif r < 0.9:
        cols = head.split(",")
        i = rnd.randrange(len(cols))
        head = ",".join(cols[:i] + cols[i + 1:])
    else:
        rows = rows[: rnd.randint(0, 2)]
    return "\n".join([head] + [",".join(r) for r in rows]) + "\n"


def mutate_json_value(v, rnd: random.Random, depth: int = 0):
    """A JSON document with one value somewhere in it replaced by a surprising one."""
    if depth > 6 or rnd.random() < 0.25:
        return weird(rnd)
    if isinstance(v, dict) and v:
        k = rnd.choice(list(v))
        if rnd.random() < 0.15:
            del v[k]
        else:
            v[k] = mutate_json_value(v[k], rnd, depth + 1)
        return v
    if isinstance(v, list) and v:
        i = rnd.randrange(len(v))
        v[i] = mutate_json_value(v[i], rnd, depth + 1)
        return v
    return weird(rnd)


# ---- byte and gzip damage on a written file ----

def damage_bytes(data: bytes, rnd: random.Random) -> bytes:
    """Flipped, cut, inserted or spliced bytes; gzip streams cut, corrupted or wrapped twice."""
    r = rnd.random()
    b = bytearray(data)
    if r < 0.25 and b:
        for _ in range(rnd.randint(1, 20)):
            i = rnd.randrange(len(b))
            b[i] ^= 1 << rnd.randrange(8)
    elif r < 0.45:
        b = b[: rnd.randrange(len(b) + 1)]
    elif r < 0.6 and b:
        i = rnd.randrange(len(b))
        b[i:i] = rnd.choice([b"\x00", b"\xff\xfe", b"{", b"]", b"NaN", b"\x1b[2J", bytes(rnd.randrange(256)
                                                                                     for _ in range(40))])
    elif r < 0.7 and b:
        i, j = sorted(rnd.randrange(len(b)) for _ in range(2))
        b = b[:i] + b[j:] + b[i:j]
    elif r < 0.8:
        b = bytearray(gzip.compress(bytes(b), 1, mtime=0))
    elif r < 0.9:
        b = bytearray(b"\x1f\x8b" + bytes(b[2:]))
    else:
        b = bytearray(rnd.choice([b"", b"{}", b"[]", b"null", b"\xef\xbb\xbf{}", b"{\"traceEvents\": 5}",
                                  b"{\"traceEvents\": [}"]))
    return bytes(b)


# ---- hostile files: compressed bombs, sparse files, FIFOs, devices ----

@dataclass(frozen=True)
class Special:
    """A file that is not written as bytes: `sparse` (`size` bytes, `head` first, the rest a hole of zeros), a
    `fifo` (no writer: a reader that opens it blocks), a `device` (a link to /dev/zero: it never ends), a
    `device_null` (a link to /dev/null: a device that reads empty), a `socket` (a Unix socket nobody listens on)."""

    kind: str
    size: int = 0
    head: bytes = b""


BOMB_BYTES = 256 << 20  # decompressed size of the harness's gzip bombs (each ~250 KB at level 9)
SPARSE_BYTES = 1 << 30
EVENT = b'{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1,"dur":2},'
BOMB_HEADS = {"zeros": (b"", b"\0"), "zeros_after_key": (b'{"traceEvents":[', b"\0"),
              "zeros_after_events": (b'{"traceEvents":[' + EVENT * 40000, b"\0"),
              "long_event": (b'{"traceEvents":[{"name":"', b"a"), "spaces": (b'{"traceEvents":[', b" "),
              "empty_events": (b'{"traceEvents":[', b"{},"), "kernel_events": (b'{"traceEvents":[', EVENT),
              "objects_in_a_list": (b'{"traceEvents":[[', b"{},"), "numbers": (b'{"traceEvents":[', b"1,")}


@functools.lru_cache(maxsize=None)
def gzip_bomb(kind: str) -> bytes:
    """One gzip member: a head, then BOMB_BYTES of one byte or one event repeated (built once per process)."""
    head, fill = BOMB_HEADS[kind]
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = fill * ((16 << 20) // len(fill))
    return c.compress(head) + b"".join(c.compress(block) for _ in range(BOMB_BYTES // len(block))) + c.flush()


HOSTILE_KINDS = [*(f"bomb:{k}" for k in BOMB_HEADS), "sparse", "sparse_after_key", "fifo", "device", "device_null",
                 "socket"]


def hostile_file(rnd: random.Random) -> tuple[str, bytes | Special]:
    """A hostile replacement for a file: its kind and its content."""
    kind = rnd.choice(HOSTILE_KINDS)
    if kind.startswith("bomb:"):
        return kind, gzip_bomb(kind[5:])
    if kind.startswith("sparse"):
        return kind, Special("sparse", SPARSE_BYTES, b'{"traceEvents": [' if kind == "sparse_after_key" else b"")
    return kind, Special(kind)


ODD_NAMES = ["\x1b[2Jtrace\u202e\x07\u009b", os.fsdecode(b"trace-\xff\xfe-"), os.fsdecode(b"\xe9t\xe9-\x9b-"),
             "sp ace\nnew line-", "-dash-"]


# ---- a whole case ----

@dataclass
class Case:
    """Files to write (relative path -> bytes) and the argv after `analyze PATH`."""

    kind: str
    files: dict[str, bytes | Special]
    options: list[str] = field(default_factory=list)
    ops: list[str] = field(default_factory=list)
    target: str = "."  # what `analyze` is given, relative to the case folder


_CACHE: dict[str, bytes] = {}


def _read(path: Path) -> bytes:
    key = str(path)
    if key not in _CACHE:
        _CACHE[key] = path.read_bytes()
    return _CACHE[key]


@functools.lru_cache(maxsize=1)
def corpus_items() -> list[tuple[str, Path]]:
    """(kind, path) of every seed: single traces, the folder of ranks, run directories (listed once)."""
    items = [("trace", p) for p in sorted((CORPUS / "traces").glob("*.json.gz"))]
    items.append(("ranks", CORPUS / "ranks"))
    items += [("run", p) for p in sorted((CORPUS / "runs").iterdir())]
    return items


@functools.lru_cache(maxsize=None)
def _files_under(folder: Path) -> list[Path]:
    """The files of a seed folder, sorted (listed once)."""
    return [p for p in sorted(folder.rglob("*")) if p.is_file()]


def encode(doc, rnd: random.Random) -> bytes:
    """JSON text of a mutated document; non-finite floats as NaN/Infinity tokens or as 1e999."""
    try:
        text = json.dumps(doc, separators=(",", ":"))
    except (ValueError, RecursionError):
        return b"[" * 100000
    if "Infinity" in text and rnd.random() < 0.5:
        text = text.replace("-Infinity", "-1e999").replace("Infinity", "1e999")
    return text.encode("utf-8", "surrogatepass")


def mutate_trace_bytes(raw_gz: bytes, rnd: random.Random, ops: list[str]) -> bytes:
    """A trace file (gzip bytes) after 1-3 structural operators, as .json bytes."""
    doc = msgspec.json.decode(gzip.decompress(raw_gz))
    ops_all = OPERATORS
    weights = [WEIGHTS.get(o, 1.0) for o in ops_all]
    for op in rnd.choices(ops_all, weights, k=rnd.choice([1, 1, 2, 3])):
        op(doc, rnd)
        ops.append(op.__name__)
    return encode(doc, rnd)


OPTIONS = [["--html", "{out}/r.html"], ["--markdown", "{out}/r.md"], ["--perfetto", "{out}/p.json.gz"],
           ["--json", "{out}/r.json"], ["--flops-per-step", "1e12"],
           ["--gpu", "H200-SXM"], ["--gpu", "NVIDIA " + "H" * 400], ["--unprofiled-step-ms", "3"],
           ["--samples-per-step", "32"], ["--peak-tflops", "1e308"],
           ["--json", "{out}/\x1b[2J\u009b" + os.fsdecode(b"-\xff-") + "r.json"]]  # an output name to show escaped
TERMINAL_SHARE = 0.25  # cases that render the terminal report (the slowest part of a check-up); others --quiet
HOSTILE_SHARE = 0.02  # cases with a hostile file (hostile_file) in place of one of theirs


def build_case(rnd: random.Random) -> Case:
    """One fuzz case: a corpus item, mutated, with some output options."""
    kind, path = rnd.choice(corpus_items())
    ops: list[str] = []
    files: dict[str, bytes] = {}
    if kind == "trace":
        files[path.name] = _read(path)
        target = path.name
    else:
        for p in _files_under(path):
            files[str(p.relative_to(path))] = _read(p)
        target = "."
    traces = [k for k in files if k.endswith(".json.gz")]
    texts = [k for k in files if k.endswith((".csv", ".json")) and not k.endswith(".json.gz")]
    n_struct = 1 if kind != "run" or rnd.random() < 0.4 else 0
    for _ in range(n_struct):
        if not traces:
            break
        k = rnd.choice(traces)
        data = mutate_trace_bytes(files[k], rnd, ops)
        if rnd.random() < 0.6:
            files[k] = gzip.compress(data, 1, mtime=0)
        else:
            del files[k]
            if target == k:
                target = k[: -len(".gz")]
            files[k[: -len(".gz")]] = data
    if kind == "run" and texts and (n_struct == 0 or rnd.random() < 0.3):
        for _ in range(rnd.randint(1, 3)):
            k = rnd.choice(texts)
            if k.endswith(".csv"):
                files[k] = mutate_csv(files[k].decode(), rnd).encode()
                ops.append(f"csv:{k}")
            else:
                try:
                    v = json.loads(files[k])
                except ValueError:
                    continue
                files[k] = encode(mutate_json_value(v, rnd), rnd)
                ops.append(f"json:{k}")
    names = [k for k in files if k.endswith((".json.gz", ".json")) and (kind != "run" or "traces" in k)]
    if names and rnd.random() < 0.05:  # a trace whose file name carries escape sequences or is not UTF-8
        k = target if kind == "trace" else rnd.choice(names)
        head, _, base = k.rpartition("/")
        name = (head + "/" if head else "") + rnd.choice(ODD_NAMES) + base
        files[name] = files.pop(k)
        target = name if target == k else target
        ops.append("file_name")
    if rnd.random() < 0.12:
        k = rnd.choice(list(files))
        files[k] = damage_bytes(files[k], rnd)
        ops.append(f"bytes:{k}")
    if rnd.random() < HOSTILE_SHARE:  # a compressed bomb, a sparse file, a FIFO or a device in a file's place
        k = target if kind == "trace" else rnd.choice(list(files))
        what, files[k] = hostile_file(rnd)
        ops.append(f"hostile:{what}:{k}")
    options: list[str] = [] if rnd.random() < TERMINAL_SHARE else ["--quiet"]
    for _ in range(rnd.choice([0, 0, 1, 2])):
        options += rnd.choice(OPTIONS)
    return Case(kind, files, options, ops, target)


def _unix_socket(p: Path) -> None:
    """A Unix socket file at p, bound then closed (nobody listens); bound by its name from its own folder, as an
    address is limited to ~108 bytes and a case's path may be longer."""
    import socket

    here = os.open(".", os.O_RDONLY)
    try:
        os.chdir(p.parent)
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(os.fsencode(p.name))
    finally:
        os.fchdir(here)
        os.close(here)


def write_case(case: Case, folder: Path) -> list[str]:
    """Write the case's files under `folder` (which must be empty) and return the argv of `gpucheckup`."""
    inp = folder / "in"
    out = folder / "out"
    inp.mkdir()
    out.mkdir()
    for rel, data in case.files.items():
        p = inp / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if not isinstance(data, Special):
            p.write_bytes(data)
        elif data.kind == "sparse":
            with open(p, "wb") as f:
                f.write(data.head)
                f.truncate(data.size)
        elif data.kind == "fifo":
            os.mkfifo(p)
        elif data.kind == "socket":
            _unix_socket(p)
        else:
            os.symlink("/dev/null" if data.kind == "device_null" else "/dev/zero", p)
    target = inp if case.target == "." else inp / case.target
    return ["--debug", "analyze", str(target)] + [o.format(out=out) for o in case.options]

"""The decode floor: gunzip + msgspec typed decode of the fields gpucheckup reads, and nothing else.

No gpucheckup import: the structs below name the same fields as src/gpucheckup/trace/schema.py.
Usage: python bench/floor.py TRACE
"""

from __future__ import annotations

import gzip
import sys

import msgspec


class Args(msgspec.Struct, gc=False):
    correlation: int | None = None
    external_id: int | None = msgspec.field(default=None, name="External id")
    device: int | None = None
    stream: int | None = None
    bytes: float | None = None
    python_id: int | None = msgspec.field(default=None, name="Python id")
    python_parent_id: int | None = msgspec.field(default=None, name="Python parent id")
    flops: float | None = None
    input_dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input type")
    concrete_inputs: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Concrete Inputs")
    name: str | None = None


class Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: float = 0.0
    dur: float = 0.0
    args: Args | None = None


class Trace(msgspec.Struct):
    traceEvents: list[Event] = []


def main() -> int:
    data = open(sys.argv[1], "rb").read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    events = msgspec.json.decode(data, type=Trace).traceEvents
    print(len(events), len(data))  # events, bytes of JSON
    return 0


if __name__ == "__main__":
    sys.exit(main())

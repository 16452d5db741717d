"""Typed msgspec structs for the parts of a Kineto (PyTorch profiler) trace that gpucheckup reads.

Only the fields the analyses use are named; msgspec skips every other field without building it.
Absent fields decode to the column's fill value (-1 for ids, nan for amounts), so the reader turns
a list of events into numpy columns without a Python loop per event. Ids are held to int64
(a 400-digit id is an unreadable event, not an overflow later). Argument fields that only some
analyses need (shapes, concrete inputs) stay raw JSON bytes until asked for.

To read one more argument: add a field to `Args` here (its JSON name, type and fill value) and a
`Column` naming it in `reader.GPU_COLUMNS` / `reader.HOST_COLUMNS`, plus the matching field on the
table dataclass in `tables.py`.
"""

from __future__ import annotations

import math
from typing import Annotated

import msgspec

Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
NO_INT = -(2**63)  # `device`/`stream` absent: the reader falls back to the event's pid/tid
NO_RAW = msgspec.Raw(b"")  # an absent raw field: empty


class Args(msgspec.Struct, frozen=True, gc=False):
    """The `args` of one event; every field optional, unknown ones skipped."""

    correlation: Int64 | None = -1
    external_id: Int64 | None = msgspec.field(default=-1, name="External id")
    device: Int64 | None = NO_INT
    stream: Int64 | None = NO_INT
    bytes: float | None = math.nan
    flops: float | None = math.nan
    input_dims: msgspec.Raw = msgspec.field(default=NO_RAW, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=NO_RAW, name="Input type")
    concrete_inputs: msgspec.Raw = msgspec.field(default=NO_RAW, name="Concrete Inputs")
    name: str | None = None  # metadata events (process_name, thread_name) carry their label here
    # --- many GPUs: what torch.distributed's `record_param_comms` op carries (reader.Builder keeps its rows) ---
    collective_name: str | None = msgspec.field(default=None, name="Collective name")
    pg_name: str | None = msgspec.field(default=None, name="Process Group Name")
    group_size: Int64 | None = msgspec.field(default=None, name="Group size")
    in_msg_nelems: Int64 | None = msgspec.field(default=None, name="In msg nelems")
    out_msg_nelems: Int64 | None = msgspec.field(default=None, name="Out msg nelems")
    dtype: str | None = None


NO_ARGS = Args()


class Event(msgspec.Struct, gc=False):
    """One Chrome-trace event as Kineto writes it."""

    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: Int64 | str = 0
    tid: Int64 | str = 0
    ts: float = 0.0
    dur: float = 0.0
    args: Args = NO_ARGS


class DeviceProperties(msgspec.Struct):
    """An entry of the trace's top-level `deviceProperties` list."""

    id: Int64 = 0
    name: str = ""
    totalGlobalMem: Int64 = 0
    computeMajor: Int64 = 0
    computeMinor: Int64 = 0
    numSms: Int64 = 0


class DistributedInfo(msgspec.Struct):
    """The trace's `distributedInfo` block, written when torch.distributed is initialised."""

    rank: Int64 | None = None
    world_size: Int64 | None = None
    backend: str | None = None


class CounterSamples(msgspec.Struct):
    """The activity counters' samples of a light window's counter steps, one list entry per sample (trace us)."""

    ts: list[float] = msgspec.field(default_factory=list)
    dur: list[float] = msgspec.field(default_factory=list)
    busy_pct: list[float] = msgspec.field(default_factory=list)
    launches: list[Int64] = msgspec.field(default_factory=list)


class CounterInfo(msgspec.Struct):
    """The `counters` of a `gpucheckup_light` block (capture/agent/cupti_window.py `counter_block`)."""

    source: str = ""
    device: Int64 = 0
    metrics: list[str] = msgspec.field(default_factory=list)
    interval_ns: Int64 = 0
    steps: list[tuple[float, float]] = msgspec.field(default_factory=list)
    samples: CounterSamples = msgspec.field(default_factory=CounterSamples)


class LightInfo(msgspec.Struct):
    """The `gpucheckup_light` block of a CUPTI light window's trace (capture/agent/cupti_window.py): what it recorded."""

    backend: str | None = None
    activities: list[str] | None = None  # CUPTI activity kinds enabled, e.g. CONCURRENT_KERNEL, SYNCHRONIZATION
    counters: CounterInfo | None = None  # the counter steps before the records, where the counters ran


class KinetoTrace(msgspec.Struct):
    """The top level of a Kineto JSON trace."""

    traceEvents: list[Event] | None = None
    schemaVersion: Int64 | None = None
    deviceProperties: list[DeviceProperties] | None = None
    distributedInfo: DistributedInfo | None = None
    baseTimeNanoseconds: Int64 | None = None
    displayTimeUnit: str | None = None
    with_stack: int | bool | None = None
    record_shapes: int | bool | None = None
    with_flops: int | bool | None = None
    cuda_driver_version: Int64 | None = None
    cuda_runtime_version: Int64 | None = None
    cupti_version: Int64 | None = None
    trace_id: str | None = None
    gpucheckup_light: LightInfo | None = None

"""Typed msgspec structs for the parts of a Kineto (PyTorch profiler) trace that gpucheckup reads.

Decoding into typed structs is about five times faster than building Python dicts, and fields
not named here are skipped without being materialised. Argument fields that only some analyses
need (shapes, concrete inputs) stay as raw JSON until asked for.
"""

from __future__ import annotations

import msgspec

Number = int | float
_NO_RAW = msgspec.Raw(b"")  # an absent raw field: falsy, like None


class Args(msgspec.Struct, gc=False):
    """The `args` of one event; every field optional, unknown ones ignored."""

    correlation: int | None = None
    external_id: int | None = msgspec.field(default=None, name="External id")
    device: int | None = None
    stream: int | None = None
    bytes: Number | None = None
    python_id: int | None = msgspec.field(default=None, name="Python id")
    python_parent_id: int | None = msgspec.field(default=None, name="Python parent id")
    grid: list[int] | None = None
    block: list[int] | None = None
    flops: Number | None = None
    input_dims: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input type")
    concrete_inputs: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Concrete Inputs")
    name: str | None = None  # metadata events (process_name, thread_name) carry their label here
    labels: str | None = None
    rank: int | None = None
    # --- many GPUs (issue 9): what torch.distributed's `record_param_comms` op carries ---
    collective_name: str | None = msgspec.field(default=None, name="Collective name")
    pg_name: str | None = msgspec.field(default=None, name="Process Group Name")
    group_size: int | None = msgspec.field(default=None, name="Group size")
    in_msg_nelems: int | None = msgspec.field(default=None, name="In msg nelems")
    out_msg_nelems: int | None = msgspec.field(default=None, name="Out msg nelems")
    dtype: str | None = None
    # --- end many GPUs ---


class Event(msgspec.Struct, gc=False):
    """One Chrome-trace event as Kineto writes it."""

    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: Number = 0.0
    dur: Number = 0.0
    args: Args | None = None


class DeviceProperties(msgspec.Struct):
    """An entry of the trace's top-level `deviceProperties` list."""

    id: int = 0
    name: str = ""
    totalGlobalMem: int = 0
    computeMajor: int = 0
    computeMinor: int = 0
    numSms: int = 0


class DistributedInfo(msgspec.Struct):
    """The trace's `distributedInfo` block, written when torch.distributed is initialised."""

    rank: int | None = None
    world_size: int | None = None
    backend: str | None = None


class KinetoTrace(msgspec.Struct):
    """The top level of a Kineto JSON trace."""

    traceEvents: list[Event] | None = None
    schemaVersion: int | None = None
    deviceProperties: list[DeviceProperties] | None = None
    distributedInfo: DistributedInfo | None = None
    baseTimeNanoseconds: int | None = None
    displayTimeUnit: str | None = None
    with_stack: int | bool | None = None
    record_shapes: int | bool | None = None
    with_flops: int | bool | None = None
    cuda_driver_version: int | None = None
    cuda_runtime_version: int | None = None
    cupti_version: int | None = None
    trace_id: str | None = None

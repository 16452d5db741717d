"""Columnar tables of one trace: numpy arrays, one row per event, times in microseconds.

Times are the trace's own `ts` values (microseconds on the profiler's clock); add
`Trace.base_time_ns / 1000` to get microseconds since the Unix epoch.
"""

from __future__ import annotations

import msgspec
import numpy as np

# GpuOps.kind
KERNEL, MEMCPY, MEMSET = 0, 1, 2

# HostEvents.cat
CPU_OP, USER_ANNOTATION, RUNTIME, DRIVER, PYTHON = 0, 1, 2, 3, 4


class RawColumn:
    """One raw-JSON argument per row, held as one byte string and row offsets (no object per row)."""

    __slots__ = ("data", "offsets")

    def __init__(self, data: bytes = b"", offsets: np.ndarray | None = None):
        self.data = data
        self.offsets = np.zeros(1, dtype=np.int64) if offsets is None else offsets  # row i: data[o[i]:o[i+1]]

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, row) -> bytes | None:
        """The JSON bytes of one row, or None where the event did not carry the argument."""
        a, b = self.offsets[row], self.offsets[row + 1]
        return self.data[a:b] if b > a else None

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def take(self, rows: np.ndarray) -> list[bytes | None]:
        """The JSON bytes of many rows (as `self[row]` for each); equal values are one object (they
        recur every step, and a list of a million distinct copies would hold hundreds of MB)."""
        a, b, d = self.offsets[rows].tolist(), self.offsets[np.asarray(rows) + 1].tolist(), self.data
        one: dict[bytes, bytes] = {}
        return [one.setdefault(s := d[x:y], s) if y > x else None for x, y in zip(a, b)]

    def present(self) -> np.ndarray:
        """Whether each row carries the argument."""
        return np.diff(self.offsets) > 0


class GpuOps(msgspec.Struct):
    """Kernels, copies and memsets as they ran on the GPU."""

    kind: np.ndarray  # int8: KERNEL, MEMCPY, MEMSET
    name: np.ndarray  # int32 index into Trace.names
    device: np.ndarray  # int32
    stream: np.ndarray  # int64
    start: np.ndarray  # float64 us
    end: np.ndarray  # float64 us
    correlation: np.ndarray  # int64, -1 when absent
    external_id: np.ndarray  # int64, -1 when absent
    bytes: np.ndarray  # float64, nan when absent (copies and memsets carry it)

    def __len__(self) -> int:
        return len(self.start)

    @property
    def dur(self) -> np.ndarray:
        return self.end - self.start

    def take(self, mask_or_index) -> "GpuOps":
        """The rows selected by a boolean mask or an index array."""
        return GpuOps(**{k: getattr(self, k)[mask_or_index] for k in self.__struct_fields__})


class HostEvents(msgspec.Struct, weakref=True):  # weakref: analysis/one_trace/host/host_calls.py's cache per table
    """CPU-side events: operators, user annotations, CUDA runtime/driver calls, Python frames."""

    cat: np.ndarray  # int8: CPU_OP, USER_ANNOTATION, RUNTIME, DRIVER, PYTHON
    name: np.ndarray  # int32 index into Trace.names
    pid: np.ndarray  # int64
    tid: np.ndarray  # int64
    start: np.ndarray  # float64 us
    end: np.ndarray  # float64 us
    # Argument columns are read from the rows of the categories named (reader.HOST_COLUMNS); other rows hold the fill.
    correlation: np.ndarray  # int64, -1 when absent; runtime and driver calls
    external_id: np.ndarray  # int64, -1 when absent; operators and user annotations
    flops: np.ndarray  # float64, nan when absent (with_flops=True); operators
    shapes: "RawColumn"  # per row: JSON bytes of `Input Dims`, or None; operators and user annotations
    dtypes: "RawColumn"  # per row: JSON bytes of `Input type`, or None; operators and user annotations
    concrete: "RawColumn"  # per row: JSON bytes of `Concrete Inputs` (scalars, int lists), or None; operators

    def __len__(self) -> int:
        return len(self.start)

    @property
    def dur(self) -> np.ndarray:
        return self.end - self.start


# --- many GPUs (issue 9) ---
class CommArgs(msgspec.Struct):
    """The arguments torch.distributed records on its `record_param_comms` host ops: one row per collective call."""

    host_row: np.ndarray  # int64 row of the op in Trace.host
    collective: list[str]  # "allreduce", "_allgather_base", ...
    pg: list[str]  # process group name
    group_size: np.ndarray  # float64, nan when absent
    in_nelems: np.ndarray  # float64 elements of a rank's input, nan when absent
    out_nelems: np.ndarray  # float64 elements of a rank's output, nan when absent
    dtype: list[str]  # "Float", "BFloat16", ...

    def __len__(self) -> int:
        return len(self.host_row)
# --- end many GPUs ---


class Counters(msgspec.Struct):
    """A light window's counter steps and the GPU activity counters sampled over its whole window (trace us): sample i
    covers [start[i], end[i]) on `device`, with the compute engine active busy_pct[i] % of its cycles and launches[i]
    kernels dispatched (nan where the chip's set had no dispatch counter)."""

    device: int
    metrics: list[str]
    interval_us: float
    step_start: np.ndarray  # float64, the counter steps' host marks
    step_end: np.ndarray
    start: np.ndarray  # float64 per sample
    end: np.ndarray
    busy_pct: np.ndarray
    launches: np.ndarray  # float64, nan when not counted

    def __len__(self) -> int:
        return len(self.start)


class Device(msgspec.Struct):
    """One GPU as `deviceProperties` describes it."""

    id: int
    name: str
    sm_count: int = 0
    total_memory: int = 0
    compute_capability: str = ""


class Trace(msgspec.Struct):
    """Everything gpucheckup reads from one trace file."""

    path: str
    names: list[str]
    gpu: GpuOps
    host: HostEvents
    devices: list[Device]
    thread_names: dict[tuple[int, int], str]
    base_time_ns: int | None = None
    schema_version: int | None = None
    rank: int | None = None
    world_size: int | None = None
    with_stack: bool = False
    record_shapes: bool = False
    cuda_runtime_version: int | None = None
    cuda_driver_version: int | None = None
    command_buffer_full_count: int = 0
    command_buffer_full_us: float = 0.0
    warnings: list[str] = msgspec.field(default_factory=list)
    comms: CommArgs | None = None  # many GPUs (issue 9): collective calls' arguments, None when none
    # a CUPTI light window's recorded activity kinds (its `gpucheckup_light` block); None for every other trace
    light_activities: tuple[str, ...] | None = None
    counters: Counters | None = None  # a CUPTI light window's counter steps and samples; None for every other trace
    # where the top-level traceEvents array's closing `]` lies in the decompressed file (a streamed read: the
    # annotated trace is spliced there without holding the file); None when the file was read whole
    events_end: int | None = None

    def name_ids(self, predicate) -> np.ndarray:
        """Indices into `names` of the names for which predicate(name) is true."""
        return np.array([i for i, n in enumerate(self.names) if predicate(n)], dtype=np.int32)

    @property
    def syncs_recorded(self) -> bool:
        """Whether a host synchronization would be in this trace: torch.profiler records every CUDA runtime call; a
        CUPTI light window only with CUPTI's SYNCHRONIZATION records (`gpucheckup run --light --light-syncs`)."""
        return self.light_activities is None or "SYNCHRONIZATION" in self.light_activities

    @property
    def has_gpu(self) -> bool:
        return len(self.gpu) > 0

    @property
    def span(self) -> tuple[float, float]:
        """First start and last end over every host and GPU event."""
        starts = [a.min() for a in (self.host.start, self.gpu.start) if len(a)]
        ends = [a.max() for a in (self.host.end, self.gpu.end) if len(a)]
        return (min(starts), max(ends)) if starts else (0.0, 0.0)

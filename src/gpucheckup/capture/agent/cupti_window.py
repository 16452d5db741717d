"""The light window's GPU timeline from CUPTI's activity API (NVIDIA's `cupti-python`), with no torch.profiler.

Inside the job only this runs during the window: CUPTI's records of kernels (CONCURRENT_KERNEL), copies
(MEMCPY) and memsets (MEMSET), written by CUPTI into its own buffers; no runtime or driver API record, no
RecordFunction callback. The host side costs one clock read per step boundary and two per optimizer step and
per DataLoader batch (`HostRanges`); the host's attribution comes from py-spy outside the job (capture/sampler.py).
CUPTI's buffers are handed to Python (`_completed`) only when one fills (BUFFER_BYTES holds ~60,000 kernel
records) or when the window stops, so the conversion happens after the window's last step.

Synchronizations (SYNC_ACTIVITIES, recorded only when asked: `gpucheckup run --light --light-syncs`; left out with a
log line where CUPTI or cupti-python refuses it): one record per host wait on the GPU (stream, event, context
synchronize) and per stream wait event, none per kernel. Not by default, because enabling the kind costs every launch,
not every sync: on an H200 the launch-bound MLP's step took +33% in a window with it and +9% without it, paired in one
process with 3 sync records per 41 steps (docs/validation.md 6e); a trace without them says so
(`gpucheckup_light.activities`), and the check-up then reads syncs as not recorded. Each host wait is written as
the `cuda_runtime` call a full trace holds (`cudaStreamSynchronize`, `cudaEventSynchronize`, `cudaDeviceSynchronize`,
SYNC_TYPE_CALLS) on the window's main thread (CUPTI's record names no thread), so the analyses count syncs and name
the idle a sync drained `sync`; a stream wait event queues a wait on the GPU, not on the host: counted in
`gpucheckup_light.sync_calls`, not written as a call.

`CuptiWindow` has a profiler's methods (start, step, stop, export_chrome_trace) so the agent drives it as it
drives torch.profiler: its host ranges (`host_scopes`) are turned on before start() and off after stop();
start() after step n enables the activities (CUPTI's first-use cost falls in the
warm-up step n+1), step() marks the end of each step, stop() after the last step synchronizes, disables the
activities, flushes CUPTI's buffers and detaches CUPTI from the process (cuptiFinalize: a disabled but attached
CUPTI still costs every launch; a later window attaches it again). With `counter_steps` C (agent/pm_counters.py),
start() starts the GPU's activity counters instead; the C steps after the warm-up are counter steps (no record),
the step() ending the last of them enables the activities (the next step is their warm-up), and stop() decodes and
closes the counters before it detaches CUPTI. The records' warm-up lasts until the GPU has run what was queued before
the records were enabled (`_still_queued`: a CUDA event marks the queue), so no kernel of the record steps runs
unrecorded and the job keeps its pace (a GPU-bound job queues a few steps ahead), and then until a step takes the
counter steps' pace again (`_refilling`): the records' first step costs the host CUPTI's first use of each kernel,
the GPU drains its queue meanwhile, and a GPU-bound job's host then runs ahead of the GPU until the queue is full
again, its steps ending on the host before their kernels ran. A window without counter steps warms its records up
the same way from its own warm-up step, at the job's recent pace, where the agent follows the warm-up
(`follows_warmup`: a window of so many steps). `shift` says how many steps later the records begin than in a window
with no counter step and one warm-up step: C + the warm-up steps so far, or the warm-up steps after the first.

Clocks: CUPTI's timestamps (ns) come from its own clock (cuptiGetTimestamp). At start() and at stop() the
window reads time.time_ns(), cupti.get_timestamp(), time.time_ns() (best of CLOCK_READS, the narrowest
bracket); Unix ns = CUPTI ns + offset, the offset taken at the bracket's midpoint and interpolated linearly
between the two readings (the trace says both offsets, their drift and the brackets' half-widths). Host
ranges are time.time_ns(), Unix already; py-spy's samples are Unix time through the launcher's
spawned_epoch_s (capture/sampler.py), so all three sources share the trace's clock:
Unix us = baseTimeNanoseconds / 1000 + ts.

The trace (docs/capture.md, "The light window's trace from CUPTI") is Kineto's JSON shape, restricted to
what the reader uses: `kernel`, `gpu_memcpy`, `gpu_memset` events (pid = device, tid = stream, args device,
stream, correlation, context, grid, block, registers per thread, shared memory, bytes) and
`user_annotation` ranges (`ProfilerStep#N`, `Optimizer.step#<Class>.step`, `Optimizer.closure#<Class>.step` for
each call of a closure passed to the step, `enumerate(DataLoader)#<Iter>.__next__`) on the main thread, plus
`deviceProperties`, `distributedInfo` and `gpucheckup_light` (backend, activities, clock, record counts). Kernel names are demangled as Kineto
does (the C++ runtime's __cxa_demangle).
Standard library only at import.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import threading
import time

from gpucheckup.capture.agent.cuda_libs import load_wheel_libraries

# The records' warm-up goes on while the GPU has not run what was queued before them, then past their first step and
# while a step takes under REFILLED_SHARE of the pace (the counter steps' median, else the job's recent steps': the
# host running ahead of a GPU whose queue drained), at most QUEUED_STEPS_MAX steps after the first (a GPU-bound job
# queues a few steps ahead: 3 of its 20 ms steps on the H200, and it then ran 14-19 ms steps for one or two more,
# docs/validation.md 6n). A tenth under the pace is a host no longer ahead of the GPU, within the steps' own spread
# (the counter steps' middle half spans a few percent).
QUEUED_STEPS_MAX = 10
REFILLED_SHARE = 0.9
BUFFER_BYTES = 16 << 20  # one CUPTI activity buffer: ~60,000 kernel records, a window's worth for most jobs
CLOCK_READS = 7  # clock brackets read at each end of the window; the narrowest one is kept
ACTIVITIES = ("CONCURRENT_KERNEL", "MEMCPY", "MEMSET")  # CUPTI activity kinds recorded (no RUNTIME, no DRIVER)
# Recorded when asked (syncs=True) and CUPTI agrees (else logged and left out): one record per host wait on the GPU,
# none per kernel; enabling it costs a launch-bound job about 5 us per launch on an H200 (docs/validation.md 6e)
SYNC_ACTIVITIES = ("SYNCHRONIZATION",)
BACKEND = "cupti-python activity API"
# The range of a closure the optimizer calls inside its step (analysis/one_trace/host/optimizer_spans.py's
# CLOSURE_RANGE: the same text)
CLOSURE_RANGE = "Optimizer.closure#"
# CUPTI's enums (cupti_activity.h), as Kineto names them in a trace
MEMCPY_KINDS = {0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
                8: "DtoD", 9: "HtoH", 10: "PtoP"}
MEMORY_KINDS = {0: "Unknown", 1: "Pageable", 2: "Pinned", 3: "Device", 4: "Array", 5: "Managed",
                6: "Device Static", 7: "Managed Static"}
# CUpti_ActivitySynchronizationType -> the CUDA runtime call the trace names (Kineto's `cuda_runtime` events)
SYNC_TYPE_CALLS = {1: "cudaEventSynchronize", 2: "cudaStreamWaitEvent", 3: "cudaStreamSynchronize",
                   4: "cudaDeviceSynchronize"}
STREAM_WAIT_EVENT = 2  # a wait queued on a stream, not a host wait: counted in the summary, not written as a call
SYNC_INVALID = 0xFFFFFFFF  # CUPTI_SYNCHRONIZATION_INVALID_VALUE: a stream or event id that does not apply


def preload_libcupti() -> str | None:
    """Where libcupti is not loaded yet, the libcupti of torch's CUDA wheel (load_wheel_libraries), so that
    cupti-python's load by name finds the library torch's profiler uses; the path loaded, or None."""
    try:
        with open("/proc/self/maps") as f:
            if "libcupti.so" in f.read():
                return None
    except OSError:
        return None
    return next(iter(load_wheel_libraries("libcupti.so*", first_only=True)), None)


def load_cupti():
    """The `cupti.cupti` module of cupti-python; ImportError (or CUPTI's own error) when it cannot be used."""
    preload_libcupti()
    from cupti import cupti  # noqa: PLC0415 - optional, imported only for a light window on a GPU

    cupti.get_timestamp()  # loads libcupti: fails here, not inside the window, when it cannot be found
    return cupti


def clock_offset(cupti_now, wall_now=time.time_ns, reads: int = CLOCK_READS) -> tuple[int, int]:
    """(Unix ns - CUPTI ns, half-width of the narrowest bracket in ns) from `reads` wall/CUPTI/wall readings."""
    best = None
    for _ in range(reads):
        a = wall_now()
        c = cupti_now()
        b = wall_now()
        if best is None or b - a < best[1] - best[0]:
            best = (a, b, c)
    a, b, c = best
    return (a + b) // 2 - c, (b - a) // 2


class Clock:
    """CUPTI ns -> Unix ns, from the offsets read at the window's start and stop, interpolated between them."""

    def __init__(self, start: tuple[int, int, int], stop: tuple[int, int, int] | None = None):
        self.start = start  # (cupti ns, offset ns, half-width ns)
        self.stop = stop if stop is not None else start

    def unix_ns(self, t: int) -> int:
        c0, o0, _ = self.start
        c1, o1, _ = self.stop
        if c1 <= c0:
            return t + o0
        return t + o0 + (o1 - o0) * (t - c0) // (c1 - c0)

    def describe(self) -> dict:
        return {"cupti_to_unix_offset_ns": [self.start[1], self.stop[1]],
                "drift_ns": self.stop[1] - self.start[1],
                "bracket_half_width_ns": [self.start[2], self.stop[2]],
                "method": "time.time_ns() / cupti.get_timestamp() / time.time_ns(), narrowest of "
                          f"{CLOCK_READS}, at the window's start and stop; interpolated linearly"}


class HostRanges:
    """The cheap host ranges, each one clock read, as (name, start Unix ns, end Unix ns): optimizer steps (a wrapper
    on the `step` of each optimizer class torch has hooked, i.e. instantiated) and DataLoader batches (a wrapper on
    `_BaseDataLoaderIter.__next__`). Class attributes are swapped, never torch's hook dictionaries: the agent turns
    these on and off inside torch's optimizer post-step hooks, while torch iterates those dictionaries (adding or
    removing a hook there ends the job with `OrderedDict mutated during iteration`, as seen on the H200). A step
    still open when the ranges are turned off (the window's last one: the agent stops inside it) ends then."""

    backend = BACKEND

    def __init__(self, torch):
        self.torch = torch
        self.ranges: list[tuple[str, int, int]] = []
        self.open_steps: dict[int, tuple[str, int]] = {}
        self.swapped: list[tuple[type, str, object]] = []  # (class, attribute, original)
        self.active = False

    def on(self) -> None:
        opened, ranges = self.open_steps, self.ranges
        self.active = True
        for cls in _hooked_optimizers(self.torch):
            real = cls.__dict__["step"]

            def timed_step(opt, *args, _real=real, **kwargs):
                key = id(opt)
                opened[key] = (f"Optimizer.step#{type(opt).__name__}.step", time.time_ns())
                args, kwargs = _timed_closure(type(opt).__name__, args, kwargs, ranges)
                try:
                    return _real(opt, *args, **kwargs)
                finally:
                    got = opened.pop(key, None)
                    if got is not None:
                        ranges.append((got[0], got[1], time.time_ns()))

            timed_step.hooked = True  # torch wraps a class's step once, where this is not set
            self._swap(cls, "step", timed_step)
        try:
            from torch.utils.data.dataloader import _BaseDataLoaderIter
        except ImportError:
            return
        real_next = _BaseDataLoaderIter.__dict__["__next__"]

        def timed_next(it):
            t0 = time.time_ns()
            try:
                return real_next(it)
            finally:
                ranges.append((f"enumerate(DataLoader)#{type(it).__name__}.__next__", t0, time.time_ns()))

        self._swap(_BaseDataLoaderIter, "__next__", timed_next)

    def _swap(self, cls: type, attr: str, fn) -> None:
        self.swapped.append((cls, attr, cls.__dict__[attr]))
        setattr(cls, attr, fn)

    def off(self) -> None:
        """Put the classes' attributes back; a step still open ends now."""
        now = time.time_ns()
        for cls, attr, original in reversed(self.swapped):
            setattr(cls, attr, original)
        self.swapped = []
        for name, t0 in self.open_steps.values():
            self.ranges.append((name, t0, now))
        self.open_steps.clear()
        self.active = False


def _timed_closure(name: str, args: tuple, kwargs: dict, ranges: list) -> tuple[tuple, dict]:
    """`step`'s arguments with its closure (Lightning's `optimizer.step(closure)`: the forward and backward run inside
    the optimizer's step) wrapped to add a CLOSURE_RANGE range each time the optimizer calls it, so that the
    check-up can tell the model's work inside Optimizer.step from the optimizer's own; unchanged without a closure."""
    closure = kwargs.get("closure", args[0] if args else None)
    if not callable(closure):
        return args, kwargs

    def timed(_c=closure):
        t0 = time.time_ns()
        try:
            return _c()
        finally:
            ranges.append((f"{CLOSURE_RANGE}{name}.step", t0, time.time_ns()))

    if "closure" in kwargs:
        return args, {**kwargs, "closure": timed}
    return (timed, *args[1:]), kwargs


def _hooked_optimizers(torch) -> list[type]:
    """The optimizer classes whose own `step` torch has wrapped for its hooks (every class instantiated so far)."""
    out, todo, seen = [], [torch.optim.Optimizer], set()
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        todo.extend(cls.__subclasses__())
        if getattr(cls.__dict__.get("step"), "hooked", False):
            out.append(cls)
    return out


def _text(v) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, (bytes, bytearray)) else str(v)


def _record(a, kinds) -> tuple | None:
    """The fields kept of one CUPTI activity record (copied out: the record lives in CUPTI's buffer)."""
    k = a.kind
    g = getattr
    if k == kinds["CONCURRENT_KERNEL"]:
        return ("kernel", a.start, a.end, g(a, "device_id", 0), g(a, "stream_id", 0), g(a, "correlation_id", -1),
                g(a, "context_id", 0), _text(a.name),
                (g(a, "grid_x", 0), g(a, "grid_y", 0), g(a, "grid_z", 0)),
                (g(a, "block_x", 0), g(a, "block_y", 0), g(a, "block_z", 0)),
                g(a, "registers_per_thread", 0), g(a, "static_shared_memory", 0) + g(a, "dynamic_shared_memory", 0))
    if k == kinds.get("MEMCPY"):
        return ("memcpy", a.start, a.end, g(a, "device_id", 0), g(a, "stream_id", 0), g(a, "correlation_id", -1),
                g(a, "context_id", 0), int(g(a, "copy_kind", 0)), int(g(a, "src_kind", 0)), int(g(a, "dst_kind", 0)),
                g(a, "bytes", 0))
    if k == kinds.get("MEMSET"):
        return ("memset", a.start, a.end, g(a, "device_id", 0), g(a, "stream_id", 0), g(a, "correlation_id", -1),
                g(a, "context_id", 0), int(g(a, "memory_kind", 3)), g(a, "bytes", 0))
    if k == kinds.get("SYNCHRONIZATION"):  # no device: the device slot holds -1 (host side, CUPTI clock)
        return ("sync", a.start, a.end, -1, g(a, "stream_id", SYNC_INVALID), g(a, "correlation_id", -1),
                g(a, "context_id", 0), int(g(a, "type", 0)), g(a, "cuda_event_id", SYNC_INVALID))
    return None


def _sync_kinds(cupti) -> dict:
    """The synchronization kinds (SYNC_ACTIVITIES) this cupti-python names: name -> its ActivityKind."""
    return {n: getattr(cupti.ActivityKind, n) for n in SYNC_ACTIVITIES if hasattr(cupti.ActivityKind, n)}


class CuptiWindow:
    """A light window's recorder with a profiler's methods: CUPTI activity records (synchronizations too when `syncs`)
    plus the cheap host ranges."""

    backend = BACKEND

    def __init__(self, torch, cupti, log=None, syncs: bool = False, counter_steps: int = 0, expected_s: float = 0.0,
                 follows_warmup: bool = False, pace_s: float = 0.0):
        self.torch = torch
        self.cupti = cupti
        self.log = log or (lambda msg: None)
        self.syncs = syncs
        self.kinds = {name: getattr(cupti.ActivityKind, name) for name in ACTIVITIES}
        if syncs:
            self.kinds.update(_sync_kinds(cupti))
        self.records: list[tuple] = []
        self.other = 0  # records of other kinds (another tool's activities in the same buffers)
        self.buffers = 0
        self.lock = threading.Lock()
        self.host = HostRanges(torch)
        self.marks: list[int] = []  # Unix ns: start(), each step(), stop()
        self.clock = None
        self.enabled: list[str] = []
        self.started = False
        self.detached = False  # CUPTI detached after the window (cuptiFinalize)
        self.tid = threading.get_native_id()
        self.pid = os.getpid()
        self.counter_steps = counter_steps  # steps sampled by the activity counters before records (0: none)
        self.expected_s = expected_s  # the counters' expected span (warm-ups, counter and record steps): their interval
        self.pm = None  # PmCounters while the counters run (agent/pm_counters.py)
        self.samples = None  # their Samples after stop()
        self.counted = 0  # counter steps the window took (counter_steps where the counters started, else 0)
        self.why_no_counters = ""
        self.warmups = 0  # the records' warm-up steps after the counter steps (1, more while the GPU runs the queue)
        self.warming = False  # the records' warm-up goes on: the GPU has not run what was queued before them
        self.queued = None  # the CUDA event marking the GPU's queue when the records were enabled (_queue_marker)
        self.pace_ns = 0  # the job's pace (ns; the counter steps' median): a step back at it has the queue refilled
        # a window without counter steps warms its records up by the marker too where the agent moves its record steps
        # by the warm-ups (a window of so many steps), at the job's recent pace (pace_s: its median step, seconds)
        self.follows_warmup = follows_warmup
        self.pace_s = pace_s

    def host_scopes(self) -> HostRanges:
        """What the agent turns on before start() and off after stop() (its `light`): the host ranges."""
        return self.host

    # ---- the profiler's methods ------------------------------------------------------------------
    def start(self) -> None:
        """Enable the activities (the agent calls this after step n: warm-up step n+1) and the host ranges."""
        cu = self.cupti
        c0 = cu.get_timestamp()
        off, half = clock_offset(cu.get_timestamp)
        self.clock = Clock((c0, off, half))
        cu.activity_register_callbacks(self._requested, self._completed)
        if self.counter_steps > 0:
            self._start_counters()
        if not self.pm:
            self._enable_records()
            if "CONCURRENT_KERNEL" not in self.enabled:
                self._disable()
                raise RuntimeError("CUPTI would not record kernels (CONCURRENT_KERNEL)")
            self.warmups, self.warming = 1, self.queued is not None  # the window's warm-up step is the records'
        self.started = True
        self.marks = [time.time_ns()]

    @property
    def shift(self) -> int:
        """Steps the records start later than those of a window with no counter step and one warm-up step: the counter
        steps and the records' warm-up steps so far, or the warm-up steps after the first where the counters do not run;
        the agent reads it after every step()."""
        return self.counted + max(self.warmups, 1) if self.counted else max(self.warmups, 1) - 1

    def step(self) -> None:
        """The end of a step (the agent's optimizer post-step hook); after the last counter step, records begin
        (the next step is their warm-up, and the next while the GPU still runs what was queued before them or the
        host runs ahead of it: `_still_queued`, `_refilling`)."""
        self.marks.append(time.time_ns())
        if self.pm and not self.enabled and len(self.marks) == self.counter_steps + 2:
            self._enable_records()
            self.warmups, self.warming = 1, True
        elif self.warming:
            why = ("the GPU still ran work queued before them" if self._still_queued() else
                   "the host still ran ahead of the GPU" if self._refilling() else "")
            capped = bool(why) and self.warmups > QUEUED_STEPS_MAX  # the next step warms up too, up to the cap
            self.warming = bool(why) and not capped
            self.warmups += self.warming
            if not self.warming:
                self.log(f"light window: records from the next step, after {self.warmups} warm-up step(s)"
                         + (f" ({why})" if capped else ""))

    def _still_queued(self) -> bool:
        """Whether the GPU has not yet run what was queued before the records (the marker not reached; False without
        a marker or where torch cannot read it)."""
        if self.queued is None:
            return False
        try:
            return not self.queued.query()
        except Exception as e:  # noqa: BLE001 - the records begin; the check-up's busy may read a little low
            self.log(f"light window: the queue's marker could not be read ({type(e).__name__}: {e})")
            self.queued = None  # nor the host's pace after it: the records begin after the step that just ended
            return False

    def _refilling(self) -> bool:
        """Whether the host may still run ahead of a GPU whose queue drained (False without a marker: no GPU queue to
        refill): the records' first warm-up step always (its time is CUPTI's first use of each kernel, not the job's
        pace: on the H200 a records-only window's first warm-up took 33 ms of a 20 ms step, the GPU reached the marker
        inside it, and the host ran the next 5 steps in 10-15 ms, docs/validation.md 6n), and any later step that took
        under REFILLED_SHARE of the pace (the counter steps' median, else the job's recent steps')."""
        if self.queued is None:
            return False
        return self.warmups <= 1 or self.marks[-1] - self.marks[-2] < REFILLED_SHARE * self.pace_ns

    def _queue_marker(self):
        """A CUDA event recorded on the current stream now (None without a GPU, or where torch refuses it): done once
        the GPU has run everything queued on that stream before it."""
        if not self.torch.cuda.is_available():
            return None
        try:
            marker = self.torch.cuda.Event()
            marker.record()
            return marker
        except Exception as e:  # noqa: BLE001 - the records begin after one warm-up step, as without the marker
            self.log(f"light window: no marker in the GPU's queue ({type(e).__name__}: {e})")
            return None

    def _start_counters(self) -> None:
        """Start the activity counters (agent/pm_counters.py) for the counter steps; where they cannot run, say why
        once and record every step."""
        try:
            from gpucheckup.capture.agent.pm_counters import PmCounters

            pm = PmCounters(self.torch.cuda.current_device(), self.log)
            pm.start(self.expected_s)
            self.pm, self.counted = pm, self.counter_steps
            self.log(f"light window: {self.counter_steps} counter steps ({', '.join(pm.metrics)} every "
                     f"{pm.interval_ns // 1000} us), then kernel records")
        except Exception as e:  # noqa: BLE001 - ImportError (cupti-python < 13.3), ERR_NVGPUCTRPERM, CUPTI's errors
            self.why_no_counters = f"{type(e).__name__}: {str(e)[:200]}"
            self.log(f"light window: no counter steps, kernel records over every step ({self.why_no_counters})")

    def _enable_records(self) -> None:
        """Enable the activity kinds (synchronizations too where asked); a kind CUPTI refuses is logged and left out.
        CUPTI records a kernel launched while its kind is enabled: a GPU-bound job's queue holds kernels launched
        before, which would run unrecorded inside the first record steps (on the H200 the counters read one such window
        4.7 points busier than its kernels, docs/validation.md 6l). After counter steps, or where the agent follows the
        warm-up (`follows_warmup`), the window marks the queue (`_queue_marker`) and warms the records up until the GPU
        has run the mark and the host is back at its pace: the job goes on at its pace. A wait for the queue instead
        (torch.cuda.synchronize) empties it, and a GPU-bound job's host then runs ahead of its GPU for several steps
        until the queue is full again: 5 record steps of a 20 ms step read 10-13 ms on the host (6m). A window the
        agent bounds by seconds keeps one warm-up step, so the window waits there, as it does where torch refuses the
        marker."""
        marked = bool(self.counted) or self.follows_warmup
        self.queued = self._queue_marker() if marked else None
        if self.torch.cuda.is_available() and self.queued is None:
            self.torch.cuda.synchronize()
        counter_ns = [b - a for a, b in zip(self.marks[1:-1], self.marks[2:])]  # marks[1..C+1]: after their warm-up
        if not self.counted:
            self.pace_ns = int(self.pace_s * 1e9)
        elif counter_ns:
            self.pace_ns = statistics.median_high(counter_ns)
        for name in ACTIVITIES:
            try:
                self.cupti.activity_enable(self.kinds[name])
                self.enabled.append(name)
            except Exception as e:  # noqa: BLE001 - a kind this CUPTI cannot record: the others still are
                self.log(f"light window: CUPTI would not record {name}: {e}")
        if self.syncs:
            self._enable_syncs()

    def stop(self) -> None:
        """The end of the last step: wait for the GPU's queued work, stop recording, flush CUPTI's buffers."""
        if not self.started:
            return
        self.marks.append(time.time_ns())
        self.started = False
        try:
            if self.torch.cuda.is_available():
                self.torch.cuda.synchronize()  # the last step's kernels finish, so their records are complete
        finally:
            self._disable()
            self.cupti.activity_flush_all(1)  # CUPTI_ACTIVITY_FLAG_FLUSH_FORCED: every buffer, now
            self._stop_counters()
            c1 = self.cupti.get_timestamp()
            off, half = clock_offset(self.cupti.get_timestamp)
            self.clock = Clock(self.clock.start, (c1, off, half))
            self._detach()

    def _stop_counters(self) -> None:
        """Decode the counters' samples and tear CUPTI's profiler down, before the detach (pm_counters.py: the order)."""
        pm, self.pm = self.pm, None
        if pm is None:
            return
        try:
            t0 = time.perf_counter()
            self.samples = pm.stop()
            self.log(f"light window: {len(self.samples.start)} counter samples decoded in "
                     f"{time.perf_counter() - t0:.2f} s (every {self.samples.interval_ns // 1000} us)")
        except Exception as e:  # noqa: BLE001 - the window keeps its records
            self.why_no_counters = f"decoding the counters failed: {type(e).__name__}: {str(e)[:200]}"
            self.log(f"light window: {self.why_no_counters}")
        finally:
            pm.close()

    def _detach(self) -> None:
        """Detach CUPTI from the process (cuptiFinalize), the window's records all in (synchronized, flushed): with
        its activities disabled CUPTI stays attached and still costs every launch and copy about 1 us (H200,
        docs/validation.md section 6c); detaching took 2.5 ms, and the next window attaches it again."""
        try:
            self.cupti.finalize()
            self.detached = True
        except Exception as e:  # noqa: BLE001 - CUPTI stays attached: the job goes on, a little slower
            self.log(f"light window: CUPTI stays attached after the window ({type(e).__name__}: {e})")

    def export_chrome_trace(self, path: str) -> None:
        """Write the window as a Kineto-shaped JSON trace (see the module docstring)."""
        devices = {r[3] for r in self.records if r[3] >= 0} or {self.torch.cuda.current_device()}
        trace = build_trace(self.records, self.host.ranges, self.marks, self.clock, self.pid, self.tid,
                            device_properties(self.torch, devices), distributed_info(self.torch), self.summary(),
                            counter_steps=self.counted, counters=self.samples, device=min(devices),
                            record_warmups=self.warmups)
        with open(path, "w") as f:
            json.dump(trace, f, separators=(",", ":"))

    def summary(self) -> dict:
        counts: dict[str, int] = {}
        for r in self.records:
            counts[r[0]] = counts.get(r[0], 0) + 1
        return {"backend": BACKEND, "activities": list(self.enabled), "records": counts,
                **({"record_warmups": self.warmups} if self.counted or self.follows_warmup else {}),
                "other_records": self.other, "buffers": self.buffers, "detached_after": self.detached,
                "cupti_python": _package_version(),
                **({"no_counters": self.why_no_counters} if self.why_no_counters else {})}

    def _enable_syncs(self) -> None:
        """Enable the synchronization kinds this cupti-python names and CUPTI agrees to record; log the others."""
        for name in SYNC_ACTIVITIES:
            if name not in self.kinds:
                self.log(f"light window: CUPTI would not record {name}: cupti-python has no ActivityKind.{name}")
                continue
            try:
                self.cupti.activity_enable(self.kinds[name])
                self.enabled.append(name)
            except Exception as e:  # noqa: BLE001 - a kind this CUPTI cannot record: the others still are
                self.log(f"light window: CUPTI would not record {name}: {e}")

    # ---- CUPTI's buffer callbacks ------------------------------------------------------------------
    def _requested(self):
        return BUFFER_BYTES, 0

    def _completed(self, activities) -> None:
        kinds = self.kinds
        out = []
        other = 0
        for a in activities:
            r = _record(a, kinds)
            if r is None:
                other += 1
            else:
                out.append(r)
        with self.lock:
            self.records.extend(out)
            self.other += other
            self.buffers += 1

    def _disable(self) -> None:
        for name in list(self.enabled):
            try:
                self.cupti.activity_disable(self.kinds[name])
            except Exception:  # noqa: BLE001 - disabling what is off
                pass


def _package_version() -> str:
    try:
        from importlib.metadata import version

        return version("cupti-python")
    except Exception:  # noqa: BLE001
        return "unknown"


def device_properties(torch, devices: set[int]) -> list[dict]:
    """deviceProperties as Kineto writes them, for the devices the records name."""
    out = []
    for d in sorted(devices):
        try:
            p = torch.cuda.get_device_properties(d)
        except Exception:  # noqa: BLE001 - a device torch does not see
            continue
        out.append({"id": d, "name": p.name, "totalGlobalMem": int(p.total_memory), "computeMajor": p.major,
                    "computeMinor": p.minor, "numSms": p.multi_processor_count})
    return out


def distributed_info(torch) -> dict | None:
    """distributedInfo as Kineto writes it, when torch.distributed is initialised."""
    try:
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            return {"rank": dist.get_rank(), "world_size": dist.get_world_size(), "backend": str(dist.get_backend())}
    except Exception:  # noqa: BLE001
        pass
    return None


_DEMANGLED: dict[str, str] = {}
_CXA = []  # [(__cxa_demangle, free)] once loaded; [None] where the C++ runtime cannot be loaded


def _cxa():
    if not _CXA:
        try:
            import ctypes

            fn = ctypes.CDLL("libstdc++.so.6").__cxa_demangle
            fn.restype = ctypes.c_void_p
            fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
            free = ctypes.CDLL(None).free
            free.argtypes = [ctypes.c_void_p]
            _CXA.append((fn, free))
        except (OSError, AttributeError):
            _CXA.append(None)
    return _CXA[0]


def demangle(name: str) -> str:
    """A C++ symbol as the C++ runtime demangles it (Kineto's kernel names); the name itself where it cannot."""
    if not name.startswith("_Z"):
        return name
    got = _DEMANGLED.get(name)
    if got is not None:
        return got
    out = name
    cxa = _cxa()
    if cxa is not None:
        import ctypes

        fn, free = cxa
        status = ctypes.c_int(-1)
        try:
            ptr = fn(name.encode("utf-8", "replace"), None, None, ctypes.byref(status))
        except (ValueError, ctypes.ArgumentError):
            ptr = None
        if ptr:
            if status.value == 0:
                out = ctypes.string_at(ptr).decode("utf-8", "replace")
            free(ptr)
    _DEMANGLED[name] = out
    return out


def build_trace(records, ranges, marks, clock: Clock, pid: int, tid: int, props: list[dict],
                dist: dict | None, summary: dict, counter_steps: int = 0, counters=None, device: int = 0,
                record_warmups: int = 1) -> dict:
    """The window's Kineto-shaped trace: records (CuptiWindow._completed's tuples, CUPTI ns), host ranges
    (name, Unix ns, Unix ns), step marks (Unix ns: start, the end of each step), all on Unix time; the first
    `counter_steps` steps after the warm-up are counter steps, then `record_warmups` warm-up steps of the records
    (without counter steps the window's warm-up is the records' first), with `counters` (pm_counters.Samples of
    `device`, None where their decode failed) written in `counter_block`."""
    lo = marks[0] if marks else min((clock.unix_ns(r[1]) for r in records), default=time.time_ns())
    base = lo // 1_000_000_000 * 1_000_000_000

    def us(unix_ns: int) -> float:
        return (unix_ns - base) / 1000.0

    # marks[0] is start() (before the warm-up step); marks[1] the warm-up's end; with counters, marks[2..C+1] end
    # the counter steps and marks[C+2..C+1+W] the records' W warm-up steps, without them marks[1..W] end the records'
    # W warm-up steps; each later mark ends a recorded step
    warm = max(record_warmups, 1)
    rec0 = min(1 + counter_steps + warm if counter_steps else warm, max(len(marks) - 1, 0))
    counted = [(marks[i - 1], marks[i]) for i in range(2, min(counter_steps + 2, len(marks)))]
    lo_rec = marks[rec0] if len(marks) > 1 else lo  # the records' warm-up end: what ended before it is not kept
    ev, streams = _gpu_events(records, clock, lo_rec, us)
    syncs = [r for r in records if r[0] == "sync"]
    host = []
    for i in range(rec0 + 1, len(marks)):
        host.append((f"ProfilerStep#{i - rec0}", marks[i - 1], marks[i]))
    hi = marks[-1] if marks else float("inf")
    # a range open when the window stopped (the optimizer's step, whose post-hook stops it) ends at the window's end:
    # the stop's own work (synchronize, flush, the counters' decode) is not the job's
    host.extend((n, t0, min(t1, hi)) for n, t0, t1 in ranges if t1 >= lo_rec and t0 <= hi)
    ev.extend(sync_events(syncs, clock, lo_rec, hi, pid, tid, us))
    for ext, (name, t0, t1) in enumerate(sorted(host, key=lambda r: (r[1], -r[2])), start=1):
        ev.append({"ph": "X", "cat": "user_annotation", "name": name, "pid": pid, "tid": tid, "ts": us(t0),
                   "dur": max(t1 - t0, 0) / 1000.0, "args": {"External id": ext}})
    light = {**summary, "clock": clock.describe(), "host_ranges": len(host), "sync_calls": _sync_counts(syncs)}
    if counters is not None:
        light["counters"] = counter_block(counters, counted, clock, us, device)
    # the block before the events: a reader streams the events and holds what follows them whole (trace/chunks.py),
    # and the counters' samples are a megabyte or two
    trace = {"schemaVersion": 1, "deviceProperties": props, "displayTimeUnit": "ms", "baseTimeNanoseconds": base,
             "gpucheckup_light": light, "traceEvents": _metadata(pid, tid, streams) + ev}
    if dist:
        trace["distributedInfo"] = dist
    return trace


def counter_block(c, steps, clock: Clock, us, device: int) -> dict:
    """The counter steps and samples (trace us) in the `gpucheckup_light` block: `steps` [[start, end], ...] of the
    counter steps (host marks), and each sample's start, duration, compute-engine busy % and launches (GPU clock read
    through CUPTI's timestamps, as the kernel records are)."""
    keep = [i for i, b in enumerate(c.busy_pct) if math.isfinite(b)]  # JSON has no NaN: a reader would refuse it
    t0 = [round(us(clock.unix_ns(c.start[i])), 3) for i in keep]
    dur = [round((c.end[i] - c.start[i]) / 1000.0, 3) for i in keep]
    launches = [c.launches[i] for i in keep] if len(c.launches) == len(c.busy_pct) else []
    return {"source": "CUPTI PM sampling", "device": device, "metrics": c.metrics, "interval_ns": c.interval_ns,
            "decoded": c.decoded, "dropped_first": c.dropped_first,
            "steps": [[round(us(a), 3), round(us(b), 3)] for a, b in steps],
            "samples": {"ts": t0, "dur": dur, "busy_pct": [c.busy_pct[i] for i in keep], "launches": launches}}


def _gpu_events(records, clock: Clock, lo_rec: int, us) -> tuple[list[dict], set[tuple[int, int]]]:
    """The kernel, copy and memset records that end after the warm-up step as Kineto's GPU events, and the
    (device, stream) pairs they ran on."""
    ev: list[dict] = []
    streams: set[tuple[int, int]] = set()
    for r in records:
        kind, start, end, dev, stream, corr, ctx = r[:7]
        if kind == "sync":
            continue
        t0, t1 = clock.unix_ns(start), clock.unix_ns(end)
        if t1 < t0 or t1 < lo_rec:
            continue
        streams.add((dev, stream))
        args = {"device": dev, "context": ctx, "stream": stream, "correlation": corr}
        if kind == "kernel":
            name, grid, block, regs, smem = r[7:]
            args.update({"registers per thread": regs, "shared memory": smem, "grid": list(grid), "block": list(block)})
            cat = "kernel"
            name = demangle(name)
        elif kind == "memcpy":
            ck, src, dst, nbytes = r[7:]
            args["bytes"] = nbytes
            cat = "gpu_memcpy"
            name = f"Memcpy {MEMCPY_KINDS.get(ck, 'Unknown')} ({MEMORY_KINDS.get(src, 'Unknown')} -> " \
                   f"{MEMORY_KINDS.get(dst, 'Unknown')})"
        else:
            mk, nbytes = r[7:]
            args["bytes"] = nbytes
            cat, name = "gpu_memset", f"Memset ({MEMORY_KINDS.get(mk, 'Unknown')})"
        ev.append({"ph": "X", "cat": cat, "name": name, "pid": dev, "tid": stream, "ts": us(t0),
                   "dur": (t1 - t0) / 1000.0, "args": args})
    return ev, streams


def _metadata(pid: int, tid: int, streams: set[tuple[int, int]]) -> list[dict]:
    """Kineto's metadata events: the host process and thread, each GPU and each of its streams named."""
    meta = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "python3"}},
            {"ph": "M", "name": "process_labels", "pid": pid, "tid": 0, "args": {"labels": "CPU"}},
            {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": "thread " + str(tid) + " (python)"}}]
    for dev in sorted({d for d, _ in streams}):
        meta.append({"ph": "M", "name": "process_labels", "pid": dev, "tid": 0, "args": {"labels": f"GPU {dev}"}})
    for dev, s in sorted(streams):
        meta.append({"ph": "M", "name": "thread_name", "pid": dev, "tid": s, "args": {"name": f"stream {s}"}})
    return meta


def sync_events(syncs, clock: Clock, lo: int, hi, pid: int, tid: int, us) -> list[dict]:
    """CUPTI's synchronization records (CuptiWindow._completed's "sync" tuples, CUPTI ns) as the host's CUDA runtime
    calls a full trace holds (`cuda_runtime`, named by SYNC_TYPE_CALLS) on the window's main thread: CUPTI's record names
    no thread, and the training loop's thread is the one that reads GPU values. Kept where the call ended after the
    warm-up step's end (lo, Unix ns) and started by the window's end (hi); a stream wait event is a wait queued on a
    stream, not a host wait, and a record CUPTI could not time (start = end = 0) says nothing: both left out."""
    out = []
    for _, start, end, _dev, stream, corr, ctx, typ, event in syncs:
        if typ == STREAM_WAIT_EVENT or typ not in SYNC_TYPE_CALLS or (start == 0 and end == 0):
            continue
        t0, t1 = clock.unix_ns(start), clock.unix_ns(end)
        if t1 < t0 or t1 < lo or t0 > hi:
            continue
        args = {"correlation": corr, "context": ctx, "source": "CUPTI synchronization record"}
        if stream != SYNC_INVALID:
            args["stream"] = stream
        if event != SYNC_INVALID:
            args["cuda_event"] = event
        out.append({"ph": "X", "cat": "cuda_runtime", "name": SYNC_TYPE_CALLS[typ], "pid": pid, "tid": tid, "ts": us(t0),
                    "dur": (t1 - t0) / 1000.0, "args": args})
    return out


def _sync_counts(syncs) -> dict[str, int]:
    """CUPTI's synchronization records by the call they name (stream wait events too), over the whole recording."""
    out: dict[str, int] = {}
    for r in syncs:
        name = SYNC_TYPE_CALLS.get(r[7], "unknown")
        out[name] = out.get(name, 0) + 1
    return out

"""gpu-steps.csv: each optimizer step's time on the GPU, for `gpucheckup ab` (setting `gpu_clock`).

The step times in steps.csv are the host's: the interval between two optimizer steps' returns. A
job that never waits for the GPU (non_blocking copies both ways, no sync, no read of a GPU value)
returns from its steps as fast as it can queue work, and those intervals say how fast the host
queues, not how fast steps are done. So, at each step's end, a timing CUDA event is recorded on
the current stream; the GPU time of step n is the time between the events of steps n-1 and n
(`cudaEventElapsedTime`): when the GPU finished the work queued up to one step's end, and then
the next's. Events are read once they are done (queried every RESOLVE_EVERY steps, never waited
for), and at exit after one synchronize. Work on other streams that the current stream does not
wait for is not in it. Nothing is recorded while a stream is being captured into a CUDA graph (an
event would break the capture), nor before the job has touched CUDA.

Columns: step, gpu_ms (one row per step whose previous step was timed too), written at exit. The
queue left at the last step's end is drained by the synchronize and is in the last steps' times.
"""

from __future__ import annotations

from collections import deque

from gpucheckup.layout import GPU_STEP_COLUMNS as COLUMNS

RESOLVE_EVERY = 32  # events waiting to be read before the oldest are queried (a query costs about a microsecond)
MAX_PENDING = 100_000  # events waiting: beyond it the oldest are dropped (a job far ahead of its GPU; rows lost)


class GpuClock:
    """Timing events at step ends and the GPU time between consecutive ones."""

    def __init__(self, torch):
        self.torch = torch
        self.pending: deque = deque()  # (step, event), oldest first
        self.last: tuple[int, object] | None = None  # the newest event already read (the next interval's start)
        self.rows: list[str] = []
        self.dropped = 0

    def mark(self, step: int) -> None:
        """Record step `step`'s end on the current stream (when CUDA is in use and not capturing)."""
        cuda = self.torch.cuda
        if not cuda.is_initialized() or cuda.is_current_stream_capturing():
            return
        ev = cuda.Event(enable_timing=True)
        ev.record()
        self.pending.append((step, ev))
        if len(self.pending) > MAX_PENDING:
            self.pending.popleft()
            self.last = None  # the interval across the dropped event is unknown
            self.dropped += 1
        if len(self.pending) >= RESOLVE_EVERY:
            self._resolve(wait=False)

    def _resolve(self, wait: bool) -> None:
        """Read the events that are done, oldest first (all of them after a synchronize when `wait`)."""
        while self.pending:
            step, ev = self.pending[0]
            if not wait and not ev.query():
                return
            if self.last is not None and self.last[0] == step - 1:
                self.rows.append(f"{step},{self.last[1].elapsed_time(ev):.4f}\n")
            self.last = (step, ev)
            self.pending.popleft()

    def finish(self) -> str:
        """Wait for the GPU, read every event; the file's text (empty when no interval was timed)."""
        if self.pending:
            self.torch.cuda.synchronize()
            self._resolve(wait=True)
        return ",".join(COLUMNS) + "\n" + "".join(self.rows) if self.rows else ""

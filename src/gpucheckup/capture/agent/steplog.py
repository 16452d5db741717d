"""steps.csv: one row per optimizer step (layout.STEP_COLUMNS), written in batches to `<file>.part`
(every FLUSH_ROWS rows or FLUSH_S seconds) and renamed into place at exit (atomic publish)."""

from __future__ import annotations

import os
import time

from gpucheckup import layout

FLUSH_ROWS = 256
FLUSH_S = 1.0


class StepLog:
    """The step rows of one process, buffered."""

    def __init__(self, path: str):
        self.path = path
        self.part = path + layout.PART
        self.buffer: list[str] = []
        self.last_flush = time.time()
        with open(self.part, "w") as f:
            f.write(",".join(layout.STEP_COLUMNS) + "\n")

    def add(self, step: int, t_end_s: float, ms: str, phase: str) -> None:
        """One step's row; written out when the batch is full or old enough."""
        self.buffer.append(f"{step},{t_end_s:.6f},{ms},{phase}\n")
        if len(self.buffer) >= FLUSH_ROWS or t_end_s - self.last_flush >= FLUSH_S:
            self.flush()

    def flush(self) -> None:
        rows, self.buffer = self.buffer, []
        self.last_flush = time.time()
        if rows:
            with open(self.part, "a") as f:
                f.write("".join(rows))

    def publish(self) -> None:
        """Write what is left and rename the file into place."""
        self.flush()
        os.replace(self.part, self.path)

"""steps.csv: one row per optimizer step (layout.STEP_COLUMNS), written in batches to `<file>.part`
(every FLUSH_ROWS rows or FLUSH_S seconds) and renamed into place at exit (atomic publish).

The file is opened relative to the run directory's descriptor (safe_dir.RunDirectory), never
through a link. After an `exec` the new image resumes the same `.part` file: it appends, and
counts on from its last row."""

from __future__ import annotations

import os
import time

from gpucheckup import layout

FLUSH_ROWS = 256
FLUSH_S = 1.0
MAX_BUFFERED = 100_000  # rows kept for a retry while writes fail (about 5 MB)


class StepLog:
    """The step rows of one process, buffered."""

    def __init__(self, rd, name: str, resume: bool = False):
        self.rd = rd
        self.name = name
        self.part = name + layout.PART
        self.buffer: list[str] = []
        self.last_flush = time.time()
        self.last_row: tuple[int, float] | None = None  # (step, t_end_s) of the last row already in the file
        if resume and rd.exists(self.part):
            self.last_row = _last_row(rd.read_text(self.part))
            self.fd = rd.open(self.part, os.O_WRONLY | os.O_APPEND)
        else:
            self.fd = rd.open(self.part, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
            self._write(",".join(layout.STEP_COLUMNS) + "\n")

    def _write(self, text: str) -> None:
        view = memoryview(text.encode())
        while view:
            view = view[os.write(self.fd, view):]

    def add(self, step: int, t_end_s: float, ms: str, phase: str) -> None:
        """One step's row; written out when the batch is full or old enough."""
        self.buffer.append(f"{step},{t_end_s:.6f},{ms},{phase}\n")
        if len(self.buffer) >= FLUSH_ROWS or t_end_s - self.last_flush >= FLUSH_S:
            self.flush()

    def flush(self) -> None:
        """Append the buffered rows; when that fails (ENOSPC, say) the file is cut back to whole rows and the
        rows stay buffered for the next flush, and the error is raised."""
        self.last_flush = time.time()
        if not self.buffer:
            return
        size = os.fstat(self.fd).st_size
        try:
            self._write("".join(self.buffer))
        except OSError:
            try:
                os.ftruncate(self.fd, size)
            except OSError:
                pass
            if len(self.buffer) > MAX_BUFFERED:
                del self.buffer[:-MAX_BUFFERED]
            raise
        self.buffer = []

    def publish(self) -> None:
        """Write what is left and rename the file into place."""
        try:
            self.flush()
        finally:
            os.close(self.fd)
        self.rd.replace(self.part, self.name)


def _last_row(text: str) -> tuple[int, float] | None:
    """(step, t_end_s) of a steps file's last complete row, None when it has none."""
    for line in reversed(text.splitlines()[1:]):
        cells = line.split(",")
        try:
            return int(cells[0]), float(cells[1])
        except (ValueError, IndexError):
            continue
    return None

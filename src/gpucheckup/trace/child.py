"""A function run in a forked child process, its result read back through a pipe.

For one large trace read in two processes (reader.py): a fork starts with every module of this process
already imported (a fresh interpreter would import them again, ~0.1 s of CPU) and runs on another core.
The result is pickled with its numpy arrays out of band, so columns cross the pipe as raw bytes, never as
objects per event. Whatever goes wrong in the child (an exception, a crash, no result within the time
allowed) comes back as None, and so does a fork that cannot start: the caller then does the work itself.
The child never writes to the terminal and leaves with `os._exit` (no exit handlers, no buffers flushed twice).
"""

from __future__ import annotations

import atexit
import os
import pickle
import select
import signal
import struct
import time
from collections.abc import Callable

PIPE_BYTES = 1 << 20  # the pipe's buffer, where Linux allows it (fewer switches between the two processes)
_SIZE = struct.Struct("<Q")
_unreaped: list[int] = []  # children whose result was taken before they exited: reaped at exit


class Child:
    """A running child process and the read end of the pipe its result comes through."""

    def __init__(self, pid: int, fd: int):
        self.pid, self.fd = pid, fd

    def result(self, timeout: float) -> object:
        """The child's result, or None when it failed, died, or sent nothing within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        try:
            (n,) = _SIZE.unpack(self._read(_SIZE.size, deadline))
            sizes = struct.unpack(f"<{n}Q", self._read(8 * n, deadline))
            head, *buffers = (self._read(k, deadline) for k in sizes)
            return pickle.loads(head, buffers=buffers)
        except (OSError, EOFError, TimeoutError, pickle.UnpicklingError, struct.error, ValueError):
            return None
        finally:
            self.close()

    def _read(self, n: int, deadline: float) -> bytearray:
        out = bytearray(n)
        view, got = memoryview(out), 0
        while got < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                raise TimeoutError
            k = os.readv(self.fd, [view[got:]])
            if k == 0:
                raise EOFError
            got += k
        return out

    def close(self) -> None:
        """Stop the child if it still runs (done sending, or its result no longer wanted); idempotent. It is
        reaped now if it has left, else at the next start or at exit (never waited for here)."""
        if self.fd < 0:
            return
        os.close(self.fd)
        self.fd = -1
        try:
            if os.waitpid(self.pid, os.WNOHANG) == (0, 0):
                os.kill(self.pid, signal.SIGKILL)
                _unreaped.append(self.pid)
        except ChildProcessError:  # reaped elsewhere
            pass


def start(fn: Callable[[], object]) -> Child | None:
    """fn() running in a forked child; None when no child can be started here."""
    if not hasattr(os, "fork"):
        return None
    _reap(os.WNOHANG)
    r, w = os.pipe()
    try:
        pid = os.fork()
    except OSError:  # no memory or too many processes: the caller does the work itself
        os.close(r)
        os.close(w)
        return None
    if pid == 0:  # the child: never returns
        code = 1
        try:
            os.close(r)
            try:
                value = fn()
            except Exception:  # noqa: BLE001 - said to the parent as "no result"
                value = None
            _send(w, value)
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    return Child(pid, r)


def _send(fd: int, value: object) -> None:
    """Write value to the pipe: the number of parts, their sizes, the pickle, then its out-of-band buffers."""
    buffers: list[pickle.PickleBuffer] = []
    head = pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
    parts = [memoryview(head)] + [b.raw() for b in buffers]
    try:
        import fcntl

        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_BYTES)
    except (ImportError, OSError):
        pass
    _write(fd, memoryview(_SIZE.pack(len(parts)) + struct.pack(f"<{len(parts)}Q", *(p.nbytes for p in parts))))
    for p in parts:
        _write(fd, p)


def _write(fd: int, view: memoryview) -> None:
    while view.nbytes:
        view = view[os.write(fd, view) :]


def _reap(flags: int) -> None:
    """Reap the children that left after their result was taken (all of them, waiting, at exit)."""
    for pid in list(_unreaped):
        try:
            if os.waitpid(pid, flags) != (0, 0):
                _unreaped.remove(pid)
        except ChildProcessError:
            _unreaped.remove(pid)


atexit.register(_reap, 0)  # so that their CPU time counts in this process's (wait4, `time`)

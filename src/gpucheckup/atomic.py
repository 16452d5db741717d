"""Atomic file writes: readers see either the old file or the complete new one, never a part.

Standard library only: the in-job agent uses it too, and it must not import anything heavy.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


class NotWritten(Exception):
    """A file the user named could not be written: one line that names it and says why (exit 4, README)."""


# Errors of writing itself (a full disk, a quota, a file too large): the output is not written, whatever wrote.
WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS)


def write_atomic(path: Path | str, data: bytes, parents: bool = False) -> None:
    """Write a file so that readers see either the old or the complete new content (open_atomic)."""
    with open_atomic(path, parents) as f:
        f.write(data)


@contextlib.contextmanager
def open_atomic(path: Path | str, parents: bool = False) -> Iterator[BinaryIO]:
    """A file to write in parts (a large output, never whole in memory) that replaces `path` only once
    complete; readers see either the old or the complete new content, and an error leaves no part behind.
    Its folder must exist (`parents`: make it and the folders above it, for a file of our own such as a cache,
    never for one a user named: a typo must not create folders). NotWritten, naming `path`, when it cannot be
    written (a folder, a missing folder, a full disk)."""
    path = Path(path)
    if (special := _special(path)) is not None:
        with _open_special(path, special) as f:
            yield f
        return
    if parents:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise NotWritten(f"{path}: not written: cannot make its folder ({e.strerror})") from None
    if path.is_dir():
        raise NotWritten(f"{path}: not written: it is a folder (name a file)")
    if not path.parent.is_dir():
        raise NotWritten(f"{path}: not written: its folder {path.parent} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise NotWritten(f"{path}: not written ({e.strerror or e})") from None
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual mode
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        if e.errno in WRITE_ERRNOS:
            raise NotWritten(f"{path}: not written ({e.strerror or e})") from None
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _special(path: Path) -> int | None:
    """The mode of what `path` names when it exists and is neither a regular file nor a folder (a device, a FIFO,
    the pipe behind /dev/stdout or a shell's `>(...)`), else None."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return None if stat.S_ISREG(mode) or stat.S_ISDIR(mode) else mode


@contextlib.contextmanager
def _open_special(path: Path, mode: int) -> Iterator[BinaryIO]:
    """A device or FIFO the user named, written in place: replacing it with a file would destroy it (/dev/null for
    root), and it has no old content to keep. Opened without blocking (a FIFO without a reader would hang the open
    forever) and without creating or truncating anything; NotWritten, naming it, when it cannot be written."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        why = "a FIFO with no reader" if e.errno == errno.ENXIO and stat.S_ISFIFO(mode) else e.strerror or e
        raise NotWritten(f"{path}: not written ({why})") from None
    try:
        os.set_blocking(fd, True)
        with os.fdopen(fd, "wb") as f:
            yield f
    except OSError as e:
        raise NotWritten(f"{path}: not written ({e.strerror or e})") from None


def _umask() -> int:
    """The process's umask, read without changing it (Linux), else the common 022."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def write_json_atomic(path: Path | str, obj) -> None:
    """Write an object as indented JSON, atomically."""
    write_atomic(path, (json.dumps(obj, indent=2, default=str) + "\n").encode())


"""Atomic file writes: readers see either the old file or the complete new one, never a part.

Standard library only: the in-job agent uses it too, and it must not import anything heavy.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


def write_atomic(path: Path | str, data: bytes) -> None:
    """Write a file so that readers see either the old or the complete new content."""
    with open_atomic(path) as f:
        f.write(data)


@contextlib.contextmanager
def open_atomic(path: Path | str) -> Iterator[BinaryIO]:
    """A file to write in parts (a large output, never whole in memory) that replaces `path` only once
    complete; readers see either the old or the complete new content, and an error leaves no part behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual mode
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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


"""Atomic file writes: readers see either the old file or the complete new one, never a part.

Standard library only: the in-job agent uses it too, and it must not import anything heavy.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


class NotWritten(Exception):
    """A file the user named could not be written: one line that names it and says why (exit 4, README)."""


def write_atomic(path: Path | str, data: bytes, parents: bool = False) -> None:
    """Write a file so that readers see either the old or the complete new content. Its folder must exist
    (`parents`: make it and the folders above it, for a file of our own such as a cache, never for one a user
    named: a typo must not create folders). NotWritten, naming `path`, when it cannot be written."""
    path = Path(path)
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
        _replace_with(path, data)
    except OSError as e:
        raise NotWritten(f"{path}: not written ({e.strerror or e})") from None


def _replace_with(path: Path, data: bytes) -> None:
    """Write `data` to a temporary file beside `path`, then rename it over `path`."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
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


"""Which paths may be read as input: regular files only, and files read whole only up to a size. A FIFO blocks
its reader until a writer comes (forever, when none does), a device like /dev/zero never ends, a 2 GB sparse
file read whole fills memory: each is refused with one line. Standard library only; below every reader
(trace, hardware) in the import layers."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from gpucheckup.errors import CheckupError


SMALL_JSON_BYTES = 64 << 20  # a run directory's manifest, env, agent and FLOPs files are kilobytes


def check_regular(path: Path, max_bytes: int | None = None) -> None:
    """CheckupError unless the path names a regular file (stat only: nothing is opened, so a FIFO cannot block),
    of at most `max_bytes` when given (a file read whole: a 2 GB sparse file must not be read into memory)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise CheckupError(f"{path}: no such file") from None
    except OSError as e:
        raise CheckupError(f"{path}: cannot read ({e.strerror})") from None
    refuse_special(path, st.st_mode)
    if max_bytes is not None and st.st_size > max_bytes:
        raise CheckupError(f"{path}: {st.st_size / (1 << 20):.0f} MiB, over the {max_bytes >> 20} MiB such a file "
                           "can hold: not a file gpucheckup wrote")


def refuse_special(path: Path, mode: int) -> None:
    """CheckupError for anything but a regular file: a FIFO blocks its reader forever, a device never ends."""
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        raise CheckupError(f"{path}: is a folder, expected a file")
    kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a character device" if stat.S_ISCHR(mode)
            else "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "special")
    raise CheckupError(f"{path}: is {kind}, not a regular file (gpucheckup reads regular files only)")

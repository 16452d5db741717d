"""Which paths may be read as input: regular files only. A FIFO blocks its reader until a writer comes (forever,
when none does), a device like /dev/zero never ends: both are refused with one line. Standard library only."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from gpucheckup.errors import CheckupError


def check_regular(path: Path) -> None:
    """CheckupError unless the path names a regular file (stat only: nothing is opened, so a FIFO cannot block)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise CheckupError(f"{path}: no such file") from None
    except OSError as e:
        raise CheckupError(f"{path}: cannot read ({e.strerror})") from None
    refuse_special(path, mode)


def refuse_special(path: Path, mode: int) -> None:
    """CheckupError for anything but a regular file: a FIFO blocks its reader forever, a device never ends."""
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        raise CheckupError(f"{path}: is a folder, expected a file")
    kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a character device" if stat.S_ISCHR(mode)
            else "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "special")
    raise CheckupError(f"{path}: is {kind}, not a regular file (gpucheckup reads regular files only)")

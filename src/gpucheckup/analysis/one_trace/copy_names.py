"""Kineto's memcpy names read once: a copy's direction (HtoD, DtoH, ...), its source and destination memory kinds,
and whether it touches pageable host memory. The GPU side counts copies by them (gpu/copies.py), the host side finds
the calls that launched pageable copies (host/host_calls.py)."""

from __future__ import annotations

import functools
import re

COPY_NAME = re.compile(r"Memcpy\s+(\w+)\s*\((\w+)\s*->\s*(\w+)\)")


@functools.lru_cache(maxsize=1 << 12)  # asked per copy row, of a few distinct names
def parse_copy_name(name: str) -> tuple[str, str, str]:
    """(direction, source kind, destination kind) from a Kineto memcpy name."""
    m = COPY_NAME.search(name)
    if m:
        return m.group(1), m.group(2), m.group(3)
    for d in ("HtoD", "DtoH", "DtoD", "HtoH", "PtoP"):
        if d in name:
            return d, "?", "?"
    return "other", "?", "?"


def is_pageable(name: str) -> bool:
    """Whether a Kineto memcpy name says it copies to or from pageable host memory (the one definition)."""
    _, src, dst = parse_copy_name(name)
    return "Pageable" in (src, dst)

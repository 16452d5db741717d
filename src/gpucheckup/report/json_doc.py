"""A check-up (or any report object) as JSON bytes for a file, standard output or an HTML page: the same strings to
a JSON reader, inert on a terminal (DEL, C1 and bidi characters as `\\u` escapes), and never a crash on a file name
that is not UTF-8 (its lone surrogates shown as escapes, as the terminal report shows them)."""

from __future__ import annotations

import msgspec

from gpucheckup.safe_text import json_escaped, without_surrogates


def encode(obj) -> bytes:
    """Compact JSON of `obj`, escaped for any reader."""
    try:
        raw = msgspec.json.encode(obj)
    except UnicodeEncodeError:  # a lone surrogate: a path that is not UTF-8
        raw = msgspec.json.encode(without_surrogates(msgspec.to_builtins(obj)))  # a Struct too (document.py)
    return json_escaped(raw)


def document(obj) -> bytes:
    """Indented JSON of `obj`, escaped for any reader (what --json writes)."""
    return msgspec.json.format(encode(obj), indent=2)

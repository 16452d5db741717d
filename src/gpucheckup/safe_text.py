"""Text from a trace or a path made safe for a terminal, a Markdown file or an HTML page.

A kernel, op, thread or GPU name, a Python frame or a file name can carry control characters: an
ESC or CSI (U+009B) sequence clears the screen, switches to the alternate screen or plants an OSC 8
hyperlink; an unterminated OSC title swallows the output after it; BEL, BS and CR rewrite what was
printed; bidirectional overrides and isolates (U+202A-U+202E, U+2066-U+2069, U+200E/U+200F)
reorder the text a reader sees. `safe` shows every one of them escaped, as Python writes them
(`\\x1b`, `\\x9b`, `\\u202e`), so the text is printed inert and still says what the trace holds. Lone
surrogates (which no encoder writes) are escaped the same way. Newline and tab are kept.

JSON keeps the text's value instead: `json_escaped` writes DEL, C1 and bidi characters of an encoded JSON
document as `\\u` escapes (a JSON reader gets the same strings; a terminal showing `--json -` or a viewer
showing a Perfetto file gets inert text), and `without_surrogates` escapes lone surrogates (a file name that
is not UTF-8, as Python reads it) as text, since no UTF-8 encoder writes them.

One character class, one pass: linear in the text's length. The only imports are the standard
library's, so every layer (errors, report renderers) may use it.
"""

from __future__ import annotations

import dataclasses
import re

# C0 controls except tab (0x09) and newline (0x0a), DEL, C1 controls (CSI is U+009B), bidi marks,
# embeddings, overrides and isolates, and lone surrogates.
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escaped(m: re.Match) -> str:
    o = ord(m.group())
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}"


def safe(text) -> str:
    """`text` (made a str) with control, bidi and surrogate characters shown as escapes (`\\x1b`, `\\u202e`)."""
    return UNSAFE.sub(_escaped, text if isinstance(text, str) else str(text))


def safe_tree(value):
    """A copy of a report (dicts, lists, tuples, dataclasses) with every string, keys included, made `safe`."""
    return _strings_mapped(value, UNSAFE)


SURROGATE = re.compile("[\ud800-\udfff]")


def without_surrogates(value):
    """A copy of a report (as safe_tree walks it) with lone surrogates in its strings shown as escapes (`\\udcff`)."""
    return _strings_mapped(value, SURROGATE)


def _strings_mapped(value, pattern: re.Pattern):
    """A copy of a report with the characters `pattern` matches in its strings (keys included) escaped."""
    if isinstance(value, str):
        return pattern.sub(_escaped, value) if pattern.search(value) else value
    if isinstance(value, dict):
        return {_strings_mapped(k, pattern): _strings_mapped(v, pattern) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        out = [_strings_mapped(v, pattern) for v in value]
        return out if isinstance(value, list) else type(value)(out) if not hasattr(value, "_fields") else \
            type(value)(*out)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{f.name: _strings_mapped(getattr(value, f.name), pattern)
                                             for f in dataclasses.fields(value) if f.init})
    return value


# DEL, C1 controls (UTF-8 C2 80-9F) and bidi marks, embeddings, overrides and isolates, as UTF-8 bytes. In a JSON
# document these bytes only occur inside strings (a lead byte C2 or E2 starts a character there and nowhere else).
_JSON_UNSAFE = re.compile(rb"\x7f|\xc2[\x80-\x9f]|\xe2\x80[\x8e\x8f\xaa-\xae]|\xe2\x81[\xa6-\xa9]")


def _json_escape(m: re.Match) -> bytes:
    return b"\\u%04x" % ord(m.group().decode())


def json_escaped(data: bytes) -> bytes:
    """A UTF-8 JSON document with its DEL, C1 and bidi characters written as `\\u` escapes: the same strings to
    a JSON reader, inert on a terminal (C0 controls are escaped by every JSON encoder already)."""
    return _JSON_UNSAFE.sub(_json_escape, data)

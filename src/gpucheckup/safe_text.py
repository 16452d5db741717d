"""Text from a trace or a path made safe for a terminal, a Markdown file or an HTML page.

A kernel, op, thread or GPU name, a Python frame or a file name can carry control characters: an
ESC or CSI (U+009B) sequence clears the screen, switches to the alternate screen or plants an OSC 8
hyperlink; an unterminated OSC title swallows the output after it; BEL, BS and CR rewrite what was
printed; bidirectional overrides and isolates (U+202A-U+202E, U+2066-U+2069, U+200E/U+200F)
reorder the text a reader sees. `safe` shows every one of them escaped, as Python writes them
(`\\x1b`, `\\x9b`, `\\u202e`), so the text is printed inert and still says what the trace holds. Lone
surrogates (which no encoder writes) are escaped the same way. Newline and tab are kept.

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
    if isinstance(value, str):
        return safe(value) if UNSAFE.search(value) else value
    if isinstance(value, dict):
        return {safe_tree(k): safe_tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        out = [safe_tree(v) for v in value]
        return out if isinstance(value, list) else type(value)(out) if not hasattr(value, "_fields") else \
            type(value)(*out)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{f.name: safe_tree(getattr(value, f.name))
                                             for f in dataclasses.fields(value) if f.init})
    return value

"""A table's columns built chunk by chunk into buffers that grow in place, with no pieces to join at the end.

The reader turns each ~2 MB chunk of events into a few thousand rows per column. Keeping each chunk's rows as
separate arrays and joining them at the end held every column twice at the peak (the pieces, and the joined
table: freed pieces of a few tens of kB stay in the process's heap), and the many small pieces spread over the
heap between the chunks' short-lived objects. Here each numeric column is one buffer grown in place (a large
buffer grows by remapping its pages, without a copy) and trimmed once at the end; a raw JSON column keeps its
rows' byte strings per chunk (joined once) and its row lengths in a growing buffer, summed into offsets in place.

A buffer grows to the rows the table is expected to reach (`append`'s `expect`: the reader's estimate from the
JSON read so far and the file's size), at most GROW_MOST times the rows it must hold; an estimate the rows have
(nearly) overtaken, as for GPU events written after the host's, grows it GROW_PAST times; without one it doubles. Growing writes zeros over the new capacity (its pages all become resident): a
doubled buffer held up to twice its rows (1.5x at the 1x trace's 176k host rows), an estimated one about its rows.
"""

from __future__ import annotations

import numpy as np

MIN_ROWS = 1 << 12  # the first buffer of a column
GROW_MOST = 4  # a buffer grows to at most this times the rows it must hold (an estimate too high: a lying trailer)
GROW_PAST = 1.5  # ... and this times them where the estimate is under 1.125 times them (a few growths, <= 1.5x slack)


class Columns:
    """Named columns of one table, appended to chunk by chunk (every column of a chunk at once, the same rows)."""

    def __init__(self) -> None:
        self.rows = 0
        self.numeric: dict[str, np.ndarray] = {}  # buffers: the first `rows` items are the column
        self.raw: dict[str, tuple[list[bytes], np.ndarray]] = {}  # byte strings per chunk; 0, then the row lengths

    def __len__(self) -> int:
        return self.rows

    def append(self, piece: dict, expect: int = 0) -> None:
        """Add one chunk's rows: a numeric column as an array, a raw one as (its rows' bytes joined, row lengths);
        `expect`: the rows this table is expected to hold at the end (0: not known)."""
        n = None
        for field, value in piece.items():
            if isinstance(value, tuple):
                data, lengths = value
                parts, buf = self.raw.get(field, ([], None))
                if buf is None:  # row i's length goes to item i + 1: the offsets are then summed in place
                    buf = _put(None, 0, np.zeros(1, dtype=np.int64))
                self.raw[field] = parts, _put(buf, self.rows + 1, lengths, expect + 1 if expect else 0)
                parts.append(data)
                n = len(lengths)
            else:
                self.numeric[field] = _put(self.numeric.get(field), self.rows, value, expect)
                n = len(value)
        self.rows += n or 0

    def column(self, field: str) -> np.ndarray:
        """The rows so far of a numeric column (a view of its buffer: valid until the next append)."""
        return self.numeric[field][: self.rows]

    def take(self, numeric: tuple[str, ...], raw: tuple[str, ...], dtypes: dict) -> dict:
        """The finished columns (numeric: arrays; raw: (bytes, offsets)), trimmed in place; this table is emptied.
        A column never appended to is empty, of its dtype in `dtypes`."""
        cols: dict = {}
        for f in numeric:
            buf = self.numeric.pop(f, None)
            if buf is None:
                cols[f] = np.zeros(0, dtype=dtypes[f])
                continue
            buf.resize(self.rows, refcheck=False)  # trims in place: no copy of the column
            cols[f] = buf
        for f in raw:
            parts, buf = self.raw.pop(f, ([], None))
            if buf is None:
                buf = np.zeros(self.rows + 1, dtype=np.int64)
            buf.resize(self.rows + 1, refcheck=False)
            np.cumsum(buf, out=buf)  # in place: a new array's pages would all fault in (0.2 s at 6.9M events)
            cols[f] = (b"".join(parts), buf)
        self.rows = 0
        return cols

    def piece(self, copy: bool = True) -> dict | None:
        """The rows so far as one piece, in `append`'s format (None: no rows), copied out of the buffers (`copy`
        False: views of them, valid until the next append; a process that sends them and ends needs no copy)."""
        if not self.rows:
            return None
        piece: dict = {f: buf[: self.rows] for f, buf in self.numeric.items()}
        for f, (parts, buf) in self.raw.items():
            piece[f] = (b"".join(parts), buf[1 : self.rows + 1])
        if copy:
            piece = {f: (v[0], v[1].copy()) if isinstance(v, tuple) else v.copy() for f, v in piece.items()}
        return piece

    def prepend(self, piece: dict) -> None:
        """Put one piece's rows (`append`'s format, the same columns as this table's) before this table's: each
        column joined into a buffer of exactly its rows, one at a time, both sources freed as it goes (the
        piece's entries are taken out of it), so that the join holds at most one column twice."""
        if not self.rows:
            self.numeric, self.raw = {}, {}
            self.append(piece)
            return
        if set(piece) != set(self.numeric) | set(self.raw):
            raise ValueError("a piece with other columns than the table's")
        n = self.rows
        for f in list(self.numeric):
            value, old = piece.pop(f), self.numeric.pop(f)
            n = len(value)
            joined = np.empty(n + self.rows, dtype=old.dtype)
            joined[:n] = value
            joined[n:] = old[: self.rows]
            del value, old
            self.numeric[f] = joined
        for f in list(self.raw):
            (data, lengths), (parts, old) = piece.pop(f), self.raw.pop(f)
            n = len(lengths)
            joined = np.empty(n + self.rows + 1, dtype=np.int64)  # 0, the piece's lengths, then this table's
            joined[0] = 0
            joined[1 : n + 1] = lengths
            joined[n + 1 :] = old[1 : self.rows + 1]
            del lengths, old
            self.raw[f] = [data, *parts], joined
        self.rows += n


def capacity(need: int, have: int, expect: int) -> int:
    """The rows a buffer of `have` rows grows to when it must hold `need`: the expected rows, at most GROW_MOST
    times `need` (one too high, say from a gzip trailer that lies, costs at most that); GROW_PAST times `need` where
    the estimate is under 1.125 times it (too low: still a geometric growth, not one copy per chunk); without an
    estimate, double."""
    if expect <= 0:
        return max(need, 2 * have, MIN_ROWS)
    if expect < need * 1.125:
        return max(int(need * GROW_PAST), MIN_ROWS)
    return max(min(expect, GROW_MOST * need), MIN_ROWS)


def _put(buf: np.ndarray | None, at: int, values: np.ndarray, expect: int = 0) -> np.ndarray:
    """Write `values` at row `at` of a column buffer (created, or grown, as needed: `capacity`); the buffer."""
    values = np.asarray(values)
    need = at + len(values)
    if buf is None:
        buf = np.empty(capacity(need, 0, expect), dtype=values.dtype)
    elif need > len(buf):
        buf.resize(capacity(need, len(buf), expect), refcheck=False)  # realloc: a large buffer's pages are remapped
    buf[at:need] = values
    return buf

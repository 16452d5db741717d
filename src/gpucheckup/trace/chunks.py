"""A trace file as a stream: its decompressed bytes in blocks, and its `traceEvents` array cut into
chunks of whole events, so that no more than a few chunks of JSON are ever held at once.

A cut is placed at a `}` `,` `{` sequence (between two events in any JSON writer's layout) and is
proven by decoding: `[` + the bytes since the last cut + `]` only decodes when the cut lies between
two elements of the array (a cut inside a string or a nested object leaves the JSON unbalanced).
Anything this cannot place (no `traceEvents` key near the top, repeated failed cuts) makes
`StreamError`, and the caller reads the file whole instead.
"""

from __future__ import annotations

import queue
import re
import threading
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import msgspec

from gpucheckup.errors import CheckupError

try:  # ISA-L's inflate: the same bytes as zlib's, in a third of the CPU time (docs/performance.md)
    from isal.igzip_lib import IsalError
    from isal.isal_zlib import decompressobj
    GZIP_ERRORS: tuple[type[Exception], ...] = (zlib.error, IsalError)
except ImportError:  # a platform without its wheel: the standard library's
    decompressobj = zlib.decompressobj
    GZIP_ERRORS = (zlib.error,)

CHUNK_BYTES = 2 << 20  # JSON per decoded chunk: ~6k events, whose structs stay in the CPU cache for the columns
READ_BYTES = 1 << 20  # compressed (or plain) bytes read from the file at a time
HEAD_LIMIT = 64 << 20  # the `traceEvents` key must appear within this many bytes of the start
CUT_TRIES = 8  # candidate cuts tried before a chunk is given up on
TAIL_SEARCH = 256 << 10  # the last chunk is cut this far before the end, to bound the work of finding the array's end

_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_BETWEEN = re.compile(rb"\}\s*,\s*\{")  # the end of one event, a comma, the start of the next
_TRAILING_AT = re.compile(r"trailing characters \(byte (\d+)\)")
_SKIP = msgspec.json.Decoder(msgspec.Raw)


class StreamError(Exception):
    """The file could not be cut into chunks; read it whole."""


def _not_found(path: Path) -> CheckupError:
    return CheckupError(f"{path}: no such file")


def open_file(path: Path) -> IO[bytes]:
    """The file opened for reading, with one-line errors."""
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise _not_found(path) from None
    except IsADirectoryError:
        raise CheckupError(f"{path}: is a folder, expected a trace file") from None
    except OSError as e:
        raise CheckupError(f"{path}: cannot read ({e.strerror})") from None


def blocks(path: Path, limit: int = CHUNK_BYTES) -> Iterator[bytes]:
    """The file's bytes in blocks of at most `limit`, gunzipped on the fly when it is gzip (by magic number)."""
    with open_file(path) as f:
        try:
            first = f.read(READ_BYTES)
        except OSError as e:
            raise CheckupError(f"{path}: cannot read ({e.strerror})") from None
        if first[:2] != b"\x1f\x8b":
            if path.name.endswith(".gz"):
                raise CheckupError(f"{path}: named .gz but is not gzip data")
            while first:
                yield first
                first = f.read(READ_BYTES)
            return
        yield from _gunzip(path, f, first, limit)


def _gunzip(path: Path, f: IO[bytes], data: bytes, limit: int) -> Iterator[bytes]:
    """Decompress gzip members (one or several) block by block, never more than `limit` bytes at a time."""
    d = decompressobj(wbits=31)
    try:
        while True:
            while data:
                out = d.decompress(data, limit)
                data = d.unconsumed_tail
                if out:
                    yield out
                if d.eof:  # one member ended; another may follow (as gzip.decompress reads them)
                    data = d.unused_data + data
                    if not data.strip(b"\x00"):
                        data = f.read(READ_BYTES)
                        if not data.strip(b"\x00"):
                            return
                    d = decompressobj(wbits=31)
            data = f.read(READ_BYTES)
            if not data:
                break
        tail = d.flush()
        if tail:
            yield tail
        if not d.eof:
            raise CheckupError(f"{path}: gzip data is truncated or corrupt (compressed file ended before the "
                               "end-of-stream marker was reached)")
    except GZIP_ERRORS as e:
        raise CheckupError(f"{path}: gzip data is truncated or corrupt ({e})") from None


def prefetched(items: Iterator[bytes], depth: int = 2) -> Iterator[bytes]:
    """The same items, produced ahead by a thread: gunzip and file reads run without the GIL, so they
    overlap the decoding on another core. At most `depth` items wait; errors reach the consumer."""
    q: queue.Queue = queue.Queue(depth)
    stop = threading.Event()

    def put(entry) -> bool:
        while not stop.is_set():
            try:
                q.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put((item, None)):
                    return
            put((None, None))
        except BaseException as e:  # handed to the consumer, raised there
            put((None, e))
        finally:
            items.close()

    threading.Thread(target=produce, name="gpucheckup-read", daemon=True).start()
    try:
        while True:
            item, err = q.get()
            if err is not None:
                raise err
            if item is None:
                return
            yield item
    finally:
        stop.set()


class EventChunks:
    """Cuts a trace's byte blocks into its top level (`head` + `[]` + `tail`) and chunks of events.

    `feed(consume)` calls `consume(chunk)` on each chunk of whole events, in file order: `chunk` is
    a JSON array (a memoryview into the buffer, valid only during the call) and `consume` must raise
    `msgspec.DecodeError` when it is not valid JSON and must not keep references into it. After it
    finishes, `top` holds the top-level object with an empty event list.

    A chunk is framed in place: the byte before its first event becomes `[` and the byte after its
    last `}` becomes `]` (both are a comma or whitespace between events), so nothing is copied.
    """

    def __init__(self, path: Path, source: Iterator[bytes], chunk_bytes: int | None = None):
        self.path = path
        self.source = source
        self.chunk_bytes = chunk_bytes or CHUNK_BYTES
        self.buf = bytearray()
        self.done = False  # the source is exhausted
        self.top = b""
        self.head = b""
        self.dropped = 0  # bytes of the decompressed stream consumed before buf[0]
        self.array_end = -1  # after feed: where the events array's closing `]` is in the decompressed stream

    def _read(self) -> bool:
        """Append the next block to the buffer; False when there is none."""
        if self.done:
            return False
        block = next(self.source, None)
        if block is None:
            self.done = True
            return False
        self.buf += block
        return True

    def _drop(self, n: int) -> None:
        del self.buf[:n]
        self.dropped += n

    def _find_array(self) -> None:
        """Leave the `[` of the top-level `traceEvents` at buf[0]; `head` keeps the bytes before it."""
        while True:
            m = _KEY.search(self.buf)
            if m:
                self.head = bytes(self.buf[: m.end() - 1])
                self._drop(m.end() - 1)
                return
            if len(self.buf) > HEAD_LIMIT or not self._read():
                raise StreamError("no traceEvents key near the top")

    def _try(self, m: re.Match, consume: Callable[[memoryview], None]) -> bool:
        """Frame buf[0 : the `}` that m starts with] as a JSON array and consume it; False if it is not one."""
        close = m.start() + 1
        saved, self.buf[close] = self.buf[close], 0x5D  # `]`
        try:
            with memoryview(self.buf) as view, view[: close + 1] as chunk:
                consume(chunk)
            return True
        except msgspec.DecodeError:
            self.buf[close] = saved
            return False

    def _next_at(self, m: re.Match) -> None:
        """Drop what was consumed: the byte before the next event's `{` becomes buf[0], framed as `[`."""
        self._drop(m.end() - 2)
        self.buf[0] = 0x5B  # `[`

    def feed(self, consume: Callable[[memoryview], None], start: int | None = None, stop: int | None = None) -> bool:
        """Consume each chunk of whole events; then set `top`. With `start` (an offset into the decompressed
        stream), begin at the split point `start` names instead (the events before it are skipped undecoded,
        and another reader must prove the cut: `stop`); with `stop`, end at the split point `stop` names,
        proven by decoding the chunk that ends there, and leave the rest and `top` unread: True when that
        chunk decoded, False when it did not (the point lies inside an event: nothing is read after it).
        The split point of an offset is the first `}` `,` `{` at or after it (and after the array's first event)."""
        self._find_array()
        if start is not None:
            self._skip_to(start)
        tail_search = min(TAIL_SEARCH, self.chunk_bytes)
        while True:  # buf[0] is `[`, the next event follows it (after whitespace)
            while not self.done and len(self.buf) < self.chunk_bytes + READ_BYTES:
                self._read()
            if self.done and len(self.buf) <= self.chunk_bytes + tail_search and stop is None:
                break  # what is left is the last chunk or two
            search, tries = self.chunk_bytes, 0
            until = None if stop is None else max(stop - self.dropped, 1)  # the split point, in buf
            if until is not None and until < search:
                search = until
            while True:
                m = _BETWEEN.search(self.buf, search)
                if m is None:
                    if self._read():
                        continue  # no cut within reach yet (a very long event): read on
                    raise StreamError("no place to cut between events")
                if until is not None and m.start() >= until:  # the first cut at or after the split point
                    return self._try(m, consume)
                if self._try(m, consume):
                    break
                tries += 1
                if tries == CUT_TRIES:
                    raise StreamError("no place to cut between events")
                search = m.start() + 1
            self._next_at(m)
        self._last(consume, tail_search)
        return True

    def _skip_to(self, at: int) -> None:
        """Drop the events before the split point of offset `at` (see feed), undecoded."""
        at = max(at, self.dropped + 1)
        while self.dropped + len(self.buf) <= at:
            self._drop(len(self.buf))
            if not self._read():
                raise StreamError("the split point lies past the end")
        self._drop(at - self.dropped)
        while (m := _BETWEEN.search(self.buf)) is None:
            if not self._read():
                raise StreamError("no cut after the split point")
        self._next_at(m)

    def _last(self, consume: Callable[[memoryview], None], tail_search: int) -> None:
        """The events left (cut once more near the end to keep the search short), then the top level."""
        if len(self.buf) > tail_search:
            search, tries = len(self.buf) - tail_search, 0
            while (m := _BETWEEN.search(self.buf, search)) is not None and tries < CUT_TRIES:
                if self._try(m, consume):  # each try decodes the whole chunk: bounded, as in feed
                    self._next_at(m)
                    break
                search, tries = m.start() + 1, tries + 1
        # where the array ends: skip over the rest as one JSON value; the trailing text starts after it
        rest = bytes(self.buf)
        self.buf = bytearray()
        try:
            _SKIP.decode(rest)
            raise StreamError("the events array ends the file")
        except msgspec.DecodeError as e:
            m = _TRAILING_AT.search(str(e))
            if m is None:
                msg = re.sub(r"\(byte (\d+)\)", lambda b: f"(byte {self.dropped + int(b.group(1)) - 1})", str(e))
                raise CheckupError(f"{self.path}: not valid JSON ({msg.splitlines()[0][:160]}); "
                                   "the trace may be truncated or corrupt") from None
            close = rest.rindex(b"]", 0, int(m.group(1)) - 1)
        self.array_end = self.dropped + close
        try:  # skipping checks less than decoding (bad UTF-8 in a string): then read the file whole, to say why
            consume(memoryview(rest)[: close + 1])
        except msgspec.DecodeError:
            raise StreamError("the last events are not valid JSON") from None
        self.top = self.head + b"[]" + rest[close + 1 :]

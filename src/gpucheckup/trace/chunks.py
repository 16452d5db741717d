"""A trace file as a stream: its decompressed bytes in blocks, and its `traceEvents` array cut into
chunks of whole events, so that no more than a few chunks of JSON are ever held at once.

A cut is placed at a `}` `,` `{` sequence (between two events in any JSON writer's layout) and is
proven by decoding: `[` + the bytes since the last cut + `]` only decodes when the cut lies between
two elements of the array (a cut inside a string or a nested object leaves the JSON unbalanced).
Anything this cannot place (no `traceEvents` key near the top, repeated failed cuts) makes
`StreamError`, and the caller reads the file whole instead (only a file of at most WHOLE_READ_BYTES).

Hostile input ends early, in bounded memory and time: bytes no JSON text holds (NUL and the other C0 controls
but tab, newline and return) where the top-level object or an event should start, or anywhere in the head or
in a search for a cut, end the read with a line that says where and what was found; the search for a cut
resumes where the last one stopped (linear in the file); an event longer than MAX_EVENT_BYTES, a stream
decompressing past the JSON limit (`json_limit`: this machine's memory, at least MIN_JSON_LIMIT; `--max-json-gib`
raises it), a gzip stream holding over MAX_RATIO times the compressed bytes read (plus RATIO_FLOOR: repeated
well-formed events cost their decoding, ~3 s of CPU a 100 MiB; a profiler's events differ, in their times at least,
and never compress so far; `--max-json-gib` lifts this limit too), and anything but a regular file (a FIFO would
block forever, a device never end) are refused.
"""

from __future__ import annotations

import os
import queue
import re
import threading
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import msgspec

from gpucheckup.errors import CheckupError
from gpucheckup.files import refuse_special

try:  # ISA-L's inflate: the same bytes as zlib's, in a third of the CPU time (docs/performance.md)
    from isal.igzip_lib import IsalError
    from isal.isal_zlib import decompressobj
    GZIP_ERRORS: tuple[type[Exception], ...] = (zlib.error, IsalError)
except ImportError:  # a platform without its wheel: the standard library's
    decompressobj = zlib.decompressobj
    GZIP_ERRORS = (zlib.error,)

CHUNK_BYTES = 512 << 10  # JSON per decoded chunk (and per gunzipped block): ~1.7k events, whose objects fit in
# CPython's 1 MiB arenas (2 MiB chunks' were mapped and unmapped each time) and stay in the CPU cache for the
# columns; the blocks waiting and the buffer being cut take ~5 MB instead of ~20 (docs/performance.md)
READ_BYTES = 1 << 20  # compressed (or plain) bytes read from the file at a time
AHEAD_BYTES = 64 << 10  # JSON held past a chunk's size before it is cut (a longer event reads on: _cut_from). What
# is left after each cut is copied once more when the next block is appended (a bytearray trimmed at the front
# moves to a new buffer as it grows): 1 MiB ahead copied ~2x the JSON, 3% of a check-up's instructions
HEAD_LIMIT = 64 << 20  # the `traceEvents` key must appear within this many bytes of the start
CUT_TRIES = 8  # candidate cuts tried before a chunk is given up on
TAIL_SEARCH = 256 << 10  # the last chunk is cut this far before the end, to bound the work of finding the array's end

WHOLE_READ_BYTES = 128 << 20  # a file the stream cannot cut is read whole only up to this size
LOOSE_READ_BYTES = 8 << 20  # ... and decoded untyped (events of the wrong types) only up to this size: untyped JSON
# costs up to ~25x its size in objects (a list of 3-byte `{}`: a 120 MB file took 3.1 GB before this limit)
MAX_EVENT_BYTES = 64 << 20  # no cut between events within this many bytes (a profiler's are under 1 MB): not a trace
MAX_CUT_RUN = 4 << 10  # longest run of whitespace, commas and `}` tracked across reads in a search for a cut
MIN_JSON_LIMIT = 8 << 30  # the decompressed-size limit is this machine's memory, and at least this
MAX_RATIO = 100  # a gzip stream may hold at most this many times its compressed bytes read so far ...
RATIO_FLOOR = 8 << 20  # ... plus this much: profilers' traces reach 9-23x (30x at level 9; docs/reliability.md)
_json_limit: list[int] = []  # set by set_json_limit (the command line's --max-json-gib)

_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_BAD_BYTE = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f]")  # no JSON text holds these raw (RFC 8259)
_NOT_SPACE = re.compile(rb"[^ \t\r\n]")
_VALUE_START = frozenset(b'{["-0123456789tfn')  # bytes a JSON value may start with
_BETWEEN = re.compile(rb"\}\s*,\s*\{")  # the end of one event, a comma, the start of the next
_TRAILING_AT = re.compile(r"trailing characters \(byte (\d+)\)")
_SKIP = msgspec.json.Decoder(msgspec.Raw)


class StreamError(Exception):
    """The file could not be cut into chunks; read it whole."""


def json_limit() -> int:
    """The most decompressed bytes a trace may hold: set_json_limit's, else this machine's memory (at least
    MIN_JSON_LIMIT). A profiler writes its trace from the profiled process's memory; more than a whole machine's
    memory of JSON from a small file is a compressed bomb, not a trace."""
    if _json_limit:
        return _json_limit[-1]
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        memory = 0
    return max(MIN_JSON_LIMIT, memory)


def set_json_limit(n_bytes: int) -> None:
    """Raise (or lower) the decompressed-size limit for this process (`--max-json-gib`)."""
    _json_limit.append(int(n_bytes))


def has_text(data: bytes | bytearray) -> bool:
    """Whether the bytes hold anything but JSON whitespace (without a stripped copy of them)."""
    return _NOT_SPACE.search(data) is not None


def _not_found(path: Path) -> CheckupError:
    return CheckupError(f"{path}: no such file")


def open_file(path: Path) -> IO[bytes]:
    """The file opened for reading, with one-line errors; anything but a regular file is refused (opened without
    blocking, so that a FIFO without a writer cannot hang the open itself)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise _not_found(path) from None
    except IsADirectoryError:
        raise CheckupError(f"{path}: is a folder, expected a trace file") from None
    except OSError as e:
        raise CheckupError(f"{path}: cannot read ({e.strerror})") from None
    try:
        refuse_special(path, os.fstat(fd).st_mode)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def ratio_limit() -> int | None:
    """The most decompressed bytes a gzip stream may hold per compressed byte (None: --max-json-gib lifted it)."""
    return None if _json_limit else MAX_RATIO


def too_compressed(path: Path, compressed: int, json_bytes: int) -> CheckupError:
    """The line for a gzip stream that holds more than MAX_RATIO times its compressed size."""
    return CheckupError(f"{path}: its first {compressed / (1 << 20):.1f} MiB of gzip hold over "
                        f"{json_bytes / (1 << 20):.0f} MiB of JSON, over {MAX_RATIO}x (a profiler's trace compresses "
                        "9-30x): a compressed bomb; --max-json-gib lifts this limit")


def too_large(path: Path, limit: int) -> CheckupError:
    """The line for a trace whose JSON is over the decompressed-size limit."""
    size = f"{limit / (1 << 30):.1f} GiB" if limit >= 1 << 30 else f"{limit / (1 << 20):.1f} MiB"
    whose = "set by --max-json-gib" if _json_limit else "this machine's memory"
    return CheckupError(f"{path}: holds over {size} of JSON once decompressed, the limit ({whose}): a compressed "
                        "bomb, or not one trace; --max-json-gib raises the limit")


def bad_byte(path: Path, offset: int, byte: int, where: str) -> CheckupError:
    """The line for a byte that no JSON text holds (or that cannot start what must follow), at a stream offset."""
    return CheckupError(f"{path}: not valid JSON (byte {offset} is 0x{byte:02x}, {where}): the file is damaged "
                        "or is not a trace")


def blocks(path: Path, limit: int = CHUNK_BYTES) -> Iterator[bytes]:
    """The file's bytes in blocks of at most `limit`, gunzipped on the fly when it is gzip (by magic number);
    CheckupError past the decompressed-size limit (json_limit)."""
    most, total = json_limit(), 0
    for block in _blocks(path, limit):
        total += len(block)
        if total > most:
            raise too_large(path, most)
        yield block


def _blocks(path: Path, limit: int) -> Iterator[bytes]:
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
    ratio, read_in, made = ratio_limit(), len(data), 0
    try:
        while True:
            while data:
                out = d.decompress(data, limit)
                data = d.unconsumed_tail
                if out:
                    made += len(out)
                    if ratio is not None and made > ratio * read_in + RATIO_FLOOR:
                        raise too_compressed(path, read_in, made)
                    yield out
                if d.eof:  # one member ended; another may follow (as gzip.decompress reads them)
                    # what follows the member: zlib gives it as unused_data and, when max_length stopped the call,
                    # as unconsumed_tail too (the same bytes); both are suffixes of the input, so the longer holds it
                    data = max(d.unused_data, data, key=len)
                    if not data.strip(b"\x00"):
                        data = f.read(READ_BYTES)
                        read_in += len(data)
                        if not data.strip(b"\x00"):
                            return
                    d = decompressobj(wbits=31)
            data = f.read(READ_BYTES)
            read_in += len(data)
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
        """Leave the `[` of the top-level `traceEvents` at buf[0]; `head` keeps the bytes before it. A first byte
        that cannot start JSON, a byte no JSON holds in the head, or an event that cannot start: CheckupError."""
        at = self._value_at(0, "where the JSON should start")
        if self.buf[at] != 0x7B:  # `{`: any other value is not a trace (the whole read says which)
            raise StreamError("the top level is not an object")
        searched = 0
        while True:
            m = _KEY.search(self.buf, max(searched - 64, 0))
            bad = _BAD_BYTE.search(self.buf, searched, m.start() if m else len(self.buf))
            if bad:
                raise bad_byte(self.path, self.dropped + bad.start(), self.buf[bad.start()], "in the head of the trace")
            if m:
                self.head = bytes(self.buf[: m.end() - 1])
                self._drop(m.end() - 1)
                break
            searched = len(self.buf)
            if len(self.buf) > HEAD_LIMIT or not self._read():
                raise StreamError("no traceEvents key near the top")
        at = self._value_at(1, "where the first event should start", b"]")
        if self.buf[at] not in b"{]":
            raise StreamError("the events are not objects")

    def _value_at(self, start: int, where: str, also: bytes = b"") -> int:
        """The offset in buf of the first byte at or after `start` that is not whitespace (reading on as needed);
        CheckupError when it cannot start a JSON value (nor is one of `also`), StreamError when the stream ends first."""
        search = start
        while (m := _NOT_SPACE.search(self.buf, search)) is None:
            search = len(self.buf)
            if search - start > MAX_EVENT_BYTES:
                raise CheckupError(f"{self.path}: not a trace: over {MAX_EVENT_BYTES >> 20} MiB of whitespace from "
                                   f"byte {self.dropped + start} of its JSON")
            if not self._read():
                raise StreamError("the stream ends in whitespace")
        if self.buf[m.start()] not in _VALUE_START and self.buf[m.start()] not in also:
            raise bad_byte(self.path, self.dropped + m.start(), self.buf[m.start()], where)
        return m.start()

    def _cut_from(self, search: int) -> re.Match | None:
        """The first `}` `,` `{` in buf at or after `search`, reading on until one is found (None: the stream
        ended first). Each read resumes where the last search stopped, less the trailing bytes a match could
        begin with (linear in the file, and exact: child and parent of a split read find the same cut)."""
        start, checked = search, 0
        while (m := _BETWEEN.search(self.buf, search)) is None:
            n = len(self.buf)
            tail = bytes(self.buf[max(n - MAX_CUT_RUN - 1, search) : n])
            run = len(tail) - len(tail.rstrip(b" \t\r\n,}"))
            if run > MAX_CUT_RUN:
                raise StreamError("a long run of whitespace, commas and braces")
            if n - start > MAX_EVENT_BYTES:
                raise CheckupError(f"{self.path}: not a trace: no boundary between two events in the {n >> 20} MiB "
                                   f"from byte {self.dropped} of its JSON (a profiler's events are far shorter)")
            if not self._read():
                return None
            bad = _BAD_BYTE.search(self.buf, checked)  # only on this slow path: a long event, or no events at all
            if bad:
                raise bad_byte(self.path, self.dropped + bad.start(), self.buf[bad.start()], "inside the events")
            search, checked = n - run, len(self.buf)
        return m

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
            while not self.done and len(self.buf) < self.chunk_bytes + AHEAD_BYTES:
                self._read()
            if self.done and len(self.buf) <= self.chunk_bytes + tail_search and stop is None:
                break  # what is left is the last chunk or two
            search, tries = self.chunk_bytes, 0
            until = None if stop is None else max(stop - self.dropped, 1)  # the split point, in buf
            if until is not None and until < search:
                search = until
            while True:
                m = self._cut_from(search)  # a very long event: reads on
                if m is None:
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
        if (m := self._cut_from(0)) is None:
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

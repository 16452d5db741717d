"""Gunzip (trace/chunks.py, ISA-L's inflate where installed, else zlib): the bytes are the file's JSON,
whichever inflate runs, for one gzip member, several (as `cat a.gz b.gz` writes), padding after them, and
damaged files are one clear line."""

from __future__ import annotations

import gzip
import zlib

import numpy as np
import pytest

from conftest import trace_path
from gpucheckup.errors import CheckupError
from gpucheckup.trace import chunks, read_trace


def _json(case: str) -> bytes:
    return gzip.decompress(trace_path(case).read_bytes())


def _same_trace(a, b) -> None:
    assert a.names == b.names and a.thread_names == b.thread_names
    for table in ("gpu", "host"):
        for f in ("start", "end", "name"):
            assert np.array_equal(getattr(getattr(a, table), f), getattr(getattr(b, table), f))


@pytest.mark.parametrize("inflate", ["installed", "zlib"])
def test_gunzip_gives_the_json_for_one_member_several_and_padding(tmp_path, monkeypatch, inflate):
    if inflate == "zlib":
        monkeypatch.setattr(chunks, "decompressobj", zlib.decompressobj)
    data = _json("launch_bound")
    cuts = [0, len(data) // 3, 2 * len(data) // 3, len(data)]
    one = tmp_path / "one.json.gz"
    one.write_bytes(gzip.compress(data))
    several = tmp_path / "several.json.gz"  # three members, then zero padding (as some tape and copy tools leave)
    several.write_bytes(b"".join(gzip.compress(data[a:b]) for a, b in zip(cuts, cuts[1:])) + b"\0" * 512)
    plain = tmp_path / "plain.json"
    plain.write_bytes(data)
    for f in (one, several):
        assert b"".join(chunks.blocks(f)) == data
        _same_trace(read_trace(f), read_trace(plain))


@pytest.mark.parametrize("inflate", ["installed", "zlib"])
def test_damaged_gzip_is_one_line(tmp_path, monkeypatch, inflate):
    if inflate == "zlib":
        monkeypatch.setattr(chunks, "decompressobj", zlib.decompressobj)
    packed = gzip.compress(_json("launch_bound"))
    truncated = tmp_path / "truncated.json.gz"
    truncated.write_bytes(packed[: len(packed) // 2])
    flipped = tmp_path / "flipped.json.gz"  # a byte of the compressed data changed: inflate or the CRC refuses it
    b = bytearray(packed)
    b[len(b) // 2] ^= 0xFF
    flipped.write_bytes(bytes(b))
    for f in (truncated, flipped):
        with pytest.raises(CheckupError, match="gzip data is truncated or corrupt"):
            read_trace(f)

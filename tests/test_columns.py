"""The reader's growing column buffers give the same table as joining its chunks' pieces (trace/columns.py)."""

import numpy as np

from gpucheckup.trace.columns import MIN_ROWS, Columns


def _pieces(sizes, seed=0):
    """Pieces as the reader makes them: numeric columns and a raw JSON column (bytes joined, row lengths)."""
    rng = np.random.default_rng(seed)
    out = []
    for n in sizes:
        rows = [b"[%d]" % v if v % 3 else b"" for v in rng.integers(0, 1000, n)]
        out.append({"start": rng.random(n), "cat": rng.integers(0, 5, n).astype(np.int8),
                    "shapes": (b"".join(rows), np.array([len(r) for r in rows], dtype=np.int64))})
    return out


def test_appended_chunks_equal_their_concatenation():
    # sizes crossing the first buffer's size and several doublings, with empty chunks between
    sizes = [0, 5, MIN_ROWS - 5, 1, 0, 3 * MIN_ROWS + 7, 17, 9 * MIN_ROWS]
    pieces = _pieces(sizes)
    t = Columns()
    for p in pieces:
        t.append(p)
    assert len(t) == sum(sizes)
    cols = t.take(("start", "cat", "never"), ("shapes", "absent"), {"never": np.int64, "start": float, "cat": np.int8})
    np.testing.assert_array_equal(cols["start"], np.concatenate([p["start"] for p in pieces]))
    assert cols["cat"].dtype == np.int8
    assert cols["cat"].tolist() == [v for p in pieces for v in p["cat"].tolist()]
    assert cols["never"].dtype == np.int64 and len(cols["never"]) == 0
    data, offsets = cols["shapes"]
    assert data == b"".join(p["shapes"][0] for p in pieces)
    # row i's bytes: data[offsets[i]:offsets[i + 1]], the lengths summed by hand from 0
    lengths = np.concatenate([p["shapes"][1] for p in pieces])
    assert offsets[0] == 0 and np.diff(offsets).tolist() == lengths.tolist()
    assert cols["absent"][0] == b"" and cols["absent"][1].tolist() == [0] * (sum(sizes) + 1)
    assert len(t) == 0


def test_piece_copies_the_rows_so_far():
    pieces = _pieces([3, 2 * MIN_ROWS])
    t = Columns()
    for p in pieces:
        t.append(p)
    one = t.piece()
    t.column("start")[:] = -1  # the piece does not share the buffers
    np.testing.assert_array_equal(one["start"], np.concatenate([p["start"] for p in pieces]))
    assert one["shapes"][0] == pieces[0]["shapes"][0] + pieces[1]["shapes"][0]
    assert Columns().piece() is None


def test_an_estimate_of_the_rows_sizes_the_buffers_and_a_wrong_one_stays_bounded():
    sizes = [700] * 60  # 42,000 rows in chunks of 700
    total = sum(sizes)
    for expect, most in ((total, total), (10**9, None), (1, None)):
        t, grown = Columns(), 0
        for p in _pieces(sizes, seed=3):
            before = len(t.numeric["start"]) if "start" in t.numeric else 0
            t.append(p, expect)
            capacity = len(t.numeric["start"])
            grown += capacity != before
            # never more than 4 times the rows held (a lying estimate), nor less than them
            assert len(t) <= capacity <= max(4 * len(t), MIN_ROWS), (expect, len(t), capacity)
        if most is not None:  # the right estimate: 4096 rows first, 4 * 4200 at the 7th chunk, then the 42,000
            assert capacity == most and grown == 3, (capacity, grown)  # (doubling: 65,536)
        else:  # too high: 4096, 16,800, 42,000 at most 4x the rows; too low: 4096 then 1.5x at a time up to 42,000
            assert grown <= 8, grown  # (log(42000 / 4096) / log(1.5) = 5.7: not one growth per chunk)
        cols = t.take(("start",), ("shapes",), {})
        np.testing.assert_array_equal(cols["start"], np.concatenate([p["start"] for p in _pieces(sizes, seed=3)]))


def test_prepend_puts_a_piece_first_with_no_slack_and_consumes_it():
    first, second = _pieces([5, MIN_ROWS + 3], seed=1), _pieces([7, 2 * MIN_ROWS], seed=2)
    ahead = Columns()
    for p in first:
        ahead.append(p)
    piece = ahead.piece()
    t = Columns()
    for p in second:
        t.append(p)
    t.prepend(piece)
    assert piece == {}  # taken out of the piece as joined
    assert len(t) == 5 + MIN_ROWS + 3 + 7 + 2 * MIN_ROWS
    assert len(t.numeric["start"]) == len(t)  # a buffer of exactly the rows, no room to grow yet
    t.append(_pieces([11], seed=4)[0])  # and it still grows
    everything = first + second + _pieces([11], seed=4)
    cols = t.take(("start", "cat"), ("shapes",), {})
    np.testing.assert_array_equal(cols["start"], np.concatenate([p["start"] for p in everything]))
    data, offsets = cols["shapes"]
    assert data == b"".join(p["shapes"][0] for p in everything)
    assert np.diff(offsets).tolist() == [n for p in everything for n in p["shapes"][1].tolist()]
    empty = Columns()  # a table with no rows takes the piece as it is
    empty.prepend(_pieces([3], seed=5)[0])
    assert len(empty) == 3


def test_prepend_holds_at_most_one_joined_column_beyond_its_sources():
    import tracemalloc

    rows = 100_000
    rng = np.random.default_rng(6)
    column = 8 * (2 * rows)  # one joined column: 200k float64s = 1.6 MB
    tracemalloc.start()  # before the arrays are made: their frees count
    try:
        t, piece = Columns(), {f"c{i}": rng.random(rows) for i in range(6)}
        t.append({f"c{i}": rng.random(rows) for i in range(6)})
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        t.prepend(piece)  # the piece's arrays are dropped from it as they are joined (the test holds no other ref)
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # sources: 6 piece columns of 0.8 MB and 6 buffers of at least 0.8 MB; joined: 6 x 1.6 MB. Freeing each column's
    # sources as it goes, the peak is at most the start plus one joined column over what is freed by then.
    assert peak - before <= 1.05 * column, (peak - before, column)
    assert current - before <= 0.05 * column  # as much held after as before: 12 sources gone, 6 joined columns

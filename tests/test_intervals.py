"""Interval arithmetic against a brute-force sampling on random sets."""

from __future__ import annotations

import numpy as np
import pytest

from gpucheckup.analysis import intervals as iv

GRID = np.arange(0, 120, 0.25) + 0.125  # sample points between the quarter-unit boundaries used below


def covered_mask(starts, ends):
    m = np.zeros(len(GRID), dtype=bool)
    for s, e in zip(starts, ends):
        m |= (GRID > s) & (GRID < e)
    return m


def random_set(rng, n):
    s = rng.integers(0, 380, n) / 4
    return s, s + rng.integers(1, 40, n) / 4


@pytest.mark.parametrize("seed", range(20))
def test_union_subtract_intersect_cover(seed):
    rng = np.random.default_rng(seed)
    a_raw, b_raw = random_set(rng, rng.integers(0, 12)), random_set(rng, rng.integers(0, 12))
    a, b = iv.union(*a_raw), iv.union(*b_raw)
    ma, mb = covered_mask(*a_raw), covered_mask(*b_raw)
    assert np.array_equal(covered_mask(*a), ma)
    assert np.all(a[0][1:] > a[1][:-1])  # disjoint and sorted
    assert iv.total(a) == pytest.approx(ma.sum() * 0.25)
    assert np.array_equal(covered_mask(*iv.subtract(a, b)), ma & ~mb)
    assert np.array_equal(covered_mask(*iv.intersect(a, b)), ma & mb)
    lo, hi = sorted(rng.integers(0, 400, 2) / 4)
    window = (GRID > lo) & (GRID < hi)
    assert float(iv.covered_between(a, lo, hi)) == pytest.approx((ma & window).sum() * 0.25)
    gs, ge = iv.gaps(a, lo, hi)
    assert np.array_equal(covered_mask(gs, ge), window & ~ma)


def test_empty_sets():
    assert iv.total(iv.union(np.zeros(0), np.zeros(0))) == 0
    assert float(iv.covered_between(iv.EMPTY, 0, 10)) == 0
    gs, ge = iv.gaps(iv.EMPTY, 0, 10)
    assert list(gs) == [0] and list(ge) == [10]

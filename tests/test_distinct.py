"""analysis.distinct gives numpy's own unique, union, median and percentile, and a check-up never imports
numpy.ma (numpy 2.4 imports it, ~12-16 ms, on the first np.unique(a), np.union1d, np.percentile or float
np.median of a process)."""

from __future__ import annotations

import warnings

import numpy as np
from conftest import modules_loaded, trace_path
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from gpucheckup.analysis.distinct import median, percentile, union1d, unique

ARRAYS = st.one_of(
    hnp.arrays(np.float64, st.integers(0, 12), elements=st.floats(allow_nan=True, allow_infinity=True)),
    hnp.arrays(np.float64, st.integers(0, 12), elements=st.sampled_from([-1.0, 0.0, 2.5, 1e300, np.nan])),
    hnp.arrays(np.float32, st.integers(0, 12), elements=st.floats(-1e6, 1e6, width=32)),
    hnp.arrays(np.int64, st.integers(0, 12), elements=st.integers(-10**12, 10**12)),
    hnp.arrays(np.int32, st.integers(0, 12), elements=st.integers(-5, 5)),
)


def same(x, y) -> bool:
    """Equal type, dtype and bits (NaN equal to NaN)."""
    return type(x) is type(y) and np.asarray(x).dtype == np.asarray(y).dtype and \
        np.asarray(x).tobytes() == np.asarray(y).tobytes()


@settings(max_examples=300, deadline=None)
@given(ARRAYS, ARRAYS, st.sampled_from([0, 1, 10, 25, 33.3, 50, 75, 90, 99, 100, 90.0]))
def test_each_gives_numpys_result(a, b, q):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the median of nothing is NaN, with numpy's warning
        assert same(unique(a), np.unique(a))
        assert same(union1d(a, b), np.union1d(a, b))
        assert same(median(a), np.median(a))
        assert same(median(list(a)), np.median(list(a)))
        if a.size:
            assert same(percentile(a, q), np.percentile(a, q))


def test_a_checkup_does_not_import_numpy_ma():
    code = ("import io, sys, contextlib\nfrom gpucheckup.cli import main\n"
            f"sys.argv = ['gpucheckup', 'analyze', {str(trace_path('launch_bound'))!r}]\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n        main()\n    except SystemExit as e:\n        assert not e.code, e.code\n"
            "assert 'gpucheckup.analysis.distinct' in sys.modules\n")
    assert modules_loaded(code, ("numpy.ma",)) == []

"""torch_compile (whatif/edits.py) on the MoE example's H200 traces, eager and compiled (docs/validation.md 7c).

The compiled trace is what Inductor did to the same job: its indexing kernels (index_put, gather, index_add, ...) are
gone into Triton kernels. The edit must fold the eager trace's indexing kernels the same way, never a library kernel
(CUB sort / scan / reduce, top-k), and must find nothing left to fuse in the compiled trace. Figures are counted from
the raw JSON here, with this file's own patterns."""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np
import pytest

from conftest import REPO, raw_events
from gpucheckup.whatif import replay, edits as whatif
from gpucheckup.checkup.pipeline import check_run
from gpucheckup.trace.reader import read_trace

RUNS = REPO / "tests/data/whatif_h200"
EAGER = RUNS / "moe_s5/20261201-022050-python3"
COMPILED = RUNS / "moe_compiled/20261201-022021-python3"
MEASURED_PCT = 9.5  # `gpucheckup ab --rounds 4` of examples.moe --compile on the H200 (docs/validation.md 7c)
INDEXING = re.compile(r"index|gather|scatter", re.I)  # this test's own reading of "an indexing kernel"
LIBRARY = re.compile(r"cub::|sort|topk", re.I)


@lru_cache(maxsize=None)
def _graph(run) -> replay.Graph:
    return replay.build(read_trace(run / "traces" / "trace.json.gz"))


def _kernels(run) -> list[dict]:
    return [e for e in raw_events(run / "traces" / "trace.json.gz")["traceEvents"] if e.get("cat") == "kernel"]


def _indexing_us(kernels) -> float:
    return sum(e["dur"] for e in kernels if INDEXING.search(e["name"]) and not LIBRARY.search(e["name"])
               and not e["name"].startswith("triton_"))


def test_inductor_took_the_indexing_kernels_of_the_moe_example():
    """The evidence the edit stands on, from the raw traces: compiled, the eager indexing kernels' time is mostly gone
    (they live inside Triton kernels), the GEMMs' is not."""
    eager, compiled = _kernels(EAGER), _kernels(COMPILED)
    assert _indexing_us(compiled) < 0.35 * _indexing_us(eager)
    assert any(e["name"].startswith("triton_") and "index" in e["name"] for e in compiled)

    def gemm_us(ks):
        return sum(e["dur"] for e in ks if re.search(r"gemm|cutlass", e["name"]))

    assert gemm_us(compiled) == pytest.approx(gemm_us(eager), rel=0.02)


def test_compile_edit_folds_indexing_kernels_and_never_a_library_kernel():
    g = _graph(EAGER)
    edit = whatif.torch_compile(g)
    names = g.trace.names
    gpu = g.trace.gpu
    before, after = g.g_dur, edit.graph.g_dur
    idx = np.array([bool(INDEXING.search(names[n])) and not LIBRARY.search(names[n]) for n in gpu.name])
    lib = np.array([bool(LIBRARY.search(names[n])) for n in gpu.name])
    assert lib.any() and idx.any()
    np.testing.assert_array_equal(after[lib], before[lib])  # CUB sorts and reductions, top-k: kept as they are
    folded = idx & (after == 0) & (before > 0)
    assert folded.sum() >= 0.5 * idx.sum()  # most indexing kernels joined a fused kernel
    assert "indexing" in edit.what


def test_compile_prediction_on_the_moe_example_against_its_measurement():
    """The replayed saving of `torch.compile` on the eager baseline, against what `ab` measured (the issue's target for
    a code change: within 50%); on the compiled trace itself, nothing is left to gain."""
    def saving(run):
        r = check_run(run).checkups[0].report
        fx = {f["key"]: f for f in r["fixes"]}["torch_compile"]
        return fx["predicted"]["saving_pct"]

    assert abs(saving(EAGER) - MEASURED_PCT) <= 0.5 * MEASURED_PCT
    assert saving(COMPILED) <= 1.0

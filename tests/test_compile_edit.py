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


# The GPU-bound bf16 transformer (the corpus's `gpu` job: 4 encoder layers, d=1024, batch 16, bf16 autocast, fused
# AdamW), captured eager and with `--compile default` one after the other on one H200 (docs/validation.md 7i), and
# torch.compile measured on it with `gpucheckup ab --rounds 3`: 21.7% faster (20.13 -> 15.75 ms; measured.json).
PAIRS = REPO / "tests/data/h200/compiled_pairs"
TRANSFORMER_PCT = 21.7


def _compile_pct(run) -> float:
    """torch_compile's replayed saving on a run directory, as its check-up says it."""
    fx = {f["key"]: f for f in check_run(run).checkups[0].report["fixes"]}["torch_compile"]
    return fx["predicted"]["saving_pct"]


def test_compile_on_a_bf16_transformer_against_its_measurement():
    """Compiled, the transformer's copies, pointwise and normalisation kernels ran as fewer fused kernels (below);
    the replay of the eager run must land within a code change's target (50%) of the measured saving, and find
    nothing left to gain on the compiled run (its model is compiled: what runs outside generated code is the loop's)."""
    assert abs(_compile_pct(PAIRS / "gpu_eager") - TRANSFORMER_PCT) <= 0.5 * TRANSFORMER_PCT
    assert _compile_pct(PAIRS / "gpu_compiled") <= 1.0


def test_compile_on_a_bf16_transformer_lands_its_gpu_work_where_the_compiled_trace_has_it():
    """From the raw traces: compiled, the GPU's work per step fell (copies, pointwise and normalisation kernels fused:
    97.7 copy kernels a step eager, under 2 compiled); the edit's GPU work per step on the eager trace must land within
    15% of the compiled trace's, and its copy kernels left per step must be those autocast makes of a GEMM's operand
    and their gradients' casts (launched inside `aten::linear` or autograd's `ToCopyBackward0`), counted here."""
    def per_step(run, pick):
        ev = raw_events(run / "traces" / "trace.json.gz")["traceEvents"]
        steps = sum(1 for e in ev if str(e.get("name", "")).startswith("ProfilerStep#"))
        return sum(e["dur"] for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and pick(e)) / steps

    eager, comp = PAIRS / "gpu_eager", PAIRS / "gpu_compiled"
    copies = re.compile(r"copy_kernel")
    assert per_step(comp, lambda e: copies.search(e["name"])) < 0.2 * per_step(eager, lambda e: copies.search(e["name"]))
    g = _graph(eager)
    edited = whatif.torch_compile(g).graph
    predicted_us = per_step(eager, lambda e: True) * edited.g_dur.sum() / g.g_dur.sum()  # the edit's share of eager's
    compiled_us = per_step(comp, lambda e: True)
    assert abs(predicted_us - compiled_us) <= 0.15 * compiled_us
    # autocast's operand casts (by the launching operator, on the raw events) stay kernels of their own, as they were
    ev = raw_events(eager / "traces" / "trace.json.gz")["traceEvents"]
    launches = {e["args"]["correlation"]: e for e in ev
                if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    ops = [e for e in ev if e.get("cat") == "cpu_op"]
    casts = set()
    for k in ev:
        if k.get("cat") == "kernel" and copies.search(k["name"]) and k["args"].get("correlation") in launches:
            ln = launches[k["args"]["correlation"]]
            around = [o for o in ops if o["tid"] == ln["tid"] and o["ts"] <= ln["ts"] <= o["ts"] + o["dur"]]
            top = min(around, key=lambda o: o["ts"])["name"] if around else ""
            if top == "aten::linear" or "ToCopyBackward0" in top:
                casts.add(k["args"]["correlation"])
    assert len(casts) > 400  # 36 weight casts and 35 gradient casts a step
    mine = np.isin(g.trace.gpu.correlation, list(casts))
    assert mine.sum() == len(casts) and np.array_equal(edited.g_dur[mine], g.g_dur[mine])
    # and the other copy kernels the window launched go: fewer than one in five keeps a duration (the head of a
    # fused kernel)
    gpu, names = g.trace.gpu, g.trace.names
    other = np.array([bool(copies.search(names[n])) for n in gpu.name]) & ~mine & (g.g_launch >= 0)
    assert (edited.g_dur[other] > 0).sum() < 0.2 * other.sum()

"""The optimizer's own work when it calls a closure: a real Lightning job on an H200 (tests/data/h200/README.md,
`lightning_closure`), whose `Optimizer.step#AdamW.step` ranges hold the model's forward and backward too
(Lightning's `optimizer.step(closure)`). The expected figures come from the trace's raw events, read with the
standard library: the optimizer's own work is what its range holds after the closure's backward ends."""

from __future__ import annotations


import numpy as np
import pytest

from conftest import REPO, analyzed, raw_events

RUN = REPO / "tests" / "data" / "h200" / "lightning_closure"
LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx")


@pytest.fixture(scope="module")
def raw():
    """The optimizer ranges, each cut after its last backward operator, and the kernels by launching call."""
    ev = [e for e in raw_events(RUN / "traces" / "trace.json.gz")["traceEvents"] if e.get("ph") == "X"]
    ranges = [e for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("Optimizer.step#")]
    backward = [e for e in ev if e.get("cat") == "cpu_op"
                and e["name"].startswith("autograd::engine::evaluate_function")]
    cuts = []
    for r in ranges:
        lo, hi = r["ts"], r["ts"] + r["dur"]
        ends = [b["ts"] + b["dur"] for b in backward if lo <= b["ts"] <= hi]
        cuts.append((r["tid"], max(ends) if ends else lo, hi, lo))
    launch_ts = {e["args"]["correlation"]: (e["tid"], e["ts"]) for e in ev
                 if e.get("cat") == "cuda_runtime" and e["name"] in LAUNCHES}
    steps = [e for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
    lo_w = min(s["ts"] for s in steps)
    hi_w = max(s["ts"] + s["dur"] for s in steps)
    kernels = [e for e in ev if e.get("cat") == "kernel" and lo_w <= e["ts"] <= hi_w]
    return {"cuts": cuts, "launch": launch_ts, "kernels": kernels, "steps": len(steps)}


@pytest.fixture(scope="module")
def doc(tmp_path_factory):
    return analyzed(RUN, tmp_path_factory.mktemp("closure") / "checkup.json")


def test_the_closure_holds_most_of_each_optimizer_range(raw):
    held = [(cut - lo) / (hi - lo) for _, cut, hi, lo in raw["cuts"]]
    assert len(held) == raw["steps"] == 40
    assert 0.5 < float(np.median(held)) < 0.95  # the forward and backward: most of the range, not all of it


def test_optimizer_kernels_are_those_launched_after_the_closure(raw, doc):
    def launched_in(k, spans) -> bool:
        at = raw["launch"].get(k["args"].get("correlation"))
        return at is not None and any(t == at[0] and lo <= at[1] <= hi for t, lo, hi in spans)

    total = sum(k["dur"] for k in raw["kernels"])
    own = [(t, cut, hi) for t, cut, hi, _ in raw["cuts"]]
    whole = [(t, lo, hi) for t, _, hi, lo in raw["cuts"]]
    own_pct = 100 * sum(k["dur"] for k in raw["kernels"] if launched_in(k, own)) / total
    whole_pct = 100 * sum(k["dur"] for k in raw["kernels"] if launched_in(k, whole)) / total
    got = doc["checkups"][0]["kernels"]["categories"]["optimizer"]
    assert abs(got - own_pct) < 1.0, (got, own_pct)
    # the whole ranges would have called the forward's kernels (launched on this thread) the optimizer's: 42%
    assert whole_pct > own_pct + 10


def test_fused_optimizer_saves_at_most_the_optimizers_own_time(raw, doc):
    own_ms = float(np.median([hi - cut for _, cut, hi, _ in raw["cuts"]])) / 1000  # profiled: the host's time, inflated
    fx = next(f for f in doc["fixes"] if f["key"] == "fused_optimizer")
    assert 0 < fx["predicted"]["saving_ms"] <= own_ms, (fx["predicted"], own_ms)

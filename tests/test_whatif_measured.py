"""Predictions against measurements on the H200: a launch-bound model already replayed as CUDA graphs
(`torch.compile(mode="reduce-overhead")`) whose AdamW runs eager in its for-loop form
(tests/data/h200/README.md, `graphs_reduce_overhead`). Its `measured.json` holds what `gpucheckup ab` measured
with each fix applied in separate processes; the expected figures below come from that file and from the trace's
raw events, never from the code under test."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from conftest import REPO, analyzed, raw_events

RUN = REPO / "tests" / "data" / "h200" / "graphs_reduce_overhead"
CONFIG_TOLERANCE = 0.25  # a configuration fix's prediction within 25% of its measured saving (the framework issue)


@pytest.fixture(scope="module")
def doc(tmp_path_factory):
    return analyzed(RUN, tmp_path_factory.mktemp("graphs") / "checkup.json")


def _fix(doc: dict, key: str) -> dict:
    return next(f for f in doc["fixes"] if f["key"] == key)


def test_the_fused_optimizer_prediction_meets_its_measurement(doc):
    measured = -json.loads((RUN / "measured.json").read_text())["fused_optimizer"]["change_pct"]  # 77.7
    predicted = _fix(doc, "fused_optimizer")["predicted"]["saving_pct"]
    assert abs(predicted - measured) <= CONFIG_TOLERANCE * measured, (predicted, measured)
    assert doc["verdict"]["primary"] == "launch_bound"  # the host's launches, not the GPU's (already graphed) work


def test_no_gpu_speed_edit_saves_more_than_the_gpu_work_it_speeds(doc):
    # TF32 can at most remove the FP32 GEMMs' own time per step; measured, it made no difference
    ev = raw_events(RUN / "traces" / "trace.json.gz")["traceEvents"]
    steps = sum(1 for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#"))
    gemm_ms = sum(e["dur"] for e in ev if e.get("cat") == "kernel"
                  and re.search(r"sgemm|gemm_f32f32", e["name"])) / 1000 / steps
    tf32 = _fix(doc, "tf32")["predicted"]["saving_ms"]
    assert 0 <= tf32 <= gemm_ms, (tf32, gemm_ms)
    lo, hi = json.loads((RUN / "measured.json").read_text())["tf32"]["interval_pct"]
    assert lo <= -_fix(doc, "tf32")["predicted"]["saving_pct"] <= hi


def test_a_model_already_in_cuda_graphs_gains_nothing_from_graphing_it(doc):
    # the forward and backward already run as graph replays: only the eager optimizer is left, which
    # mode="reduce-overhead" does not capture
    assert _fix(doc, "cuda_graph")["predicted"]["saving_pct"] < 5.0


def test_the_worker_count_advised_is_the_one_replayed(tmp_path):
    # the demo's input-bound job loads each batch in the training process (num_workers=0); from its raw events,
    # over its steps: L = time in DataLoader __next__, R = the rest of the steps' time; ceil(L / R) workers, each as
    # fast as the training process, deliver a batch per step
    from conftest import DEMO

    ev = raw_events(DEMO / "input_bound" / "trace.json.gz")["traceEvents"]
    steps = [e for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
    loads = [e for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("enumerate(DataLoader)#")]
    load = sum(min(e["ts"] + e["dur"], s["ts"] + s["dur"]) - max(e["ts"], s["ts"]) for s in steps for e in loads
               if e["ts"] < s["ts"] + s["dur"] and e["ts"] + e["dur"] > s["ts"]) / len(steps)
    step = sum(s["dur"] for s in steps) / len(steps)
    workers = -(-load // (step - load))  # ceil
    fx = _fix(analyzed(DEMO / "input_bound", tmp_path / "input.json"), "dataloader_workers")
    assert f"num_workers={int(workers)})" in fx["action"] and f"num_workers={int(workers)}," in fx["how"], fx
    assert f"with {int(workers)} workers" in fx["predicted"]["what"], fx["predicted"]


def test_a_shortening_edit_never_claims_more_than_it_takes_out(monkeypatch):
    # on the bundled sync-bound trace, an edit filed as shortening (as tf32 is) that instead stops the host waiting
    # at its syncs (a dependency change, as remove_syncs makes) takes no time out of any node: whatever the replay
    # then saves is capped to nothing, and the sentence says so
    from gpucheckup.trace.reader import read_trace
    from gpucheckup.whatif import edits, replay

    g = replay.build(read_trace(REPO / "tests" / "data" / "h200" / "sync_bound" / "trace.json.gz"))
    before = replay.calibrate(g, None).replayed_ms
    monkeypatch.setitem(edits.TRANSFORMS, "tf32", lambda graph: edits.remove_syncs(graph))
    free = edits.predict(g, "remove_syncs", before)
    capped = edits.predict(g, "tf32", before)
    assert free.saving_ms > 1.0  # the syncs' waits are real time on this trace
    assert capped.saving_ms == 0.0 and "capped there" in capped.transform
    # a shortening that takes 0.5 ms out of one GPU op is bounded by exactly that
    shorter = g.copy()
    op = int(np.flatnonzero((g.g_step == 1) & (g.g_dur > 600))[0])
    shorter.g_dur[op] -= 500.0
    assert edits.removed_ms(g, shorter) == pytest.approx(0.5)

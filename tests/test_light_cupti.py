"""The light window's CUPTI backend (capture/agent/cupti_window.py): its fallback where cupti-python or a GPU is
missing, the recorder driven by a real CPU torch job's optimizer and DataLoader, and the trace it writes read
back by the reader.

CUPTI itself needs a GPU: here `FakeCupti` stands in for cupti-python's module (the same calls: register the
buffer callbacks, enable/disable kinds, timestamps, flush), with its own clock a known offset from Unix time,
so the clock alignment is checked against a figure the code under test never sees. The real records come
from the H200 (validation/light_ab.py; docs/validation.md section 6).
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np
import pytest
from conftest import raw_events

from gpucheckup.analysis.run_logs.sampled_causes import SOURCE_GPU_ONLY
from gpucheckup.capture.agent import cupti_window as cw
from gpucheckup.capture.agent.light import BACKEND_TORCH, light_recorder

FAKE_OFFSET_NS = 987_654_321  # Unix ns - the fake CUPTI clock's ns


class FakeCupti:
    """cupti-python's calls the window makes, over a clock FAKE_OFFSET_NS behind Unix time."""

    class ActivityKind:
        CONCURRENT_KERNEL, MEMCPY, MEMSET, SYNCHRONIZATION = 10, 1, 2, 38

    def __init__(self):
        self.enabled, self.pending, self.callbacks = set(), [], None
        self.calls = []  # flushes, clock readings after a flush, detaches, in order

    def get_timestamp(self):
        if self.calls and self.calls[-1] != "clock":
            self.calls.append("clock")
        return time.time_ns() - FAKE_OFFSET_NS

    def activity_register_callbacks(self, requested, completed):
        self.callbacks = (requested, completed)

    def activity_enable(self, kind):
        self.enabled.add(kind)

    def activity_disable(self, kind):
        self.enabled.discard(kind)

    def finalize(self):
        """cuptiFinalize: CUPTI detached; its callbacks and activities are gone until it is used again."""
        self.calls.append("finalize")
        self.enabled, self.callbacks = set(), None

    def activity_flush_all(self, flag):
        self.calls.append("flush")
        if self.pending:
            self.callbacks[1](self.pending)
        self.pending = []

    def run(self, kind, dur_ns, **fields):
        """The GPU ran one piece of work just now (recorded only while its kind is enabled)."""
        t = self.get_timestamp()
        self.record(kind, t, t + dur_ns, **fields)

    def record(self, kind, start, end, **fields):
        """One activity record of the given kind and CUPTI times (kept only while its kind is enabled)."""
        if kind in self.enabled:
            fields = {"device_id": 0, "stream_id": 7, "context_id": 1, **fields}
            self.pending.append(types.SimpleNamespace(kind=kind, start=start, end=end,
                                                      correlation_id=len(self.pending), **fields))


KERNEL = dict(name="_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_",
              grid_x=1, grid_y=1, grid_z=1, block_x=128, block_y=1, block_z=1, registers_per_thread=16,
              static_shared_memory=0, dynamic_shared_memory=0)


def test_light_falls_back_to_torch_profiler_without_cupti(monkeypatch):
    torch = pytest.importorskip("torch")
    lines = []
    prof = object()
    rec, scopes = light_recorder(torch, prof, lines.append)  # this CPU machine: no CUDA device
    assert rec is prof and scopes.backend == BACKEND_TORCH
    assert lines == [f"light window: {BACKEND_TORCH}, the fallback: no CUDA device"]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU, but no cupti-python installed here
    try:
        import cupti  # noqa: F401

        pytest.skip("cupti-python is installed here")
    except ImportError:
        pass
    lines.clear()
    rec, scopes = light_recorder(torch, prof, lines.append)
    assert rec is prof and scopes.backend == BACKEND_TORCH
    assert len(lines) == 1 and "cupti-python is not usable (ModuleNotFoundError" in lines[0]


@pytest.fixture()
def recorded(tmp_path):
    """A CuptiWindow over FakeCupti, driven as the agent drives it, around 6 steps of a real CPU torch job."""
    torch = pytest.importorskip("torch")
    import torch.utils.data as tud

    fake = FakeCupti()
    kinds = fake.ActivityKind
    w = cw.CuptiWindow(torch, fake)
    model = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = iter(tud.DataLoader(tud.TensorDataset(torch.randn(64, 8)), batch_size=4))
    fake.run(kinds.CONCURRENT_KERNEL, 1000, **KERNEL)  # before the window: never recorded
    scopes = w.host_scopes()
    scopes.on()  # the agent's order: scopes on, start(), step() after each step but the last, stop(), scopes off
    w.start()
    steps = 6  # the warm-up step, then 5 recorded steps
    for i in range(steps):
        (x,) = next(batches)
        fake.run(kinds.CONCURRENT_KERNEL, 2000, **KERNEL)
        fake.run(kinds.MEMCPY, 3000, copy_kind=1, src_kind=2, dst_kind=3, bytes=4096)
        fake.run(kinds.MEMSET, 500, memory_kind=3, bytes=64)
        model(x).sum().backward()
        opt.step()
        time.sleep(0.002)
        if i < steps - 1:
            w.step()
    w.stop()
    scopes.off()
    fake.run(kinds.CONCURRENT_KERNEL, 1000, **KERNEL)  # after the window: never recorded
    path = tmp_path / "trace.json"
    w.export_chrome_trace(str(path))
    return {"w": w, "path": path, "doc": json.loads(path.read_text()), "torch": torch, "steps": steps}


def test_cupti_window_trace_has_steps_ranges_and_gpu_work_on_unix_time(recorded):
    doc, w = recorded["doc"], recorded["w"]
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    ann = [e for e in xs if e["cat"] == "user_annotation"]
    steps = [e for e in ann if e["name"].startswith("ProfilerStep#")]
    assert [e["name"] for e in steps] == [f"ProfilerStep#{i}" for i in range(1, recorded["steps"])]
    assert sum(e["name"] == "Optimizer.step#SGD.step" for e in ann) == recorded["steps"] - 1
    assert sum(e["name"] == "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__" for e in ann) == 5
    # the warm-up step's and the outside work is not kept: one of each kind per recorded step
    by_cat = {c: [e for e in xs if e["cat"] == c] for c in ("kernel", "gpu_memcpy", "gpu_memset")}
    assert {c: len(v) for c, v in by_cat.items()} == {"kernel": 5, "gpu_memcpy": 5, "gpu_memset": 5}
    k = by_cat["kernel"][0]
    assert k["name"].startswith("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>")
    assert (k["pid"], k["tid"], k["args"]["stream"], k["args"]["device"], k["dur"]) == (0, 7, 7, 0, 2.0)
    assert by_cat["gpu_memcpy"][0]["name"] == "Memcpy HtoD (Pinned -> Device)"
    assert by_cat["gpu_memcpy"][0]["args"]["bytes"] == 4096
    assert by_cat["gpu_memset"][0]["name"] == "Memset (Device)"
    # clock: the offset recovered within the narrowest bracket's half-width (the bound the bracket guarantees: a
    # few hundred ns on a quiet machine, more when the reads are preempted on a loaded one), so every GPU record
    # lies inside its step on Unix time, to that half-width
    clock = doc["gpucheckup_light"]["clock"]
    halves = clock["bracket_half_width_ns"]
    assert all(abs(o - FAKE_OFFSET_NS) <= h + 1 for o, h in zip(clock["cupti_to_unix_offset_ns"], halves))
    slack_us = max(halves) / 1000 + 1e-3
    for e in by_cat["kernel"]:
        assert any(s["ts"] - slack_us <= e["ts"] <= s["ts"] + s["dur"] + slack_us for s in steps), e["ts"]
    base_s = doc["baseTimeNanoseconds"] / 1e9
    assert abs(base_s + steps[0]["ts"] / 1e6 - time.time()) < 60
    assert doc["gpucheckup_light"]["records"] == {"kernel": 6, "memcpy": 6, "memset": 6}  # the warm-up's too
    assert doc["gpucheckup_light"]["activities"] == list(cw.ACTIVITIES)  # no synchronizations unless asked


def test_cupti_window_leaves_the_job_as_it_was(recorded):
    torch = recorded["torch"]
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    assert _BaseDataLoaderIter.__next__.__name__ == "__next__"  # the wrapper is gone
    n = len(recorded["w"].host.ranges)
    opt = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)
    opt.step()
    assert len(recorded["w"].host.ranges) == n  # the optimizer hooks are gone


def test_reader_reads_the_cupti_trace_shape(recorded, tmp_path):
    from gpucheckup.trace.reader import read_trace
    from gpucheckup.trace.tables import KERNEL, MEMCPY, MEMSET, USER_ANNOTATION

    gz = tmp_path / "trace.json.gz"
    gz.write_bytes(gzip.compress(recorded["path"].read_bytes()))
    t = read_trace(gz)
    doc = recorded["doc"]
    kinds = t.gpu.kind.tolist()
    assert (kinds.count(KERNEL), kinds.count(MEMCPY), kinds.count(MEMSET)) == (5, 5, 5)
    assert set(t.gpu.stream.tolist()) == {7} and set(t.gpu.device.tolist()) == {0}
    assert t.base_time_ns == doc["baseTimeNanoseconds"]
    assert sorted(b for b in t.gpu.bytes.tolist() if b == b) == [64.0] * 5 + [4096.0] * 5
    names = [t.names[i] for i, c in zip(t.host.name.tolist(), t.host.cat.tolist()) if c == USER_ANNOTATION]
    assert sum(n.startswith("ProfilerStep#") for n in names) == 5
    starts = sorted(e["ts"] for e in doc["traceEvents"] if e.get("cat") == "kernel")
    assert sorted(t.gpu.start[t.gpu.kind == KERNEL].tolist()) == pytest.approx(starts)
    assert not t.warnings


def test_build_trace_without_steps_keeps_the_records():
    clock = cw.Clock((0, 1_700_000_000_000_000_000, 50))
    rec = [("kernel", 1000, 3000, 1, 13, 5, 1, "gemm", (1, 1, 1), (64, 1, 1), 32, 0)]
    doc = cw.build_trace(rec, [], [], clock, 42, 42, [], None, {})
    (k,) = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert (k["pid"], k["tid"], k["dur"]) == (1, 13, 2.0)
    assert doc["baseTimeNanoseconds"] + round(k["ts"] * 1000) == 1_700_000_000_000_001_000


def test_clock_interpolates_between_its_two_readings():
    c = cw.Clock((1_000, 500, 10), (2_000, 700, 10))
    assert (c.unix_ns(1_000), c.unix_ns(1_500), c.unix_ns(2_000)) == (1_500, 2_100, 2_700)
    assert c.describe()["drift_ns"] == 200


def test_demangle_reads_cxx_symbols_and_keeps_other_names():
    assert cw.demangle("_Z3fooi") == "foo(int)"
    assert cw.demangle("sm90_xmma_gemm_bf16bf16") == "sm90_xmma_gemm_bf16bf16"
    assert cw.demangle("_Znot a symbol") == "_Znot a symbol"


def test_window_stopped_from_the_optimizers_post_hook_leaves_the_job_running():
    """The agent stops the window inside torch's optimizer post-step hook (its step hook): turning the host ranges
    off there must not change the hooks torch is iterating (on the H200 it did: `OrderedDict mutated during
    iteration` ended the job)."""
    torch = pytest.importorskip("torch")
    from torch.optim.optimizer import register_optimizer_step_post_hook

    fake = FakeCupti()
    w = cw.CuptiWindow(torch, fake)
    scopes = w.host_scopes()
    state = {"n": 0}

    def agent_hook(opt, args, kwargs):  # as core.Agent._on_step: start after step 1, stop after step 3
        state["n"] += 1
        if state["n"] == 1:
            scopes.on()
            w.start()
        elif state["n"] == 2:
            w.step()
        elif state["n"] == 3:
            w.stop()
            scopes.off()

    handle = register_optimizer_step_post_hook(agent_hook)
    try:
        model = torch.nn.Linear(2, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(6):
            model(torch.randn(3, 2)).sum().backward()
            opt.step()
    finally:
        handle.remove()
    assert state["n"] == 6
    names = [r[0] for r in w.host.ranges]
    assert names.count("Optimizer.step#SGD.step") == 2  # steps 2 and 3; none after the window


# ---- CUPTI light windows captured on the H200 (validation/light_ab.py, 2026-11-30; docs/validation.md section 6) ---
# The jobs ended with the agent's error at the window's end (fixed since: the post-hook test above); the windows and
# their traces were complete.
H200_LIGHT = Path(__file__).resolve().parent / "data" / "h200" / "light"


def _report(name: str) -> dict:
    from gpucheckup.checkup.pipeline import check_run

    return check_run(H200_LIGHT / name).checkups[0].report


def _x(name: str) -> list[dict]:
    return [e for e in raw_events(H200_LIGHT / name / "traces" / "trace.json.gz")["traceEvents"] if e.get("ph") == "X"]


def test_h200_cupti_light_trace_without_sync_records_says_syncs_are_not_recorded(tmp_path):
    """The H200 CUPTI window recorded kernels, copies and memsets only (its `gpucheckup_light.activities`): a sync there
    could not have been seen, so every format says syncs are not recorded instead of "0 per step"; the full window of
    the same job records runtime calls, so its count stands."""
    from gpucheckup.checkup.pipeline import check_run
    from gpucheckup.report.text.lines import SYNCS_NOT_RECORDED
    from gpucheckup.trace.reader import read_trace

    trace = read_trace(H200_LIGHT / "launch_bound_cupti" / "traces" / "trace.json.gz")
    assert trace.light_activities == ("CONCURRENT_KERNEL", "MEMCPY", "MEMSET") and not trace.syncs_recorded
    assert read_trace(H200_LIGHT / "launch_bound" / "traces" / "trace.json.gz").syncs_recorded
    r = _report("launch_bound_cupti")
    assert r["sync"]["recorded"] is False and r["sync"]["count"] == 0
    assert _report("launch_bound")["sync"]["recorded"] is True
    out = subprocess.run([sys.executable, "-m", "gpucheckup", "analyze", str(H200_LIGHT / "launch_bound_cupti"),
                          "--markdown", str(tmp_path / "r.md"), "--html", str(tmp_path / "r.html")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.replace("│", " ").split())  # rich wraps lines inside its boxes
    assert f"syncs {SYNCS_NOT_RECORDED}" in text and "syncs 0.0 per step" not in text
    assert "Not recorded (light window without --light-syncs): this trace cannot show them." in \
        (tmp_path / "r.md").read_text()
    assert "this trace cannot show them" in (tmp_path / "r.html").read_text()


def test_cupti_window_records_no_synchronizations_unless_asked():
    """Enabling CUPTI's SYNCHRONIZATION kind costs every launch, not every sync (an H200 launch-bound step +33% with it,
    +9% without, paired in one process: docs/validation.md 6e), so the window enables it only when asked."""
    torch = pytest.importorskip("torch")
    for syncs, kinds in ((False, cw.ACTIVITIES), (True, cw.ACTIVITIES + cw.SYNC_ACTIVITIES)):
        fake = FakeCupti()
        w = cw.CuptiWindow(torch, fake, syncs=syncs)
        w.start()
        assert w.enabled == list(kinds)
        assert (fake.ActivityKind.SYNCHRONIZATION in fake.enabled) is syncs
        w.stop()


def test_h200_cupti_trace_holds_the_same_gpu_work_as_torch_profilers():
    cupti_ev, torch_ev = _x("launch_bound_cupti"), _x("launch_bound")  # the same job and window, two backends
    cats = {e["cat"] for e in cupti_ev}
    assert cats == {"kernel", "gpu_memset", "user_annotation"}  # no runtime, driver or flow events

    def per_step(ev):
        steps = sum(e["cat"] == "user_annotation" and e["name"].startswith("ProfilerStep#") for e in ev)
        return sum(e["cat"] == "kernel" for e in ev) / steps

    assert per_step(cupti_ev) == per_step(torch_ev) == 339.0
    names = {e["name"] for e in cupti_ev if e["cat"] == "kernel"}
    assert names == {e["name"] for e in torch_ev if e["cat"] == "kernel"}  # demangled as Kineto names them


def test_h200_cupti_clock_puts_the_optimizers_kernels_inside_its_steps():
    """CUPTI's clock vs the host's: AdamW's kernels run while Optimizer.step runs on the host (the GPU is idle in a
    launch-bound job, so each starts within microseconds of its launch)."""
    ev = _x("launch_bound_cupti")
    opt = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e["name"].startswith("Optimizer.step#AdamW")]
    kernels = [e["ts"] for e in ev if e["cat"] == "kernel" and "multi_tensor_apply" in e["name"]]
    assert len(opt) == 30 and len(kernels) == 450
    inside = sum(any(a <= t <= b for a, b in opt) for t in kernels)
    assert inside >= 0.95 * len(kernels)
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e["name"].startswith("ProfilerStep#")]
    assert all(any(a <= e["ts"] <= b for a, b in steps) for e in ev if e["cat"] == "kernel")


def test_h200_cupti_light_verdicts_and_sources():
    r = _report("launch_bound_cupti")
    assert r["verdict"]["primary"] == "launch_bound"
    assert r["gaps"]["source"] == SOURCE_GPU_ONLY
    hs = r["run_figures"]["host_samples"]
    assert hs["gap_covered_pct"] >= 90.0
    dispatching = sum(next((x["pct"] for x in hs["gap_by_state"] if x["state"] == s), 0.0)
                      for s in ("forward", "backward", "optimizer", "python"))
    assert dispatching >= 95.0
    assert hs["ranges"]["optimizer"]["pct"] > 0.0  # the agent's own Optimizer.step ranges
    assert _report("gpu_bound_cupti")["verdict"]["primary"] == "gpu_bound"


def test_host_ranges_time_the_closure_an_optimizer_calls_inside_its_step():
    """Lightning calls optimizer.step(closure): the forward and backward run inside the optimizer's step. The window
    times each call of the closure as an Optimizer.closure# range inside Optimizer.step#, passes the closure's value
    back (the loss), and leaves a step without a closure as it was."""
    torch = pytest.importorskip("torch")
    from gpucheckup.analysis.one_trace.host.optimizer_spans import CLOSURE_RANGE

    w = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.SGD([w], lr=0.1)
    opt.register_step_post_hook(lambda *a: None)

    returned = []

    def closure():
        opt.zero_grad()
        loss = (w * 2).sum()
        loss.backward()
        time.sleep(0.002)
        returned.append(loss.detach())
        return returned[-1]

    opt.step(closure)  # torch wraps the class's step for its hooks at the first step
    returned.clear()
    host = cw.HostRanges(torch)
    host.on()
    try:
        got = opt.step(closure)
        got_kw = opt.step(closure=closure)
        opt.step()
    finally:
        host.off()
    assert len(returned) == 2 and got is returned[0] and got_kw is returned[1]
    steps = [r for r in host.ranges if r[0].startswith("Optimizer.step#SGD")]
    closures = [r for r in host.ranges if r[0] == f"{CLOSURE_RANGE}SGD.step"]
    assert cw.CLOSURE_RANGE == CLOSURE_RANGE and len(steps) == 3 and len(closures) == 2
    for (_, c0, c1), (_, s0, s1) in zip(closures, steps):
        assert s0 <= c0 and c1 <= s1 and c1 - c0 >= 2_000_000  # ns: the closure's sleep is inside it


def test_h200_cupti_light_trace_is_not_replayed_and_its_fixes_rank_by_their_bounds():
    """A CUPTI light trace holds no launch call: every replay edit acts on the host's launches, so a replay of it would
    predict nothing for the launch fixes (and, on a Lightning loop, let a DataLoader edit name the verdict). It is not
    replayed; the launch-bound MLP still reads launch_bound and its fixes carry their bounds, the fused optimizer's
    first as in the same job's full window, and the same three first in the same order (fused_optimizer,
    cuda_graph, larger_batch). tf32, configuration only, came second before: its bound is now the FP32 GEMMs' time
    on the critical path, under a tenth of the launch fixes' bounds (gpu_critical.py, findings.CHEAP_FIRST_SHARE)."""
    from gpucheckup.diagnosis.savings import NO_LAUNCH_CALLS

    r = _report("launch_bound_cupti")
    assert r["verdict"]["primary"] == "launch_bound"
    assert NO_LAUNCH_CALLS in r["notes"]
    assert all(f["predicted"] is None for f in r["fixes"])
    keys = [f["key"] for f in r["fixes"]]
    assert keys[:3] == ["fused_optimizer", "cuda_graph", "larger_batch"]
    # the same order as a full window of the same job (its replay: graphs above a larger batch, docs/validation.md 7j)
    from gpucheckup.checkup.pipeline import check_run

    full = check_run(next((H200_LIGHT.parent / "runs").glob("*-launch_bound"))).checkups[0].report
    assert [f["key"] for f in full["fixes"][:3]] == keys[:3]
    launch = next(f for f in r["fixes"] if f["key"] == "larger_batch")["saving_ms"]
    assert launch > 0.5 * r["steps"]["median_ms"] * r["gaps"]["pct_of_step"]["other_host"] / 100


def test_h200_lightning_light_window_counts_the_optimizers_own_time_inside_its_steps_only():
    """A step's mark comes from inside its optimizer step, so a light window's first step begins inside the range of
    the step before it: on the H200's Lightning loop a 59 ms range (its closure unrecorded, CUPTI's first use). The
    fused optimizer's bound counts the optimizer's own spans (the ranges less the closures in them) that start inside
    the profiled steps, cut at their end: computed here from the trace's JSON, per step, the profiler's host scale
    applied, no more than the launch idle, plus the optimizer kernels' time."""
    from gpucheckup.checkup.pipeline import check_run
    from gpucheckup.diagnosis.fixes import _kernel_ms, _launch_idle

    run = H200_LIGHT / "lightning_default"
    doc = json.loads(gzip.decompress((run / "traces" / "trace.json.gz").read_bytes()))
    ranges = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "user_annotation"]
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in ranges if e["name"].startswith("ProfilerStep#"))
    lo, hi = steps[0][0], steps[-1][1]
    closures = [(e["ts"], e["ts"] + e["dur"]) for e in ranges if e["name"].startswith("Optimizer.closure#")]
    own_us = 0.0
    whole, started = [], set()
    for e in (e for e in ranges if e["name"].startswith("Optimizer.step#")):
        a, b = e["ts"], e["ts"] + e["dur"]
        whole.append(e["dur"])
        cut = max([c1 for c0, c1 in closures if a <= c0 <= b], default=a)
        if lo <= cut < hi:
            own_us += min(b, hi) - cut
            started.add(next(i for i, (s0, s1) in enumerate(steps) if s0 <= cut < s1))
    assert max(whole) > 4 * (hi - lo) / len(steps)  # the range from before the window, longer than four steps
    assert len(started) == len(steps)
    a = check_run(run).checkups[0].analysis
    want = min(a.window.host_ms(own_us), _launch_idle(a)) + _kernel_ms(a, "optimizer")
    r = _report("lightning_default")
    got = next(f for f in r["fixes"] if f["key"] == "fused_optimizer")["saving_ms"]
    assert got == pytest.approx(want, rel=1e-6)
    assert got < 0.25 * r["steps"]["median_ms"]  # 1.8 ms; counting that range read 8.1, the whole launch idle


def test_h200_lightning_light_window_names_the_full_windows_three_fixes_first():
    """Lightning's CUPTI light window (tests/data/h200/light/lightning_default) against the same job's full window (the
    corpus run): the fused optimizer, the DataLoader's workers, then CUDA graphs, as the full window's replay ranks
    them. The DataLoader's fix is configuration only and goes before the code changes when its bound reaches a tenth
    of the largest: against the whole launch idle as the graphs' bound (83% of the step) it sat at that line (6 of 17
    H200 runs put it after them, docs/validation.md 6m, 6n). The graphs change the model alone: their bound is the
    idle inside Lightning's closures (the model's forward and backward), computed here from the trace's JSON as the
    share of the GPU's idle time between the window's kernels that falls inside a closure."""
    from gpucheckup.checkup.pipeline import check_run
    from gpucheckup.diagnosis.fixes import _idle, _launch_idle

    light = _report("lightning_default")
    full = check_run(H200_LIGHT.parent / "corpus" / "lightning").checkups[0].report
    top = [f["key"] for f in full["fixes"][:3]]
    assert top == ["fused_optimizer", "dataloader_workers", "cuda_graph"]
    assert [f["key"] for f in light["fixes"][:3]] == top
    run = H200_LIGHT / "lightning_default"
    doc = json.loads(gzip.decompress((run / "traces" / "trace.json.gz").read_bytes()))
    ev = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e["name"].startswith("ProfilerStep#"))
    lo, hi = steps[0][0], steps[-1][1]
    gpu = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                 and lo <= e["ts"] < hi)
    loading = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e["name"].startswith("enumerate(DataLoader)")]
    closures = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e["name"].startswith("Optimizer.closure#")]

    def inside(a, b, spans):
        return sum(max(0.0, min(b, y) - max(a, x)) for x, y in spans)

    end, idle, model = gpu[0][1], 0.0, 0.0
    for s0, s1 in gpu[1:]:
        if s0 > end:  # a gap between kernels; the DataLoader's wait is not the launches'
            host = (s0 - end) - inside(end, s0, loading)
            idle += host
            model += min(inside(end, s0, closures), host)
        end = max(end, s1)
    a = check_run(run).checkups[0].analysis
    graphs = next(f for f in light["fixes"] if f["key"] == "cuda_graph")["saving_ms"]
    assert 0.6 < model / idle < 0.85
    assert graphs == pytest.approx((_launch_idle(a) + _idle(a, "queued")) * model / idle, rel=0.03)
    loader = next(f for f in light["fixes"] if f["key"] == "dataloader_workers")["saving_ms"]
    largest = max(f["saving_ms"] for f in light["fixes"])
    assert largest < 0.8 * (_launch_idle(a) + _idle(a, "queued"))  # neither the graphs' nor a larger batch's is all
    assert loader >= 0.1 * largest  # 0.82 ms: against the whole launch idle, 8.07 ms, a ratio of 0.102


def test_h200_a_larger_batchs_bound_is_of_the_step_its_idle_is_of():
    """The host's speed drifts: this Lightning light window (tests/data/h200/light/lightning_faster_window) ran its
    record steps at 6.70 ms where the job's steps took 9.43 ms, so the profiler correction does not apply and the
    idle per step is the traced step's. A doubled batch saves at most that step less half its launch idle (computed
    here from the trace's step windows and the report's idle); taken of the job's step, it read 57% of it and put
    the DataLoader's fix after the code changes, where the full window ranks it second."""
    from gpucheckup.checkup.pipeline import check_run
    from gpucheckup.diagnosis.fixes import _launch_idle

    run = H200_LIGHT / "lightning_faster_window"
    doc = json.loads(gzip.decompress((run / "traces" / "trace.json.gz").read_bytes()))
    traced = float(np.median([e["dur"] for e in doc["traceEvents"] if e.get("ph") == "X"
                              and e["name"].startswith("ProfilerStep#")])) / 1000
    r = _report("lightning_faster_window")
    p = r["profiler"]
    assert p["traced_step_ms"] == pytest.approx(traced) and p["inflation_pct"] < -20 and not p["applied"]
    launch = _launch_idle(check_run(run).checkups[0].analysis)
    batch = next(f for f in r["fixes"] if f["key"] == "larger_batch")["saving_ms"]
    assert batch == pytest.approx(min(launch, traced - launch / 2))
    assert batch < 0.5 * p["unprofiled_step_ms"]
    assert [f["key"] for f in r["fixes"][:2]] == ["fused_optimizer", "dataloader_workers"]


def test_h200_hf_trainer_light_window_names_the_full_windows_three_fixes_first():
    """HF Trainer's CUPTI light window (tests/data/h200/light/hf_cupti) against the same job's full window (the corpus
    run, tests/data/h200/corpus/hf): launch_bound both, and the same three fixes first in the same order (the full
    window's replay: cuda_graph 69% (an upper bound), larger_batch 49%, torch_compile 36%; measured 59%, 44%, 21%).
    Before, the light window put tf32 first: a configuration fix bounded by all its FP32 GEMM time (0.75 ms) where
    those GEMMs are never waited for (the full window replays 0.0%); its bound is now their time on the critical
    path, under a tenth of the launch fixes' (docs/validation.md 6h). The light window ranks by bounds (nothing is
    replayed; graphs and a larger batch share the launch idle as theirs); the full window's order matched it once its
    graphs replay ran none of the model's Python (docs/validation.md 7j: it put a larger batch first before)."""
    light = _report("hf_cupti")
    from gpucheckup.checkup.pipeline import check_run

    full = check_run(H200_LIGHT.parent / "corpus" / "hf").checkups[0].report
    assert light["verdict"]["primary"] == full["verdict"]["primary"] == "launch_bound"
    top = [f["key"] for f in full["fixes"][:3]]
    assert top == ["cuda_graph", "larger_batch", "torch_compile"]
    keys = [f["key"] for f in light["fixes"]]
    assert keys[:3] == top
    tf32 = next(f for f in light["fixes"] if f["key"] == "tf32")
    assert tf32["saving_ms"] < 0.1 * max(f["saving_ms"] or 0.0 for f in light["fixes"])


def test_h200_an_optimizer_already_fused_is_not_told_to_fuse():
    """The MoE job (validation/train_moe.py: AdamW(fused=True)) in the default light window, launch-bound: its
    optimizer's kernels are torch's fused form already (their names, read here from the trace's JSON, carry
    `FusedOptimizerTensorListMetadata`), so the fused optimizer is not offered. Before, its bound (the optimizer's own
    host span plus its kernels' time: 9% of the step) put it first (docs/validation.md 6o), where the full window
    replays it at 0.2% (its fused kernels keep their work)."""
    light = _report("moe_fused_default")
    names = {e["name"] for e in _x("moe_fused_default") if e.get("cat") == "kernel"}
    assert any("FusedOptimizerTensorListMetadata" in n for n in names)
    assert light["verdict"]["primary"] == "launch_bound"
    keys = [f["key"] for f in light["fixes"]]
    assert "fused_optimizer" not in keys
    assert keys[0] == "cuda_graph" and "torch_compile" in keys[:3]


def test_h200_cupti_kernels_in_optimizer_ranges_are_the_optimizers():
    """Without launch calls a kernel is `optimizer` when it starts inside Optimizer.step after the GPU went idle
    there. On the launch-bound MLP (foreach AdamW) that picks AdamW's multi_tensor_apply kernels, read off their names,
    and none of the forward's or backward's; on the GPU-bound transformer (fused AdamW, work queued ahead) its
    backward kernels run during the host's Optimizer.step, and none of them is picked: only the optimizer's own
    multi_tensor_apply kernels, where the GPU had caught up."""
    from gpucheckup.analysis.one_trace.gpu.kernels import _started_in_optimizer
    from gpucheckup.trace.reader import read_trace
    from gpucheckup.trace.tables import KERNEL

    for name, share in (("launch_bound_cupti", 0.9), ("gpu_bound_cupti", 0.0)):
        t = read_trace(H200_LIGHT / name / "traces" / "trace.json.gz")
        rows = np.flatnonzero(t.gpu.kind == KERNEL)
        hit = _started_in_optimizer(t, rows)
        adam = np.array(["multi_tensor_apply" in t.names[int(i)] for i in t.gpu.name[rows]])
        assert hit[adam].mean() >= share and not (hit & ~adam).any()


def test_h200_torch_profiler_light_predictions_say_they_are_coarse():
    """The torch.profiler light window records launch calls but no operators: its replay runs, and every prediction
    says it is coarse (no operator dispatch to remove) in its `predicted_note` (the document's keys unchanged), in the
    report and its text."""
    import msgspec

    from gpucheckup.diagnosis.savings import COARSE
    from gpucheckup.document import Fix
    from gpucheckup.report.text.lines import saving_text

    r = _report("launch_bound")
    predicted = [f for f in r["fixes"] if f["predicted"]]
    assert predicted and all(f["predicted_note"] == COARSE and "coarse" not in f["predicted"] for f in predicted)
    assert all("coarse" in saving_text(msgspec.convert(f, Fix)) for f in predicted)


# ---- CUPTI's synchronization records: the host's waits on the GPU in a CUPTI light window ------------------------
STREAM_SYNC, EVENT_SYNC, WAIT_EVENT, CONTEXT_SYNC = 3, 1, 2, 4  # CUpti_ActivitySynchronizationType (cupti-python)
GPU_MS, HOST_MS = 3.0, 4.0  # per step: a kernel the host synchronizes on, then host work with the GPU idle


def _sync_window(fake, steps=6):
    """A CuptiWindow over `fake` around `steps` steps of a sync-bound job (the first is the warm-up): each step the GPU
    runs a kernel for GPU_MS while the host waits in a stream synchronize, then the host works HOST_MS (the GPU idle);
    a stream wait event is queued on the stream each step. Also returns the GPU's idle time after each recorded step's
    sync (kernel end -> next kernel start, the last to the window's end), on the fake's own clock."""
    torch = pytest.importorskip("torch")
    kinds = fake.ActivityKind
    sync_kind = getattr(kinds, "SYNCHRONIZATION", "no such kind")  # a kind never enabled: its records are never made
    w = cw.CuptiWindow(torch, fake, log=(lines := []).append, syncs=True)
    w.start()
    idle_after_sync, last_end = [], None
    for i in range(steps):
        k0 = fake.get_timestamp()
        if last_end is not None and i > 1:  # idle of the previous recorded step: its kernel's end to this kernel
            idle_after_sync.append(k0 - last_end)
        fake.record(sync_kind, k0, k0 + 5_000, type=WAIT_EVENT, stream_id=7, cuda_event_id=3)
        k1 = k0 + int(GPU_MS * 1e6)
        fake.record(kinds.CONCURRENT_KERNEL, k0, k1, **KERNEL)
        s0 = fake.get_timestamp()
        while fake.get_timestamp() < k1 + 50_000:  # the host blocks until the kernel is done
            time.sleep(0.0002)
        fake.record(sync_kind, s0, fake.get_timestamp(), type=STREAM_SYNC, stream_id=7,
                    cuda_event_id=cw.SYNC_INVALID)
        last_end = k1
        time.sleep(HOST_MS / 1000)
        if i < steps - 1:
            w.step()
    w.stop()
    idle_after_sync.append(w.marks[-1] - FAKE_OFFSET_NS - last_end)  # the last step's idle runs to the window's end
    w.lines = lines
    return w, idle_after_sync


def _checkup(w, tmp_path, name="trace.json.gz", keep=lambda r: True):
    from gpucheckup.checkup.pipeline import check_path

    doc = cw.build_trace([r for r in w.records if keep(r)], w.host.ranges, w.marks, w.clock, w.pid, w.tid, [], None,
                         w.summary())
    path = tmp_path / name
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return doc, check_path(path)[0].report, path


def test_cupti_sync_records_are_counted_and_name_the_idle_they_drain(tmp_path):
    """A fake sync-bound window: one stream synchronize per step, the GPU idle while the host works after it. The
    check-up counts one sync per step and names that idle `sync` (the drain rule of
    analysis/one_trace/host/gap_causes.py);
    the same records without the sync ones read `launch_bound` (every gap `other_host`), as the H200 sync-bound job did."""
    from gpucheckup.analysis.run_logs.sampled_causes import SOURCE_GPU_SYNCS, gap_source
    from gpucheckup.trace.reader import read_trace

    w, idle = _sync_window(FakeCupti())
    assert w.enabled == list(cw.ACTIVITIES + cw.SYNC_ACTIVITIES) and not w.lines
    doc, r, path = _checkup(w, tmp_path)
    calls = [e for e in doc["traceEvents"] if e.get("cat") == "cuda_runtime"]
    assert [e["name"] for e in calls] == ["cudaStreamSynchronize"] * 5  # the warm-up's and the wait events: not kept
    assert all((e["pid"], e["tid"], e["args"]["stream"]) == (w.pid, w.tid, 7) for e in calls)
    assert all(e["dur"] >= GPU_MS * 1000 * 0.9 for e in calls)  # the host blocked about as long as the kernel ran
    assert doc["gpucheckup_light"]["sync_calls"] == {"cudaStreamWaitEvent": 6, "cudaStreamSynchronize": 6}
    assert doc["gpucheckup_light"]["records"]["sync"] == 12
    assert r["sync"]["count_per_step"] == 1.0
    assert r["verdict"]["primary"] == "sync_bound"
    expected_ms = sum(idle) / 1e6  # the fake's own clock: kernel ends and starts, never the trace's figures
    assert r["gaps"]["by_cause_ms"]["sync"] == pytest.approx(expected_ms, rel=0.03)
    assert r["gaps"]["by_cause_ms"]["sync"] > 0.9 * sum(r["gaps"]["by_cause_ms"].values())
    assert gap_source(read_trace(path)) == SOURCE_GPU_SYNCS

    _, r0, _ = _checkup(w, tmp_path, "nosync.json.gz", keep=lambda rec: rec[0] != "sync")
    assert r0["sync"]["count_per_step"] == 0.0 and r0["gaps"]["by_cause_ms"]["sync"] == 0.0
    assert r0["verdict"]["primary"] == "launch_bound"


class RefusingCupti(FakeCupti):
    """A CUPTI that will not record synchronizations (an older or restricted libcupti)."""

    def activity_enable(self, kind):
        if kind == self.ActivityKind.SYNCHRONIZATION:
            raise RuntimeError("CUPTI_ERROR_NOT_COMPATIBLE")
        super().activity_enable(kind)


class NoSyncKindCupti(FakeCupti):
    """A cupti-python whose ActivityKind has no SYNCHRONIZATION."""

    class ActivityKind:
        CONCURRENT_KERNEL, MEMCPY, MEMSET = 10, 1, 2


@pytest.mark.parametrize("fake, why", [(RefusingCupti, "CUPTI_ERROR_NOT_COMPATIBLE"),
                                       (NoSyncKindCupti, "cupti-python has no ActivityKind.SYNCHRONIZATION")])
def test_cupti_refusing_synchronization_still_records_the_gpu(fake, why, tmp_path):
    w, _ = _sync_window(fake())
    assert w.lines == [f"light window: CUPTI would not record SYNCHRONIZATION: {why}"]
    assert w.enabled == list(cw.ACTIVITIES)
    doc, r, _ = _checkup(w, tmp_path)
    assert doc["gpucheckup_light"]["activities"] == list(cw.ACTIVITIES)
    assert doc["gpucheckup_light"]["records"] == {"kernel": 6}
    assert not [e for e in doc["traceEvents"] if e.get("cat") == "cuda_runtime"]
    assert sum(e.get("cat") == "kernel" for e in doc["traceEvents"]) == 5
    assert r["sync"]["count_per_step"] == 0.0


def test_sync_events_name_each_type_and_leave_out_what_is_no_host_wait():
    clock = cw.Clock((0, 1_700_000_000_000_000_000, 50))
    lo, hi = clock.unix_ns(1_000_000), clock.unix_ns(9_000_000)
    inv = cw.SYNC_INVALID
    syncs = [("sync", 2_000_000, 2_500_000, -1, 7, 11, 1, STREAM_SYNC, inv),
             ("sync", 3_000_000, 3_100_000, -1, inv, 12, 1, EVENT_SYNC, 4),
             ("sync", 4_000_000, 4_900_000, -1, inv, 13, 1, CONTEXT_SYNC, inv),
             ("sync", 5_000_000, 5_001_000, -1, 7, 14, 1, WAIT_EVENT, 4),  # queued on the stream: no host wait
             ("sync", 0, 0, -1, 7, 15, 1, STREAM_SYNC, inv),  # CUPTI could not time it
             ("sync", 100, 900_000, -1, 7, 16, 1, STREAM_SYNC, inv),  # ended before the warm-up's end
             ("sync", 9_500_000, 9_600_000, -1, 7, 17, 1, STREAM_SYNC, inv)]  # after the window
    base = 1_700_000_000_000_000_000

    def us(t):
        return (t - base) / 1000.0

    ev = cw.sync_events(syncs, clock, lo, hi, 42, 43, us)
    assert [(e["name"], e["ts"], e["dur"], e["args"]["correlation"]) for e in ev] == [
        ("cudaStreamSynchronize", 2000.0, 500.0, 11), ("cudaEventSynchronize", 3000.0, 100.0, 12),
        ("cudaDeviceSynchronize", 4000.0, 900.0, 13)]
    assert all(e["cat"] == "cuda_runtime" and (e["pid"], e["tid"]) == (42, 43) for e in ev)
    assert ev[0]["args"]["stream"] == 7 and "cuda_event" not in ev[0]["args"]
    assert "stream" not in ev[1]["args"] and ev[1]["args"]["cuda_event"] == 4
    from gpucheckup.analysis.one_trace.host.host_calls import SYNC_CALLS

    assert set(cw.SYNC_TYPE_CALLS.values()) - SYNC_CALLS == {"cudaStreamWaitEvent"}  # every other one is a sync there


def _as_cupti_records(doc: dict) -> tuple[list, list, list]:
    """A full torch.profiler trace's GPU work and sync calls as the CUPTI window's records (CUPTI ns = the trace's
    ns, so the clock's offset is 0), its other ranges, and step marks (the first step's start twice, as start() and
    a warm-up's end, then each step's end): what the CUPTI window would have recorded of the same job."""
    sync_type = {v: k for k, v in cw.SYNC_TYPE_CALLS.items()}
    copy_kind = {v: k for k, v in cw.MEMCPY_KINDS.items()}
    mem_kind = {v: k for k, v in cw.MEMORY_KINDS.items()}
    recs, ranges, steps = [], [], []
    for e in doc["traceEvents"]:
        if e.get("ph") != "X":
            continue
        cat, a = e.get("cat"), e.get("args", {})
        t0, t1 = round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000)
        head = (t0, t1, a.get("device"), a.get("stream"), a.get("correlation"), a.get("context"))
        if cat == "kernel":
            recs.append(("kernel", *head, e["name"], tuple(a["grid"]), tuple(a["block"]), a["registers per thread"],
                         a["shared memory"]))
        elif cat == "gpu_memcpy":  # "Memcpy DtoH (Device -> Pageable)"
            direction, mem = e["name"].removeprefix("Memcpy ").split(" ", 1)
            src, dst = mem.strip("()").split(" -> ")
            recs.append(("memcpy", *head, copy_kind[direction], mem_kind[src], mem_kind[dst], a["bytes"]))
        elif cat == "gpu_memset":
            recs.append(("memset", *head, mem_kind[e["name"].removeprefix("Memset (").rstrip(")")], a.get("bytes", 0)))
        elif cat == "cuda_runtime" and e["name"] in sync_type:
            recs.append(("sync", t0, t1, -1, a.get("stream", cw.SYNC_INVALID), a["correlation"], 1,
                         sync_type[e["name"]], cw.SYNC_INVALID))
        elif cat == "user_annotation":
            (steps if e["name"].startswith("ProfilerStep#") else ranges).append((e["name"], t0, t1))
    steps.sort(key=lambda s: s[1])
    return recs, ranges, [steps[0][1], steps[0][1]] + [s[2] for s in steps]


@pytest.mark.parametrize("name, syncs, per_step, verdict, light_verdict",
                         [("sync_bound", 11, 2.0, "sync_bound", "sync_bound"),
                          ("item_checks", 166, 33.0, "sync_bound", "launch_bound")])
def test_h200_sync_jobs_through_the_cupti_path_read_as_their_full_traces(name, syncs, per_step, verdict,
                                                                         light_verdict, tmp_path):
    """Two H200 jobs that read GPU values on the host (tests/data/h200/sync_bound: softmax copied to the host and
    `.item()` every step; item_checks: 33 `.item()` per step), their kernels, copies, memsets and sync calls
    rebuilt as CUPTI's records and written by the CUPTI window's build_trace: the check-up counts the syncs per
    step of the full trace and gives about its sync share; without the sync records syncs read 0 and the
    sync-bound job launch_bound, as its CUPTI light window did on the H200 (docs/validation.md section 6b).
    item_checks' full trace reads sync_bound once the profiler's per-event cost is taken out of its host time
    (whatif/replay.py), as it does calibrated on its measured unprofiled step; the rebuilt records keep
    torch.profiler's host timings but hold no operators, so they get no per-event cost and read launch_bound."""
    from gpucheckup.checkup.pipeline import check_path

    full = Path(__file__).resolve().parent / "data" / "h200" / name / "trace.json.gz"
    doc = raw_events(full)
    recs, ranges, marks = _as_cupti_records(doc)
    assert sum(r[0] == "sync" for r in recs) == syncs  # the stream syncs in 5 steps + the profiler's device sync

    def checkup(records, name):
        light = cw.build_trace(records, ranges, marks, cw.Clock((0, 0, 0)), 414, 414, doc["deviceProperties"], None,
                               {})
        path = tmp_path / name
        path.write_bytes(gzip.compress(json.dumps(light).encode()))
        return check_path(path)[0].report

    want = check_path(full)[0].report
    got = checkup(recs, "light.json.gz")
    assert want["sync"]["count_per_step"] == got["sync"]["count_per_step"] == per_step
    assert want["verdict"]["primary"] == verdict and got["verdict"]["primary"] == light_verdict
    assert got["gaps"]["pct_of_step"]["sync"] == pytest.approx(want["gaps"]["pct_of_step"]["sync"], abs=3.0)
    assert got["steps"]["median_ms"] == pytest.approx(want["steps"]["median_ms"], rel=1e-6)
    without = checkup([r for r in recs if r[0] != "sync"], "nosync.json.gz")
    assert without["sync"]["count_per_step"] == 0.0 and without["verdict"]["primary"] == "launch_bound"


def test_cupti_window_detaches_cupti_once_its_records_are_in_and_attaches_again():
    """After the window CUPTI is detached (cuptiFinalize: a disabled but attached CUPTI still cost every launch about
    1 us on the H200, docs/validation.md section 6c), only after the forced flush and the stop's clock reading; a
    later window (an attach request) attaches it again and records."""
    torch = pytest.importorskip("torch")
    fake = FakeCupti()
    for window in range(2):
        w = cw.CuptiWindow(torch, fake)
        w.start()
        fake.run(fake.ActivityKind.CONCURRENT_KERNEL, 1000, **KERNEL)
        fake.calls.clear()
        w.stop()
        assert fake.calls == ["flush", "clock", "finalize"], window
        assert fake.enabled == set() and fake.callbacks is None
        assert w.summary()["detached_after"] is True
        assert w.summary()["records"] == {"kernel": 1}, window


def test_cupti_window_that_cannot_detach_says_so_and_the_job_goes_on():
    torch = pytest.importorskip("torch")
    fake = FakeCupti()

    def finalize():
        raise RuntimeError("CUPTI_ERROR_NOT_SUPPORTED")

    fake.finalize = finalize
    lines = []
    w = cw.CuptiWindow(torch, fake, lines.append)
    w.start()
    w.stop()
    assert w.summary()["detached_after"] is False
    assert lines == ["light window: CUPTI stays attached after the window (RuntimeError: CUPTI_ERROR_NOT_SUPPORTED)"]


def test_kernels_only_window_counts_other_kinds_as_other(monkeypatch):
    """A window recording kernels only (light_variant.py's `kern`) that is handed a copy record (another tool's, in
    the same buffers) counts it as other, and keeps its kernels."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(cw, "ACTIVITIES", ("CONCURRENT_KERNEL",))
    fake = FakeCupti()
    w = cw.CuptiWindow(torch, fake)
    kinds = fake.ActivityKind
    w._completed([types.SimpleNamespace(kind=kinds.MEMCPY, start=1, end=2, copy_kind=1, src_kind=2, dst_kind=3,
                                        bytes=8),
                  types.SimpleNamespace(kind=kinds.CONCURRENT_KERNEL, start=1, end=2, **KERNEL)])
    assert w.other == 1 and [r[0] for r in w.records] == ["kernel"]


@pytest.mark.parametrize("block, activities", [
    ({"backend": cw.BACKEND, "activities": ["CONCURRENT_KERNEL", "SYNCHRONIZATION"]},
     ("CONCURRENT_KERNEL", "SYNCHRONIZATION")),
    ({"activities": ["CONCURRENT_KERNEL"]}, ("CONCURRENT_KERNEL",)),
    ("not an object", None), ({"activities": "CONCURRENT_KERNEL"}, None), ({"activities": [1, 2]}, None),
    ({"backend": cw.BACKEND}, None)])
def test_light_block_read_or_dropped_when_malformed(block, activities, tmp_path):
    """The reader keeps a well-formed `gpucheckup_light.activities`; a malformed block is dropped (the trace still
    reads) and the trace is then taken as one that records syncs, as every trace without the block is."""
    from conftest import write_trace

    from gpucheckup.trace.reader import read_trace

    ev = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10.0, "dur": 5.0,
           "args": {"device": 0, "stream": 7, "correlation": 1}}]
    t = read_trace(write_trace(tmp_path / "t.json", ev, gpucheckup_light=block))
    assert t.light_activities == activities
    assert t.syncs_recorded is (activities is None or "SYNCHRONIZATION" in activities)

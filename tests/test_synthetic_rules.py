"""Rules that the lent single H200 cannot show for real (contention, NCCL), on small synthetic traces.

Synthetic traces only check the arithmetic of a rule; the verdicts themselves are tested on real traces.
"""

from __future__ import annotations

import pytest

from conftest import write_trace
from gpucheckup.analysis.checkup import analyze
from gpucheckup.diagnosis import diagnose
from gpucheckup.trace import read_trace


def ev(cat, name, ts, dur, pid=1, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def kernel(name, ts, dur, corr, stream=7):
    return ev("kernel", name, ts, dur, pid=0, tid=stream, device=0, stream=stream, correlation=corr)


def test_lock_contention_names_both_threads_and_calls(tmp_path):
    events = [ev("user_annotation", "ProfilerStep#1", 0, 10_000)]
    t, corr = 10.0, 1
    for _ in range(40):  # ordinary launches: 5 us each
        events += [ev("cuda_runtime", "cudaLaunchKernel", t, 5, correlation=corr), kernel("k", t + 6, 100, corr)]
        t += 110
        corr += 1
    # one launch takes 800 us while the pin-memory thread sits in cudaHostAlloc
    events += [ev("cuda_runtime", "cudaHostAlloc", t - 50, 900, tid=2),
               ev("cuda_runtime", "cudaLaunchKernel", t, 800, correlation=corr), kernel("k", t + 801, 100, corr)]
    path = write_trace(tmp_path / "contention.json", events)
    tr = read_trace(path)
    tr.thread_names[(1, 2)] = "pin_memory"
    a = analyze(tr)
    cont = a.api.contention
    assert len(cont) == 1
    c = cont[0]
    assert (c.call, c.blocker, c.blocker_thread, c.count) == ("cudaLaunchKernel", "cudaHostAlloc", "pin_memory", 1)
    assert c.typical_us == pytest.approx(5)
    findings = diagnose(a).findings
    assert all(x.events for x in findings)  # every finding points at the events behind it
    f = {x.id: x for x in findings}["lock_contention"]
    assert [(e.name, e.dur_ms) for e in f.events] == [("cudaLaunchKernel", pytest.approx(0.8))]
    assert "while cudaHostAlloc ran on pin_memory" in f.evidence[0] and "cudaLaunchKernel on thread 1" in f.evidence[0]


def test_exposed_nccl_time_is_communication_bound(tmp_path):
    events = []
    corr = 1
    for step in range(3):
        t0 = step * 1000.0
        events.append(ev("user_annotation", f"ProfilerStep#{step}", t0, 1000))
        # 300 us of compute, then a 600 us all-reduce of which 100 us overlaps compute on another stream
        events += [ev("cuda_runtime", "cudaLaunchKernel", t0 + 1, 2, correlation=corr),
                   kernel("sm90_xmma_gemm_bf16", t0 + 10, 300, corr)]
        corr += 1
        events += [ev("cuda_runtime", "cudaLaunchKernel", t0 + 3, 2, correlation=corr),
                   kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", t0 + 210, 600, corr, stream=20)]
        corr += 1
    a = analyze(read_trace(write_trace(tmp_path / "ddp.json", events)))
    cm = a.communication
    assert cm.time_ms == pytest.approx(1.8)
    assert cm.overlap_pct == pytest.approx(100 * 100 / 600)
    assert cm.exposed_ms_per_step == pytest.approx(0.5)
    d = diagnose(a)
    assert d.primary == "communication_bound"
    comm = {x.id: x for x in d.findings}["exposed_communication"]
    nccl = [e for e in comm.events if e.name.startswith("ncclDevKernel")]
    assert len(nccl) == 3 and all(e.where == "GPU 0 stream 20" and e.dur_ms == pytest.approx(0.6) for e in nccl)
    assert a.kernels.categories_pct["communication"] == pytest.approx(100 * 600 / 900)

"""What recording CUPTI's SYNCHRONIZATION kind costs a job, paired in one process (run on a GPU).

Windows of three kinds in turn, CYCLES times: `off` (no window), `kmm` (the CUPTI light window without
synchronization records: kernels, copies, memsets) and `sync` (the window as shipped: the same plus
SYNCHRONIZATION). In each window: the host's time per launched op (`x.add_(1)` on a small tensor, N_OPS
of them timed after a synchronize, the queue never full) and per host read of a GPU value (`x.add_(1)`
then `x[0].item()`: a launch, a copy and a stream synchronize, N_READS of them). Pairs taken in one
cycle cancel the slow drift of the host's speed seen on the H200 (docs/validation.md 6c). Prints one JSON
line: the medians per kind, and each kind's median ratio to `off` over the cycles.

    PYTHONPATH=<cupti-python>:src python3 validation/cupti_sync_cost.py [--cycles 40]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from gpucheckup.capture.agent import cupti_window as cw

N_OPS, N_READS = 400, 100


def per_op_us(x) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter_ns()
    for _ in range(N_OPS):
        x.add_(1)
    t1 = time.perf_counter_ns()
    torch.cuda.synchronize()
    return (t1 - t0) / N_OPS / 1e3


def per_read_us(x) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter_ns()
    for _ in range(N_READS):
        x.add_(1)
        x[0].item()
    return (time.perf_counter_ns() - t0) / N_READS / 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=40)
    a = ap.parse_args()
    cupti = cw.load_cupti()
    x = torch.zeros(256, device="cuda")
    per_op_us(x), per_read_us(x)  # warm-up
    kinds = {"off": None, "kmm": False, "sync": True}  # no window; the window without, with synchronization records
    got = {k: {"op_us": [], "read_us": [], "sync_records": []} for k in kinds}
    for _ in range(a.cycles):
        for kind, syncs in kinds.items():
            w = None
            if syncs is not None:
                w = cw.CuptiWindow(torch, cupti, syncs=syncs)
                w.start()
            got[kind]["op_us"].append(per_op_us(x))
            got[kind]["read_us"].append(per_read_us(x))
            if w is not None:
                w.stop()
                got[kind]["sync_records"].append(sum(1 for r in w.records if r[0] == "sync"))
    out = {"cycles": a.cycles, "n_ops": N_OPS, "n_reads": N_READS}
    for kind, v in got.items():
        out[kind] = {"op_us": statistics.median(v["op_us"]), "read_us": statistics.median(v["read_us"]),
                     "sync_records_per_window": statistics.median(v["sync_records"]) if v["sync_records"] else 0}
        if kind != "off":
            out[kind]["op_ratio_to_off"] = statistics.median(
                b / o for b, o in zip(v["op_us"], got["off"]["op_us"]))
            out[kind]["read_ratio_to_off"] = statistics.median(
                b / o for b, o in zip(v["read_us"], got["off"]["read_us"]))
    print(json.dumps(out))


if __name__ == "__main__":
    main()

"""Build the seed corpus (fuzz/corpus/) from the real H200 traces: each trace cut down to its first
profiled steps so one check-up takes milliseconds, a folder of two ranks, and run directories.

Run once from the repository root: `python fuzz/make_corpus.py`. The corpus is kept in the repository;
rebuild it only when the real traces change.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "fuzz" / "corpus"
TRACES = {
    "copy_bound": "tests/data/h200/copy_bound/trace.json.gz",
    "sync_bound": "tests/data/h200/sync_bound/trace.json.gz",
    "item_checks": "tests/data/h200/item_checks/trace.json.gz",
    "alloc_churn": "tests/data/h200/alloc_churn/trace.json.gz",
    "no_step_markers": "tests/data/h200/no_step_markers/trace.json.gz",
    "bf16_transformer": "tests/data/h200/bf16_transformer_run/traces/trace_rank0.json.gz",
    "input_bound": "src/gpucheckup/data/demo/input_bound/trace.json.gz",
    "launch_bound": "src/gpucheckup/data/demo/launch_bound/trace.json.gz",
    "compute_bound": "src/gpucheckup/data/demo/compute_bound/trace.json.gz",
    "moe_seed": "src/gpucheckup/data/demo/moe_seed/trace.json.gz",
}
RUNS = ("20261129-105908-input_bound", "20261129-110024-attach-653")
PER_STEP = 80  # host events kept of each step (the first ones, in time order): a check-up in milliseconds


def cut(doc: dict, steps: int = 2) -> dict:
    """The trace restricted to its first `steps` host ProfilerSteps, at most PER_STEP host events of each
    (in time order), the GPU events they launched and their flow arrows."""
    events = doc["traceEvents"]
    marks = sorted((e for e in events if str(e.get("name", "")).startswith("ProfilerStep") and e.get("cat") ==
                    "user_annotation"), key=lambda e: e["ts"])[:steps]
    host_cats = ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "python_function")
    host_all = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") in host_cats), key=lambda e: e["ts"])
    windows = [(m["ts"], m["ts"] + m["dur"]) for m in marks] or [(host_all[0]["ts"], host_all[-1]["ts"])]
    host = list(marks)
    for lo, hi in windows:
        host += [e for e in host_all if lo <= e["ts"] <= hi and e not in marks][:PER_STEP]
    corr = {e.get("args", {}).get("correlation") for e in host if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    lo, hi = windows[0][0], windows[-1][1]
    gpu = [e for e in events if e.get("ph") == "X" and e.get("cat") not in host_cats and (
        e.get("args", {}).get("correlation") in corr
        or (e.get("cat") == "gpu_user_annotation" and lo <= e["ts"] <= hi + 1e6))]
    flows = [e for e in events if e.get("ph") in ("s", "f") and e.get("id") in corr]
    keep_meta = [e for e in events if e.get("ph") not in ("X", "s", "f")]
    out = dict(doc)
    out["traceEvents"] = keep_meta + sorted(host + gpu, key=lambda e: e["ts"]) + flows
    return out


def write(doc: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(json.dumps(doc, separators=(",", ":")).encode(), 9, mtime=0))


def main() -> None:
    if OUT.exists():
        shutil.rmtree(OUT)
    small = {}
    for name, rel in TRACES.items():
        doc = json.loads(gzip.decompress((ROOT / rel).read_bytes()))
        small[name] = cut(doc)
        write(small[name], OUT / "traces" / f"{name}.json.gz")
    for rank in (0, 1):  # a folder of two ranks
        doc = dict(small["sync_bound"])
        doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 2}
        write(doc, OUT / "ranks" / f"rank{rank}.json.gz")
    for run in RUNS:
        src = ROOT / "tests/data/h200/runs" / run
        dst = OUT / "runs" / run
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.json.gz"))
        for t in src.glob("traces/*.json.gz"):
            write(cut(json.loads(gzip.decompress(t.read_bytes()))), dst / "traces" / t.name)
    print(sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file()), "bytes in", OUT)


if __name__ == "__main__":
    main()

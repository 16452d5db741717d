"""A folder of N per-rank traces built from one real H200 DDP trace, with one planted straggler.

Rank r's file is the source trace (tests/data/h200x2/ddp_healthy rank 0) with its `distributedInfo`
rank and world size and every collective's group size set to N; on the planted rank every NCCL
kernel starts and ends `late_us` later (it arrives late, its calls take as long as before); on
every other rank every NCCL kernel ends `late_us` later (it waits that long for the planted rank).
Used by tests/test_ranks.py and bench/bench_ranks.py; nothing here imports gpucheckup.
"""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "data" / "h200x2" / "ddp_healthy" / "traces" / "rank0.json.gz"


def write_folder(folder: Path, n: int, planted: int, late_us: float = 20_000.0, source: Path = SOURCE) -> list[Path]:
    """Write rank0.json.gz .. rank{n-1}.json.gz into folder (gzip level 1); their paths."""
    with gzip.open(source, "rt") as f:
        base = json.load(f)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for r in range(n):
        doc = copy.deepcopy(base)
        doc["distributedInfo"].update(rank=r, world_size=n)
        for e in doc["traceEvents"]:
            args = e.get("args") or {}
            if "Group size" in args:
                args["Group size"] = n
            if e.get("cat") == "kernel" and "nccl" in e.get("name", "").lower():
                if r == planted:
                    e["ts"] += late_us
                else:
                    e["dur"] += late_us
        p = folder / f"rank{r}.json.gz"
        with gzip.open(p, "wt", compresslevel=1) as f:
            json.dump(doc, f, separators=(",", ":"))
        paths.append(p)
    return paths

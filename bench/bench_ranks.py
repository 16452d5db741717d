"""Benchmark: `gpucheckup analyze` of a folder of N synthetic ranks (a real H200 DDP trace, one planted
straggler: tests/synthetic_ranks.py), read in worker processes; peak memory of the main process and of
the largest worker, wall time, and whether the planted straggler is named.

The main process keeps each rank's report and compact cross-rank table (analysis/ranks.RankInput),
never a trace: its peak should grow by the reports' size per rank, not by a trace per rank. Peak RSS
comes from the operating system: getrusage(RUSAGE_SELF) in the analyzing process, RUSAGE_CHILDREN
(the largest worker) once its workers are gone.

Usage: python bench/bench_ranks.py [--ranks 48,128] [--jobs 1,2] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from synthetic_ranks import write_folder  # noqa: E402

RUNNER = """
import json, resource, sys
from gpucheckup.cli import main
code = main(sys.argv[1:])  # not `python -m gpucheckup`: that ends the process at once, before the figures
self_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
child_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"code": code, "self_mib": self_kb / 1024, "worker_mib": child_kb / 1024}), file=sys.stderr)
"""


def measure(folder: Path, jobs: int, out: Path) -> dict:
    """One `analyze` of the folder: exit code, peak RSS of the main process and of the largest worker, wall time."""
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "XDG_CACHE_HOME": str(out.parent / "cache")}
    res = subprocess.run([sys.executable, "-c", RUNNER, "analyze", str(folder), "--jobs", str(jobs), "--quiet",
                          "--json", str(out)], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    figures = json.loads(res.stderr.strip().splitlines()[-1])
    return {**figures, "wall_s": wall}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="48,128")
    ap.add_argument("--jobs", default="1,2", help="worker counts to run each folder with (1: in one process)")
    ap.add_argument("--workdir", type=Path, default=None)
    args = ap.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench-ranks-"))
    print(f"{'ranks':>6} {'MB on disk':>10} {'jobs':>5} {'wall s':>7} {'main peak MiB':>14} {'worker peak MiB':>16} "
          "straggler")
    for n in (int(x) for x in args.ranks.split(",")):
        folder = work / f"ranks{n}"
        planted = n * 3 // 5
        if not (folder / f"rank{n - 1}.json.gz").exists():
            write_folder(folder, n, planted)
        mb = sum(p.stat().st_size for p in folder.iterdir()) / 1e6
        for jobs in (int(x) for x in args.jobs.split(",")):
            out = work / f"ranks{n}-jobs{jobs}.json"
            m = measure(folder, jobs, out)
            found = json.loads(out.read_text())["job"]["ranks"]["straggler"] if m["code"] in (0, None) else None
            print(f"{n:>6} {mb:>10.1f} {jobs:>5} {m['wall_s']:>7.1f} {m['self_mib']:>14.0f} {m['worker_mib']:>16.0f} "
                  f"{found} (planted {planted})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

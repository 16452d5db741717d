"""Benchmark: wall time and peak memory of a full check-up of a large real trace, against HTA.

Usage: python bench/bench_analyze.py [TRACE] [--repeat N]
Default trace: the shared H200 fixture `launch_bound_stacks` (61 MB of JSON, Python stacks).
HTA (pip install HolisticTraceAnalysis) runs in the same process when installed: only its
TraceAnalysis parse, which every HTA analysis needs first (its temporal breakdown fails an
internal assertion on this trace in HTA 0.5.0), so the ratio flatters HTA.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT = REPO.parent / "shared" / "fixtures" / "h200" / "launch_bound_stacks" / "trace.json.gz"


def run_gpucheckup(path: Path) -> None:
    from gpucheckup.analysis.checkup import analyze
    from gpucheckup.diagnosis import diagnose
    from gpucheckup.report.model import checkup_dict
    from gpucheckup.trace import read_trace

    a = analyze(read_trace(path))
    checkup_dict(a, diagnose(a))


def run_hta(path: Path) -> None:
    import logging

    from hta.trace_analysis import TraceAnalysis

    logging.getLogger("hta").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as d:
        shutil.copy(path, Path(d) / "rank-0.json.gz")
        TraceAnalysis(trace_dir=d)


def measure(fn, path: Path, repeat: int) -> tuple[float, float]:
    """Median wall seconds over `repeat` runs, and peak traced memory (MB) of one run."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn(path)
        times.append(time.perf_counter() - t)
    tracemalloc.start()
    fn(path)
    peak = tracemalloc.get_traced_memory()[1] / 1e6
    tracemalloc.stop()
    return statistics.median(times), peak


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace", nargs="?", type=Path, default=DEFAULT)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    if not args.trace.exists():
        print(f"trace not found: {args.trace}", file=sys.stderr)
        return 2
    rows = [("gpucheckup", *measure(run_gpucheckup, args.trace, args.repeat))]
    try:
        import hta  # noqa: F401

        rows.append(("HTA (parse)", *measure(run_hta, args.trace, max(1, args.repeat // 2))))
    except ImportError:
        print("(HTA not installed: pip install HolisticTraceAnalysis to compare)")
    size = args.trace.stat().st_size / 1e6
    print(f"trace: {args.trace} ({size:.1f} MB on disk)")
    print(f"{'tool':<14}{'wall s (median)':>18}{'peak MB (traced)':>18}{'time vs gpucheckup':>20}")
    base = rows[0][1]
    for name, wall, peak in rows:
        print(f"{name:<14}{wall:>18.2f}{peak:>18.0f}{wall / base:>19.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

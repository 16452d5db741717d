"""Benchmark: what each export costs on top of a JSON-only check-up of the same trace.

Paired whole-process runs, A and B in turn: A is `gpucheckup analyze TRACE --json OUT`, B the same with one
export more (`--perfetto OUT.json.gz`, `--perfetto OUT.json`, `--html`, `--markdown`); each pair's B/A ratio of
CPU seconds (user + system, from os.wait4, the process and the children it waited for) and of peak RSS, then
the median and range of the ratios. Ratios taken pair by pair hold on a loaded machine, where seconds do not.

The traces: `launch_bound_stacks` from the H200 fixtures ($GPUCHECKUP_FIXTURES, else ../shared/fixtures/h200
beside the repository), tiled K times with bench/scale_trace.py into --workdir; from a plain clone, the bundled
`compute_bound` instead (said in a note).

Usage (from a clone, after `pip install -e .`):
    python bench/bench_exports.py [--sizes 1,16] [--repeat 5] [--exports perfetto.gz,perfetto,html,markdown]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_analyze import BENCH, SMALL, big_trace, load, run, source_env  # noqa: E402

EXPORTS = {"perfetto.gz": ["--perfetto", "{d}/out.json.gz"], "perfetto": ["--perfetto", "{d}/out.json"],
           "html": ["--html", "{d}/out.html"], "markdown": ["--markdown", "{d}/out.md"]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1,16", help="tiling factors of the trace (default 1,16)")
    p.add_argument("--repeat", type=int, default=5, help="pairs per export and size (default 5)")
    p.add_argument("--exports", default=",".join(EXPORTS), help=f"any of {', '.join(EXPORTS)}")
    p.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "gpucheckup-bench")
    args = p.parse_args()
    name, big = big_trace(f"{SMALL} instead")
    env = source_env()
    gc = [sys.executable, "-m", "gpucheckup"]
    args.workdir.mkdir(parents=True, exist_ok=True)
    run(gc + ["--help"], env)  # compiles the bytecode once, as an installed package has it
    print(f"{os.cpu_count()} cores; B/A per pair, median (min-max) of {args.repeat} pairs; A = analyze --json")
    print(f"{'K':>4} {'export':<12} {'A cpu s':>8} {'B cpu s':>8} {'B/A cpu':>20} {'A MB':>6} {'B MB':>6} "
          f"{'B/A RSS':>20}  load")
    with tempfile.TemporaryDirectory() as d:
        for k in [int(x) for x in args.sizes.split(",") if x]:
            path = big if k == 1 else args.workdir / f"{name}_x{k}.json.gz"
            if not path.exists():
                subprocess.run([sys.executable, str(BENCH / "scale_trace.py"), str(big), str(k), str(path)],
                               check=True, stdout=subprocess.DEVNULL)
            a_cmd = gc + ["analyze", str(path), "--quiet", "--json", f"{d}/a.json"]
            for name in args.exports.split(","):
                b_cmd = a_cmd + [x.format(d=d) for x in EXPORTS[name]]
                before, pairs = load(), []
                for _ in range(args.repeat):
                    pairs.append((run(a_cmd, env), run(b_cmd, env)))
                cpu = [b.cpu / a.cpu for a, b in pairs]
                rss = [b.rss_mb / a.rss_mb for a, b in pairs]
                print(f"{k:>3}x {name:<12} {statistics.median(a.cpu for a, _ in pairs):8.2f} "
                      f"{statistics.median(b.cpu for _, b in pairs):8.2f} "
                      f"{statistics.median(cpu):6.2f} ({min(cpu):.2f}-{max(cpu):.2f}) "
                      f"{statistics.median(a.rss_mb for a, _ in pairs):6.0f} "
                      f"{statistics.median(b.rss_mb for _, b in pairs):6.0f} "
                      f"{statistics.median(rss):6.2f} ({min(rss):.2f}-{max(rss):.2f})  {before} -> {load()}",
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

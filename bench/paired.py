"""Benchmark: one source tree against another on one trace, as paired whole-process runs taken A and B in turn.

Each pair runs `gpucheckup analyze TRACE --quiet --jobs 1 --json OUT` with A's source tree, then with B's (the
order alternates pair by pair, so that neither always runs second); each run's wall and CPU seconds (user +
system, os.wait4) and peak RSS. Printed: both sides' medians, and the B/A ratios taken pair by pair (median and
range), which hold on a loaded machine where seconds do not. The two JSON documents are compared too: a speed
change must change no check-up (bench/same_checkups.py does that for every real trace). With --floor, each pair
also runs the decode floor (bench/floor.py) just before it, and each side's CPU over the floor is printed, taken
run by run against the floor run of its own pair (the floor's CPU moves with the machine as the check-up's does).

Usage (from a clone, after `pip install -e .`):
    python bench/paired.py TRACE OLD_SRC [NEW_SRC] [--repeat 3] [--jobs 1] [--floor]
  OLD_SRC, NEW_SRC: a `src` folder (NEW_SRC defaults to this checkout's), e.g. from
  `git archive HEAD~3 | tar -x -C old` then old/src. TRACE: e.g. a tiled trace from bench/scale_trace.py.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_analyze import REPO, Run, load, run  # noqa: E402


def env_for(src: str) -> dict:
    """The environment of a timed child reading gpucheckup from `src`, bytecode cached."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(Path(src).resolve())
    return env


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace", type=Path)
    p.add_argument("old_src")
    p.add_argument("new_src", nargs="?", default=str(REPO / "src"))
    p.add_argument("--repeat", type=int, default=3, help="pairs (default 3)")
    p.add_argument("--jobs", default="1", help="analyze --jobs (default 1: all the CPU in one process)")
    p.add_argument("--floor", action="store_true", help="run the decode floor in each pair too, and print CPU over it")
    args = p.parse_args()
    py = sys.executable
    sides = {"A": env_for(args.old_src), "B": env_for(args.new_src)}
    runs: dict[str, list[Run]] = {"A": [], "B": []}
    floors: list[Run] = []
    same = True
    with tempfile.TemporaryDirectory() as d:
        for side, env in sides.items():  # compiles each tree's bytecode once, as an installed package has it
            run([py, "-m", "gpucheckup", "--help"], env)
        before = load()
        for i in range(args.repeat):
            docs = {}
            if args.floor:
                floors.append(run([py, str(Path(__file__).parent / "floor.py"), str(args.trace)], sides["A"]))
            for side in ("A", "B") if i % 2 == 0 else ("B", "A"):
                out = Path(d) / f"{side}.json"
                runs[side].append(run([py, "-m", "gpucheckup", "analyze", str(args.trace), "--quiet", "--jobs",
                                       args.jobs, "--json", str(out)], sides[side]))
                docs[side] = out.read_bytes()
            same = same and docs["A"] == docs["B"]
    after = load()
    a, b = runs["A"], runs["B"]
    print(f"{os.cpu_count()} cores; {args.trace.name}; {args.repeat} pairs, A and B in turn; load {before} -> {after}")
    print(f"A: {args.old_src}\nB: {args.new_src}")
    for what, key in (("CPU s", "cpu"), ("wall s", "wall"), ("peak RSS MB", "rss_mb")):
        ra = [getattr(x, key) for x in a]
        rb = [getattr(x, key) for x in b]
        ratio = [y / x for x, y in zip(ra, rb)]
        print(f"{what:<12} A {statistics.median(ra):8.2f}  B {statistics.median(rb):8.2f}  B/A "
              f"{statistics.median(ratio):.3f} ({min(ratio):.3f}-{max(ratio):.3f})")
    if floors:
        fc = [f.cpu for f in floors]
        print(f"{'floor CPU s':<12}   {statistics.median(fc):8.2f}  ({min(fc):.2f}-{max(fc):.2f}), peak RSS "
              f"{statistics.median(f.rss_mb for f in floors):.0f} MB")
        for side, rs in (("A", a), ("B", b)):
            over = [r.cpu / f for r, f in zip(rs, fc)]
            print(f"{side} CPU / floor CPU, pair by pair: {statistics.median(over):.2f}x "
                  f"({min(over):.2f}-{max(over):.2f}); of the medians {statistics.median(r.cpu for r in rs) / statistics.median(fc):.2f}x")
    print("JSON documents: " + ("byte-identical" if same else "DIFFER"))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

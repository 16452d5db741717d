"""Benchmark: does any stage of a check-up grow faster than the trace? CPU per million events, 1x to 64x.

The `launch_bound_stacks` H200 trace (215k events) is tiled K times (bench/scale_trace.py: K times the
steps, the same per-step behaviour), and each size is checked up as a user runs it, in one process
(`gpucheckup analyze TRACE --quiet --jobs 1 --json OUT`: no second process, so all the CPU is in one place):
- whole-process runs, the check-up and the decode floor (bench/floor.py) in turn, --repeat times: CPU
  seconds (user + system, os.wait4) per million events, medians, and the check-up over the floor;
- one run under cProfile per size (Python functions only: a C function's time counts in its caller's): each
  function's own time, library Python code's given to the gpucheckup functions that called it (in
  proportion to each caller's share), summed per module of ours (a stage). cProfile slows Python code more
  than C code, so these seconds are inflated; their shares, compared across sizes, are what the table is for.
A stage is flagged GROWS when its share of the whole at the largest size is more than --tolerance (default
1.15) times its share at the second size (4x by default: 1x still carries start-up; of two sizes, the first), and
it takes at least 1% of the largest run; the flagged stages' top functions are listed. Linear work gives a flat row
of CPU per million events where the machine runs every size at one speed; where it does not (a process of 1-2 GB misses
the CPU caches more: the floor's own CPU per million events, printed, shows how much), every row rises
together and the shares still tell a stage that grows faster than the rest.

A size is run only where the memory it needs is available now (MemAvailable, Linux): the check-up's and the
floor's peak RSS per million events measured at the smaller sizes, times its events, with a quarter to spare;
the floor alone is skipped where only the check-up fits (it holds every decoded event: ~0.8 GB per million),
the whole size where neither does; either is said in a note. 64x of launch_bound_stacks is 13.8M events (3.4 GB
of JSON, 0.7 GB gzipped): the check-up peaks ~2.2 GB, the floor ~11 GB.

The trace: $GPUCHECKUP_FIXTURES, else ../shared/fixtures/h200 beside the repository; from a plain clone,
the bundled `compute_bound` (45k events) is tiled instead. Tiled traces are written once to --workdir
(32x of launch_bound_stacks: 6.9M events, 1.7 GB of JSON, 0.34 GB gzipped; the check-up peaks ~1.1 GB).

Usage (from a clone, after `pip install -e .`):
    python bench/scaling.py [--sizes 1,4,8,16,32,64] [--repeat 2] [--tolerance 1.15] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_analyze import BENCH, REPO, SMALL, big_trace, load, run, source_env  # noqa: E402

SRC = str(REPO / "src" / "gpucheckup") + os.sep
PROFILED = """
import cProfile, sys, time
from gpucheckup.cli import main
# CPU time of the process (the gunzip thread's too), not wall time; a C function's counts in its Python caller's
prof = cProfile.Profile(time.process_time, builtins=False)
prof.runcall(main, sys.argv[2:])
prof.dump_stats(sys.argv[1])
"""


def attributed(stats_file: Path) -> dict[tuple[str, int, str], float]:
    """Own CPU seconds per gpucheckup function, with the C functions and library code it called folded in."""
    stats = pstats.Stats(str(stats_file)).stats  # func -> (cc, nc, tt, ct, callers: {caller: (cc, nc, tt, ct)})
    ours = lambda f: f[0].startswith(SRC)  # noqa: E731
    memo: dict = {}

    def shares(f, depth=0) -> dict:
        """How f's own time divides among gpucheckup functions up its callers (fractions summing to <= 1)."""
        if ours(f):
            return {f: 1.0}
        if f in memo or depth > 30:
            return memo.get(f, {})
        memo[f] = {}  # a cycle adds nothing
        callers = stats[f][4]
        total = sum(c[2] for c in callers.values())
        out: dict = defaultdict(float)
        for caller, c in callers.items():
            if total > 0 and caller in stats:
                for g, w in shares(caller, depth + 1).items():
                    out[g] += w * c[2] / total
        memo[f] = dict(out)
        return memo[f]

    own: dict = defaultdict(float)
    for f, (_, _, tt, _, _) in stats.items():
        got = shares(f)
        for g, w in got.items():
            own[g] += tt * w
        if not got:
            own[("(interpreter, imports, libraries)", 0, "")] += tt
    return own


def _events_at(counts: dict[int, int], k: int) -> int:
    """Events in the K-times tiling from two counted sizes (metadata once, the timed events K times), else from
    one (as if all were timed); 0 before any is counted."""
    if len(counts) >= 2:
        (a, na), (b, nb) = sorted(counts.items())[:2]
        timed = (nb - na) // (b - a)
        return na + (k - a) * timed
    return next(iter(counts.values())) * k // next(iter(counts)) if counts else 0


def _fits(mb_per_m: float, n: int, room: float | None) -> bool:
    """Whether a process of `mb_per_m` MB per million events fits, on `n` events, in `room` MB (a quarter spare)."""
    return not n or room is None or mb_per_m * n / 1e6 * 1.25 < room


def available_mb() -> float | None:
    """Memory available to a new process now (MB; MemAvailable on Linux), None where it cannot be told."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def stage(f: tuple[str, int, str]) -> str:
    """The module of ours a function is in, as a path under src/gpucheckup."""
    return f[0][len(SRC):] if f[0].startswith(SRC) else f[0]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1,4,8,16,32,64")
    p.add_argument("--repeat", type=int, default=2, help="whole-process runs per size (default 2)")
    p.add_argument("--tolerance", type=float, default=1.15)
    p.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "gpucheckup-bench")
    args = p.parse_args()
    sizes = [int(x) for x in args.sizes.split(",") if x]
    name, src = big_trace(f"tiling {SMALL}")
    env = source_env()
    py = sys.executable
    args.workdir.mkdir(parents=True, exist_ok=True)
    run([py, "-m", "gpucheckup", "--help"], env)  # compiles the bytecode once, as an installed package has it
    print(f"{os.cpu_count()} cores; {name} tiled K times; CPU s per million events (whole process, median of "
          f"{args.repeat}), the check-up over the decode floor, peak RSS per million events")
    print(f"{'K':>4} {'events':>9} {'floor':>7} {'ours':>7} {'ours/floor':>10} {'MB/M ev':>8}  load")
    per_stage: dict[int, dict[str, float]] = {}
    top: dict[int, dict] = {}
    events: dict[int, int] = {}
    floor_m: dict[int, float] = {}
    cpu_m: dict[int, float] = {}
    done: list[int] = []  # the sizes run
    with tempfile.TemporaryDirectory() as d:
        counts: dict[int, int] = {}  # events at each size the floor counted
        ours_mb_m, floor_mb_m = 300.0, 900.0  # peak RSS, MB per million events (raised as measured)
        for k in sizes:
            path = src if k == 1 else args.workdir / f"{name}_x{k}.json.gz"
            n = counts.get(k) or _events_at(counts, k)
            room = available_mb()
            if not _fits(ours_mb_m, n, room):
                print(f"{k:>3}x skipped: needs ~{ours_mb_m * n / 1e6:.0f} MB, {room:.0f} MB available", flush=True)
                continue
            if k > 1 and not path.exists():
                subprocess.run([py, str(BENCH / "scale_trace.py"), str(src), str(k), str(path)], check=True,
                               stdout=subprocess.DEVNULL)
            with_floor = _fits(floor_mb_m, n, room)
            cmd = [py, "-m", "gpucheckup", "analyze", str(path), "--quiet", "--jobs", "1", "--json", f"{d}/c.json"]
            before, floor, ours = load(), [], []
            for _ in range(args.repeat):
                if with_floor:
                    floor.append(run([py, str(BENCH / "floor.py"), str(path)], env))
                ours.append(run(cmd, env))
            if floor:
                n = counts[k] = int(floor[0].out.split()[0])
                floor_mb_m = max(floor_mb_m, statistics.median(r.rss_mb for r in floor) / n * 1e6)
            events[k] = n
            o = statistics.median(r.cpu for r in ours)
            f = statistics.median(r.cpu for r in floor) if floor else float("nan")
            floor_m[k], cpu_m[k] = f / n * 1e6, o / n * 1e6
            rss = statistics.median(r.rss_mb for r in ours)
            ours_mb_m = max(ours_mb_m, rss / n * 1e6) if k > 1 else ours_mb_m  # 1x: start-up dominates
            print(f"{k:>3}x {n:>9} {f / n * 1e6:7.2f} {o / n * 1e6:7.2f} {o / f:9.2f}x {rss / n * 1e6:8.0f}  "
                  f"{before} -> {load()}" + ("" if floor else f"  (floor skipped: needs ~{floor_mb_m * n / 1e6:.0f} "
                                              f"MB, {room:.0f} MB available)"), flush=True)
            prof = Path(d) / f"x{k}.prof"
            run([py, "-c", PROFILED, str(prof)] + cmd[3:], env)
            own = attributed(prof)
            top[k] = own
            by: dict[str, float] = defaultdict(float)
            for fn, t in own.items():
                by[stage(fn)] += t
            per_stage[k] = dict(by)
            done.append(k)

    sizes = done
    ref, last = (sizes[1] if len(sizes) > 2 else sizes[0]), sizes[-1]  # of two sizes, the smaller
    total = {k: sum(v.values()) for k, v in per_stage.items()}
    print(f"\nstages under cProfile: CPU s per million events (inflated; compare across a row), the growth of that "
          f"from {ref}x to {last}x, the share of the run; GROWS: the share at {last}x over {args.tolerance}x that at {ref}x")
    print(f"{'stage':<44}" + "".join(f"{f'{k}x':>8}" for k in sizes) + f"{f'{last}x/{ref}x':>10}"
          + f"{f'share {ref}x':>11}{f'{last}x':>7}")
    stages = sorted(per_stage[last], key=lambda s: -per_stage[last][s])
    flagged = []
    for s in stages:
        row = [per_stage[k].get(s, 0.0) / events[k] * 1e6 for k in sizes]
        share, share_ref = per_stage[last][s] / total[last], per_stage[ref].get(s, 0.0) / total[ref]
        growth = row[-1] / row[sizes.index(ref)] if row[sizes.index(ref)] > 0 else float("inf")
        grows = share > args.tolerance * share_ref and share >= 0.01
        if share >= 0.005 or grows:
            print(f"{s[-44:]:<44}" + "".join(f"{v:8.3f}" for v in row) + f"{growth:9.2f}x"
                  f"{100 * share_ref:10.1f}%{100 * share:6.1f}%" + ("  GROWS" if grows else ""))
        if grows:
            flagged.append(s)
    row = [total[k] / events[k] * 1e6 for k in sizes]
    print(f"{'all':<44}" + "".join(f"{v:8.3f}" for v in row) + f"{row[-1] / row[sizes.index(ref)]:9.2f}x")
    print(f"whole process, CPU per million events {last}x over {ref}x: check-up {cpu_m[last] / cpu_m[ref]:.2f}x, "
          f"decode floor {floor_m[last] / floor_m[ref]:.2f}x")
    for s in flagged:
        fns = sorted((f for f in top[last] if stage(f) == s), key=lambda f: -top[last][f])[:5]
        print(f"  {s}: " + ", ".join(
            f"{f[2]} {top[last][f] / events[last] * 1e6:.3f} ({top[ref].get(f, 0.0) / events[ref] * 1e6:.3f} "
            f"at {ref}x)" for f in fns))
    print(f"{len(flagged)} stage(s) grow faster than the trace" if flagged else "every stage linear")
    return 1 if flagged else 0


if __name__ == "__main__":
    sys.exit(main())

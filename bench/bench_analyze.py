"""Benchmark: `gpucheckup analyze` against the decode floor and HTA, 1x..16x a real trace and a folder of ranks.

One command, one run: every row's commands are run in turn (floor, gpucheckup, HTA, floor, ...) as
whole processes, and each one's wall time, CPU time (user + system) and peak RSS come from the
operating system (os.wait4). Medians over --repeat runs. The rows:
- 1x..20x: the `launch_bound_stacks` H200 trace (215k events, 64 MB of JSON) tiled K times
  (bench/scale_trace.py, compact JSON); 16x is 3.4M events (840 MB of JSON, gzipped), 20x is 4.3M
  events written as 1.05 GB of plain JSON.
- the decode floor (bench/floor.py): gunzip + msgspec typed decode of the fields gpucheckup reads.
- HTA (HolisticTraceAnalysis, its TraceAnalysis parse only: bench/hta_parse.py), run with the Python
  of its own environment: the repository's ignored .hta-venv/ (`--setup-hta` creates it and installs HTA
  from PyPI, as `python bench/hta_parse.py --setup` does), or --hta-python / $HTA_PYTHON; skipped with a
  note when absent; by default only at 1x (it grows with the square of the events).
- a folder of --ranks copies of the `compute_bound` trace (1 MB each), `analyze` on the folder.
- a 1 MB trace (`compute_bound`) checked up end to end, and `gpucheckup --help`.
Each row ends with the machine's load average (1 minute) before and after it: on a shared machine wall
times inflate with the load, CPU seconds much less, and ratios of CPU seconds least.

The traces: the H200 fixtures folder in $GPUCHECKUP_FIXTURES, else ../shared/fixtures/h200 beside the
repository, else the traces bundled with the package (src/gpucheckup/data/demo) and tests/data/h200. Those
lack launch_bound_stacks: from a plain clone the size rows tile the bundled `compute_bound` instead (45k
events, 15 MB of JSON; said in a note). Scaled traces are written once to --workdir.

Usage (from a clone, after `pip install -e .`):
    python bench/bench_analyze.py [--sizes 1,2,4,8,16] [--ranks 32] [--repeat 3] [--setup-hta]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
sys.path.insert(0, str(BENCH))
import hta_parse  # noqa: E402
BIG = "launch_bound_stacks"
SMALL = "compute_bound"
PLAIN = 20  # this tiling is written as plain JSON: 1.05 GB, the "1 GB JSON trace" row


def fixture_dirs() -> list[Path]:
    """Where real traces are looked for, in order: $GPUCHECKUP_FIXTURES, beside the repository, in it."""
    env = os.environ.get("GPUCHECKUP_FIXTURES")
    return [Path(p) for p in ([env] if env else [])] + [
        REPO.parent / "shared" / "fixtures" / "h200", REPO / "src" / "gpucheckup" / "data" / "demo",
        REPO / "tests" / "data" / "h200"]


def source_env() -> dict:
    """The environment for a timed child: this checkout's src/ first, bytecode cached as an installed package has it."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(REPO / "src")
    return env


def big_trace(instead: str) -> tuple[str, Path]:
    """The BIG fixture trace (its name and path), else SMALL's, saying so (`instead`: what is done with it)."""
    path = find_fixture(BIG)
    if path is not None:
        return BIG, path
    print(f"note: no {BIG} trace (set GPUCHECKUP_FIXTURES to the H200 fixtures folder): {instead}")
    return SMALL, find_fixture(SMALL)


def find_fixture(case: str) -> Path | None:
    for d in fixture_dirs():
        if (d / case / "trace.json.gz").is_file():
            return d / case / "trace.json.gz"
    return None


@dataclass
class Run:
    wall: float
    cpu: float
    rss_mb: float
    out: str


def run(cmd: list[str], env: dict) -> Run:
    """One whole-process run: wall seconds, CPU seconds (user + sys), peak RSS (MB), standard output."""
    with tempfile.TemporaryFile() as out:
        t = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL, env=env)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode(errors="replace")
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}")
    return Run(wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024, text)


def load() -> str:
    """The 1-minute load average, as `uptime` prints it."""
    return f"{os.getloadavg()[0]:.1f}"


def median(runs: list[Run]) -> Run:
    return Run(statistics.median(r.wall for r in runs), statistics.median(r.cpu for r in runs),
               statistics.median(r.rss_mb for r in runs), runs[0].out)


def measure(cmds: dict[str, list[str]], env: dict, repeat: int) -> dict[str, Run]:
    """Median of `repeat` runs of each command, taken in turn (A B C A B C ...)."""
    runs: dict[str, list[Run]] = {k: [] for k in cmds}
    for _ in range(repeat):
        for k, cmd in cmds.items():
            runs[k].append(run(cmd, env))
    return {k: median(v) for k, v in runs.items()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1,2,4,8,16,20",
                   help="tiling factors of the big trace (default 1,2,4,8,16,20; 20 is written as plain JSON: 1 GB)")
    p.add_argument("--ranks", type=int, default=32, help="ranks in the folder row (0: skip)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--hta-python", default=os.environ.get("HTA_PYTHON", str(hta_parse.venv_python())),
                   help="the Python of an environment with HTA (default: the repository's .hta-venv)")
    p.add_argument("--setup-hta", action="store_true", help="create .hta-venv and install HTA into it first")
    p.add_argument("--hta-max-size", type=int, default=1, help="largest tiling HTA is run on (default 1)")
    p.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "gpucheckup-bench")
    args = p.parse_args()

    env = source_env()
    py = sys.executable
    gc = [py, "-m", "gpucheckup"]
    hta = hta_parse.setup() if args.setup_hta else Path(args.hta_python)
    has_hta = hta.exists() and subprocess.run([str(hta), "-c", "import hta"], capture_output=True).returncode == 0
    args.workdir.mkdir(parents=True, exist_ok=True)
    run(gc + ["--help"], env)  # a warm-up: compiles the bytecode once, as an installed package has it

    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, {platform.python_implementation()} "
          f"{platform.python_version()}, {platform.platform()}")
    print(f"rows: median of {args.repeat} whole-process runs; wall s / CPU s / peak RSS MB; load: the 1-minute "
          f"load average before -> after the row ({os.cpu_count()} cores)\n")
    big, small = find_fixture(BIG), find_fixture(SMALL)
    name = BIG
    if big is None:
        big, name = small, SMALL
        print(f"note: no {BIG}/trace.json.gz under {', '.join(map(str, fixture_dirs()))}: the size rows tile "
              f"{SMALL} instead (set GPUCHECKUP_FIXTURES to the H200 fixtures folder for {BIG})")
    if not has_hta:
        print(f"note: HTA not found at {hta}: HTA columns skipped (--setup-hta installs it under .hta-venv/; "
              "or --hta-python)")

    print(f"trace: {name} tiled K times ({big})" if big else "")
    header = (f"{'K':<22}{'events':>9}{'JSON MB':>9} | {'floor':>17} | {'gpucheckup analyze':>19} | "
              f"{'vs floor':>14} | {'MB/M ev':>7} | {'HTA parse':>18} | {'HTA/ours':>15} | load")
    print(header)
    print("-" * len(header))
    fmt = lambda r: f"{r.wall:5.2f} {r.cpu:5.2f} {r.rss_mb:5.0f}"  # noqa: E731
    for k in [int(x) for x in args.sizes.split(",") if x] if big else []:
        path = big if k == 1 else args.workdir / f"{name}_x{k}.json{'' if k == PLAIN else '.gz'}"
        if not path.exists():
            subprocess.run([py, str(BENCH / "scale_trace.py"), str(big), str(k), str(path)], check=True,
                           stdout=subprocess.DEVNULL)
        cmds = {"floor": [py, str(BENCH / "floor.py"), str(path)], "ours": gc + ["analyze", str(path)]}
        if has_hta and k <= args.hta_max_size:
            cmds["hta"] = [str(hta), str(BENCH / "hta_parse.py"), str(path)]
        before = load()
        m = measure(cmds, env, args.repeat)
        events = int(m["floor"].out.split()[0])
        json_mb = float(m["floor"].out.split()[1]) / 1e6
        f, o = m["floor"], m["ours"]
        row = (f"{f'{k}x' + (' (plain JSON)' if k == PLAIN else ''):<22}{events:>9}{json_mb:>9.0f} | {fmt(f)} | {fmt(o):>19} | "
               f"{o.wall / f.wall:5.2f}x {o.cpu / f.cpu:5.2f}x | {o.rss_mb / events * 1e6:7.0f} | ")
        row += (f"{fmt(m['hta']):>18} | {m['hta'].wall / o.wall:6.1f}x {m['hta'].cpu / o.cpu:6.1f}x"
                if "hta" in m else f"{'-':>18} | {'-':>15}")
        print(row + f" | {before} -> {load()}", flush=True)
    print("  (vs floor: wall ratio, CPU ratio; MB/M ev: peak RSS per million events; HTA/ours: wall, CPU)")
    if small is not None and args.ranks:
        folder = args.workdir / f"ranks{args.ranks}"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        for r in range(args.ranks):
            (folder / f"trace_rank{r}.json.gz").symlink_to(small)
        before = load()
        m = measure({"ours": gc + ["analyze", str(folder), "--quiet"]}, env, args.repeat)["ours"]
        print(f"\n{args.ranks} ranks of {SMALL} ({args.ranks} x {small.stat().st_size / 1e6:.1f} MB): "
              f"wall {m.wall:.2f} s, CPU {m.cpu:.2f} s (CPU/wall {m.cpu / m.wall:.2f} on {os.cpu_count()} cores), "
              f"peak RSS of the largest process {m.rss_mb:.0f} MB; load {before} -> {load()}")
    if small is not None:
        before = load()
        m = measure({"ours": gc + ["analyze", str(small)], "help": gc + ["--help"], "pass": [py, "-c", "pass"]},
                    env, max(args.repeat, 5))
        print(f"{SMALL} ({small.stat().st_size / 1e6:.1f} MB) checked up end to end: wall {m['ours'].wall:.3f} s, "
              f"CPU {m['ours'].cpu:.3f} s, {m['ours'].rss_mb:.0f} MB;  gpucheckup --help: wall {m['help'].wall:.3f} s, "
              f"CPU {m['help'].cpu:.3f} s;  python -c pass: wall {m['pass'].wall:.3f} s, CPU {m['pass'].cpu:.3f} s; "
              f"load {before} -> {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

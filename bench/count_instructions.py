"""Instructions a check-up executes, stage by stage (valgrind's callgrind): the figure a shared, loaded
machine does not move, where wall and CPU seconds swing 20-50% from run to run.

Usage: python bench/count_instructions.py TRACE [--src SRC ...] [--floor]
  TRACE: a trace file; --src: one or more `src` folders to compare (default: this checkout's);
  --floor: also count bench/floor.py (gunzip + typed decode) on the trace.
Each stage is one whole process run under callgrind that stops after that stage; a stage's figure is
its total less the previous stage's (the interpreter's start-up is the first). `analyze` is the whole
command, `gpucheckup analyze TRACE`, as a user runs it. Needs valgrind (apt-get install valgrind); each
run takes 30-80 times its normal time.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# One program; STAGE (argv[1]) says how far it goes. The stages are the pipeline's own steps for one trace
# (pipeline.check_trace), then the terminal report.
PROGRAM = """
import io, sys
n, path = int(sys.argv[1]), sys.argv[2]
if n >= 1:
    import gpucheckup.cli as cli
    cli.build_parser().parse_args(["analyze", path])
if n >= 2:
    cli._load_libraries()
    from rich.console import Console
if n >= 3:
    import gpucheckup.cli.emit, gpucheckup.checkup.pipeline as P
    from gpucheckup.analysis.flops.mfu import MfuInputs
if n >= 4:
    trace = P.read_trace(path)
if n >= 5:
    a = P.analyze(trace, P._inputs_for(trace, MfuInputs()), None, "", None)
if n >= 6:
    s = P.savings.predict(a)
if n >= 7:
    d = P.diagnose(a, s)
    report = P.checkup_dict(a, d)
if n >= 8:
    from gpucheckup.report.text import terminal
    terminal.render(report, Console(file=io.StringIO(), width=80, highlight=False))
"""
STAGES = ["interpreter start-up", "command line (import, parse)", "numpy and rich", "our modules",
          "read the trace", "analyses", "replay: graph and calibration",
          "diagnosis (the offered fixes' edits replayed) and report dict", "terminal report"]


def instructions(cmd: list[str], env: dict) -> int:
    """Instructions the command executed (all its threads), counted by callgrind."""
    p = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"] + cmd, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    m = re.search(r"Collected : (\d+)", p.stderr)
    if p.returncode != 0 or m is None:
        raise SystemExit(f"count_instructions: {' '.join(cmd)} failed (exit {p.returncode}): "
                         f"{p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ''}")
    return int(m.group(1))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace", type=Path)
    p.add_argument("--src", type=Path, nargs="+", default=[REPO / "src"])
    p.add_argument("--floor", action="store_true", help="also count bench/floor.py on the trace")
    args = p.parse_args()
    if shutil.which("valgrind") is None:
        print("count_instructions: valgrind not found (apt-get install valgrind)", file=sys.stderr)
        return 2
    base = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # bytecode cached, as installed
    counts: dict[Path, list[int]] = {}
    for src in args.src:
        env = {**base, "PYTHONPATH": str(src.resolve())}
        subprocess.run([sys.executable, "-m", "gpucheckup", "--help"], env=env, capture_output=True)  # compile once
        totals = [instructions([sys.executable, "-c", PROGRAM, str(n), str(args.trace)], env)
                  for n in range(len(STAGES))]
        totals.append(instructions([sys.executable, "-m", "gpucheckup", "analyze", str(args.trace)], env))
        counts[src] = totals
    print(f"{args.trace}: millions of instructions per stage")
    print(f"{'stage':32s}" + "".join(f"{str(s)[-28:]:>30s}" for s in args.src))
    for i, name in enumerate(STAGES):
        print(f"{name:32s}" + "".join(f"{(c[i] - (c[i - 1] if i else 0)) / 1e6:30.1f}" for c in counts.values()))
    print(f"{'gpucheckup analyze (whole)':32s}" + "".join(f"{c[-1] / 1e6:30.1f}" for c in counts.values()))
    if args.floor:
        floor = instructions([sys.executable, str(REPO / "bench" / "floor.py"), str(args.trace)], base)
        print(f"{'decode floor (bench/floor.py)':32s}{floor / 1e6:30.1f}")
        print(f"{'analyze / floor':32s}" + "".join(f"{c[-1] / floor:30.2f}" for c in counts.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

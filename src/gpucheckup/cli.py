"""The `gpucheckup` command line."""

from __future__ import annotations

import argparse
import sys
from importlib import resources
from pathlib import Path

import msgspec
from rich.console import Console

from gpucheckup import __version__
from gpucheckup.atomic import write_atomic  # noqa: F401 - also re-exported for callers of cli.write_atomic
from gpucheckup.checkup import Checkup, check_path, rank_summary
from gpucheckup.errors import CheckupError
from gpucheckup.report import terminal

EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 70
DEMO_CASES = ("input_bound", "launch_bound", "moe_seed", "compute_bound")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gpucheckup",
        description="A performance check-up for PyTorch GPU training: what bounds the job, the evidence, "
                    "and what to fix first.",
    )
    p.add_argument("--version", action="version", version=f"gpucheckup {__version__}")
    p.add_argument("--debug", action="store_true", help="show tracebacks instead of one-line errors")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    a = sub.add_parser("analyze", help="check up a PyTorch profiler trace (file or folder of per-rank traces) "
                                       "or a gpucheckup run directory")
    a.add_argument("path", type=Path, help="trace .json / .json.gz, a folder of them, or a run directory")
    _output_options(a)
    a.set_defaults(func=cmd_analyze)

    d = sub.add_parser("demo", help="check up real H200 traces bundled with gpucheckup (offline, no GPU)")
    d.add_argument("--case", choices=DEMO_CASES, action="append",
                   help="only this bundled case (repeatable); default: all of them")
    _output_options(d)
    d.set_defaults(func=cmd_demo)

    from gpucheckup.capture import attach, launcher

    launcher.add_parser(sub)
    attach.add_parser(sub)
    return p


def _output_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the check-up as JSON")
    p.add_argument("--quiet", action="store_true", help="no terminal report (with --json)")


def _emit(results: list[Checkup], args, console: Console) -> None:
    """Print and write what the options ask for."""
    if not args.quiet:
        if len(results) > 1:
            terminal.render_ranks(rank_summary(results), console)
        for c in results:
            terminal.render(c.report, console)
    if args.json:
        payload = results[0].report if len(results) == 1 else {
            "ranks": rank_summary(results), "reports": [c.report for c in results]}
        write_atomic(args.json, msgspec.json.format(msgspec.json.encode(payload), indent=2))
        console.print(f"JSON written to {args.json}", style="dim", markup=False)


def cmd_analyze(args, console: Console) -> int:
    from gpucheckup.trace.rundir import is_run_dir

    if is_run_dir(args.path):  # a gpucheckup run directory: traces plus the run-level parts
        from gpucheckup.run_checkup import check_run, emit_run

        emit_run(check_run(args.path), console, quiet=args.quiet, json_path=args.json)
        return 0
    results = check_path(args.path)
    _emit(results, args, console)
    return 0


def demo_trace(case: str) -> Path:
    """Path of a bundled demo trace."""
    return Path(str(resources.files("gpucheckup") / "data" / "demo" / case / "trace.json.gz"))


def cmd_demo(args, console: Console) -> int:
    cases = args.case or list(DEMO_CASES)
    console.print("gpucheckup demo: real PyTorch profiler traces captured on an NVIDIA H200, checked up offline.",
                  style="bold", markup=False)
    results = []
    for case in cases:
        results += check_path(demo_trace(case))
    if not args.quiet:
        from rich.table import Table

        t = Table(title="Bundled cases", title_justify="left")
        for col in ("case", "verdict", "GPU busy", "median step"):
            t.add_column(col)
        for case, c in zip(cases, results):
            t.add_row(case, c.diagnosis.primary, f"{c.report['gpu']['busy_pct']:.1f}%",
                      f"{c.report['steps']['median_ms']:.2f} ms")
        console.print(t)
        for case, c in zip(cases, results):
            console.rule(f"demo case: {case}")
            terminal.render(c.report, console)
    if args.json:
        payload = {case: c.report for case, c in zip(cases, results)}
        write_atomic(args.json, msgspec.json.format(msgspec.json.encode(payload), indent=2))
        console.print(f"JSON written to {args.json}", style="dim", markup=False)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = Console(highlight=False)
    try:
        return args.func(args, console)
    except CheckupError as e:
        _say(f"gpucheckup: error: {e}")
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        _say("gpucheckup: interrupted")
        return 130
    except Exception as e:  # noqa: BLE001 - one line, not a traceback, unless --debug
        if args.debug:
            raise
        _say(f"gpucheckup: internal error: {type(e).__name__}: {e} (run with --debug for details)")
        return EXIT_INTERNAL


def _say(line: str) -> None:
    """One unwrapped line on stderr."""
    sys.stderr.write(" ".join(line.split()) + "\n")


if __name__ == "__main__":
    sys.exit(main())

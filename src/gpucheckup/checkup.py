"""The whole check-up of a path: read each trace, analyze it, diagnose it, build its report dict."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from gpucheckup.analysis.checkup import TraceAnalysis, analyze
from gpucheckup.diagnosis import Diagnosis, diagnose
from gpucheckup.errors import CheckupError
from gpucheckup.report.model import checkup_dict
from gpucheckup.trace import find_trace_files, read_trace

STRAGGLER_PCT = 10.0  # a rank whose median step is this much slower than the fastest is a straggler


@dataclass
class Checkup:
    """One trace's analysis, diagnosis and report dict."""

    analysis: TraceAnalysis
    diagnosis: Diagnosis
    report: dict


def trace_paths(path: Path) -> list[Path]:
    """The trace files a path names: the file itself, or the traces in a folder."""
    if not path.exists():
        raise CheckupError(f"{path}: no such file or folder")
    if path.is_dir():
        files = find_trace_files(path)
        if not files:
            raise CheckupError(f"{path}: no trace files (*.json, *.json.gz) in this folder")
        return files
    return [path]


def check_path(path: Path, console: Console | None = None) -> list[Checkup]:
    """Check up every trace under a path, in rank order."""
    files = trace_paths(path)
    results = []
    console = console or Console(stderr=True)
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as progress:
        task = progress.add_task("reading traces", total=len(files))
        for f in files:
            size_mb = f.stat().st_size / 1e6
            progress.update(task, description=f"reading {f.name} ({size_mb:.1f} MB)")
            trace = read_trace(f)
            progress.update(task, description=f"analyzing {f.name}")
            a = analyze(trace)
            d = diagnose(a)
            results.append(Checkup(a, d, checkup_dict(a, d)))
            progress.advance(task)
    results.sort(key=lambda c: (c.analysis.trace.rank is None, c.analysis.trace.rank or 0, c.analysis.trace.path))
    if len(results) > 1:
        _note_stragglers(results)
    return results


def rank_summary(results: list[Checkup]) -> list[dict]:
    """One row per trace: rank, verdict, median step, GPU busy."""
    return [
        {
            "rank": c.analysis.trace.rank if c.analysis.trace.rank is not None else i,
            "path": c.analysis.trace.path,
            "verdict": c.diagnosis.primary,
            "step_median_ms": c.report["steps"]["median_ms"],
            "busy_pct": c.report["gpu"]["busy_pct"],
        }
        for i, c in enumerate(results)
    ]


def _note_stragglers(results: list[Checkup]) -> None:
    """Add a note to every report when one rank's steps are much slower than the fastest rank's."""
    rows = rank_summary(results)
    fastest = min(r["step_median_ms"] for r in rows)
    slow = [r for r in rows if r["step_median_ms"] > fastest * (1 + STRAGGLER_PCT / 100)]
    for r in slow:
        note = (f"rank {r['rank']} is a straggler: median step {r['step_median_ms']:.2f} ms against "
                f"{fastest:.2f} ms on the fastest rank; every rank waits for it at the next collective")
        for c in results:
            c.report["notes"].append(note)

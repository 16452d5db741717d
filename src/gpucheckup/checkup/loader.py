"""`gpucheckup dataloader`: measure the user's loader alone, put the GPU's step time beside it, advise.

Measuring is capture/dataloader_bench.py's, the advice analysis/run_logs/loader_advice.py's, the view
report/text/terminal_loader.py's; this module joins them and reads the GPU's step time from a
check-up (a JSON report, a run directory or a trace, checked up here).
"""

from __future__ import annotations

from pathlib import Path

import msgspec
from rich.console import Console

from gpucheckup.analysis.run_logs.environment import usable_cores
from gpucheckup.analysis.run_logs.loader_advice import Rate, advise, step_without_data
from gpucheckup.atomic import write_atomic
from gpucheckup.document import measured
from gpucheckup.errors import CheckupError
from gpucheckup.report import json_doc
from gpucheckup.safe_text import safe

PIN_CHOICES = {"false": (False,), "true": (True,), "both": (False, True)}


def parse_workers(text: str) -> list[int]:
    """`0,2,4` -> [0, 2, 4]; CheckupError for anything else."""
    try:
        out = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise CheckupError(f"--workers: expected comma-separated counts like 0,2,4,8, got {text!r}") from None
    if not out or out[0] < 0:
        raise CheckupError(f"--workers: expected counts of 0 or more, got {text!r}")
    return out


def gpu_step_for(path: Path) -> tuple[float, str]:
    """The GPU's step time without waiting for data (ms) and its source, from a check-up JSON, run dir or trace (its
    check-up document, either way read through document.py's types)."""
    path = Path(path)
    if not path.exists():
        raise CheckupError(f"{path}: no such file or folder")
    from gpucheckup.checkup.assemble import document, is_document, read_document

    if path.is_file() and path.suffix == ".json" and is_document(path):
        doc = read_document(path)
    else:
        from gpucheckup.checkup.pipeline import check

        doc = document(check(path))
    run_steps = doc.run.figures.steps if doc.run is not None else None
    found = []
    for part in doc.checkups or doc.cpu_checkups:
        try:
            found.append(step_without_data(part, run_steps))
        except (ValueError, AttributeError, TypeError, KeyError):
            continue
    if not found:
        raise CheckupError(f"{path}: no step time in this check-up: it has no profiled step, on the GPU or on the CPU "
                           "(check up a run of `gpucheckup run`, or its JSON)")
    ms, how = max(found)  # the slowest rank sets the pace
    return ms, f"{path.name}: {how}"


def run(spec: str, workers: list[int], pin: str, batches: int, checkup: Path | None, json_path: Path | None,
        console: Console) -> int:
    """The whole command: measure, read the GPU's step time, advise, print, write JSON when asked."""
    from gpucheckup.capture.dataloader_bench import load_factory, measure
    from gpucheckup.report.text.terminal_loader import render_loader

    gpu_ms, gpu_src = gpu_step_for(checkup) if checkup else (None, "")
    factory = load_factory(spec)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as progress:
        bench = measure(factory, spec, workers=workers, pin=PIN_CHOICES[pin], batches=batches, progress=progress)
    cores, limit = usable_cores({"cpu": bench.cpu})
    rates = [Rate(r.num_workers, r.pin_memory, r.batches_per_s,
                  sum(r.worker_uss_mb) / len(r.worker_uss_mb) if r.worker_uss_mb else None,
                  r.worker_cpu_s / r.seconds if r.worker_cpu_s is not None and r.seconds > 0 else None,
                  r.worker_runq_s / r.seconds if r.worker_runq_s is not None and r.seconds > 0 else None)
             for r in bench.runs]
    adv = advise(rates, cores, limit, gpu_ms, gpu_src)
    doc = measured("dataloader", {"dataloader_bench": bench.to_dict(), "advice": msgspec.structs.asdict(adv)})
    render_loader(doc.dataloader_bench, doc.advice, console)  # what --json writes, read through its types
    if json_path:
        write_atomic(json_path, json_doc.document(doc))
        console.print(f"JSON written to {safe(json_path)}", style="dim", markup=False)
    return 0

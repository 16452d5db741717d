"""Read a run directory written by `gpucheckup run` (or `gpucheckup attach`) into plain tables.

A run directory holds `manifest.json` and, when they could be captured: `traces/*.json.gz`
(profiled windows, one per rank; `traces/time-window/` when no optimizer stepped,
`traces/attach/` for attach captures), `steps.csv` /
`steps-rank<R>.csv`, `nvml.csv`, `cpu.csv`, `env.json`, `agent*.json`, `flops.json`, and for an
out-of-process attach `samples.csv`. CSV columns become numpy arrays (empty cells are NaN);
text columns stay lists. A missing optional file is None; an unreadable one raises CheckupError.
Needs no torch.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gpucheckup.errors import CheckupError

STEP_TEXT = {"phase"}
CPU_TEXT = {"name"}
SAMPLE_TEXT = {"main_state", "main_frame", "main_thread_active"}


@dataclass
class RunDir:
    """Everything in one run directory."""

    path: Path
    manifest: dict
    env: dict = field(default_factory=dict)
    agents: dict[str, dict] = field(default_factory=dict)
    steps: dict[str, dict] = field(default_factory=dict)  # process key -> columns of steps*.csv
    nvml: dict | None = None
    cpu: dict | None = None
    flops: dict | None = None
    traces: list[Path] = field(default_factory=list)
    time_traces: list[Path] = field(default_factory=list)  # traces/time-window/: no optimizer stepped
    attach_traces: list[Path] = field(default_factory=list)
    samples: dict | None = None  # out-of-process attach: one row per py-spy sample
    coarse: dict | None = None  # out-of-process attach: its summary (attach.json)

    @property
    def kind(self) -> str:
        return self.manifest.get("kind", "run")

    @property
    def started_epoch_s(self) -> float | None:
        return self.manifest.get("started_epoch_s")


def is_run_dir(path: Path) -> bool:
    """Whether a folder is a gpucheckup run directory (it has manifest.json)."""
    return path.is_dir() and (path / "manifest.json").is_file()


def read_run(path: Path) -> RunDir:
    """Read a run directory."""
    path = Path(path)
    manifest = read_json(path / "manifest.json")
    run = RunDir(path=path, manifest=manifest)
    run.env = read_json(path / "env.json") if (path / "env.json").exists() else {}
    for p in sorted(path.glob("agent*.json")):
        a = read_json(p)
        run.agents[a.get("key") or p.stem] = a
    for p in sorted(path.glob("steps*.csv")):
        key = p.stem.split("-", 1)[1] if "-" in p.stem else "main"
        run.steps[key] = read_csv(p, STEP_TEXT)
    if (path / "nvml.csv").exists():
        run.nvml = read_csv(path / "nvml.csv")
    if (path / "cpu.csv").exists():
        run.cpu = read_csv(path / "cpu.csv", CPU_TEXT)
    if (path / "flops.json").exists():
        run.flops = read_json(path / "flops.json")
    traces = path / "traces"
    if traces.is_dir():
        run.traces = sorted(p for p in traces.iterdir() if p.is_file() and p.name.endswith((".json.gz", ".json")))
        run.time_traces = sorted((traces / "time-window").glob("*.json*"))
        run.attach_traces = sorted((traces / "attach").glob("*.json*"))
    if (path / "samples.csv").exists():
        run.samples = read_csv(path / "samples.csv", SAMPLE_TEXT)
    if (path / "attach.json").exists():
        run.coarse = read_json(path / "attach.json")
    return run


def read_json(path: Path) -> dict:
    """A JSON object from a file, or a one-line CheckupError."""
    try:
        obj = json.loads(path.read_text())
    except FileNotFoundError:
        raise CheckupError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise CheckupError(f"{path}: not readable JSON ({str(e).splitlines()[0][:120]})") from None
    if not isinstance(obj, dict):
        raise CheckupError(f"{path}: expected a JSON object")
    return obj


def read_csv(path: Path, text: set[str] = frozenset()) -> dict:
    """A CSV file as columns: float arrays (NaN for empty cells), lists of str for `text` columns."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise CheckupError(f"{path}: not readable CSV ({e})") from None
    if not rows:
        raise CheckupError(f"{path}: empty file (no header)")
    header, body = rows[0], [r for r in rows[1:] if r]
    out: dict = {}
    for j, name in enumerate(header):
        cells = [r[j] if j < len(r) else "" for r in body]
        if name in text:
            out[name] = cells
            continue
        try:
            out[name] = np.array([float(c) if c != "" else np.nan for c in cells], dtype=np.float64)
        except ValueError:
            bad = next(i for i, c in enumerate(cells) if c != "" and not _is_float(c))
            raise CheckupError(f"{path}: line {bad + 2}, column {name}: {cells[bad]!r} is not a number") from None
    return out


def _is_float(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return False

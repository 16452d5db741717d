"""Read a run directory written by `gpucheckup run` (or `gpucheckup attach`) into plain tables.

A run directory's files and columns are those of gpucheckup/layout.py (the writers use it too):
`manifest.json` and, when they could be captured: `traces/*.json.gz` (profiled windows, one per
rank; `traces/time-window/` when no optimizer stepped, `traces/attach/` for attach captures),
`steps.csv` / `steps-rank<R>.csv`, `nvml.csv`, `cpu.csv`, `env.json`, `agent*.json`, `flops.json`,
and for an out-of-process attach `samples.csv`. CSV columns become numpy arrays (empty cells are NaN);
text columns stay lists. A missing optional file is None. Needs no torch.

A file that is there but malformed stops the reading with a one-line CheckupError naming the
file and what is wrong: unreadable JSON or CSV, a CSV without a column the check-up uses
(STEP_NEEDED, NVML_NEEDED, CPU_NEEDED: of layout's columns), an empty cell where one is needed (a step number, a
sample time, a pid), a cell that is not a number, a JSON field of the wrong type (MANIFEST_TYPES,
ENV_TYPES, ...). Such a file was not written by gpucheckup as it is, and leaving part of it out
would give figures a user cannot check against the files; the error says which file to fix or
remove (removing an optional file leaves only its part out of the check-up).
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import msgspec
import numpy as np

from gpucheckup import layout
from gpucheckup.errors import CheckupError
from gpucheckup.files import SMALL_JSON_BYTES, check_regular

STEP_TEXT = {"phase"}
CPU_TEXT = {"name"}
# samples.csv: main_stack since the raw stacks are stored; main_state and main_frame in older run directories
SAMPLE_TEXT = {"main_stack", "main_state", "main_frame", "main_thread_active"}
# Of layout's CSV columns (layout.STEP_COLUMNS, ...: their one home), those the run-level analyses read
# (analysis/run_logs/step_history.py, telemetry.py, stack_samples.py), and those no row may leave empty.
STEP_NEEDED, STEP_FILLED = ("step", "ms"), ("step",)
STEP_MAX, STEP_MS_MAX = 2.0 ** 53, 24 * 3600 * 1e3  # a step number, a step time of at most a day
EPOCH_MAX = 2.0 ** 33  # a Unix time (s) before the year 2242
NVML_NEEDED = ("t_s", "gpu", "util_pct", "mem_used_mb", "mem_total_mb", "power_w", "sm_clock_mhz", "clock_reasons")
NVML_FILLED = ("t_s",)
CPU_NEEDED, CPU_FILLED = ("t_s", "pid", "cpu_pct"), ("t_s", "pid")
SAMPLE_NEEDED, SAMPLE_FILLED = ("t_s",), ("t_s",)

NUMBER, TEXT, OBJECT, LIST = "a number", "a string", "an object", "a list"
MANIFEST_TYPES = {"kind": TEXT, "command": LIST, "started_epoch_s": NUMBER, "ended_epoch_s": NUMBER,
                  "duration_s": NUMBER, "exit_code": NUMBER, "exit_signal": TEXT, "captured": OBJECT,
                  "failed": OBJECT, "artefacts": LIST}
ENV_TYPES = {"cpu": OBJECT, "gpus": LIST, "torch": OBJECT, "dataloaders": LIST, "job": OBJECT, "driver": TEXT,
             "topology": TEXT}
AGENT_TYPES = {"key": TEXT}
FLOPS_TYPES = {"flops_per_step": NUMBER}


class RunDir(msgspec.Struct):
    """Everything in one run directory."""

    path: Path
    manifest: dict
    env: dict = msgspec.field(default_factory=dict)
    agents: dict[str, dict] = msgspec.field(default_factory=dict)
    steps: dict[str, dict] = msgspec.field(default_factory=dict)  # process key -> columns of steps*.csv
    nvml: dict | None = None
    cpu: dict | None = None
    flops: dict | None = None
    traces: list[Path] = msgspec.field(default_factory=list)
    time_traces: list[Path] = msgspec.field(default_factory=list)  # traces/time-window/: no optimizer stepped
    attach_traces: list[Path] = msgspec.field(default_factory=list)
    samples: dict | None = None  # out-of-process attach: one row per py-spy sample

    @property
    def kind(self) -> str:
        return self.manifest.get("kind", layout.KIND_RUN)

    @property
    def started_epoch_s(self) -> float | None:
        return self.manifest.get("started_epoch_s")


def is_run_dir(path: Path) -> bool:
    """Whether a folder is a gpucheckup run directory (it has manifest.json)."""
    return path.is_dir() and (path / layout.MANIFEST).is_file()


def is_live_run_dir(path: Path) -> bool:
    """Whether a folder is the run directory of a job still running under `gpucheckup run`: no manifest yet (it is
    written when the job ends), the agent's account and its step log being written (steps*.csv.part)."""
    return (path.is_dir() and not (path / layout.MANIFEST).exists() and any(path.glob(layout.AGENT_GLOB))
            and any(path.glob(layout.STEPS_GLOB + layout.PART)))


def live_manifest(path: Path) -> dict:
    """The manifest of a run still in progress, as far as its files tell: started when its agent activated."""
    agents = [read_json(p, AGENT_TYPES) for p in sorted(path.glob(layout.AGENT_GLOB))]
    started = min((a["activated_epoch_s"] for a in agents if isinstance(a.get("activated_epoch_s"), (int, float))),
                  default=None)
    argv = next((a["argv"] for a in agents if isinstance(a.get("argv"), list)), None)
    return {"kind": layout.KIND_RUN, "command": [str(x) for x in argv] if argv else None, "started_epoch_s": started,
            "exit_code": None, "exit_signal": None, "captured": {}, "failed": {}}


def read_run(path: Path, live: bool = False) -> RunDir:
    """Read a run directory; CheckupError (one line: the file, what is wrong) for a malformed file. `live`: a run
    still in progress (is_live_run_dir): its manifest as far as its files tell, its step logs as far as written."""
    path = Path(path)
    refuse_links_outside(path)
    live = live and not (path / layout.MANIFEST).exists()
    manifest = live_manifest(path) if live else read_json(path / layout.MANIFEST, MANIFEST_TYPES)
    _check_items(path / layout.MANIFEST, "command", manifest.get("command"), TEXT)
    for key in ("started_epoch_s", "ended_epoch_s"):  # every time in a run is placed from these
        if manifest.get(key) is not None and not 0 <= manifest[key] <= EPOCH_MAX:
            raise CheckupError(f"{path / layout.MANIFEST}: field {key!r} is {manifest[key]!r}, out of range "
                               f"(0 to {EPOCH_MAX:g} s since 1970)")
    _check_items(path / layout.MANIFEST, "failed", manifest.get("failed"), TEXT)
    for key in ("captured", "failed"):
        if manifest.get(key) is None:
            manifest[key] = {}
    run = RunDir(path=path, manifest=manifest)
    if (path / layout.ENV).exists():
        run.env = read_json(path / layout.ENV, ENV_TYPES)
        for key in ("gpus", "dataloaders", "job"):
            _check_items(path / layout.ENV, key, run.env.get(key), OBJECT)
    for p in sorted(path.glob(layout.AGENT_GLOB)):
        a = read_json(p, AGENT_TYPES)
        run.agents[a.get("key") or p.stem] = a
    for p in sorted(path.glob(layout.STEPS_GLOB + (layout.PART if live else ""))):
        key = layout.steps_key(p.name.removesuffix(layout.PART))
        if _lost_to_failure(p, manifest, "steps"):
            continue
        run.steps[key] = read_csv(p, STEP_TEXT, STEP_NEEDED, STEP_FILLED, whole_lines=live)
        for col, top in (("step", STEP_MAX), ("ms", STEP_MS_MAX)):  # NaN (an empty cell) passes
            bad = np.flatnonzero((run.steps[key][col] < 0) | (run.steps[key][col] > top))
            if len(bad):
                value = float(run.steps[key][col][bad[0]])
                raise CheckupError(f"{p}: line {bad[0] + 2}, column {col}: {value!r} is out of range (0 to {top:g})")
    if (path / layout.NVML).exists() and not _lost_to_failure(path / layout.NVML, manifest, "nvml"):
        run.nvml = read_csv(path / layout.NVML, required=NVML_NEEDED, filled=NVML_FILLED)
    if (path / layout.CPU).exists() and not _lost_to_failure(path / layout.CPU, manifest, "cpu"):
        run.cpu = read_csv(path / layout.CPU, CPU_TEXT, CPU_NEEDED, CPU_FILLED)
    if (path / layout.flops_file()).exists():
        run.flops = read_json(path / layout.flops_file(), FLOPS_TYPES)
    traces = path / layout.TRACES
    if traces.is_dir():
        run.traces = sorted(p for p in traces.iterdir() if p.is_file() and p.name.endswith((".json.gz", ".json")))
        run.time_traces = sorted((path / layout.TIME_WINDOW_TRACES).glob("*.json*"))
        run.attach_traces = sorted((path / layout.ATTACH_TRACES).glob("*.json*"))
    if (path / layout.SAMPLES).exists():
        run.samples = read_csv(path / layout.SAMPLES, SAMPLE_TEXT, SAMPLE_NEEDED, SAMPLE_FILLED)
        if "main_stack" not in run.samples and "main_state" not in run.samples:
            raise CheckupError(f"{path / layout.SAMPLES}: no column main_stack (the header has: "
                               f"{','.join(run.samples)[:120]})")
    return run


def _lost_to_failure(path: Path, manifest: dict, key: str) -> bool:
    """Whether a CSV file is empty (0 bytes) and the manifest says why: a full disk (failed.disk) or its writer's
    failure (failed.<key>). Such a file was never written, and reads as not captured (the report lists the
    failure), not as a malformed file that stops the check-up."""
    try:
        empty = path.stat().st_size == 0
    except OSError:
        return False
    failed = manifest.get("failed") or {}
    return empty and ("disk" in failed or key in failed)


def refuse_links_outside(path: Path) -> None:
    """CheckupError (one line) when a file or folder in the run directory is a symbolic link leading outside
    it: gpucheckup never writes links, and one planted there would make the check-up read another user's
    (or any) file as this run's (docs/reliability.md, threat model)."""
    import os

    root = os.path.realpath(path)
    for top, dirs, files in os.walk(path):  # links to folders are listed, not entered
        for name in dirs + files:
            p = os.path.join(top, name)
            if not os.path.islink(p):
                continue
            target = os.path.realpath(p)
            if os.path.commonpath([root, target]) != root:
                raise CheckupError(f"{p}: a link to {target}, outside the run directory: refused (a run directory "
                                   "holds its own files; remove the link)")


def read_nvml_recording(path: Path) -> RunDir:
    """A CSV written by `gpucheckup monitor --record` (nvml.csv's columns) as a run holding only its telemetry."""
    path = Path(path)
    nvml = read_csv(path, required=NVML_NEEDED, filled=NVML_FILLED)
    t = nvml["t_s"]
    start = float(t.min()) if len(t) else None
    return RunDir(path=path, manifest={"kind": "monitor", "command": ["gpucheckup", "monitor", "--record", str(path)],
                                       "started_epoch_s": start, "captured": {"nvml": str(path)}, "failed": {}},
                  nvml=nvml)


def read_json(path: Path, types: dict[str, str] | None = None) -> dict:
    """A JSON object from a file, its fields in `types` null or of that type; else a one-line CheckupError."""
    check_regular(path, SMALL_JSON_BYTES)  # a FIFO would block the read forever, a sparse file fill memory
    try:
        obj = json.loads(path.read_text())
    except FileNotFoundError:
        raise CheckupError(f"{path}: no such file") from None
    except RecursionError:
        raise CheckupError(f"{path}: not readable JSON (nested too deeply)") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise CheckupError(f"{path}: not readable JSON ({str(e).splitlines()[0][:120]})") from None
    if not isinstance(obj, dict):
        raise CheckupError(f"{path}: expected a JSON object")
    for key, kind in (types or {}).items():
        if obj.get(key) is not None and not _is(obj[key], kind):
            raise CheckupError(f"{path}: field {key!r} should be {kind}, not {_json_type(obj[key])}")
    return obj


def _check_items(path: Path, key: str, value, kind: str) -> None:
    """Every item of a list (or every value of an object) at `key` is of `kind`; else a one-line CheckupError."""
    items = value.items() if isinstance(value, dict) else enumerate(value or [])
    for k, v in items:
        if not _is(v, kind):
            raise CheckupError(f"{path}: {key}[{k!r}] should be {kind}, not {_json_type(v)}")


def _is(value, kind: str) -> bool:
    if kind == NUMBER:  # finite, and an int a float can hold (json reads NaN, Infinity and 400-digit ints)
        return (isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2 ** 63) or (
            isinstance(value, float) and math.isfinite(value))
    return isinstance(value, {TEXT: str, OBJECT: dict, LIST: list}[kind])


def _json_type(value) -> str:
    """A value's JSON type, as the error message names it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    for kind in (NUMBER, TEXT, OBJECT, LIST):
        if _is(value, kind):
            return f"{kind} ({json.dumps(value)[:40]})" if kind in (NUMBER, TEXT) else kind
    return type(value).__name__


TIME_COLUMNS = ("t_s", "t_end_s")  # epoch seconds in every CSV file of a run directory
MAX_EPOCH_S = 2**53 / 1e6  # as the trace reader's timestamps (MAX_TS_US): beyond, a microsecond no longer resolves
MAX_CSV_LINE = 1 << 20  # characters; the CSV files gpucheckup writes have lines of a few hundred


def _lines(path: Path, f, whole_lines: bool = False):
    """The file's lines, each read with a bounded length: a line over MAX_CSV_LINE (a sparse or binary file has
    none end) is one line of error instead of the whole file read into memory. `whole_lines`: a last line without
    its newline (a file still being written) is left out."""
    while line := f.readline(MAX_CSV_LINE):
        if len(line) == MAX_CSV_LINE and not line.endswith("\n"):
            raise CheckupError(f"{path}: a line over {MAX_CSV_LINE >> 20} MiB: not a CSV file gpucheckup wrote")
        if whole_lines and not line.endswith("\n"):
            return
        yield line


def read_csv(path: Path, text: set[str] = frozenset(), required=(), filled=(), whole_lines: bool = False) -> dict:
    """A CSV file as columns: float arrays (NaN for empty cells), lists of str for `text` columns.
    CheckupError when a `required` column is missing or a `filled` column has an empty cell. `whole_lines`: a file
    still being written (its last line is read only once its newline is there)."""
    check_regular(path)
    try:
        with open(path, newline="") as f:
            rows = list(csv.reader(_lines(path, f, whole_lines)))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise CheckupError(f"{path}: not readable CSV ({e})") from None
    if not rows:
        raise CheckupError(f"{path}: empty file (no header)")
    header, body = rows[0], [r for r in rows[1:] if r]
    missing = [c for c in required if c not in header]
    if missing:
        raise CheckupError(f"{path}: no column {', '.join(missing)} (the header has: {','.join(header)[:120]})")
    out: dict = {}
    for j, name in enumerate(header):
        cells = [r[j] if j < len(r) else "" for r in body]
        if name in filled and "" in cells:
            raise CheckupError(f"{path}: line {cells.index('') + 2}, column {name}: empty")
        if name in text:
            out[name] = cells
            continue
        try:
            out[name] = np.array([float(c) if c != "" else np.nan for c in cells], dtype=np.float64)
        except ValueError:
            bad = next(i for i, c in enumerate(cells) if c != "" and not _is_float(c))
            raise CheckupError(f"{path}: line {bad + 2}, column {name}: {cells[bad]!r} is not a number") from None
        inf = np.flatnonzero(np.isinf(out[name]) | (np.isnan(out[name]) & np.array([c != "" for c in cells], bool)))
        if len(inf):  # "inf", "nan", 1e999: no measurement writes these
            raise CheckupError(f"{path}: line {inf[0] + 2}, column {name}: {cells[inf[0]]!r} is not a finite number")
        far = np.flatnonzero(np.abs(out[name]) > MAX_EPOCH_S) if name in TIME_COLUMNS else ()
        if len(far):  # 1e308 s: finite, but a thousand times it (its milliseconds) is not
            raise CheckupError(f"{path}: line {far[0] + 2}, column {name}: {cells[far[0]]!r} is not a time in "
                               f"seconds since 1970 (over {MAX_EPOCH_S:.3g})")
    return out


def _is_float(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return False

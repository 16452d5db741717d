"""Read Nsight Compute `--csv` output: the long form (the default `details` page: one row per
kernel launch and metric) and `--page raw` (one row per launch, one column per metric, a row of
units under the header).

Lines ncu writes around the table (`==PROF==`, `==WARNING==`, `==ERROR==`, the profiled program's
own output) are skipped; values lose thousands separators and unit suffixes (`41,984`, `12.5 %`);
`n/a` and empty cells are missing values. Times are converted to nanoseconds. Display names of the
Speed-of-Light section (`Compute (SM) Throughput`, `DRAM Throughput`, `Memory Throughput`,
`Achieved Occupancy`, `Duration`) are mapped to their metric names.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import msgspec

from gpucheckup.errors import CheckupError
from gpucheckup.files import check_regular

SM_PCT = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
DRAM_PCT = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
MEM_PCT = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
WARPS_PCT = "sm__warps_active.avg.pct_of_peak_sustained_active"
DURATION = "gpu__time_duration.sum"
SOL_METRICS = (SM_PCT, DRAM_PCT, MEM_PCT, WARPS_PCT, DURATION)
DISPLAY_NAMES = {
    "compute (sm) throughput": SM_PCT, "sm throughput": SM_PCT,
    "dram throughput": DRAM_PCT,
    "memory throughput": MEM_PCT,
    "achieved occupancy": WARPS_PCT,
    "duration": DURATION,
}
TIME_TO_NS = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6, "s": 1e9,
              "second": 1e9}
NAME_COLUMNS = ("Kernel Name", "Function Name", "Demangled Name", "Name")
_NUMBER = re.compile(r"^([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z%/_]*)$")


class NcuLaunch(msgspec.Struct):
    """One profiled kernel launch: its name and its metrics (percent, or nanoseconds for times)."""

    id: str
    name: str
    metrics: dict[str, float] = msgspec.field(default_factory=dict)
    grid: str = ""
    block: str = ""


def parse_value(text: str, unit: str = "") -> float | None:
    """`41,984` -> 41984.0; `12.5 %` -> 12.5; `1.2 ms` -> 1.2e6 (ns); `n/a` -> None."""
    s = text.strip().replace(",", "").replace("\u202f", "").replace("'", "")
    if not s or s.lower() in ("n/a", "na", "nan", "-"):
        return None
    m = _NUMBER.match(s)
    if not m:
        return None
    value = float(m.group(1))
    u = (m.group(2) or unit).strip().lower()
    return value * TIME_TO_NS.get(u, 1.0)


def canonical(metric: str, unit: str = "") -> str:
    """The metric name for an ncu metric or Speed-of-Light display name."""
    m = metric.strip()
    alias = DISPLAY_NAMES.get(m.lower())
    if alias and (alias == DURATION or unit.strip() in ("%", "")):
        return alias
    return m


MAX_LINE = 4 << 20  # characters: a raw-form row holds a column per metric (tens of KB with --set full)


def _table_lines(path: Path, f) -> list[str]:
    """The CSV lines: from the header (first line starting with `"ID"`) on, without ncu's own lines; each read with
    a bounded length (a sparse or binary file has no line end: one line of error, not the file read whole)."""
    lines: list[str] = []
    started = False
    while line := f.readline(MAX_LINE):
        if len(line) == MAX_LINE and not line.endswith(("\n", "\r")):
            raise CheckupError(f"{path}: a line over {MAX_LINE >> 20} MiB: not Nsight Compute CSV output")
        line = line.rstrip("\r\n")
        started = started or line.lstrip().startswith('"ID"')
        if started and line.startswith('"') and not line.startswith("=="):
            lines.append(line)
    return lines


def read_ncu_csv(path: str | Path) -> list[NcuLaunch]:
    """Every profiled launch in an `ncu --csv` file (long or raw form)."""
    path = Path(path)
    check_regular(path)  # a FIFO would block the read forever
    try:
        with open(path, errors="replace") as f:
            lines = _table_lines(path, f)
    except FileNotFoundError:
        raise CheckupError(f"{path}: no such file") from None
    except OSError as e:
        raise CheckupError(f"{path}: cannot read ({e.strerror})") from None
    if not lines:
        raise CheckupError(f"{path}: not Nsight Compute CSV output (no header row starting with \"ID\"); "
                           "export it with ncu --csv")
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    header = [h.strip() for h in rows[0]]
    name_col = next((header.index(c) for c in NAME_COLUMNS if c in header), None)
    if name_col is None:
        raise CheckupError(f"{path}: Nsight Compute CSV without a kernel name column ({', '.join(NAME_COLUMNS)})")
    if "Metric Name" in header and "Metric Value" in header:
        launches = _long_form(header, rows[1:], name_col)
    else:
        launches = _raw_form(header, rows[1:], name_col)
    if not launches:
        raise CheckupError(f"{path}: Nsight Compute CSV with no kernel rows")
    return launches


def _cell(row: list[str], header: list[str], col: str) -> str:
    return row[header.index(col)] if col in header and header.index(col) < len(row) else ""


def _long_form(header: list[str], rows: list[list[str]], name_col: int) -> list[NcuLaunch]:
    mcol, vcol = header.index("Metric Name"), header.index("Metric Value")
    ucol = header.index("Metric Unit") if "Metric Unit" in header else None
    by_id: dict[str, NcuLaunch] = {}
    for r in rows:
        if len(r) <= max(mcol, vcol, name_col):
            continue
        lid = r[0]
        launch = by_id.get(lid)
        if launch is None:
            launch = by_id[lid] = NcuLaunch(id=lid, name=r[name_col], grid=_cell(r, header, "Grid Size"),
                                            block=_cell(r, header, "Block Size"))
        unit = r[ucol] if ucol is not None else ""
        value = parse_value(r[vcol], unit)
        if value is not None:
            launch.metrics[canonical(r[mcol], unit)] = value
    return list(by_id.values())


def _raw_form(header: list[str], rows: list[list[str]], name_col: int) -> list[NcuLaunch]:
    units = [""] * len(header)
    if rows and not parse_value(rows[0][0] if rows[0] else "") and not (rows[0][0] if rows[0] else "").strip():
        units = rows[0] + [""] * (len(header) - len(rows[0]))  # the units row: ID column empty
        rows = rows[1:]
    meta = {"ID", "Process ID", "Process Name", "Host Name", "Context", "Stream", "Block Size", "Grid Size",
            "Device", "CC", header[name_col]}
    out = []
    for r in rows:
        if len(r) <= name_col or not r[0].strip():
            continue
        launch = NcuLaunch(id=r[0], name=r[name_col], grid=_cell(r, header, "Grid Size"),
                           block=_cell(r, header, "Block Size"))
        for i, col in enumerate(header):
            if col in meta or i >= len(r):
                continue
            value = parse_value(r[i], units[i])
            if value is not None:
                launch.metrics[canonical(col, units[i])] = value
        out.append(launch)
    return out

"""The Nsight Compute command line that profiles a check-up's top kernels.

- `--kernel-name regex:^(a|b|...)$` with `--kernel-name-base function`: the top kernels' function
  names (no namespace, template arguments or parameters), because ncu and the PyTorch profiler
  demangle full names differently. Other kernels with the same function name match too.
- `--launch-skip`: launches of the matching kernels per step x `--skip-steps` (default 10), so
  profiling starts past warm-up; `--launch-count`: one step's worth of those launches.
- `--metrics`: the Speed-of-Light figures gpucheckup classifies by (analysis/flops/ncu_bounds.py).
- `--clock-control none`: keep the GPU's own clocks (ncu locks them to base by default, which
  makes kernels look slower than in training); `--target-processes all`: follow launchers
  (torchrun) into their workers; `--csv`: the output `gpucheckup analyze --ncu` reads.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import msgspec

from gpucheckup.analysis.flops.ncu_bounds import base_name
from gpucheckup.errors import CheckupError
from gpucheckup.safe_text import UNSAFE
from gpucheckup.document import TraceReport, decode
from gpucheckup.trace.ncu_csv import SOL_METRICS

MAX_LAUNCH_COUNT = 1000


def saved_report(path: Path) -> TraceReport | None:
    """The first GPU check-up of a check-up document, read through its types; None when the path is not one."""
    if path.is_file() and path.name.endswith(".json"):
        with open(path, "rb") as f:
            head = f.read(4096)
        if b'"schema_version"' in head:
            try:
                doc = decode(path.read_bytes())
            except (msgspec.DecodeError, msgspec.ValidationError) as e:
                raise CheckupError(f"{path}: not a check-up document ({str(e).splitlines()[0][:120]})") from None
            if not doc.checkups:
                raise CheckupError(f"{path}: a check-up with no GPU timeline (no kernels to profile)")
            return doc.checkups[0]
    return None


_CONTROL = re.compile(f"{UNSAFE.pattern}|[\t\n]")


def printable_regex(name: str) -> str:
    """A regex matching exactly `name`, written in printable characters (controls, bidi marks, tab and newline
    from a trace as `\\xHH` / `\\uHHHH` escapes, which ncu's and Python's regex syntax read back)."""
    parts, pos = [], 0
    for m in _CONTROL.finditer(name):
        o = ord(m.group())
        parts += [re.escape(name[pos:m.start()]), f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}"]
        pos = m.end()
    return "".join(parts) + re.escape(name[pos:])


def ncu_command(part: TraceReport, top: int = 5, skip_steps: int = 10, command: str = "python train.py") -> str:
    """The ncu command line for a GPU check-up's top kernels by GPU time."""
    kernels = [k for k in part.kernels.top if k.name][:top]
    if not kernels:
        raise CheckupError("the check-up has no kernels to profile")
    bases = list(dict.fromkeys(base_name(k.name) for k in kernels))
    steps = max(int(part.steps.count), 1)
    per_step = max(1, round(sum(k.count for k in kernels) / steps))
    regex = "regex:^(" + "|".join(printable_regex(b) for b in bases) + ")$"
    args = [
        "ncu", "--target-processes", "all",
        "--kernel-name-base", "function", "--kernel-name", regex,
        "--launch-skip", str(per_step * max(skip_steps, 0)),
        "--launch-count", str(min(per_step, MAX_LAUNCH_COUNT)),
        "--metrics", ",".join(SOL_METRICS),
        "--clock-control", "none",
        "--csv", "--log-file", "ncu_top_kernels.csv",
    ]
    return " ".join(shlex.quote(a) for a in args) + " " + command

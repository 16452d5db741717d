"""Measured ceilings of one GPU: what `gpucheckup ceilings` stores and the analysis reads back.

Stored as JSON (format `gpucheckup-ceilings/1`), by default at
`$XDG_CACHE_HOME/gpucheckup/ceilings-<device>.json` (`~/.cache/...` without XDG_CACHE_HOME), so
that a later check-up of a trace from the same GPU model finds it by the trace's device name.
- matmul_tflops[dtype]: 2*n^3 / median time of an n x n x n matmul (n = 8192), per dtype.
- copy_gb_s.d2d: bytes read + bytes written / median time of a device-to-device copy (a copy of
  B bytes moves 2B through memory).
- copy_gb_s.h2d_pinned / h2d_pageable: bytes / median time of a host-to-device copy from pinned
  or ordinary (pageable) host memory.
The legacy layout of the shared fixtures' ceilings.json (`bf16_matmul_tflops`, `d2d_copy_tb_s`,
`h2d_pinned_gb_s`, `h2d_pageable_gb_s`) is read too.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gpucheckup.atomic import write_atomic
from gpucheckup.errors import CheckupError
from gpucheckup.files import SMALL_JSON_BYTES, check_regular

FORMAT = "gpucheckup-ceilings/1"


@dataclass
class Ceilings:
    """One GPU's measured matmul rates (TFLOP/s) and copy bandwidths (GB/s)."""

    device: str
    matmul_tflops: dict[str, float] = field(default_factory=dict)  # burst: boost clocks, the ceiling
    matmul_sustained_tflops: dict[str, float] = field(default_factory=dict)  # after seconds of full load
    copy_gb_s: dict[str, float] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # what could not be measured, and why
    measured_at: str = ""
    torch: str = ""
    cuda: str = ""
    sm_count: int = 0
    matmul_n: int = 0
    format: str = FORMAT

    def to_dict(self) -> dict:
        return asdict(self)


def cache_dir() -> Path:
    """Where ceilings are kept by default."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpucheckup"


def default_path(device: str) -> Path:
    """The default file for a device name: ceilings-nvidia-h200.json."""
    slug = re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-")[:100].strip("-") or "unknown-gpu"  # a file name
    return cache_dir() / f"ceilings-{slug}.json"


def from_dict(d: dict, where: str = "ceilings") -> Ceilings:
    """Ceilings from their JSON form, or from the fixtures' legacy layout; CheckupError for bad values."""
    try:
        return _from_dict(d, where)
    except (TypeError, ValueError, AttributeError) as e:
        raise CheckupError(f"{where}: not a valid ceilings file ({type(e).__name__}: {e})") from None


def _from_dict(d: dict, where: str) -> Ceilings:
    if not isinstance(d, dict):
        raise CheckupError(f"{where}: not a ceilings file (top level is not a JSON object)")
    if "matmul_tflops" in d or d.get("format") == FORMAT:
        return Ceilings(
            device=str(d.get("device", "")),
            matmul_tflops={k: float(v) for k, v in (d.get("matmul_tflops") or {}).items() if v is not None},
            matmul_sustained_tflops={k: float(v) for k, v in (d.get("matmul_sustained_tflops") or {}).items()
                                     if v is not None},
            copy_gb_s={k: float(v) for k, v in (d.get("copy_gb_s") or {}).items() if v is not None},
            skipped=dict(d.get("skipped") or {}),
            measured_at=str(d.get("measured_at", "")), torch=str(d.get("torch", "")), cuda=str(d.get("cuda", "")),
            sm_count=int(d.get("sm_count") or 0), matmul_n=int(d.get("matmul_n") or 0),
        )
    if "bf16_matmul_tflops" in d:  # the shared fixtures' layout
        copy = {}
        if d.get("d2d_copy_tb_s") is not None:
            copy["d2d"] = float(d["d2d_copy_tb_s"]) * 1000
        for key, name in (("h2d_pinned_gb_s", "h2d_pinned"), ("h2d_pageable_gb_s", "h2d_pageable")):
            if d.get(key) is not None:
                copy[name] = float(d[key])
        return Ceilings(device=str(d.get("device", "")), matmul_tflops={"bf16": float(d["bf16_matmul_tflops"])},
                        copy_gb_s=copy, sm_count=int(d.get("sm_count") or 0))
    raise CheckupError(f"{where}: not a ceilings file (no `matmul_tflops`)")


def load(path: Path) -> Ceilings:
    """Read a ceilings file; CheckupError when it is missing or not one."""
    if Path(path).exists():
        check_regular(Path(path), SMALL_JSON_BYTES)  # a FIFO would block the read forever
    try:
        d = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise CheckupError(f"{path}: no such ceilings file (run `gpucheckup ceilings` on that GPU)") from None
    except (OSError, ValueError) as e:
        raise CheckupError(f"{path}: cannot read ceilings ({e})") from None
    return from_dict(d, str(path))


def find_for(device: str) -> tuple[Ceilings, Path] | None:
    """The stored ceilings for a device name, if `gpucheckup ceilings` has been run for it here."""
    path = default_path(device)
    if not path.exists():
        return None
    try:
        return load(path), path
    except CheckupError:
        return None


def save(c: Ceilings, path: Path) -> Path:
    """Write ceilings atomically."""
    write_atomic(path, (json.dumps(c.to_dict(), indent=2) + "\n").encode(), parents=Path(path) == default_path(c.device))
    return Path(path)

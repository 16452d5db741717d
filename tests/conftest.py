"""Shared test helpers: where the real H200 traces are, and an independent trace reader."""

from __future__ import annotations

import ast
import gzip
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "src" / "gpucheckup" / "data" / "demo"
REQUIRE_TORCH = "GPUCHECKUP_REQUIRE_TORCH"  # =1 (.ci/run sets it): the torch tests may not skip


def pytest_configure(config):
    """Without torch the tests that run real torch jobs skip; with $GPUCHECKUP_REQUIRE_TORCH=1 the run stops
    instead (a CI machine must run them). Chromium: tests/browser.py, $GPUCHECKUP_REQUIRE_BROWSER."""
    if os.environ.get(REQUIRE_TORCH) == "1" and importlib.util.find_spec("torch") is None:
        raise pytest.UsageError(f"{REQUIRE_TORCH}=1 but torch is not installed: the tests that run real torch "
                                "jobs are required here (pip install torch==2.13.0)")


def fixtures_dir() -> Path | None:
    """The shared H200 fixtures: $GPUCHECKUP_FIXTURES, else ../shared/fixtures/h200 beside the repo, else
    /work/shared/fixtures/h200 (where this workplace keeps them, for a clone made elsewhere)."""
    env = os.environ.get("GPUCHECKUP_FIXTURES")
    for cand in ([Path(env)] if env else []) + [REPO.parent / "shared" / "fixtures" / "h200",
                                                 Path("/work/shared/fixtures/h200")]:
        if cand.is_dir():
            return cand
    return None


def trace_path(case: str) -> Path:
    """A real trace: from the shared fixtures, else the copy bundled for the demo."""
    base = fixtures_dir()
    if base is not None and (base / case / "trace.json.gz").exists():
        return base / case / "trace.json.gz"
    bundled = DEMO / case / "trace.json.gz"
    if bundled.exists():
        return bundled
    pytest.skip(f"real trace {case!r} not available (set GPUCHECKUP_FIXTURES to the h200 fixtures folder)")


def raw_events(path: Path) -> dict:
    """The trace as the standard library's json reads it: no gpucheckup code involved."""
    with gzip.open(path, "rt") if path.suffix == ".gz" else open(path) as f:
        return json.load(f)


def write_trace(path: Path, events: list[dict], **top) -> Path:
    """Write a small synthetic trace (for edge cases only; verdicts are tested on real traces)."""
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H200", "numSms": 132}], **top,
           "traceEvents": events}
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


def modules_loaded(code: str, packages: tuple[str, ...]) -> list[str]:
    """The modules of these packages (a name, or a name and what lies under it) that a fresh interpreter has
    loaded after running `code`, sorted; the code must run without error."""
    probe = (f"{code}\nimport sys\npk = {packages!r}\n"
             "print(sorted(m for m in sys.modules if m in pk or m.startswith(tuple(p + '.' for p in pk))))\n")
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return ast.literal_eval(res.stdout.strip().splitlines()[-1])

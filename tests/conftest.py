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


SCHEMA = REPO / "src" / "gpucheckup" / "data" / "schema.json"
# the other commands' documents, by `kind`: written here by hand (docs/schema.md lists them), not read from the code
MEASURED_KINDS = ("ab", "try", "compare", "scaling", "dataloader")
CHECKED_DOCUMENTS: list[Path] = []  # the check-up documents this test run validated (tests/test_schema.py counts)


def validate_document(doc: dict) -> None:
    """A check-up document against the shipped JSON Schema, by jsonschema (not gpucheckup's own types)."""
    import jsonschema

    jsonschema.validate(doc, json.loads(SCHEMA.read_text()), cls=jsonschema.Draft202012Validator)


@pytest.fixture(autouse=True)
def _written_documents_validate(request):
    """After every test that used tmp_path: each check-up document (JSON with `schema_version`) it wrote there
    validates against the shipped schema."""
    if "tmp_path" not in request.fixturenames:
        yield
        return
    tmp = request.getfixturevalue("tmp_path")  # asked for here, so it is torn down after this check
    yield
    for f in tmp.rglob("*.json"):
        if not f.is_file() or f.stat().st_size > 200_000_000:
            continue
        with open(f, "rb") as fh:
            if b'"schema_version"' not in fh.read(200):  # a document's first key: not an input of the test
                continue
        try:
            doc = json.loads(f.read_bytes())
        except (ValueError, UnicodeDecodeError, RecursionError):
            continue
        measured = doc.get("kind") in MEASURED_KINDS if isinstance(doc, dict) else False  # the other commands'
        if isinstance(doc, dict) and "schema_version" in doc and ("checkups" in doc or measured):
            validate_document(doc)
            CHECKED_DOCUMENTS.append(f)


def flat(doc: dict, i: int = 0) -> dict:
    """Check-up i of a check-up document (docs/schema.md) read back through its types, as one report: its trace's
    keys with its run's run-level keys (`run`, `run_figures`, ...), the shape a report had before the document
    wrapped it (gpucheckup.document.flat_report)."""
    import msgspec

    from gpucheckup.document import Document, flat_report

    return flat_report(msgspec.convert(doc, Document), i)


def document_of(result, cases=None) -> dict:
    """The check-up document of a pipeline result as plain JSON types (what `--json` writes)."""
    import msgspec

    from gpucheckup.checkup.assemble import document

    return msgspec.to_builtins(document(result, cases))


def ranks_view(doc: dict) -> dict:
    """A document of several ranks as {ranks, communication, verdict, reports}: the job's section, its verdict
    and each rank's report (`flat`)."""
    n = len(doc["checkups"])
    return {"ranks": doc["job"]["ranks"], "communication": doc["job"]["communication"], "verdict": doc["verdict"],
            "reports": [flat(doc, i) for i in range(n)]}


def analyzed(path: Path, out: Path) -> dict:
    """`gpucheckup analyze PATH --json OUT` run as a user runs it (its own process); the document it wrote."""
    res = subprocess.run([sys.executable, "-m", "gpucheckup", "analyze", str(path), "--json", str(out)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(Path(out).read_text())


def read_report(path: Path, i: int = 0) -> dict:
    """Check-up i of the check-up document at path, as `flat` gives it."""
    return flat(json.loads(Path(path).read_text()), i)


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

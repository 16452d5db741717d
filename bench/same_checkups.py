"""Check that a speed change changed no check-up: every real trace, folder of ranks and run directory
checked up by two source trees, their JSON and terminal text compared byte for byte.

Usage: python bench/same_checkups.py OLD_SRC [NEW_SRC]
  OLD_SRC, NEW_SRC: a `src` folder (NEW_SRC defaults to this checkout's), e.g. from
  `git worktree add /tmp/old HEAD~3` then /tmp/old/src, or `git archive HEAD~3 | tar -x -C /tmp/old`.
The inputs: every trace and run directory under tests/data, the traces bundled with the package, and the H200
fixtures ($GPUCHECKUP_FIXTURES, else ../shared/fixtures/h200 beside the repository) where present. Standard
error is compared without its blank lines (a progress bar leaves one). Exit 0 when all are the same, 1 otherwise.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
from bench_analyze import fixture_dirs  # noqa: E402


def inputs() -> list[Path]:
    """Trace files, folders of ranks and run directories to check up."""
    found: set[Path] = set()
    data = REPO / "tests" / "data"
    roots = [data] + [d for d in fixture_dirs() if d.is_dir() and d != data / "h200"]
    for root in roots:
        for p in root.rglob("*.json*"):
            if p.name.endswith((".json", ".json.gz")) and "traces" not in p.parts and "traceEvents" in _head(p):
                found.add(p)
        for p in root.rglob("manifest.json"):  # run directories
            found.add(p.parent)
        for p in root.rglob("traces"):  # run directories and folders of ranks
            found.add(p.parent)
    return sorted(found)


def _head(p: Path) -> str:
    import gzip

    try:
        with (gzip.open(p, "rt", errors="replace") if p.name.endswith(".gz") else open(p, errors="replace")) as f:
            return f.read(1 << 16)
    except (OSError, EOFError):
        return ""


def checkup(src: str, path: Path, out: Path) -> tuple[int, str, str, bytes]:
    """Exit status, terminal text, standard error (no blank lines) and JSON of one check-up."""
    env = dict(os.environ, PYTHONPATH=src, COLUMNS="120")
    js = out / "c.json"
    p = subprocess.run([sys.executable, "-m", "gpucheckup", "analyze", str(path), "--json", str(js)],
                       capture_output=True, text=True, env=env, cwd=REPO)
    text = p.stdout.replace(str(js), "<json>")
    err = "\n".join(line for line in p.stderr.splitlines() if line.strip())
    data = js.read_bytes() if js.exists() else b""
    js.unlink(missing_ok=True)
    return p.returncode, text, err, data


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    old, new = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else str(REPO / "src")
    differ = 0
    with tempfile.TemporaryDirectory() as d:
        for path in inputs():
            a, b = checkup(old, path, Path(d)), checkup(new, path, Path(d))
            same = a == b
            differ += not same
            print(f"{'same   ' if same else 'DIFFERS'} exit {a[0]}/{b[0]}  {path}", flush=True)
    print(f"{differ} of the check-ups differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())

"""HTA's trace parse (HolisticTraceAnalysis TraceAnalysis), which every HTA analysis needs first.

HTA runs in a virtual environment of its own (its pins may clash with ours), under the repository's
ignored `.hta-venv/`:
    python bench/hta_parse.py --setup          # creates .hta-venv and installs HolisticTraceAnalysis from PyPI
    .hta-venv/bin/python bench/hta_parse.py TRACE
bench/bench_analyze.py finds it there (or takes --hta-python).
"""

from __future__ import annotations

import logging
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

VENV = Path(__file__).resolve().parents[1] / ".hta-venv"  # ignored by git (.gitignore)


def venv_python() -> Path:
    """The Python of the repository's HTA environment (it may not exist yet)."""
    return VENV / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")


def setup() -> Path:
    """Create the HTA environment under the repository and install HTA into it; its Python."""
    if not venv_python().exists():
        venv.create(VENV, with_pip=True)
    subprocess.run([str(venv_python()), "-m", "pip", "install", "--quiet", "HolisticTraceAnalysis"], check=True)
    return venv_python()


def main() -> int:
    if sys.argv[1:] == ["--setup"]:
        print(setup())
        return 0
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    from hta.trace_analysis import TraceAnalysis

    logging.disable(logging.WARNING)
    src = Path(sys.argv[1]).resolve()
    with tempfile.TemporaryDirectory() as d:
        name = "rank-0.json.gz" if src.name.endswith(".gz") else "rank-0.json"
        (Path(d) / name).symlink_to(src)
        TraceAnalysis(trace_dir=d)
    return 0


if __name__ == "__main__":
    sys.exit(main())

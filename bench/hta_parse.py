"""HTA's trace parse (HolisticTraceAnalysis TraceAnalysis), which every HTA analysis needs first.

Run with the Python of an environment where HTA is installed (its pins may clash with ours):
    python -m venv /work/hta-venv && /work/hta-venv/bin/pip install HolisticTraceAnalysis
Usage: HTA_PYTHON bench/hta_parse.py TRACE
"""

from __future__ import annotations

import logging
import sys
import tempfile
from pathlib import Path


def main() -> int:
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

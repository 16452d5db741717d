"""Record real step times of one CPU example run as many separate processes, for the A/B null test.

`python validation/ab_null_capture.py OUT.json [PROCESSES]` runs `python -m gpucheckup.examples.launch`
PROCESSES times (default 60) through `checkup/ab.py` (the agent's steps.csv, warm-up dropped),
alternately labelled A and B, and writes {"command", "warmup", "measure", "rounds": [{"side", "ms"}]}.
tests/test_ab_stats.py draws ten A/B repetitions of three rounds each from it, in capture order.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from gpucheckup.checkup import ab

CMD = [sys.executable, "-m", "gpucheckup.examples.launch", "--steps", "23"]
WARMUP, MEASURE = 3, 20


def main() -> None:
    out = Path(sys.argv[1])
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(n):
            side = ab.Side("AB"[i % 2], CMD)
            ms = ab.run_round(side, Path(tmp), i // 2 + 1, WARMUP, MEASURE).host_ms
            rounds.append({"side": side.label, "ms": [round(float(x), 4) for x in ms]})
            print(f"{i + 1}/{n} {side.label} median {sorted(ms)[len(ms) // 2]:.2f} ms", flush=True)
    out.write_text(json.dumps({"command": ["python"] + CMD[1:], "warmup": WARMUP, "measure": MEASURE,
                               "captured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                               "machine": "the 2-core CPU development VM, shared with other jobs", "rounds": rounds},
                              indent=1))


if __name__ == "__main__":
    main()

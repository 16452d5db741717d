"""Cut HTA's mtia_inference_rank_0.json.gz (340 KB) to its first WINDOW_MS of events, for tests/data/hta/.

Every event is kept as HTA ships it (metadata events and the top-level keys too); only events that start
after the window are dropped. Usage: python cut_mtia.py SOURCE.json.gz OUT.json.gz
"""

import gzip
import json
import sys

WINDOW_MS = 120.0

src, dst = sys.argv[1], sys.argv[2]
doc = json.load(gzip.open(src))
ts = [e["ts"] for e in doc["traceEvents"] if e.get("ph") == "X"]
t0 = min(ts)
doc["traceEvents"] = [e for e in doc["traceEvents"]
                      if e.get("ph") not in ("X", "s", "f", "i") or float(e["ts"]) <= t0 + WINDOW_MS * 1e3]
with gzip.open(dst, "wt") as f:
    json.dump(doc, f)

#!/usr/bin/env bash
# The whole H200 validation of gpucheckup capture in one go (about 7 minutes), run from the repository root:
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl   # msgspec, py-spy (+ rich if absent)
#   export PYTHONPATH=/tmp/site:$PWD/src
#   bash validation/h200_capture.sh
# It runs gpucheckup run on an input-bound and a launch-bound training script (verdicts checked), attaches to a
# job started under gpucheckup run (agent) and to plain jobs (py-spy + NVML), sends SIGTERM through the
# launcher, and measures the overhead (3 interleaved rounds of plain / always-on / profiled per job).
# Writes under $OUT (default ./out): summary.md, summary.json, overhead.csv, runs.tar.gz, oh_runs.tar.gz,
# logs.tar.gz, env.txt. Details: validation/h200_validate.py and docs/validation.md.
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/out}"
mkdir -p "$OUT"
export PATH="/tmp/site/bin:$PATH"   # py-spy from the carried wheel
export PYTHONPATH="${PYTHONPATH:-/tmp/site:$PWD/src}"
export PYTHONUNBUFFERED=1
missing=$(python3 - <<'PY'
import importlib
print(" ".join(m for m in ("torch", "numpy", "msgspec", "rich", "pynvml", "psutil") if importlib.util.find_spec(m) is None))
PY
)
if [ -n "$missing" ]; then
    echo "h200_capture.sh: missing Python modules: $missing (carry their wheels into /tmp/site)" | tee "$OUT/summary.md"
    exit 2
fi
command -v py-spy >/dev/null || echo "h200_capture.sh: py-spy not on PATH: the py-spy attach checks will fail"
rm -rf /tmp/gpucheckup-h200-validation
timeout 470 python3 validation/h200_validate.py "$OUT" --work /tmp/gpucheckup-h200-validation "$@" 2>&1 | tee "$OUT/console.txt"
rc=${PIPESTATUS[0]}
ls -la "$OUT"
exit "$rc"

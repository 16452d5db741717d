#!/bin/bash
# issue 15 on the H200 (docs/validation.md section 6c): where the CUPTI light window's cost comes from
# (validation/cupti_cost.py), then the window's cost before / inside / after it, interleaved (validation/light_ab.py).
# Runs from a carried folder holding this script as go.sh, src/ and validation/ (copies of the branch) and wheels:
# whl/ (msgspec, py-spy), whl_cupti/ (cupti-python 13.0.x), whl_cb/ (cuda-bindings 13, used only when missing).
# The two calls of 6c: PLAN2="launch:full,full_td" bash go.sh; then
# MC=paired MT=70 MD=60 PLAN="launch:cupti;gpu:cupti" R=3 T=115 D=100 \
#   PLAN2="moe:cupti;sync:cupti;gpu16:cupti;input:cupti" T2=85 D2=80 bash go.sh
# (call 1 ran modes cupti, nospy, fin: `fin` was then a variant; the backend detaches since, and the old behaviour is
# the variant `attached`).
cd "$(dirname "$0")" || exit 2
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site whl/*.whl || exit 3
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/cupti_site whl_cupti/*.whl || exit 3
python3 -c "import cuda.bindings, sys; sys.exit(int(cuda.bindings.__version__.split('.')[0]) < 13)" 2>/dev/null || { echo "carried cuda-bindings"; python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/cupti_site whl_cb/*.whl; }
export PYTHONPATH=/tmp/site:$PWD/src PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
{ date -u; git -C ../.. log -1 --format=%H 2>/dev/null; cat COMMIT 2>/dev/null
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv
  python3 -c "import torch,sys;print(torch.__version__, sys.version)"; nproc; py-spy --version
  python3 -m pip show cuda-bindings 2>/dev/null | grep -E "^(Name|Version)"; } > $OUT/env.txt 2>&1
cat $OUT/env.txt
python3 -c "import gpucheckup,sys; print(gpucheckup.__file__)" || exit 4
if [ "${MICRO:-1}" = 1 ]; then
  el "== cupti_cost (mechanism)"
  PYTHONPATH=/tmp/cupti_site:$PYTHONPATH timeout ${MT:-125} python3 validation/cupti_cost.py $OUT/micro.json --deadline-s ${MD:-112} ${MC:+--configs $MC} > /tmp/micro.txt 2>&1
  cat /tmp/micro.txt >> $OUT/console.txt; grep -v '^{' /tmp/micro.txt | cut -c1-200; grep '^{' /tmp/micro.txt | cut -c1-300
fi
el "== light_ab"
timeout ${T:-290} python3 validation/light_ab.py $OUT/ab --rounds ${R:-2} --deadline-s ${D:-255} --check-budget-s 0 --run-s 16 --plan "${PLAN:-launch:plain,cupti,nospy,attached;gpu:plain,cupti,nospy,attached;gpu16:plain,cupti}" --cupti-site /tmp/cupti_site >> $OUT/console.txt 2>&1
cat $OUT/ab/light_ab.md
if [ -n "$PLAN2" ]; then
  el "== light_ab 2: $PLAN2"
  timeout ${T2:-60} python3 validation/light_ab.py $OUT/ab2 --work /tmp/light_ab2 --rounds ${R2:-1} --deadline-s ${D2:-55} --check-budget-s 0 --run-s 14 --plan "$PLAN2" --cupti-site /tmp/cupti_site >> $OUT/console.txt 2>&1
  cat $OUT/ab2/light_ab.md
fi
rm -f $OUT/ab/light_ab.md $OUT/ab2/light_ab.md
el "== runs"
mkdir -p /tmp/light_ab/runs /tmp/light_ab2/runs
tar czf $OUT/runs.tgz --exclude='./*-full*/*/traces' -C /tmp/light_ab/runs . -C /tmp/light_ab2/runs . 2>/dev/null
ls -la $OUT $OUT/*/ ; el done

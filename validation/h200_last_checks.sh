#!/bin/bash
# The H200 checks of 2026-11-30's last device call (run from the repo root of the device copy, with
# .dev_light carried: wheels for msgspec and py-spy in whl/, cupti-python in whl_cupti/, cuda-bindings in whl_cb/):
# 1. the MoE example's baseline WITH operator shapes (issue 10: the static_shapes edit pads the work the data sized);
# 2. `gpucheckup ab`'s GPU clock on a side that runs ahead of its GPU (validation/runahead_job.py, issue 10);
# 3. the CUPTI light window with SYNCHRONIZATION records on the sync-bound job: plain, full and cupti (issue 15).
# Everything lands in $OUT (runs.tgz holds the run directories: the device tool drops deep paths).
set -u
W=/tmp/last; mkdir -p "$W"
. validation/device_site.sh  # the carried wheels, installed; PYTHONPATH and PATH set
GC="python3 -m gpucheckup"
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== 1. moe baseline with shapes"
timeout 100 $GC run --out "$W/runs/moe" --record-shapes --skip 20 --steps 5 --no-report -- \
  python3 -m gpucheckup.examples.moe --steps 60 2>&1 | grep -v "USDT\|Warn\|warn" | tail -2
echo "== 2. ab: a side that runs ahead of its GPU"
timeout 200 $GC ab --rounds 3 --warmup 20 --measure 100 --json "$OUT/runahead-ab.json" -- \
  python3 validation/runahead_job.py --steps 130 --sync -- python3 validation/runahead_job.py --steps 130 2>&1 | tail -8
echo "== 3. CUPTI light window with synchronization records, sync-bound job"
timeout 230 python3 validation/light_ab.py "$OUT/ab" --rounds 2 --deadline-s 200 --check-budget-s 30 --jobs sync \
  --modes plain,full,cupti --cupti-site /tmp/cupti_site --work "$W/light" 2>&1 | tail -12
tar czf "$OUT/runs.tgz" -C "$W" . ; date -u

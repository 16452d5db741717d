#!/bin/bash
# One GPU-machine call (docs/validation.md 7i, 6g): the GPU-bound transformer (the corpus's `gpu` job) captured eager
# and with --compile default one after the other on one machine, so the compiled trace shows kernel by kernel what
# Inductor changed (torch.compile measured 21.7% faster on it in 7i; the edit predicted 4.7%); then HF Trainer's CUPTI
# light window with --light-syncs (the light check-up's host reads). Wheels as validation/device_site.sh.
#   WHEELS=.dev24 bash validation/h200_compiled_gpu.sh call4
set -u
TAG=${1:-call4}
WHEELS=${WHEELS:-.dev24}
. validation/device_site.sh
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
W=/tmp/cg_$TAG; mkdir -p "$W"
for mode in eager default; do
  flags=(); [ "$mode" != eager ] && flags=(--compile "$mode")
  timeout 200 python3 -m gpucheckup run --out "$W/runs" --name "gpu_$mode" --skip 40 --steps 6 --no-report -- \
    python3 validation/train_gpu_bound.py --steps 90 --batch 16 "${flags[@]}" 2>&1 | grep -v "USDT\|Warn\|warn" | tail -2
  date -u
done
PYTHONPATH=/tmp/cupti_site:$PYTHONPATH timeout 120 python3 -m gpucheckup run --out "$W/runs" --name hf_light_syncs \
  --light --light-syncs --skip 70 --steps 30 --no-report -- python3 validation/train_hf_trainer.py --steps 170 2>&1 \
  | grep -v "USDT\|Warn\|warn" | tail -2
date -u
(cd "$W" && tar czf "$OUT/cg_$TAG.tgz" runs); ls -la "$OUT"

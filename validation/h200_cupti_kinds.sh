#!/bin/bash
# One GPU-machine call (docs/validation.md 6g, issue 26): where the CUPTI light window's cost goes on framework loops,
# paired inside each loop's own steps (validation/paired_steps.py): plain, `cupti` (kernels, copies and memsets, as
# shipped) and `kern` (kernels only), SECONDS of cycles per loop. Wheels as validation/device_site.sh.
#   WHEELS=.dev24 SECONDS_PER_LOOP=50 bash validation/h200_cupti_kinds.sh
# MODES picks paired_steps' modes: MODES=plain,cupti,shared adds CUPTI's per-thread activity buffers flipped from
# their default (docs/validation.md 6i: the one setting of the recorder not yet measured).
set -u
. validation/device_site.sh
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for j in hf:train_hf_trainer.py lightning:train_lightning.py timm:train_timm_amp.py; do
  PAIRED_SECONDS=${SECONDS_PER_LOOP:-50} PAIRED_MODES=${MODES:-plain,cupti,kern} PYTHONPATH=/tmp/cupti_site:$PYTHONPATH \
    timeout $(( ${SECONDS_PER_LOOP:-50} + 60 )) python3 validation/${j#*:} --paired "$OUT/paired_${j%%:*}.json" 2>&1 \
    | grep -v "USDT\|Warn\|warn" | tail -5
  date -u
done

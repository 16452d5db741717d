#!/bin/bash
# One GPU-machine call (docs/validation.md 6g, issue 26): where the CUPTI light window's cost goes on framework loops,
# paired inside each loop's own steps (validation/paired_steps.py): plain, `cupti` (kernels, copies and memsets, as
# shipped) and `kern` (kernels only), SECONDS of cycles per loop. Wheels as validation/device_site.sh.
#   WHEELS=.dev24 SECONDS_PER_LOOP=50 bash validation/h200_cupti_kinds.sh
# MODES picks paired_steps' modes (MODES=plain,cupti,shared: CUPTI's per-thread activity buffers flipped, 6j);
# LOOPS the loops (default "hf lightning timm"); SITE the folder of cupti-python put first on the loops' PYTHONPATH
# (default /tmp/cupti_site); PREFIX the outputs' name ($OUT/PREFIX_<loop>.json, default paired). A script that has
# already sourced device_site.sh (SITE_READY=1) calls this one for its paired loops.
set -u
[ -n "${SITE_READY:-}" ] || . validation/device_site.sh
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
declare -A SCRIPT=([hf]=train_hf_trainer.py [lightning]=train_lightning.py [timm]=train_timm_amp.py)
for j in ${LOOPS:-hf lightning timm}; do
  PAIRED_SECONDS=${SECONDS_PER_LOOP:-50} PAIRED_MODES=${MODES:-plain,cupti,kern} \
    PYTHONPATH=${SITE:-/tmp/cupti_site}:$PYTHONPATH timeout $(( ${SECONDS_PER_LOOP:-50} + 60 )) \
    python3 validation/${SCRIPT[$j]} --paired "$OUT/${PREFIX:-paired}_$j.json" 2>&1 | grep -v "USDT\|Warn\|warn" | tail -5
  date -u
done

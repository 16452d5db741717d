#!/bin/bash
# One GPU-machine call (docs/validation.md 6j, issue 26): CUPTI's per-thread activity buffers flipped from their
# default, against the window as shipped, on the two loops whose whole runs missed the 10% target (6i):
#   1. paired inside HF Trainer's and timm's own steps (paired_steps.py: plain, cupti, shared), SECONDS_PER_LOOP each;
#   2. whole runs, one process per run, the modes rotated each round (light_ab.py: cupti, shared; ROUNDS rounds).
#   WHEELS=.dev24 bash validation/h200_shared_buffers.sh
set -u
. validation/device_site.sh
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for j in hf:train_hf_trainer.py timm:train_timm_amp.py; do
  PAIRED_SECONDS=${SECONDS_PER_LOOP:-40} PAIRED_MODES=plain,cupti,shared PYTHONPATH=/tmp/cupti_site:$PYTHONPATH \
    timeout $(( ${SECONDS_PER_LOOP:-40} + 60 )) python3 validation/${j#*:} --paired "$OUT/paired_${j%%:*}.json" 2>&1 \
    | grep -v "USDT\|Warn\|warn" | tail -4
  date -u
done
left=$(( ${DEADLINE_S:-560} - SECONDS ))
timeout $(( left + 20 )) python3 validation/light_ab.py "$OUT/ab" --rounds "${ROUNDS:-3}" --deadline-s "$left" \
  --check-budget-s 0 --run-s 20 --plan "hf:cupti,shared;timm:cupti,shared" --cupti-site /tmp/cupti_site 2>&1 | tail -25
date -u

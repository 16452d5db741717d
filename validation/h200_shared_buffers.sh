#!/bin/bash
# One GPU-machine call (docs/validation.md 6j, issue 26): CUPTI's per-thread activity buffers flipped from their
# default, against the window as shipped, on the two loops whose whole runs missed the 10% target (6i):
#   1. paired inside HF Trainer's and timm's own steps (h200_cupti_kinds.sh: plain, cupti, shared), SECONDS_PER_LOOP each;
#   2. whole runs, one process per run, the modes rotated each round (light_ab.py: cupti, shared; ROUNDS rounds).
#   WHEELS=.dev24 bash validation/h200_shared_buffers.sh
set -u
. validation/device_site.sh
SITE_READY=1 LOOPS="hf timm" MODES=plain,cupti,shared SECONDS_PER_LOOP=${SECONDS_PER_LOOP:-40} \
  bash validation/h200_cupti_kinds.sh
left=$(( ${DEADLINE_S:-560} - SECONDS ))
timeout $(( left + 20 )) python3 validation/light_ab.py "$OUT/ab" --rounds "${ROUNDS:-3}" --deadline-s "$left" \
  --check-budget-s 0 --run-s 20 --plan "hf:cupti,shared;timm:cupti,shared" --cupti-site /tmp/cupti_site 2>&1 | tail -25
date -u

#!/bin/bash
# One GPU-machine call (issue 26, docs/validation.md 6k): PM sampling and kernel records over the same steps.
#   1. validation/pm_overlap_probe.py: four loops of known shape, the launch counters, a detach inside a PM window;
#   2. paired_steps.py's `pmk` mode (PM with the kernel records inside it) in HF Trainer, timm and Lightning's own
#      steps, SECONDS_PER_LOOP each: PM's busy share against the kernels', sample by sample, on real loops.
#   WHEELS=.dev24 bash validation/h200_pm_overlap.sh
# Wheels as validation/h200_pm_probe.sh.
set -u
. validation/device_site.sh
. validation/pm_site.sh
PYTHONPATH=/tmp/pm_site:$PYTHONPATH timeout ${PROBE_S:-240} python3 validation/pm_overlap_probe.py "$OUT/pm_overlap.json" \
  2>&1 | grep -v "USDT\|Warn\|warn" | cut -c1-700 | tail -20
SITE_READY=1 SITE=/tmp/pm_site LOOPS="${LOOPS:-hf timm lightning}" MODES=plain,pmk PREFIX=paired_pmk \
  SECONDS_PER_LOOP=${SECONDS_PER_LOOP:-30} bash validation/h200_cupti_kinds.sh

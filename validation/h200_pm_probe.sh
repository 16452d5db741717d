#!/bin/bash
# One GPU-machine call (issue 26, docs/validation.md 6j): can CUPTI's PM sampling stand in for the light window's
# kernel records? cupti-python 13.3+ (PM sampling's bindings) against the machine's libcupti (torch's CUDA wheels):
#   1. validation/pm_sampling_probe.py: facts, busy share PM against kernel records on three loops, cost on the MLP;
#   2. where the probe configured a metric set: paired_steps.py's plain and pm modes in HF Trainer, timm and
#      Lightning's own steps, SECONDS_PER_LOOP each (no cupti phase: after its detach CUPTI's profiler would not
#      initialize again; the window's cost on these loops is in 6j).
#   WHEELS=.dev24 bash validation/h200_pm_probe.sh
# WHEELS holds, besides device_site.sh's: whl_pm/ (cupti-python 13.4, cuda-pathfinder, pyelftools) and whl_pm_cb/
# (cuda-bindings 13.0.3, installed only where the machine's is older than cupti-python asks).
set -u
. validation/device_site.sh
. validation/pm_site.sh
ls "$LIBDIR" 2>/dev/null | grep -i "cupti\|nvperf"
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
PYTHONPATH=/tmp/pm_site:$PYTHONPATH timeout ${PROBE_S:-200} python3 validation/pm_sampling_probe.py "$OUT/pm_probe.json" \
  --cycles ${CYCLES:-12} 2>&1 | grep -v "USDT\|Warn\|warn" | tail -20
date -u
python3 -c "import json, sys; sys.exit(not json.load(open('$OUT/pm_probe.json')).get('facts', {}).get('metric_set'))" \
  || { echo "no PM metric set configured: paired runs skipped"; exit 0; }
SITE_READY=1 SITE=/tmp/pm_site LOOPS="hf timm lightning" MODES=plain,pm PREFIX=paired_pm \
  SECONDS_PER_LOOP=${SECONDS_PER_LOOP:-40} bash validation/h200_cupti_kinds.sh

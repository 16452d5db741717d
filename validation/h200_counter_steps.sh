#!/bin/bash
# One GPU-machine call (issue 26, docs/validation.md 6l): the light window as shipped (counter steps, then record
# steps) against the window of records alone, whole runs of HF Trainer, timm and Lightning, checked up on the device.
#   WHEELS=.dev24 bash validation/h200_counter_steps.sh
# Wheels as validation/h200_pm_probe.sh (cupti-python 13.4 in whl_pm: the counters need 13.3+).
set -u
. validation/device_site.sh
. validation/pm_site.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 - <<'PY'
import torch; print("torch", torch.__version__, torch.version.cuda)
PY
python3 validation/light_ab.py "$OUT" --cupti-site /tmp/pm_site --rounds ${ROUNDS:-2} --window-steps ${WINDOW_STEPS:-0} \
  --plan "${PLAN:-hf:counters,cupti;timm:counters,cupti;lightning:counters,cupti}" \
  --deadline-s ${DEADLINE_S:-470} --check-budget-s ${CHECK_S:-130} --check-workers ${CHECK_WORKERS:-6} 2>&1 | grep -v "USDT\|Warn\|warn" | cut -c1-600 | tail -40
# the light runs' files a check-up reads (the traces are gzip already), for the tests and a check-up here
cd /tmp/light_ab/runs && tar czf "$OUT/runs.tar.gz" ${TAR_RUNS:-*-counters-0} && du -sh /tmp/light_ab/runs
# every run's small files: its steps, the agent's log and capture, its check-up (the traces stay on the machine)
find . -maxdepth 3 \( -name steps.csv -o -name agent.log -o -name agent.json -o -name checkup.json \) -print0 | \
  tar czf "$OUT/meta.tar.gz" --null -T - ; ls -la "$OUT"

#!/bin/bash
# One GPU-machine call (docs/validation.md 6g and 7i), run from the repository's root with the wheels in WHEELS
# (default .dev24: whl/ msgspec and py-spy, whl_cupti/ cupti-python; validation/device_site.sh):
#  1. HF Trainer whole runs, the CUPTI light window and the full window, ROUNDS_LIGHT rounds (light_ab.py): the light
#     check-up's fix order against the full one's, off the GPU, on traces of the same loop (issue 26);
#  2. Lightning's fused AdamW measured again with ROUNDS interleaved rounds (its 7e figure, 2 rounds, is the
#     corpus's one estimate outside its target; issue 23);
#  3. the GPU-bound transformer's baseline captured and torch.compile measured on it (not measured before), as long
#     as the call's time allows.
#   WHEELS=.dev24 ROUNDS=5 bash validation/h200_rounds_and_light.sh call3
set -u
TAG=${1:-call3}
WHEELS=${WHEELS:-.dev24}
. validation/device_site.sh
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
quiet() { grep -v "USDT\|Warn\|warn\|━\|─\|┃\|│\|round [0-9] done"; }
W=/tmp/r_$TAG; mkdir -p "$W"
echo "== 1. HF Trainer: CUPTI light and full windows"
timeout 200 python3 validation/light_ab.py "$OUT/light_hf" --rounds "${ROUNDS_LIGHT:-2}" --deadline-s 170 \
  --check-budget-s 0 --run-s 15 --plan "hf:cupti,full" --cupti-site /tmp/cupti_site --work "$W/light" 2>&1 \
  | quiet | cut -c1-300 | tail -6
(cd "$W/light/runs" 2>/dev/null && tar czf "$OUT/runs_hf.tgz" hf-*); date -u
echo "== 2. Lightning's fused AdamW again"
python3 validation/framework_corpus.py measure "$W/c" --pairs lightning:fused_optimizer --rounds "${ROUNDS:-5}" \
  --deadline-s 60 --measured tests/data/h200/corpus/measured.json 2>&1 | quiet | cut -c1-400 | tail -3
date -u
echo "== 3. the GPU-bound transformer: baseline and torch.compile"
python3 validation/framework_corpus.py measure "$W/g" --only gpu --rounds 3 --deadline-s 60 2>&1 | quiet \
  | cut -c1-400 | tail -4
date -u
(cd "$W" && tar czf "$OUT/corpus_$TAG.tgz" --exclude='*.pyc' c g); ls -la "$OUT"

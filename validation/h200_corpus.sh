#!/bin/bash
# One GPU-machine call of the framework corpus (validation/framework_corpus.py measure), run from the repository's
# root with the wheels carried in WHEELS (default .dev24: whl/ holds msgspec and py-spy, which that machine lacks).
# JOBS picks the jobs (comma-separated, default all), DEADLINE_S when no new measurement starts. Everything comes
# back as one archive, OUT/corpus_<tag>.tgz (run directories, ab's JSON, measured.json), and the log.
#   JOBS=hf,lightning DEADLINE_S=500 bash validation/h200_corpus.sh call1
# PAIRS=hf:no_host_reads,... measures those fixes again, ab only (no baseline; `measure --pairs`).
# WHAT=try runs `framework_corpus.py try` instead: the jobs' configuration fixes applied by `gpucheckup try`, against
# the hand-edited ab's measurements in tests/data/h200/corpus/measured.json (the same worker counts).
set -u
TAG=${1:-call1}
WHEELS=${WHEELS:-.dev24}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$WHEELS"/whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD/src PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
python3 -c "import torch, transformers, lightning, timm, accelerate; print('torch', torch.__version__, 'transformers', \
transformers.__version__, 'lightning', lightning.__version__, 'timm', timm.__version__, 'accelerate', \
accelerate.__version__)" 2>&1 | tail -1
W=/tmp/corpus_$TAG
python3 validation/framework_corpus.py ${WHAT:-measure} "$W" ${JOBS:+--only $JOBS} ${PAIRS:+--pairs $PAIRS} --rounds ${ROUNDS:-2} \
  --deadline-s ${DEADLINE_S:-500} --measured tests/data/h200/corpus/measured.json 2>&1 | grep -v "USDT\|Warn\|warn\|━\|─\|┃\|│\|round [0-9] done" | cut -c1-400
date -u
(cd /tmp && tar czf "$OUT/corpus_$TAG.tgz" --exclude='*.pyc' "corpus_$TAG"); ls -la "$OUT"

#!/bin/bash
# The fused kernels against eager diffusers at every row's real shapes (scripts/gpu-runs/kernels.py),
# from the kit `make gpu-kit` builds; the JSON lines are also left in $OUT/kernels.jsonl:
#   bash scripts/gpu-runs/kernels.sh
source .gpu/setup.sh || exit 1
export CUDA_VISIBLE_DEVICES=0
bash scripts/gpu-runs/machine.sh
python3 scripts/gpu-runs/kernels.py | tee "$OUT/kernels.jsonl"
exit "${PIPESTATUS[0]}"

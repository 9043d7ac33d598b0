#!/bin/bash
# Wan2.1 runtime variants side by side in one device call (docs/PERFORMANCE.md, "Task speed"):
#   bash scripts/gpu-runs/wan-speed.sh [N] [VARIANT...]
# Each variant runs in its own process (scripts/gpu-runs/wan_speed.py): load, warm-up, N jobs,
# a JSON line a job, also kept in $OUT/speed.jsonl.
n=${1:-3}; shift
variants=${*:-eager regional-compile regional-compile+cfg-batch regional-compile+autotune}
source .gpu/setup.sh || exit 1
export CUDA_VISIBLE_DEVICES=0
rm -rf /tmp/bundles/Qwen  # the device's 64 GB disk holds one big bundle at a time
[ -f /tmp/bundles/Wan-AI/Wan2.1-T2V-1.3B-Diffusers/model_index.json ] || python3 models/wan/build_l0.py --out /tmp/bundles 2>&1 | tail -1
python3 -c 'import torch; print("sdpa priority:", torch._C._get_sdp_priority_order())' 2>&1 | tail -1
for v in $variants; do
  timeout 300 python3 scripts/gpu-runs/wan_speed.py /tmp/bundles/Wan-AI/Wan2.1-T2V-1.3B-Diffusers "$v" "$n" 2>"$OUT/speed-${v//+/_}.log" \
    | tee -a "$OUT/speed.jsonl"; [ "${PIPESTATUS[0]}" = 0 ] || { echo "$v failed:"; tail -5 "$OUT/speed-${v//+/_}.log"; }
done
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv

#!/bin/bash
# parity's wrong runtimes (models/pyworker/faults.py) at a GPU row's pinned shape, on its L0
# bundle, one load (scripts/gpu-runs/faults.py); leaves $OUT/parity-faults-BUILDER.json:
#   bash scripts/gpu-runs/parity-faults.sh wan|qwenimage
source .gpu/setup.sh || exit 1
source scripts/gpu-runs/bundle.sh
export MEDIAQUAL_BUNDLES=${MEDIAQUAL_BUNDLES:-/tmp/bundles}
l0_bundle "$1" >/dev/null || exit 1
case $1 in
wan) args=(--bundle-name Wan-AI/Wan2.1-T2V-1.3B-Diffusers --flow-shift 3.0 --warmup-size 832x480 --warmup-frames 17) ;;
qwenimage) args=(--bundle-name Qwen/Qwen-Image-Edit-2511 --warmup-size 1024x1024) ;;
*) echo "parity-faults.sh: wan or qwenimage, not '$1'" >&2; exit 2 ;;
esac
time python3 scripts/gpu-runs/faults.py "$OUT/parity-faults-$1.json" "$1" "${args[@]}" 2>&1 | tee "$OUT/parity-faults-$1.log"

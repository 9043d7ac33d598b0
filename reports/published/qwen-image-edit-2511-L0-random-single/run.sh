# Reproduce: on a machine with Go, `make gpu-kit` (the kit in .gpu/), carry the repository and
# .gpu/ to an 80 GB H100 (`run` with kind nvidia-h100-x1), then from the repository root (the
# script removes other bundles first: the 57.7 GB bundle needs the disk; the row's engine,
# regional-compile-fused, is the default). Detached (docs/DEVICE-KIT.md section 6): the row's
# wrong runtimes (parity-faults.json and .log, one load, engine eager), then its qualification.
LIMIT=560 QUALIFY=scripts/gpu-runs/faults-and-qualify.sh bash scripts/gpu-runs/detached.sh start Qwen qwenimage
WAIT=560 bash scripts/gpu-runs/detached.sh status
# parity-faults.json and .log alone (as republished at d29da9c, issue #47, on the bundle the builder
# draws now), from the repository root on the device: $OUT/parity-faults-qwenimage.json and .log;
# then text-strength.json and .log:
#   bash scripts/gpu-runs/parity-faults.sh qwenimage
#   source .gpu/setup.sh; MEDIAQUAL_BUNDLES=/tmp/bundles python3 scripts/gpu-runs/text_strength.py $OUT/text-qwen.json qwenimage base,v2 --bundle-name Qwen/Qwen-Image-Edit-2511 --warmup-size 1024x1024
# The qualification above now runs on that bundle too (other weights than results.json's).

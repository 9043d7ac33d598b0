# Reproduce: on a machine with Go, `make gpu-kit` (the kit in .gpu/), carry the repository and
# .gpu/ to an 80 GB H100 (`run` with kind nvidia-h100-x1), then from the repository root (the
# script removes other bundles first: the 57.7 GB bundle needs the disk; the row's engine,
# regional-compile-fused, is the default). Detached (docs/DEVICE-KIT.md section 6): the row's
# wrong runtimes (parity-faults.json and .log, one load, engine eager), then its qualification.
LIMIT=560 QUALIFY=scripts/gpu-runs/faults-and-qualify.sh bash scripts/gpu-runs/detached.sh start Qwen qwenimage
WAIT=560 bash scripts/gpu-runs/detached.sh status

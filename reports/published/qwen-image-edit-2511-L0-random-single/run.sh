# Reproduce: on a machine with Go, `make gpu-kit` (the kit in .gpu/), carry the repository and
# .gpu/ to an H200, then from the repository root (the script removes other bundles first: the
# 57.7 GB bundle needs the disk; the row's engine, regional-compile-fused, is the default):
LIMIT=500 bash scripts/gpu-runs/qualify.sh Qwen qwen

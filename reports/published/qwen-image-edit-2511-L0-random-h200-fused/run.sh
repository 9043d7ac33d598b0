# Reproduce: on a machine with Go, `make gpu-kit` (the kit in .gpu/), carry the repository and
# .gpu/ to an H200, then from the repository root (each script removes other bundles first: the
# 57.7 GB bundle needs the disk). The kernel's launches, the engines side by side, then the run
# (the row's engine, regional-compile-fused, is the default):
python3 scripts/gpu-runs/norm_rope_probe.py
bash scripts/gpu-runs/speed.sh qwenimage 2 regional-compile+profile regional-compile-fused+profile
LIMIT=470 bash scripts/gpu-runs/qualify.sh Qwen qwen

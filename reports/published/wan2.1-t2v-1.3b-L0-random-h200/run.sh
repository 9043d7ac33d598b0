# Reproduce: on a machine with Go, `make gpu-kit` (the kit in .gpu/), carry the repository and
# .gpu/ to an H200, then from the repository root:
bash scripts/gpu-runs/qualify.sh Wan2.1 wan
# The engine comparison (engines.txt) and the encoder figures (docs/PERFORMANCE.md) came from:
#   bash scripts/gpu-runs/engines.sh Wan-AI/Wan2.1-T2V-1.3B wan 3
#   bash scripts/gpu-runs/encode-bench.sh short

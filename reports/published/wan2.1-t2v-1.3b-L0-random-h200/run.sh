# Reproduce: on a machine with Go, `make gpu-kit` (the kit in .gpu/), carry the repository and
# .gpu/ to an H200, then from the repository root:
MEDIAQUAL_ENGINE=regional-compile-graphs bash scripts/gpu-runs/qualify.sh Wan2.1 wan
# The engine comparison (engines.txt, 2026-11-30) and the encoder figures (docs/PERFORMANCE.md) came from:
#   bash scripts/gpu-runs/engines.sh Wan-AI/Wan2.1-T2V-1.3B wan 3
#   bash scripts/gpu-runs/encode-bench.sh short
# The runtime variants side by side (docs/PERFORMANCE.md, "Task speed"):
#   bash scripts/gpu-runs/speed.sh wan 4 regional-compile regional-compile+graphs regional-compile+cfg-batch+graphs eager+graphs

# Reproduce: on a machine with Go, `make gpu-kit` (the kit in .gpu/), carry the repository and
# .gpu/ to an H200, then from the repository root (the speed comparison first, then the run):
bash scripts/gpu-runs/speed.sh wan 3 regional-compile-fused-graphs regional-compile-graphs
MEDIAQUAL_ENGINE=regional-compile-fused-graphs bash scripts/gpu-runs/qualify.sh Wan2.1 wan

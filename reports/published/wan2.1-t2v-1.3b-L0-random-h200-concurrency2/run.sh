# Reproduce: `make gpu-kit` here, carry the repository and .gpu/ to an H200, then from the
# repository root:
MEDIAQUAL_CONCURRENCY=2 bash scripts/gpu-runs/qualify.sh Wan2.1 wan

# Reproduce: `make gpu-kit` here, carry the repository and .gpu/ to an H200, then from the
# repository root:
# The row's engine was regional-compile then (regional-compile-graphs since: the same bytes):
MEDIAQUAL_ENGINE=regional-compile MEDIAQUAL_CONCURRENCY=2 bash scripts/gpu-runs/qualify.sh Wan2.1 wan

# Reproduce: on a machine with Go, `make gpu-kit` (the kit in .gpu/), carry the repository and
# .gpu/ to an H200, then from the repository root (the row's engine, regional-compile-fused-graphs,
# is the default). kernels.jsonl came from the day's first device call, `bash scripts/gpu-runs/kernels.sh`.
LIMIT=205 bash scripts/gpu-runs/qualify.sh Wan2.1 wan

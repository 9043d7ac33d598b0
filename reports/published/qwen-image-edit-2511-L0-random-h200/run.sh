# Reproduce: `make gpu-kit` here, carry the repository and .gpu/ to an H200, then from the
# repository root (the script removes other bundles first: the 57.7 GB bundle needs the disk):
# The row was eager then; its engine is regional-compile since, so the run names eager:
MEDIAQUAL_ENGINE=eager bash scripts/gpu-runs/qualify.sh Qwen qwen

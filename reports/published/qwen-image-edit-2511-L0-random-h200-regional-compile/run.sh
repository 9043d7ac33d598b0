# Reproduce: `make gpu-kit`, carry the repository and .gpu/ to an H200, then from the repository
# root (the script removes other bundles first: the 57.7 GB bundle needs the disk). The row's
# engine is regional-compile since this run, so the variable only pins it:
MEDIAQUAL_ENGINE=regional-compile bash scripts/gpu-runs/qualify.sh Qwen qwen

# Reproduce: `make gpu-kit`, carry the repository and .gpu/ to an H200, then from the repository
# root (the script removes other bundles first: the 57.7 GB bundle needs the disk). The row's
# engine, regional-compile, is the default:
LIMIT=500 bash scripts/gpu-runs/qualify.sh Qwen qwen

# Reproduce: `make gpu-kit` here, carry the repository and .gpu/ to an H200, then from the
# repository root (the script removes other bundles first: the 57.7 GB bundle needs the disk):
bash scripts/gpu-runs/qualify.sh Qwen qwen

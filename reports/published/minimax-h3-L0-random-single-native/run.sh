# Reproduce: `make gpu-kit` here, carry the repository and .gpu/ to an H200, then from the
# repository root (STEPS=N for a shorter shakedown; this run used the row's 50, and the default
# LIMIT, 540 s):
bash scripts/gpu-runs/minimax-native.sh

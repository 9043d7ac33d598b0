# Reproduce: `make gpu-kit` here, carry the repository and .gpu/ to an H200, then from the
# repository root:
bash scripts/gpu-runs/native.sh Wan-AI/Wan2.2-TI2V-5B models/wan/build_l0.py --wan22

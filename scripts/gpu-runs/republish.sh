#!/bin/bash
# The rows issue #40 republished, one after the other on one GPU (run detached: detached.sh with
# QUALIFY=scripts/gpu-runs/republish.sh): Qwen-Image-Edit-2511's wrong runtimes and its
# qualification, then Wan2.1's (its bundle replaces Qwen's on the 64 GB disk).
bash scripts/gpu-runs/parity-faults.sh qwenimage
LIMIT=${QWEN_LIMIT:-560} bash scripts/gpu-runs/qualify.sh Qwen qwenimage
bash scripts/gpu-runs/parity-faults.sh wan
LIMIT=${WAN_LIMIT:-260} bash scripts/gpu-runs/qualify.sh Wan2.1 wan

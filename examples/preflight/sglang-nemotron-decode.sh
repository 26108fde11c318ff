#!/usr/bin/env bash
# Decode server: Nemotron-H 8B over two GPUs.
export SGLANG_MAMBA_SSM_DTYPE=float32
CUDA_VISIBLE_DEVICES=2,3 sglang serve nvidia/Nemotron-H-8B-Base-8K --tp-size 2 \
    --disaggregation-mode decode --disaggregation-transfer-backend nixl \
    --trust-remote-code --port 30001

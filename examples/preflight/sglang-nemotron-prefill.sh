#!/usr/bin/env bash
# Prefill server: Nemotron-H 8B on one GPU.
export SGLANG_MAMBA_SSM_DTYPE=float32
CUDA_VISIBLE_DEVICES=0 sglang serve nvidia/Nemotron-H-8B-Base-8K \
    --disaggregation-mode prefill --disaggregation-transfer-backend nixl \
    --trust-remote-code --port 30000

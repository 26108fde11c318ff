#!/usr/bin/env bash
# Decode engine: Nemotron-H 8B over two GPUs.
export VLLM_SSM_CONV_STATE_LAYOUT=DS
CUDA_VISIBLE_DEVICES=2,3 vllm serve nvidia/Nemotron-H-8B-Base-8K \
    --tensor-parallel-size 2 --port 8200 --trust-remote-code --attention-backend FLASH_ATTN \
    --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}'

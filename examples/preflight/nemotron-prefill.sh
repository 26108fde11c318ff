#!/usr/bin/env bash
# Prefill engine: Nemotron-H 8B on one GPU.
export VLLM_SSM_CONV_STATE_LAYOUT=DS
CUDA_VISIBLE_DEVICES=0 vllm serve nvidia/Nemotron-H-8B-Base-8K \
    --port 8100 --trust-remote-code --attention-backend FLASH_ATTN \
    --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'

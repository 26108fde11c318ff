#!/usr/bin/env bash
# Decode engine: Qwen3.5-0.8B over three GPUs, TP written --tp.
export VLLM_SSM_CONV_STATE_LAYOUT=DS
vllm serve Qwen/Qwen3.5-0.8B --port 8200 --tp 3 \
    --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}'

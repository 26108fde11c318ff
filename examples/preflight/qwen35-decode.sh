#!/usr/bin/env bash
# Decode engine: Qwen3.5-0.8B over four GPUs.
export VLLM_SSM_CONV_STATE_LAYOUT=DS
CUDA_VISIBLE_DEVICES=4,5,6,7 vllm serve Qwen/Qwen3.5-0.8B \
    --tensor-parallel-size 4 --port 8200 --max-model-len 32768 \
    --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}'

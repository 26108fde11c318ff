#!/usr/bin/env bash
# Prefill engine: Qwen3.5-0.8B on one GPU, vLLM's default flags.
export VLLM_SSM_CONV_STATE_LAYOUT=DS
CUDA_VISIBLE_DEVICES=0 vllm serve Qwen/Qwen3.5-0.8B \
    --port 8100 --max-model-len 32768 \
    --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'

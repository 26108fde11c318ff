#!/usr/bin/env bash
# Prefill engine: Qwen3.5-0.8B on one GPU, vLLM's default flags.
set -euo pipefail
MODEL=${MODEL:-Qwen/Qwen3.5-0.8B}      # the caller may name another checkpoint
PORT=8100
export VLLM_SSM_CONV_STATE_LAYOUT=DS
CUDA_VISIBLE_DEVICES=0 vllm serve "$MODEL" \
    --port "$PORT" --max-model-len 32768 \
    --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'

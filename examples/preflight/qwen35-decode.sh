#!/usr/bin/env bash
# Decode engine: Qwen3.5-0.8B over four GPUs.
set -euo pipefail
MODEL=${MODEL:-Qwen/Qwen3.5-0.8B}      # the caller may name another checkpoint
PORT=8200
export VLLM_SSM_CONV_STATE_LAYOUT=DS
CUDA_VISIBLE_DEVICES=4,5,6,7 vllm serve "$MODEL" \
    --tensor-parallel-size 4 --port "$PORT" --max-model-len 32768 \
    --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}'

#!/usr/bin/env bash
# Decode engine as deployed: the model comes from the host's serving config.
set -euo pipefail
MODEL=$(cat /etc/serving/model)
export VLLM_SSM_CONV_STATE_LAYOUT=DS
CUDA_VISIBLE_DEVICES=4,5,6,7 vllm serve "$MODEL" \
    --tensor-parallel-size 4 --port 8200 --max-model-len 32768 \
    --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}'

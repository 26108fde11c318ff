#!/usr/bin/env bash
# Prefill engine: Qwen3.5-0.8B, with SGLang's --disaggregation-mode written by habit.
export VLLM_SSM_CONV_STATE_LAYOUT=DS
vllm serve Qwen/Qwen3.5-0.8B --port 8100 --disaggregation-mode prefill \
    --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'

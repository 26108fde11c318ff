#!/usr/bin/env bash
# Prefill server: Qwen3-Next-80B over two GPUs, SGLang over NIXL.
CUDA_VISIBLE_DEVICES=0,1 python -m sglang.launch_server \
    --model-path Qwen/Qwen3-Next-80B-A3B-Instruct --tp 2 \
    --disaggregation-mode prefill --disaggregation-transfer-backend nixl \
    --page-size 64 --port 30000

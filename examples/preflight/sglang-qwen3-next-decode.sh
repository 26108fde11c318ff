#!/usr/bin/env bash
# Decode server: Qwen3-Next-80B on one GPU, with SGLang's default page size.
CUDA_VISIBLE_DEVICES=2 python -m sglang.launch_server \
    --model-path Qwen/Qwen3-Next-80B-A3B-Instruct --tp 1 \
    --disaggregation-mode decode --disaggregation-transfer-backend nixl \
    --port 30001

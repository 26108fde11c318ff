"""Reading what users give: model configs and presets, plan documents, ``vllm serve`` lines."""

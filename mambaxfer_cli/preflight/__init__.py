"""Preflight's shared half: what both engines' preflights share (``report``); each engine's
preflight lives in its package (``engines/vllm/preflight/``, ``engines/sglang/preflight.py``)."""

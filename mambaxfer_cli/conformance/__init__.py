"""Conformance's shared half: what both engines' conformance reports share (``report``); each
engine's run lives in its package (``engines/vllm/conformance/``, ``engines/sglang/conformance.py``)."""

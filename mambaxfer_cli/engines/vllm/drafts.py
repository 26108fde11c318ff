"""Speculative decoding's draft layers in vLLM's KV cache.

A speculative method that drafts with a model (MTP, EAGLE, EAGLE3, a draft model, DFlash, ...)
builds the drafter in the target's worker: its cache-keeping layers register after the target's,
tagged ``is_draft`` (``get_kv_cache_spec``), and ``is_draft`` takes no part in spec equality, so
they join the target's KV-cache groups and the connector moves their pages with the target's.
mambaxfer plans the target's layers only; these say where that differs from vLLM's engine.
"""

from __future__ import annotations

from typing import Any, Mapping

# vLLM's SpeculativeMethod values that draft without a model (n-gram lookup, suffix trees), and the
# draft "model" names that select n-gram when no method is given (SpeculativeConfig.__post_init__).
DRAFTLESS_METHODS = ("ngram", "ngram_gpu", "suffix")
NGRAM_MODELS = ("ngram", "[ngram]")

RULE = ("vLLM keeps the draft's attention layers in the engine's KV-cache groups (get_kv_cache_spec: "
        "is_draft layers) and its connector moves their pages too")


def drafts(speculative: Mapping[str, Any]) -> bool:
    """Whether a ``--speculative-config`` drafts with a model. Without a method vLLM picks one:
    n-gram for the model names above, ``draft_model`` without a model, else the draft checkpoint's."""
    if not speculative:
        return False
    method = speculative.get("method")
    if method is None:
        return speculative.get("model") not in NGRAM_MODELS
    return str(method) not in DRAFTLESS_METHODS


def method_name(speculative: Mapping[str, Any]) -> str:
    """The method as vLLM resolves it where the config leaves it out."""
    method = speculative.get("method")
    if method is not None:
        return str(method)
    model = speculative.get("model")
    if model is None:
        return "draft_model (vLLM's default without a model)"
    return "ngram" if model in NGRAM_MODELS else f"the one {model}'s config names"

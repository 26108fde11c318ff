"""What the core reads of a model's start-up: its architectures and the attention heads a TP size
must divide (``ModelConfig.verify_with_parallel_config``, which ``planning/layout.py`` follows).
An engine's own start-up rules live in its package (``engines/vllm/startup.py``)."""

from __future__ import annotations

from typing import Any, Mapping

from mambaxfer_cli.planning.model import ModelSpec


def attention_heads(model: ModelSpec) -> int:
    """``total_num_attention_heads`` as vLLM's arch-config reads it: the config's
    ``num_attention_heads``, 0 where it has none (a pure-Mamba model)."""
    return model.num_q_heads or 0


def parallel_refusal(model: ModelSpec, tp: int) -> str | None:
    """``ModelConfig.verify_with_parallel_config``'s first check: the attention heads must divide
    by the TP size, or the engine does not start (ValueError). None where it passes."""
    heads = attention_heads(model)
    if heads % tp:
        return f"{heads} attention heads do not divide by TP {tp}"
    return None


def architecture_names(config: Mapping[str, Any]) -> tuple[str, ...]:
    """The config's ``architectures`` that are names; none where it is not a list (a config may
    hold anything there)."""
    found = config.get("architectures")
    return tuple(a for a in found if isinstance(a, str)) if isinstance(found, (list, tuple)) else ()

"""What the core reads of a model's start-up: its architectures and the attention heads a TP size
must divide; an engine's own start-up rules live in its package."""

from __future__ import annotations

from typing import Any, Mapping

from mambaxfer_cli.planning.model import ModelSpec


def attention_heads(model: ModelSpec) -> int:
    """``total_num_attention_heads`` as vLLM's arch-config reads it (0: none, a pure-Mamba model)."""
    return model.num_q_heads or 0


def parallel_refusal(model: ModelSpec, tp: int) -> str | None:
    """``ModelConfig.verify_with_parallel_config``'s first check: the attention heads divide by TP."""
    heads = attention_heads(model)
    if heads % tp:
        return f"{heads} attention heads do not divide by TP {tp}"
    return None


def architecture_names(config: Mapping[str, Any]) -> tuple[str, ...]:
    """The config's ``architectures`` that are names (none where it is not a list)."""
    found = config.get("architectures")
    return tuple(a for a in found if isinstance(a, str)) if isinstance(found, (list, tuple)) else ()

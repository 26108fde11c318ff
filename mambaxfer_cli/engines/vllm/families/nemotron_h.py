"""Nemotron-H in vLLM: its class is SupportsReplaySSM (nemotron_h.py; 0.34 adds nano_nemotron_vl.py)."""

from mambaxfer_cli.planning.model import ModelSpec


def replay_ssm(model: ModelSpec) -> bool | None:
    return model.family == "Nemotron-H" or None

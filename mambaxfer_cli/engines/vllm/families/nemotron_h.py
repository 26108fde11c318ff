"""Nemotron-H in vLLM: its class is SupportsReplaySSM (nemotron_h.py; 0.34 adds nano_nemotron_vl.py)."""

from mambaxfer_cli.planning.model import ModelSpec

# SpeculativeConfig: its MTP method names (aliases of "mtp"), by the release that added them.
MTP_METHODS = {"0.33": ("nemotron_h_mtp",), "0.34": ("nemotron3_5_transcribe_mtp",)}


def replay_ssm(model: ModelSpec) -> bool | None:
    return model.family == "Nemotron-H" or None

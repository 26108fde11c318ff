"""Nemotron-H in vLLM: its class is SupportsReplaySSM (nemotron_h.py; 0.34 adds nano_nemotron_vl.py)."""

from typing import Any

from mambaxfer_cli.errors import Refused, UserError, quoted
from mambaxfer_cli.limits import MAX_LAYERS
from mambaxfer_cli.planning.model import ModelSpec

# SpeculativeConfig: its MTP method names (aliases of "mtp"), by the release that added them.
MTP_METHODS = {"0.33": ("nemotron_h_mtp",), "0.34": ("nemotron3_5_transcribe_mtp",)}


def replay_ssm(model: ModelSpec) -> bool | None:
    return model.family == "Nemotron-H" or None


# transformers' NemotronHConfig where mtp_hybrid_override_pattern is absent: full_attention, moe.
MTP_PATTERN_DEFAULT = "*E"


def mtp_pattern_layers(model_type: str, pattern: Any, steps: int, where: str) -> int | None:
    """The cache-keeping layers NemotronHMultiTokenPredictor builds: one step of the pattern,
    "*" an attention decoder layer, "E" an MoE one (no cache)."""
    if model_type != "nemotron_h":
        return None
    if steps != 1:
        raise Refused("vLLM does not start: \"AssertionError: Only one MTP layer is supported for "
                      f"NemotronH-MTP\" (NemotronHMultiTokenPredictor: num_nextn_predict_layers {steps})")
    pattern = MTP_PATTERN_DEFAULT if pattern is None else pattern
    if not isinstance(pattern, str) or not pattern or len(pattern) > MAX_LAYERS:
        raise UserError(f"{where}: key 'mtp_hybrid_override_pattern' must be a pattern like '*E', "
                        f"got {quoted(pattern)}")
    other = [c for c in pattern if c not in "*E"]
    if other:
        raise Refused(f"vLLM does not start: \"NotImplementedError: Pattern char '{other[0]}' in {pattern} not "
                      "implemented\" (NemotronHMultiTokenPredictor builds only '*' and 'E' layers)")
    return pattern.count("*")

"""Nemotron-H in vLLM: its class is SupportsReplaySSM (nemotron_h.py; 0.34 adds nano_nemotron_vl.py)."""

from typing import Any, Mapping

from mambaxfer_cli.errors import Refused, UserError, quoted
from mambaxfer_cli.limits import MAX_LAYERS
from mambaxfer_cli.planning.model import ModelSpec

MTP_METHODS = {"0.33": ("nemotron_h_mtp",), "0.34": ("nemotron3_5_transcribe_mtp",)}


def replay_ssm(model: ModelSpec) -> bool | None:
    return model.family == "Nemotron-H" or None


# transformers' NemotronHConfig.__post_init__ (the config vLLM reads): mtp_layers_block_type, legacy
# names remapped (remap_legacy_layer_types), is the MTP pattern (mtp_hybrid_override_pattern, a
# property of it); the pattern key is read only where that list is absent or its default, *E.
MTP_PATTERN_DEFAULT = "*E"
MTP_BLOCKS = {"full_attention": "*", "attention": "*", "moe": "E", "linear_attention": "M", "mamba": "M", "mlp": "-"}


def mtp_pattern(config: Mapping[str, Any], where: str) -> str:
    blocks, pattern = config.get("mtp_layers_block_type"), config.get("mtp_hybrid_override_pattern")
    if blocks is not None:
        if not isinstance(blocks, list) or not blocks or len(blocks) > MAX_LAYERS:
            raise UserError(f"{where}: key 'mtp_layers_block_type' must be a list like [\"attention\", \"moe\"], "
                            f"got {quoted(blocks)}")
        bad = ", ".join(sorted({repr(b) for b in blocks if not isinstance(b, str) or b not in MTP_BLOCKS}))
        if bad:
            raise Refused(f"vLLM does not start: \"ValueError: `mtp_layers_block_type` contains invalid types: "
                          f"{{{bad}}}\" (NemotronHConfig.validate_layer_type: full_attention, linear_attention, "
                          "moe, mlp or their legacy names)")
        listed = "".join(MTP_BLOCKS[b] for b in blocks)
        if listed != MTP_PATTERN_DEFAULT or pattern is None:
            return listed
    return MTP_PATTERN_DEFAULT if pattern is None else pattern


def mtp_pattern_layers(model_type: str, config: Mapping[str, Any], steps: int, where: str) -> int | None:
    """The cache-keeping layers NemotronHMultiTokenPredictor builds: one step of the pattern,
    "*" an attention decoder layer, "E" an MoE one (no cache)."""
    if model_type != "nemotron_h":
        return None
    if steps != 1:
        raise Refused("vLLM does not start: \"AssertionError: Only one MTP layer is supported for "
                      f"NemotronH-MTP\" (NemotronHMultiTokenPredictor: num_nextn_predict_layers {steps})")
    pattern = mtp_pattern(config, where)
    if not isinstance(pattern, str) or not pattern or len(pattern) > MAX_LAYERS:
        raise UserError(f"{where}: key 'mtp_hybrid_override_pattern' must be a pattern like '*E', "
                        f"got {quoted(pattern)}")
    other = [c for c in pattern if c not in "*E"]
    if other:
        raise Refused(f"vLLM does not start: \"NotImplementedError: Pattern char '{other[0]}' in {pattern} not "
                      "implemented\" (NemotronHMultiTokenPredictor builds only '*' and 'E' layers)")
    return pattern.count("*")


def mtp_layers_built(hf: Any) -> int | None:
    """The attention layers NemotronHMultiTokenPredictor builds of vLLM's loaded config (the probe's)."""
    if getattr(hf, "model_type", "") != "nemotron_h":
        return None
    pattern = getattr(hf, "mtp_hybrid_override_pattern", None)
    return pattern.count("*") if isinstance(pattern, str) else None

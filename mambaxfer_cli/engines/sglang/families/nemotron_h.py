"""Nemotron-H in SGLang."""
from collections.abc import Mapping
from typing import Any

from mambaxfer_cli.engines.sglang.families import FamilyRule
from mambaxfer_cli.errors import Refused

SGLANG_0_5_23 = {"Nemotron-H": FamilyRule(True, config_ssm_dtype=True, note="configs/nemotron_h.py")}
# Nemotron-Nano-VL is a Nemotron-H inside (its llm_config, which mamba2_config hands the pool): read so.
# The MTP draft class ModelConfig._config_draft_model gives the target's own checkpoint (one layer).
MTP_DRAFTS = {a: "NemotronHForCausalLMMTP" for a in ("NemotronHForCausalLM", "NemotronHPuzzleForCausalLM")}


def check_mtp_pattern(config: Mapping[str, Any]) -> None:
    """Refuse an MTP pattern SGLang does not build (NemotronHConfig._resolve_mtp_layers_block_type,
    NemotronHMultiTokenPredictor, the one-layer draft pool)."""
    blocks = config.get("mtp_layers_block_type")
    pattern = str(config.get("mtp_hybrid_override_pattern", "*E"))
    if blocks is not None and blocks != ["attention", "moe"]:
        valid = {"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}
        if not isinstance(blocks, list) or not set(map(str, blocks)) <= set(valid):
            raise Refused(f"SGLang does not start: \"mtp_layers_block_type contains invalid types\" (NemotronHConfig"
                          f"._validate_layers_block_type: mamba, attention, mlp or moe; got {blocks!r})")
        pattern = "".join(valid[b] for b in blocks)
    other = [c for c in pattern if c not in "*E"]
    if other:
        raise Refused(f"SGLang does not start: \"NotImplementedError: Pattern char '{other[0]}' in {pattern} not "
                      "implemented\" (NemotronHMultiTokenPredictor builds only '*' and 'E' layers)")
    late = pattern.find("*", 1)
    if late > 0:    # its attention's layer id is its place in the pattern, past the one-layer pool
        raise Refused(f"SGLang fails at its first draft forward: \"IndexError: list index out of range\" "
                      f"(MHATokenToKVPool.set_kv_buffer: NemotronHMultiTokenPredictor gives the '*' at place {late} "
                      f"of {pattern} layer id {late}; the draft pool keeps one layer, num_nextn_predict_layers = 1)")


MTP_CHECKS = dict.fromkeys(MTP_DRAFTS, check_mtp_pattern)

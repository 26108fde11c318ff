"""SGLang 0.5.23 as data: its state dtypes, the families it serves, and its refusals as it words
them. Where a rule lives in SGLang's code, the comment names the function."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

NIXL = "nixl"
MOONCAKE = "mooncake"
BACKENDS = (NIXL, MOONCAKE)


@dataclass(frozen=True)
class FamilyRule:
    """How SGLang serves one model family (keyed by the family label mambaxfer reads)."""

    served: bool                     # mambaxfer answers for it under this release
    config_ssm_dtype: bool = False   # its config hook passes the config to mamba2_state_dtype
    note: str = ""
    engine_serves: bool = False      # not served by mambaxfer, but SGLang serves it (srt/models/ has it)


@dataclass(frozen=True)
class Release:
    """One SGLang release: what mambaxfer needs to answer for it."""

    version: str
    backends: tuple[str, ...]
    conv_dtype_env: str
    conv_dtype_default: str
    ssm_dtype_env: str
    ssm_dtype_default: str
    ssm_dtype_config_key: str
    state_dtypes: tuple[str, ...]            # the names mamba2_state_dtype accepts
    families: Mapping[str, FamilyRule]
    messages: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "families", MappingProxyType(dict(self.families)))
        object.__setattr__(self, "messages", MappingProxyType(dict(self.messages)))

    @property
    def label(self) -> str:
        return f"SGLang {self.version}"

    def message(self, key: str, **values: object) -> str:
        """A refusal as SGLang words it, with its values filled in."""
        return self.messages[key].format(**values)


# Refusals quoted from SGLang 0.5.23 (file, function):
_MESSAGES = {
    # disaggregation/common/conn.py, CommonKVReceiver (the prefill server info sanity checks)
    "page_size": ("Page size mismatch: prefill server has page_size={prefill}, but decode server has "
                  "page_size={decode}. Both servers must use the same --page-size value."),
    "kv_cache_dtype": ("KV cache dtype mismatch: prefill server has kv_cache_dtype={prefill}, but "
                       "decode server has kv_cache_dtype={decode}. Both servers must use the same "
                       "--kv-cache-dtype value."),
    # disaggregation/common/conn.py, _resolve_rank_mapping (an assert)
    "pp": "Decode pp size ({decode}) should be equal to prefill pp size ({prefill}) or 1",
    # disaggregation/nixl/conn.py, the MAMBA branch of the state send loop
    "nixl_replicated": ("Replicated Mamba PD state transfer currently requires matching "
                        "prefill/decode attention TP sizes"),
    # disaggregation/utils.py, should_send_replicated_state (Mooncake's path reaches it)
    "replicated_divide": ("One attention TP size must divide the other for replicated-state "
                          "transfer: src={prefill}, dst={decode}"),
    # disaggregation/mooncake/conn.py, the unified-memory KV check
    "unified_memory": ("--enable-unified-memory does not support different prefill / decode "
                       "attention TP sizes (prefill={prefill}, decode={decode}): the "
                       "whole-envelope state cannot be TP-resliced."),
    # disaggregation/mooncake/conn.py, _send_mamba_state
    "slot_size": ("Prefill/Decode Mamba slot size mismatch (src={prefill}, dst={decode}). "
                  "Configure matching persistent state layouts on both peers."),
    # layers/attention/mamba/mamba.py, MambaMixer2.__init__ (asserts)
    "mamba2_heads": "Tensor parallel world size must divide num heads.",
    "mamba2_groups": ("If tensor parallel world size does not divide num_groups, then num_groups "
                      "must equal 1."),
    # configs/mamba_utils.py, Mamba2StateShape.create_full_rank (an assert)
    "mamba1_intermediate": ("Mamba-1 intermediate_size ({intermediate}) must be divisible by "
                            "tp_world_size ({tp})"),
}

# The families mambaxfer reads, as SGLang 0.5.23 serves them: srt/models/ holds the model file,
# and the config class's mamba2_cache_params says whether it passes the config to
# mamba2_state_dtype (so that the config's mamba_ssm_dtype counts).
_FAMILIES = {
    "Mamba (HF)": FamilyRule(True, note="configs/mamba.py MambaConfig (full-rank Mamba2 layout)"),
    "Falcon-Mamba": FamilyRule(True, note="configs/mamba.py FalconMambaConfig"),
    "Mamba2": FamilyRule(True, note="configs/mamba2.py"),
    "Nemotron-H": FamilyRule(True, config_ssm_dtype=True, note="configs/nemotron_h.py"),
    "Granite-4.0-H / Bamba": FamilyRule(True, note="configs/granitemoehybrid.py (GraniteMoeHybrid)"),
    "Falcon-H1": FamilyRule(True, config_ssm_dtype=True, note="configs/falcon_h1.py"),
    "Qwen3-Next / Qwen3.5": FamilyRule(True, config_ssm_dtype=True,
                                       note="configs/qwen3_next.py (Qwen3.5 inherits it)"),
    "Jamba": FamilyRule(False, note="SGLang 0.5.23 has no Jamba model file"),
    "Zamba2": FamilyRule(False, note="SGLang 0.5.23 has no Zamba2 model file"),
    "Kimi-Linear": FamilyRule(False, engine_serves=True,
                              note="SGLang 0.5.23 serves Kimi-Linear (models/kimi_linear.py), but mambaxfer does not "
                                   "model its KDA and MLA transfer yet"),
    "Kimi-K3": FamilyRule(False, engine_serves=True,
                          note="SGLang 0.5.23 serves Kimi-K3 (srt/models/kimi_k3.py), but mambaxfer does not model "
                               "its KDA and MLA transfer for SGLang"),
    "Bailing-V3": FamilyRule(False, engine_serves=True, note="mambaxfer does not model SGLang 0.5.23's KDA transfer"),
    "AliceAI": FamilyRule(False, engine_serves=True, note="mambaxfer does not model SGLang 0.5.23's KDA transfer"),
    "Qwen4Exp": FamilyRule(False, engine_serves=True,
                           note="SGLang 0.5.23 serves Qwen4Exp (models/qwen4_exp.py) with a PLE state mambaxfer does "
                                "not model for SGLang"),
    "GLM-5-Next": FamilyRule(False, engine_serves=True,
                             note="SGLang 0.5.23 serves GLM-5-Next (models/glm5_next.py, whose EntryClass is "
                                  "Glm5NextForConditionalGeneration only), but mambaxfer does not model its KDA, "
                                  "sparse MLA and indexer transfer for SGLang"),
}

SGLANG_0_5_23 = Release(
    version="0.5.23",
    backends=BACKENDS,
    conv_dtype_env="SGLANG_MAMBA_CONV_DTYPE",
    conv_dtype_default="bfloat16",
    ssm_dtype_env="SGLANG_MAMBA_SSM_DTYPE",
    ssm_dtype_default="float32",
    ssm_dtype_config_key="mamba_ssm_dtype",
    state_dtypes=("float32", "bfloat16", "float16"),
    families=_FAMILIES,
    messages=_MESSAGES,
)

RELEASES: Mapping[str, Release] = MappingProxyType({SGLANG_0_5_23.version: SGLANG_0_5_23})

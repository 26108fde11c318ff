"""SGLang 0.5.23 as data: its state dtypes, the families it serves, and its refusals as it words
them. Where a rule lives in SGLang's code, the comment names the function."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from mambaxfer_cli.engines.sglang.families import FamilyRule, merged

NIXL = "nixl"
MOONCAKE = "mooncake"
BACKENDS = (NIXL, MOONCAKE)
# --disaggregation-transfer-backend's default (server_args, arg_groups/fields/disagg.py).
DEFAULT_BACKEND = MOONCAKE


@dataclass(frozen=True)
class Release:
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
    # disaggregation/nixl/conn.py, the QSA_PENDING branch of the state send loop (after MAMBA's)
    "nixl_qsa": ("PD Disaggregation does NOT support PD different TP sizes for non-MLA QSA_PENDING "
                 "hybrid models yet."),
    # disaggregation/utils.py, should_send_replicated_state (Mooncake's path reaches it)
    "replicated_divide": ("One attention TP size must divide the other for replicated-state "
                          "transfer: src={prefill}, dst={decode}"),
    # disaggregation/nixl/conn.py _send_kvcache_generic, mooncake/conn.py _state_stride_mismatch: the
    # compressed QSA pages' item lengths (entry 0 of each side's QSA_COMPRESSED list)
    "qsa_item_len": ("StateType.QSA_COMPRESSED item length mismatch for paired entries src[0]={prefill} "
                     "dst[0]={decode}"),
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
    # models/kimi_linear.py, _get_kda_local_num_heads (KimiDeltaAttention.__init__)
    "kda_heads": "KDA num_heads ({heads}) must be divisible by shard tp_size ({tp})",
    # configs/mamba_utils.py, Mamba2StateShape.create_full_rank (an assert)
    "mamba1_intermediate": ("Mamba-1 intermediate_size ({intermediate}) must be divisible by "
                            "tp_world_size ({tp})"),
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
    families=merged("SGLANG_0_5_23"),   # each family module's row
    messages=_MESSAGES | merged("MESSAGES"),   # and each family module's own
)

RELEASES: Mapping[str, Release] = MappingProxyType({SGLANG_0_5_23.version: SGLANG_0_5_23})

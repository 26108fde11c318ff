"""Qwen4Exp in SGLang: GDN as Qwen3-Next's (``Qwen4ExpTextConfig`` subclasses ``Qwen3NextConfig``, so
``hybrid_gdn_config`` finds it and its ``mamba2_cache_params`` pass ``conv_shard_groups``), and the
PLE side states its ``MambaPool`` carries after the GDN entries (mem_cache/ple_state_pool.py)."""

from __future__ import annotations

from mambaxfer_cli.engines.sglang.families import FamilyRule
from mambaxfer_cli.planning.dtypes import dtype_bytes
from mambaxfer_cli.planning.model import ModelSpec

SGLANG_0_5_23 = {"Qwen4Exp": FamilyRule(True, config_ssm_dtype=True, note="configs/qwen4_exp.py")}

PLE_CONV, PLE_NGRAM = "ple_short_conv", "ple_ngram"
NGRAM_LAYER_ID = (1 << 32) - 1      # ple_state_pool.py PLE_NGRAM_STATE_LAYER_ID: no model layer owns it


def side_entries(model: ModelSpec, conv_dtype: str) -> tuple[tuple[str, int, int], ...]:
    """``ShortConvPool`` and ``NGramPool``'s entries (``iter_transfer_state_entries``), replicated
    across attention TP, as (field, layer id, item bytes): a window per PLE layer, then the int64 n-gram context."""
    parts = model.ple_qsa
    if parts is None or not parts.ple_layers:
        return ()
    from mambaxfer_cli.readers.model_config import flatten_text_config   # read when a plan asks (not at import)

    ngram = int(flatten_text_config(model.hf_config).get("ngram_size", 3))   # Qwen4ExpTextConfig's default
    window = parts.ple_channels * parts.ple_state_len * dtype_bytes(conv_dtype)
    return (*((PLE_CONV, layer, window) for layer in parts.ple_layers),
            *(((PLE_NGRAM, NGRAM_LAYER_ID, (ngram - 1) * 8),) if ngram > 1 else ()))


SIDE_STATES = {"Qwen4Exp": side_entries}
# ModelConfig._config_draft_model: the target's own checkpoint as a one-layer MTP draft.
MTP_DRAFTS = {"Qwen4ExpForConditionalGeneration": "Qwen4ExpForCausalLMMTP"}
FIELD_LABELS = {PLE_CONV: "PLE conv", PLE_NGRAM: "n-gram"}
# Its QSA indexer's state (QSATokenToKVPool): a ring of raw index keys per request and the compressed keys.
QSA_STATE = {"Qwen4Exp": lambda model: model.ple_qsa is not None and model.ple_qsa.has_qsa}

# Conformance: SGLang's PLE pools against side_entries, on this preset and on it with these keys changed.
PLE_POOLS = ("ShortConvPool and NGramPool entries", "the PLE states' entries: fields, layers, item bytes")
PLE_PRESET = "qwen3.8-flash-next"
PLE_STAND_INS: tuple[dict[str, object], ...] = (
    {"ple_layer_ids": [2, 6], "ngram_size": 4}, {"ple_conv_kernel_size": 3, "hc_count": 2}, {"ngram_size": 1})

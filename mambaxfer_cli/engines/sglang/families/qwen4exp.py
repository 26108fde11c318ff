"""Qwen4Exp in SGLang: GDN as Qwen3-Next's (``Qwen4ExpTextConfig`` subclasses ``Qwen3NextConfig``, so
``hybrid_gdn_config`` finds it and its ``mamba2_cache_params`` pass ``conv_shard_groups``), the
PLE side states its ``MambaPool`` carries after the GDN entries (mem_cache/ple_state_pool.py), and
its QSA indexer's states (mem_cache/qsa_kv_pool.py ``QSATokenToKVPool``), sent as QSA_PENDING and
QSA_COMPRESSED beside them (disaggregation/utils.py)."""

from __future__ import annotations

from mambaxfer_cli.engines.sglang.families import FamilyRule
from mambaxfer_cli.errors import Refused
from mambaxfer_cli.planning.dtypes import dtype_bytes
from mambaxfer_cli.planning.model import ATTENTION, ModelSpec

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
# The QSA indexer's states (QSATokenToKVPool): per full-attention layer a ring of the raw index keys
# of a request's open compression group, then one RoPE-position ring (QSA_PENDING, indexed by the
# request's row); per full-attention layer the compressed keys of each full-KV page (QSA_COMPRESSED,
# indexed by the request's pages). Alike on every rank: replicated across attention TP.
QSA_PENDING, QSA_ROPE, QSA_COMPRESSED = "qsa_pending", "qsa_rope", "qsa_compressed"
QSA_ROPE_LAYER_ID = (1 << 32) - 2   # qsa_kv_pool.py QSA_ROPE_STATE_LAYER_ID: shared by every layer
QSA_PAGE = 64                       # model_overrides/qwen4_exp.py: the page size a compressed QSA model gets
_BLOCK_TOPK = (512, 2048)           # layers/attention/qsa/config.py _COMPRESSED_BLOCK_TOPK


def qsa_entries(model: ModelSpec, indexer_dtype: str = "bfloat16",
                draft_band: int | None = None) -> tuple[tuple[str, int, int], ...]:
    """The QSA states' entries in SGLang's order, as (field, layer id, item bytes): the pending
    list (each full-attention layer's key ring, the RoPE ring; a draft's after, its ids from
    ``draft_band`` on, as ``_remap_draft_layer_ids`` numbers them), then the compressed pages."""
    parts = model.ple_qsa
    if parts is None or not parts.has_qsa:
        return ()
    assert parts.compress_ratio is not None and parts.indexer_head_dim is not None
    ratio, dim = parts.compress_ratio, parts.indexer_head_dim
    ids = model.layer_ids or range(len(model.layers))
    layers = [i for i, kind in zip(ids, model.layers) if kind == ATTENTION]
    ring = ratio * dim * dtype_bytes("bfloat16")       # one index KV head (parse_qsa_profile requires it)
    rope, page = ratio * 3 * 8, QSA_PAGE // ratio * dim * dtype_bytes(indexer_dtype)
    # A draft worker's pool keeps one full-attention layer (_build_hybrid_linear_kv_pool: [0]).
    drafts = () if draft_band is None else ((draft_band, draft_band + 1),)
    return (*((QSA_PENDING, layer, ring) for layer in layers), (QSA_ROPE, QSA_ROPE_LAYER_ID, rope),
            *(x for layer, rope_id in drafts for x in ((QSA_PENDING, layer, ring), (QSA_ROPE, rope_id, rope))),
            *((QSA_COMPRESSED, layer, page) for layer in layers),
            *((QSA_COMPRESSED, layer, page) for layer, _ in drafts))


def _as_sglang_reads(model: ModelSpec) -> ModelSpec:
    """The model where SGLang starts with its QSA profile (``parse_qsa_profile``, and the pool's page
    check with the page size SGLang sets); a profile it rejects, its refusal."""
    parts = model.ple_qsa
    if parts is None or not parts.has_qsa:
        return model
    from mambaxfer_cli.readers.model_config import flatten_text_config   # read when a plan asks (not at import)

    ratio = parts.compress_ratio or 0
    budget = int(flatten_text_config(model.hf_config or {}).get("indexer_budget") or 0)
    why = (f"QSA requires indexer_compress_ratio >= 2, got {ratio}" if ratio < 2 else
           f"indexer_budget must be divisible by indexer_compress_ratio, got {budget} / {ratio}" if budget % ratio else
           f"fast_topk_v2 requires indexer_budget / indexer_compress_ratio to be one of {list(_BLOCK_TOPK)}, got "
           f"{budget // ratio}" if budget // ratio not in _BLOCK_TOPK else
           f"compressed QSA requires a paged full-KV cache with the page a multiple of the compress ratio "
           f"(compressed slots are full_slot // ratio): page_size={QSA_PAGE}, ratio={ratio}"
           if QSA_PAGE % ratio else None)
    if why:
        raise Refused(f"{model.name}: SGLang does not start: {why} (layers/attention/qsa/config.py "
                      f"parse_qsa_profile, mem_cache/qsa_kv_pool.py)")
    return model


SGLANG_READS = {"Qwen4Exp": _as_sglang_reads}
QSA_STATES = {"Qwen4Exp": qsa_entries}
PAGE_SIZES = {"Qwen4Exp": lambda model: QSA_PAGE if model.ple_qsa is not None and model.ple_qsa.has_qsa else None}
FIELD_LABELS = {PLE_CONV: "PLE conv", PLE_NGRAM: "n-gram", QSA_PENDING: "QSA key ring", QSA_ROPE: "QSA RoPE ring",
                QSA_COMPRESSED: "QSA compressed keys"}
# mem_cache/kv_cache_configurator.py _build_hybrid_linear_kv_pool: a --qsa-indexer-dtype other than auto
# for a model without the compressed QSA indexer.
MESSAGES = {"qsa_dtype_unused": ("--qsa-indexer-dtype {dtype} needs a model with a compressed QSA indexer "
                                 "(Qwen4-Exp); this model has none")}
# The replicated states a request holds one item of per full-KV page (its pages index them), by SGLang's state type.
PAGED_STATES = {QSA_COMPRESSED: "QSA_COMPRESSED"}
# The byte pattern's region of each replicated item (execute, check): rings and compressed keys apart.
PATTERN_REGIONS = {QSA_PENDING: "ring", QSA_ROPE: "ring", QSA_COMPRESSED: "ckey"}

# Conformance: SGLang's PLE pools against side_entries, on this preset and on it with these keys changed.
PLE_POOLS = ("ShortConvPool and NGramPool entries", "the PLE states' entries: fields, layers, item bytes")
PLE_PRESET = "qwen3.8-flash-next"
PLE_STAND_INS: tuple[dict[str, object], ...] = (
    {"ple_layer_ids": [2, 6], "ngram_size": 4}, {"ple_conv_kernel_size": 3, "hc_count": 2}, {"ngram_size": 1})

# Conformance: SGLang's QSATokenToKVPool on the CPU (at the page SGLang sets) against qsa_entries, on
# the presets and on the PLE preset with these keys changed (the last three SGLang refuses to start).
QSA_POOL = ("QSATokenToKVPool entries", "the QSA states' entries: items and layer ids per --qsa-indexer-dtype, "
            "and the QSA profiles SGLang refuses")
# Conformance: Mooncake's QSA send between SGLang's QSA pools (maybe_send_extra), where D keeps the
# compressed keys in each of these --qsa-indexer-dtype values and P in auto's.
QSA_SEND = ("Mooncake QSA state send", "the QSA states' writes Mooncake posts between SGLang's QSA pools "
            "(maybe_send_extra: its elected writers), the decode bytes left wrong, and its refusals")
QSA_SEND_DTYPES = ("auto", "fp8_e4m3")
QSA_STAND_INS: tuple[dict[str, object], ...] = (
    {"indexer_compress_ratio": 8, "indexer_budget": 4096}, {"indexer_head_dim": 64, "indexer_compress_ratio": 2,
                                                            "indexer_budget": 1024},
    {"indexer_compress_ratio": 3, "indexer_budget": 1536}, {"indexer_budget": 1024},
    {"indexer_compress_ratio": 1, "indexer_budget": 512})

"""Qwen4Exp: GDN as Qwen3.5's, plus a TP-replicated PLE state and the QSA indexer's caches.

Defaults and checks are those of transformers' ``Qwen4ExpTextConfig`` (5.18), which vLLM loads the
config with: ``ple_conv_kernel_size`` 4, ``ngram_size`` 3, ``hc_count`` 4, no PLE layers, no QSA.
"""

from __future__ import annotations

from typing import Any, Mapping

from mambaxfer_cli.errors import Refused, UserError
from mambaxfer_cli.families import Config, Family, dim_key, list_key
from mambaxfer_cli.families.qwen3_next import GDN_KEYS
from mambaxfer_cli.limits import MAX_DIM, at_most
from mambaxfer_cli.planning.model import ATTENTION, SSM, PleQsaParts, Variant

FAMILY = "Qwen4Exp"
QSA_KEYS = ("indexer_n_heads", "indexer_kv_heads", "indexer_head_dim", "indexer_budget", "indexer_compress_ratio")
# Layer kinds of a Qwen4Exp config: transformers 5.18 renamed qwen_sparse_attention to
# indexed_attention and reads the released checkpoint's full_attention as indexed_attention.
INDEXED_KINDS = ("indexed_attention", "qwen_sparse_attention")


def parts(config: Config, layers: tuple[str, ...], where: str, kv_dtype: str | None) -> Mapping[str, Any]:
    """The PLE layers and their state (on linear_attention layers only), and the QSA indexer, of a
    flattened Qwen4Exp config; ``kv_dtype``: the compressed keys' dtype an engine settles (bf16: none)."""
    ids = sorted(set(list_key({"ple_layer_ids": config.get("ple_layer_ids") or []}, "ple_layer_ids", int, where)))
    bad = [i for i in ids if not 1 <= i <= len(layers)]
    if bad:
        raise UserError(f"{where}: ple_layer_ids must be one-indexed layers in [1, {len(layers)}], got {bad}")
    not_linear = [i for i in ids if layers[i - 1] != SSM]
    if not_linear:
        raise Refused(f"{where}: Qwen4Exp PLE is only supported on linear_attention layers, got PLE on "
                        f"layers {not_linear} (transformers' Qwen4ExpTextConfig refuses it)")
    hidden = dim_key(config, "hidden_size", None, where)
    hc_count = dim_key(config, "hc_count", 4, where)
    kernel = dim_key(config, "ple_conv_kernel_size", 4, where)
    ngram = dim_key(config, "ngram_size", 3, where)
    given = {key: config.get(key) for key in QSA_KEYS if config.get(key) is not None}
    head_dim = ratio = None
    if given:
        missing = [key for key in QSA_KEYS if key not in given]
        if missing:
            raise UserError(f"{where}: the QSA indexer config is missing {', '.join(missing)}")
        head_dim = dim_key(config, "indexer_head_dim", None, where)
        ratio = dim_key(config, "indexer_compress_ratio", None, where)
        if dim_key(config, "indexer_kv_heads", None, where) != 1:
            raise UserError(f"{where}: Qwen4Exp QSA requires indexer_kv_heads = 1, got "
                            f"{config['indexer_kv_heads']}")
    return {"ple_qsa": PleQsaParts(tuple(i - 1 for i in ids), at_most(f"{where}: hc_count · hidden_size",
                                                                      hc_count * hidden, MAX_DIM, "model's"),
                                   (kernel - 1) * ngram, head_dim, ratio, uses_mrope(config), kv_dtype or "bf16",
                                   key="qwen4exp")}


def uses_mrope(config: Mapping[str, Any]) -> bool:
    """vLLM's ``uses_mrope``: the RoPE parameters (or one layer type's) name an ``mrope_section``
    (``xdrope_section``, its older name), a list."""
    params = config.get("rope_parameters") or config.get("rope_scaling") or {}
    if not isinstance(params, Mapping):
        return False
    candidates = [params] + [v for v in params.values() if isinstance(v, Mapping)]
    return any(isinstance(c.get(name), (list, tuple)) for c in candidates
               for name in ("mrope_section", "xdrope_section"))


FAMILIES = (
    Family(FAMILY, ("qwen4_exp", "qwen4_exp_text"), Variant("gdn"), GDN_KEYS,
           conv_kernel=(("linear_conv_kernel_dim",),), ssm_dtype_keys=("mamba_ssm_dtype",),
           attention_kinds=INDEXED_KINDS, parts=parts, order=14,
           # vLLM's Qwen4ExpMultiTokenPredictor: mtp_num_hidden_layers indexed-attention (QSA) layers.
           mtp_keys={t: "mtp_num_hidden_layers" for t in ("qwen4_exp", "qwen4_exp_text")}, mtp_kind=ATTENTION),
)
LABELS = {"QSA": FAMILY}

"""GLM-5-Next in SGLang: ``Glm5NextLinearAttention`` (a KDA mixer) beside DSA MLA layers.

``configs/glm5_next.py`` ``Glm5NextTextConfig`` (``hybrid_arch.glm5_next_config`` hands the pool the
text_config) gives ``KimiLinearStateShape.create`` ``linear_attn_config``'s heads, and
``linear_layer_ids``: the layers ``i`` in its 0-based ``kda_layers`` (built from ``layer_types``,
else ``i % 4 != 3``, where the config has no ``linear_attn_config``). The MLA latents and the DSA
index-key pages (``DSATokenToKVPool``) move whole from every writer; its kpool-compress tail ring
(``StateType.DSA_TAIL``) is not modelled."""
from dataclasses import replace

from mambaxfer_cli.engines.sglang.families import FamilyRule
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.planning.model import ATTENTION, SSM, ModelSpec

SGLANG_0_5_23 = {"GLM-5-Next": FamilyRule(
    True, note="configs/glm5_next.py Glm5NextTextConfig",
    kda_heads="AssertionError in Glm5NextLinearAttention.__init__ (models/glm5_next.py): its bare assert "
              "self.num_heads % head_shard_size == 0, with num_heads {heads} and TP {tp}")}


def _as_sglang_reads(model: ModelSpec) -> ModelSpec:
    from mambaxfer_cli.readers.model_config import flatten_text_config   # read when a plan asks (not at import)

    c = flatten_text_config(model.hf_config) if model.hf_config else {}
    if c.get("index_kpool_compress") and c.get("index_kpool", 1) > 1:
        raise UserError(f"{model.name}: mambaxfer does not model the kpool-compress tail ring SGLang sends beside "
                        f"GLM-5-Next's state (StateType.DSA_TAIL, DSATokenToKVPool.get_compress_tail_buf_infos)")
    kda = (c.get("linear_attn_config") or {}).get("kda_layers")
    if kda is None:               # SGLang builds them from layer_types or i % 4 != 3, as the core reads them
        return model
    return replace(model, layers=tuple(SSM if i in kda else ATTENTION for i in range(len(model.layers))))


# The model as SGLang's config class reads it (shapes.sglang_model), by family label.
SGLANG_READS = {"GLM-5-Next": _as_sglang_reads}
# Conformance: its own KDA mixer, whose weight loaders give a rank's conv channels, and the config class
# it is built with (Kimi's are families/kimi.py's KDA_MIXER).
KDA_MIXERS = {"GLM-5-Next": ("Glm5NextLinearAttention conv channels", "sglang.srt.models.glm5_next",
                             "Glm5NextLinearAttention", "sglang.srt.configs.glm5_next", "Glm5NextTextConfig")}


def dsa_page_size(model: ModelSpec) -> int | None:
    """The page size SGLang sets on CUDA for a DSA model (``index_topk`` set), whatever --page-size says:
    ``64 · index_kpool`` (model_overrides/deepseek_v2.py; ``get_dsa_index_kpool``: 1 where unset)."""
    from mambaxfer_cli.readers.model_config import flatten_text_config

    c = flatten_text_config(model.hf_config or {})
    return None if c.get("index_topk") is None else 64 * int(c.get("index_kpool") or 1)


PAGE_SIZES = {"GLM-5-Next": dsa_page_size}

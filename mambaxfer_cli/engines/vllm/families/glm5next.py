"""GLM-5-Next in vLLM (``models/glm5next``): KDA layers beside sparse MLA layers with the kpool
indexer's two caches (docs/reference.md, "GLM-5-Next: sparse MLA and the kpool indexer")."""

from __future__ import annotations

import math
from typing import Any, Mapping
from dataclasses import replace

from mambaxfer_cli.engines.vllm import circular_buffer
from mambaxfer_cli.engines.vllm.circular_buffer import IndexerCaches
from mambaxfer_cli.engines.vllm.engine import KEYS, PAGES, STATE, EngineLayout, Region, registered_regions
from mambaxfer_cli.engines.vllm.kv_groups import RING
from mambaxfer_cli.engines.vllm.handshake import Verdict, not_started_first
from mambaxfer_cli.engines.vllm.geometry import SPARSE_MLA_BACKENDS, Backend, EngineFlags, Geometry
from mambaxfer_cli.engines.vllm.release import Refusal
from mambaxfer_cli.engines.vllm.gpu import Gpu
from mambaxfer_cli.errors import Refused, UserError
from mambaxfer_cli.families import dim_key
from mambaxfer_cli.families.glm5next import DEFAULTS, FAMILY, MODEL_TYPES, glm5next_parts
from mambaxfer_cli.planning.model import ATTENTION, ModelSpec

MTP_METHODS = {"0.33": ("glm5_next_mtp",)}

# The sparse MLA backend vLLM picks, by GPU family (SM 9.x, SM 10.x): geometry.SPARSE_MLA_BACKENDS.
SPARSE_PICKS = {9: "FLASHINFER_MLA_SPARSE_SM90", 10: "FLASHINFER_MLA_SPARSE"}
# KpoolTailBackend.supported_kv_cache_layouts: the only layout a GLM-5-Next engine may run.
LAYOUTS = ("BLHNC",)
# Glm5NextIndexerCache's key: index_head_dim fp8 bytes and one float32 scale per 128 of them.
QUANT_BLOCK, SCALE_BYTES = 128, 4
# The indexer's kernel pages in states (get_paged_mqa_page_sizes; SM 12.x: 64 only).
PAGED_MQA_STATES = (32, 64)
# The family vLLM's sparse MLA backends run.
SPARSE_MLA = FAMILY


def mtp_refusal(model_type: str, text_config: Mapping[str, Any]) -> str | None:
    """``SpeculativeConfig.hf_config_override`` reads text_config's num_nextn_predict_layers, which
    transformers' Glm5NextTextConfig does not define: without the key, MTP stops vLLM."""
    if model_type != "glm5_next" or "num_nextn_predict_layers" in text_config:
        return None
    return ("\"AttributeError: 'Glm5NextTextConfig' object has no attribute 'num_nextn_predict_layers'\" "
            "(SpeculativeConfig.hf_config_override: GLM-5-Next's MTP layer count)")


def mtp_layers_built(hf: Any) -> int | None:
    """The MLA layers Glm5NextMultiTokenPredictor builds of vLLM's loaded config (the probe's): the
    ``n_predict`` hf_config_override takes from its text config's num_nextn_predict_layers."""
    if getattr(hf, "model_type", "") != "glm5_next":
        return None
    return int(hf.get_text_config().num_nextn_predict_layers)


def attention_refusal(model_type: str, config: Mapping[str, Any], where: str) -> None:
    """What vLLM refuses of the indexer as it builds the model."""
    if model_type not in MODEL_TYPES:
        return
    glm5next_parts(config, where)      # transformers refuses the config before vLLM builds the model
    kpool = dim_key(config, "index_kpool", DEFAULTS["index_kpool"], where)
    if kpool < 2:
        raise Refused(f"{where}: vLLM does not build GLM-5-Next's indexer with index_kpool {kpool} "
                      f"(AssertionError: Glm5NextIndexerCache expects index_kpool > 1)")
    if config.get("index_kpool_always_select_tail") is False:
        raise Refused(f"{where}: vLLM does not build this model: \"GLM-5.3 sparse indexer requires "
                      f"index_kpool_always_select_tail=True\" (NotImplementedError in _validate_supported_config)")


def layouts(model: ModelSpec) -> tuple[str, ...] | None:
    """The KV-cache layouts an engine of ``model`` may run: BLHNC, or None (not GLM-5-Next)."""
    return LAYOUTS if model.kpool_indexer is not None else None


def startup_refusal(model: ModelSpec, gpu: Gpu) -> str | None:
    """Why vLLM starts no engine of ``model`` on ``gpu``: no sparse MLA backend is valid there
    (``get_attn_backend_cls``); None where one is (or the model is not GLM-5-Next)."""
    g = model.kpool_indexer
    if g is None:
        return None
    major = gpu.capability[0]
    why = ""
    if major == 10 and (g.kv_lora_rank, g.qk_nope_head_dim) != (512, 256):
        why = ("no sparse MLA backend runs its NoPE latent there (FLASHINFER_MLA_SPARSE needs qk_nope_head_dim 256 "
               "and kv_lora_rank 512, FLASHMLA_SPARSE no head size 512 on SM 10.x)")
    elif major not in (9, 10, 12):
        why = "the sparse MLA backends run on SM 9.x, 10.x and 12.x only"
    if not why:
        return None
    return f"{why}: \"No valid attention backend found\" (ValueError in get_attn_backend_cls)"


def sparse_backend(model: ModelSpec, gpu: Gpu) -> tuple[str, int]:
    """The sparse MLA backend vLLM picks on ``gpu`` and its smallest kernel block (tokens); a UserError
    where vLLM starts no engine there or mambaxfer does not model the pick."""
    g = model.kpool_indexer
    assert g is not None
    refused = startup_refusal(model, gpu)
    if refused:
        raise Refused(f"vLLM does not start a GLM-5-Next engine on {gpu.describe()}: {refused}")
    major = gpu.capability[0]
    if major == 9 and g.kv_lora_rank != 512:
        raise UserError(f"mambaxfer models GLM-5-Next's sparse MLA backend on SM 9.x for kv_lora_rank 512 "
                        f"(FLASHINFER_MLA_SPARSE_SM90) only; this model has {g.kv_lora_rank}")
    if major in SPARSE_PICKS:
        return SPARSE_PICKS[major], SPARSE_MLA_BACKENDS[SPARSE_PICKS[major]].multiple_of
    raise UserError(f"mambaxfer does not model GLM-5-Next on SM 12.x ({gpu.name}): vLLM runs "
                    f"FLASHINFER_MLA_SPARSE_SM120 there with fp8_ds_mla latent rows of 528 bytes")


def backend_refusal(model: ModelSpec, flags: EngineFlags) -> str | None:
    """Why vLLM starts no GLM-5-Next engine on the ``--attention-backend`` given, in its words; None
    without the flag, where it names vLLM's pick, or where no backend runs on the GPU at all."""
    chosen = flags.attention_backend
    if chosen is None or model.kpool_indexer is None or startup_refusal(model, flags.gpu):
        return None
    pick, _ = sparse_backend(model, flags.gpu)
    if chosen == pick:
        return None
    reason = "compute capability not supported" if chosen in SPARSE_MLA_BACKENDS else "sparse not supported"
    return (f"\"Selected backend {chosen} is not valid for this configuration. Reason: [..., '{reason}', ...]\" "
            f"(get_attn_backend_cls); on {flags.gpu.describe()} its backend is {pick}, vLLM's pick (leave the flag "
            f"out or name it)")


def attention_pick(model: ModelSpec, gpu: Gpu) -> str | None:
    """vLLM's sparse MLA pick for the GPU, as preflight shows it."""
    if model.kpool_indexer is None:
        return None
    return "none (no sparse MLA backend)" if startup_refusal(model, gpu) else sparse_backend(model, gpu)[0]


def served_flags(model: ModelSpec, flags: EngineFlags) -> EngineFlags | None:
    """A served engine's flags after its config hook, where vLLM starts it (else a start-up refusal
    says why); the sparse backend is checked as it picks it."""
    if model.kpool_indexer is None:
        return None
    if not backend_refusal(model, flags):
        flags = engine_flags(model, flags) or flags
    if not startup_refusal(model, flags.gpu):
        sparse_backend(model, flags.gpu)
    return flags


def engine_flags(model: ModelSpec, flags: EngineFlags) -> EngineFlags | None:
    """The engine's flags after ``Glm5NextModelConfig.verify_and_update_config`` (fp8 KV on SM 10.x under
    ``--kv-cache-dtype auto``); refused where ``--attention-backend`` is not vLLM's sparse pick."""
    if model.kpool_indexer is None:
        return None
    refused = backend_refusal(model, flags)
    if refused:
        raise Refused(f"vLLM does not start a GLM-5-Next engine on --attention-backend "
                        f"{flags.attention_backend}: {refused}")
    if flags.kv_cache_dtype == "auto" and flags.gpu.capability[0] == 10:
        return replace(flags, kv_cache_dtype="fp8")
    return flags


def kernel(model: ModelSpec, flags: EngineFlags) -> Backend | None:
    """The backend geometry derives the block from: aligned from the indexer's smallest kernel block
    and rounded to a multiple of every non-SSM backend's; a packed block is its own kernel block."""
    g = model.kpool_indexer
    if g is None:
        return None
    name, smallest = sparse_backend(model, flags.gpu)
    indexer = g.index_kpool * PAGED_MQA_STATES[0]
    return Backend(name, multiple_of=1, first=indexer, align=math.lcm(indexer, smallest))


def indexer_caches(model: ModelSpec) -> IndexerCaches | None:
    g = model.kpool_indexer
    if g is None:
        return None
    key = g.index_head_dim + g.index_head_dim // QUANT_BLOCK * SCALE_BYTES
    return IndexerCaches("GLM-5-Next indexer", "kpool tail ring", circular_buffer.kpool_ring_tokens(
        g.index_kpool, model.num_spec), circular_buffer.kpool_slot_bytes(g.index_head_dim), g.index_kpool, key,
        model.mla, "glm5next-indexer", "MLA")


def kv_caches(model: ModelSpec) -> dict[int, tuple[str, ...]] | None:
    """What an MLA layer registers (``Indexer.__init__``): the indexer's keys (of the MLA bucket),
    its tail ring, then the layer."""
    if model.kpool_indexer is None:
        return None
    return {i: (ATTENTION, RING) for i in model.attention_indices}


def regions(model: ModelSpec, geometry: Geometry, kda_slots: int, keyed_by_length: bool) -> tuple[Region, ...] | None:
    """Every NIXL region of a GLM-5-Next engine as ``register_kv_caches`` records it: views of one block
    row, in its order: the KDA slots', the compressed keys', the latent's (after the keys), the rings'."""
    found = indexer_caches(model)
    if found is None:
        return None
    mla, page = model.attention_layers, geometry.page_bytes
    keys, ring = found.key_page_bytes(geometry.block_size), found.ring_page_bytes
    return registered_regions([(i * page, page, STATE) for i in range(kda_slots)]
                              + [(j * keys, keys, KEYS) for j in range(mla)]
                              + [(mla * keys + j * page, page, PAGES) for j in range(mla)]
                              + [(j * ring, ring, RING) for j in range(mla)], keyed_by_length)


def refusals(model: ModelSpec, p_block: int, d_block: int, p_model: ModelSpec | None = None) -> tuple[Refusal, ...]:
    """vLLM's refusals of a GLM-5-Next pairing its other checks do not make: an engine whose tail
    ring does not divide its block does not start (``Glm5NextTailCache.get_kv_cache_spec``)."""
    sides = zip("PD", (p_block, d_block), (indexer_caches(p_model or model), indexer_caches(model)))
    return circular_buffer.ring_refusals("kpool-ring", "kpool tail", (
        (name, block, found.ring_tokens if found else None) for name, block, found in sides))


def with_refusals(verdict: Verdict, model: ModelSpec, prefill: EngineLayout, decode: EngineLayout,
                  rebuild: object, p_model: ModelSpec | None = None, push: bool = False) -> Verdict | None:
    """The handshake's verdict with an engine that does not start first (``refusals``)."""
    if model.kpool_indexer is None:
        return None
    return not_started_first(verdict, refusals(model, prefill.geometry.block_size, decode.geometry.block_size,
                                               p_model))


# The (module, classes) the conformance probe asks for: the indexer's backends (they declare the
# layouts too), then each MLA layer's two caches (the compressed keys', the tail ring's).
INDEXER_CLASSES = (("vllm.v1.attention.backends.mla.indexer", ("Glm5NextIndexerBackend", "KpoolTailBackend")),
                   ("vllm.models.glm5next.common.attention", ("Glm5NextIndexerCache", "Glm5NextTailCache")))

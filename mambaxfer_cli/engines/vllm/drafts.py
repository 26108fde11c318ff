"""Speculative decoding's draft layers in vLLM's KV cache: a family's MTP layers and an EAGLE / EAGLE-3
drafter's, after the target's, in its groups or in groups of their own (docs/reference.md §4)."""

from __future__ import annotations

import json
from dataclasses import replace
from fractions import Fraction
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Mapping

from mambaxfer_cli.errors import Refused, UserError, quoted
from mambaxfer_cli.engines.vllm.families import first, gathered
from mambaxfer_cli.engines.vllm.kv_groups import KVGrouping, model_grouping
from mambaxfer_cli.families import dim_key, family_for, int_key
from mambaxfer_cli.limits import MAX_LAYERS, MAX_NUM_SPEC, within
from mambaxfer_cli.planning.model import ATTENTION, ModelSpec
from mambaxfer_cli.planning.startup import architecture_names
from mambaxfer_cli.readers.model_config import flatten_text_config
from mambaxfer_cli.readers.model_source import local_config, read_json

if TYPE_CHECKING:
    from mambaxfer_cli.engines.vllm.release import Release

FLAG = "--speculative-config"
REFUSES = "vLLM does not start: "      # how each refusal below begins
# Each MTP model class builds getattr(config, key, 1) layers whatever the token count
# (Qwen3NextMultiTokenPredictor, Qwen3_5MultiTokenPredictor: ``num_mtp_layers``).
MTP_LAYERS_DEFAULT = 1


def no_eagle3() -> frozenset[str]:
    """Architectures whose vLLM class lacks SupportsEagle3: an EAGLE-3 drafter on them stops the
    worker (set_eagle3_aux_hidden_state_layers); 0.33 and 0.34 alike."""
    return frozenset(arch for found in gathered("NO_EAGLE3") for arch in found)


# vLLM's SpeculativeMethod values that draft without a model (n-gram lookup, suffix trees), and the
# draft "model" names that select n-gram when no method is given (SpeculativeConfig.__post_init__).
DRAFTLESS_METHODS = ("ngram", "ngram_gpu", "suffix")
NGRAM_MODELS = ("ngram", "[ngram]")

EAGLE_METHODS = ("eagle", "eagle3")
DRAFTER_METHODS = EAGLE_METHODS + ("draft_model", "dflash")    # a draft checkpoint of their own

RULE = ("vLLM keeps the draft's attention layers in the engine's KV-cache groups (get_kv_cache_spec: "
        "is_draft layers) and its connector moves their pages too")


def drafts(speculative: Mapping[str, Any]) -> bool:
    """Whether a ``--speculative-config`` drafts with a model. Without a method vLLM picks one:
    n-gram for the model names above, ``draft_model`` without a model, else the draft checkpoint's."""
    if not speculative:
        return False
    method = speculative.get("method")
    if method is None:
        return speculative.get("model") not in NGRAM_MODELS
    return str(method) not in DRAFTLESS_METHODS


def method_name(speculative: Mapping[str, Any]) -> str:
    """The method as vLLM resolves it where the config leaves it out."""
    method = speculative.get("method")
    if method is not None:
        return str(method)
    model = speculative.get("model")
    if model is None:
        return "draft_model (vLLM's default without a model)"
    return "ngram" if model in NGRAM_MODELS else f"the one {model}'s config names"


def speculative_config(text: str | None) -> dict[str, Any] | None:
    """``--speculative-config`` as vLLM parses it: one JSON object (None: not given)."""
    if text is None:
        return None
    from mambaxfer_cli.engines.vllm.serve_args import load_json

    try:
        data = load_json(text, "its value", FLAG)
    except json.JSONDecodeError as exc:
        raise UserError(f"{FLAG} is not valid JSON ({exc.msg}): {quoted(text)}") from None
    if not isinstance(data, dict):
        raise UserError(f"{FLAG} must be a JSON object, e.g. '{{\"method\":\"mtp\",\"num_speculative_tokens\":1}}', "
                        f"got {quoted(text)}")
    return data


def _tokens(speculative: Mapping[str, Any]) -> int | None:
    tokens = speculative.get("num_speculative_tokens")
    if tokens is None:
        return None
    if isinstance(tokens, bool) or not isinstance(tokens, int):
        raise UserError(f"{FLAG}: num_speculative_tokens must be an integer, got {quoted(tokens)}")
    if tokens <= 0:
        raise Refused(f"{REFUSES}\"1 validation error for SpeculativeConfig "
                            f"num_speculative_tokens: Input should be greater than 0\" (num_speculative_tokens "
                            f"= {tokens}; SpeculativeConfig's field is gt=0)")
    return within(f"{FLAG} num_speculative_tokens", tokens, 1, MAX_NUM_SPEC, "speculative decoding uses")


def with_drafts(model: ModelSpec, speculative: Mapping[str, Any] | None, release: Release,
                num_spec: int | None = None) -> ModelSpec:
    """``model`` as an engine started with ``speculative`` holds it: conv rows for its tokens, and its
    MTP or drafter layers after the target's; vLLM's refusals raise ``Refused`` (``num_spec``: --num-spec)."""
    if not speculative:
        return model
    tokens = _tokens(speculative)
    if num_spec is not None and tokens is not None and num_spec != tokens:
        raise UserError(f"--num-spec {num_spec} and {FLAG}'s num_speculative_tokens {tokens} differ; give one "
                        f"(the conv rows follow the speculative tokens)")
    method = release.speculative_method(speculative.get("method"))
    if speculative.get("model") is None and tokens is not None and (method or "draft_model") in DRAFTER_METHODS:
        raise Refused(f"{REFUSES}\"num_speculative_tokens was provided but without speculative model.\" "
                      f"({method or 'draft_model'} drafts with a model: 0.33's SpeculativeConfig.__post_init__, "
                      f"0.34's DraftModelSpeculatorConfig.default_model)")
    arch = (architecture_names(model.hf_config) or ("",))[0]
    if method == "eagle3" and arch in no_eagle3():
        raise Refused(f"{REFUSES}\"Model does not support EAGLE3 interface\" (set_eagle3_aux_hidden_state_layers: "
                      f"{arch} does not implement SupportsEagle3)")
    if method in EAGLE_METHODS and speculative.get("model") is not None:
        return _with_drafter(model, str(speculative["model"]), tokens)
    flat = flatten_text_config(model.hf_config)
    # hf_config_override reads the top-level model_type (Kimi-K3's text_config is kimi_linear)
    model_type = str(model.hf_config.get("model_type") or flat.get("model_type", ""))
    family = family_for(model_type)
    key = family.mtp_keys.get(model_type) if family else None
    if method == "mtp" and speculative.get("model") is None:
        refusal = first("mtp_refusal", model_type, model.hf_config.get("text_config") or model.hf_config)
        if refusal is not None:
            raise Refused(REFUSES + refusal)
    # A pattern family's config is its MTP variant only with the key above 0 (hf_config_override).
    if (method != "mtp" or speculative.get("model") is not None or family is None or key is None
            or (family.mtp_pattern and not flat.get(key))):
        return model if tokens is None else replace(model, num_spec=tokens)
    if tokens is None:
        # Without a draft model or a token count vLLM builds no draft config to read n_predict from.
        raise Refused(f"{REFUSES}\"num_speculative_tokens must be provided with speculative "
                            "model unless the draft model config contains an n_predict parameter.\" "
                            "(SpeculativeConfig.__post_init__: method mtp with neither model nor "
                            "num_speculative_tokens)")
    where = model.source or model.name
    n_predict = None if flat.get(key) is None else int_key(flat, key, 0, where)
    if n_predict == 0:
        raise Refused(f"{REFUSES}\"ZeroDivisionError: integer modulo by zero\" ({release.speculative_tokens_check}: "
                      f"num_speculative_tokens {tokens} is checked as a multiple of the config's {key}, 0)")
    if n_predict is not None and tokens > n_predict and tokens % n_predict:
        raise Refused(f"{REFUSES}\"num_speculative_tokens:{tokens} must be divisible by "
                            f"n_predict={n_predict}\" ({release.speculative_tokens_check}: a count above the "
                            f"config's {key} must be a multiple of it)")
    built = MTP_LAYERS_DEFAULT if n_predict is None else n_predict
    if family.mtp_pattern:      # a family whose predictor builds a pattern per step
        built = first("mtp_pattern_layers", model_type, flat, built, where)
        assert built is not None, f"{model_type}: an MTP pattern without vLLM's rule for it"
    within(f"{where}: {len(model.layers) + built} cache-keeping layers with the MTP layers",
           len(model.layers) + built, 1, MAX_LAYERS, "model's")
    assert family is not None and family.mtp_kind, f"{family}: MTP keys without a layer kind"
    return replace(model, layers=model.layers + (family.mtp_kind,) * built, draft_layers=built, num_spec=tokens)


def drafter_of(speculative: Mapping[str, Any]) -> str | None:
    """The EAGLE drafter a ``--speculative-config`` names, else None."""
    found = speculative.get("model")
    return str(found) if speculative.get("method") in EAGLE_METHODS and found is not None else None


def unplanned(model: ModelSpec, name: str) -> str:
    """Why the drafter ``name``'s layers are not in ``model``'s plan, said before the warning's end."""
    config = drafter_config(name)
    if config is None:
        return (f"the drafter {name} is not here (mambaxfer reads a config.json, a folder or the local Hugging "
                f"Face cache, and downloads nothing); ")
    heads, size = _pages(flatten_text_config(config), name)
    if not _other_pages(model, (heads, size)):
        return ""
    return (f"the drafter's pages are not the target's ({heads} KV heads of {size}, the target's "
            f"{model.num_kv_heads} of {model.head_size}): vLLM raises every page to the largest "
            f"(unify_kv_cache_spec_page_size) and buckets its layers apart; mambaxfer plans them where one "
            f"page is a whole number of the other (else vLLM pads) and no TP size exceeds either's KV heads, "
            f"or P's and D's are one or hold one head of each a rank (NIXL slices every page by the "
            f"target's heads, compute_tp_mapping); ")


def drafter_apart(model: ModelSpec, speculative: Mapping[str, Any]) -> KVGrouping | None:
    """vLLM's groups with the EAGLE drafter ``speculative`` names where its pages are not the
    target's and its config is here (``model``: the target, or with that drafter planned)."""
    if model.draft_attention:
        return model_grouping(model)
    name = drafter_of(speculative)
    config = drafter_config(name) if name else None
    return None if name is None or config is None else apart_grouping(model, config, name)


def apart_grouping(model: ModelSpec, config: Mapping[str, Any], name: str) -> KVGrouping | None:
    """vLLM's groups with an EAGLE drafter whose attention pages are not the target's (a bucket of
    their own); None where the pages are the target's (or the target has no such attention)."""
    flat = flatten_text_config(config)
    pages = _pages(flat, name)
    if not _other_pages(model, pages):
        return None
    built = dim_key(flat, "num_hidden_layers", None, name)
    return model_grouping(replace(model, layers=model.layers + (ATTENTION,) * built, draft_layers=built,
                                  draft_attention=pages))


def page_ratio(model: ModelSpec, tp: int = 1) -> int:
    """How many target attention pages one drafter page holds on a rank of TP ``tp``, by which
    ``unify_kv_cache_spec_page_size`` raises the target's blocks; 1 where it is not larger."""
    drafter, ours = _rank_pages(model, tp)
    return drafter // ours if drafter > ours and drafter % ours == 0 else 1


def _rank_pages(model: ModelSpec, tp: int) -> tuple[int, int]:
    """The drafter's and the target's attention bytes a token on a rank of TP ``tp``."""
    (heads, size), target = model.draft_attention or (1, 1), model.num_kv_heads or 1
    return max(1, heads // tp) * size, max(1, target // tp) * (model.head_size or 1)


def block_scales(model: ModelSpec, grouping: KVGrouping, tp: int = 1) -> tuple[Fraction, ...]:
    """Each group's blocks per target attention block of a request on a rank of TP ``tp``: for a
    drafter's group of other pages its page over the target's, else 1."""
    ratio, first_draft = Fraction(*_rank_pages(model, tp)), len(model.layers) - model.draft_layers
    return tuple(ratio if model.draft_attention and members and min(members) >= first_draft else Fraction(1)
                 for members in grouping.members or [()] * len(grouping.groups))


def planned_at(model: ModelSpec, *tps: int) -> ModelSpec:
    """``model`` with a drafter of other pages as the ranks of TP ``tps`` hold it: left out past the
    KV heads where NIXL's slices by the target's heads are not the drafter's (``compute_tp_mapping``)."""
    if not model.draft_attention or max(tps) <= min(model.draft_attention[0], model.num_kv_heads or 0):
        return model
    if not _whole_pages(model, *tps):
        return target_only(model)
    if not apart_at(model, tps[0]):
        return replace(model, draft_attention=None)
    return model if _whole(*_rank_pages(model, tps[0])) else target_only(model)


def apart_at(model: ModelSpec, tp: int) -> bool:
    """Whether a drafter's layers are a bucket of their own on the ranks of TP ``tp`` (their
    spec, heads past a model's own replicated, is not the target's there)."""
    assert model.draft_attention and model.num_kv_heads
    heads, size = model.draft_attention
    return (max(1, heads // tp), size) != (max(1, model.num_kv_heads // tp), model.head_size)


def past_heads(model: ModelSpec, p_tp: int, d_tp: int) -> tuple[bool, str]:
    """What vLLM does with a drafter of other pages that ``planned_at`` leaves out: whether P and D
    group its layers otherwise (the handshake's ``draft-groups`` refusal), and what the warning
    says; (False, "") elsewhere."""
    if not model.draft_attention or planned_at(model, p_tp, d_tp) is model or _whole_pages(model, p_tp, d_tp):
        return False, ""
    if apart_at(model, p_tp) != apart_at(model, d_tp):
        return True, ""
    return False, (f"vLLM pairs them but slices the drafter's pages by the target's {model.num_kv_heads} KV heads "
                f"(compute_tp_mapping), which past the drafter's {model.draft_attention[0]} are not its heads: "
                f"its KV lands wrong; ")


def target_only(model: ModelSpec) -> ModelSpec:
    """``model`` without its draft layers."""
    return replace(model, layers=model.layers[:len(model.layers) - model.draft_layers], draft_layers=0,
                   draft_attention=None)


def drafter_config(name: str) -> dict[str, Any] | None:
    """The drafter's config.json where ``--model`` would find it here, a fresh copy each call; None
    where it is not here (mambaxfer never downloads)."""
    text = _drafter_text(name)
    return None if text is None else json.loads(text)


@lru_cache(maxsize=8)
def _drafter_text(name: str) -> str | None:
    path = local_config(name)
    return None if path is None else json.dumps(read_json(path))


def _with_drafter(model: ModelSpec, name: str, tokens: int | None) -> ModelSpec:
    """An EAGLE drafter's ``num_hidden_layers`` attention layers after the target's, planned where
    its page is the target's or a whole number of it (else vLLM pads)."""
    config = drafter_config(name)
    flat = flatten_text_config(config or {})
    if tokens is None and config is not None:
        if flat.get("n_predict") is None:
            raise Refused(f"{REFUSES}\"A speculative model was provided, but `num_speculative_tokens` was not "
                          "provided\" (SpeculativeConfig.__post_init__: the drafter's config has no n_predict)")
        tokens = int_key(flat, "n_predict", 1, name)     # vLLM's default: the drafter's n_predict
    if config is None or tokens is None or model.mla or not model.has_attention:
        return model if tokens is None else replace(model, num_spec=tokens)
    pages = _pages(flat, name)
    target = (model.num_kv_heads or 0) * (model.head_size or 0)
    if _other_pages(model, pages) and not _whole(pages[0] * pages[1], target):
        return replace(model, num_spec=tokens)
    built = dim_key(flat, "num_hidden_layers", None, name)
    within(f"{name}: {len(model.layers) + built} cache-keeping layers with the drafter's",
           len(model.layers) + built, 1, MAX_LAYERS, "model's")
    return replace(model, layers=model.layers + (ATTENTION,) * built, draft_layers=built, num_spec=tokens,
                   draft_attention=pages if _other_pages(model, pages) else None)


def _whole_pages(model: ModelSpec, *tps: int) -> bool:
    """Whether every D rank reads whole pages of one P rank: one TP size, or one head of each a rank."""
    assert model.draft_attention
    return len(set(tps)) == 1 or min(tps) >= max(model.draft_attention[0], model.num_kv_heads or 0)


def _whole(drafter: int, target: int) -> bool:
    """Whether one page is a whole number of the other (else vLLM pads the smaller)."""
    return max(drafter, target) % min(drafter, target) == 0


def _other_pages(model: ModelSpec, pages: tuple[int, int]) -> bool:
    """Whether a drafter of ``pages`` (KV heads, head size) has attention pages not the target's."""
    return not model.mla and model.has_attention and pages != (model.num_kv_heads, model.head_size)


def _pages(flat: Mapping[str, Any], name: str) -> tuple[int, int]:
    """A drafter's KV heads and head size, as its attention's pages hold them."""
    heads = dim_key(flat, "num_attention_heads", None, name)
    return (dim_key(flat, "num_key_value_heads", heads, name),
            dim_key(flat, "head_dim", dim_key(flat, "hidden_size", None, name) // heads, name))

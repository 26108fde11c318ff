"""From a Hugging Face config dict to a validated ModelSpec (pure: no file access)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Sequence

from mambaxfer_cli.planning.dtypes import canonical_dtype
from mambaxfer_cli.errors import UserError, quoted
from mambaxfer_cli.planning.startup import architecture_names
from mambaxfer_cli.families import (
    ATTENTION_KINDS, GENERIC, SIGNATURE_KEYS, UNSUPPORTED, Family,
    family_for, int_key, labelled, list_key, supported_summary,
)
from mambaxfer_cli.limits import (
    MAX_CONV_KERNEL, MAX_DIM, MAX_LAYER_STATE, MAX_LAYERS, MAX_NUM_SPEC, at_most, within,
)
from mambaxfer_cli.planning.model import ATTENTION, SSM, ModelSpec, Variant
from mambaxfer_cli.planning.variants import titles

DEFAULT_DTYPE = "bfloat16"

# A serving engine's check of a config: given the config as read, the config flattened, --variant
# and where the config comes from, it raises the engine's refusal, else gives what it checks once
# the layers are read (None: nothing).
AfterLayers = Callable[[Sequence[str]], None]
Check = Callable[[Mapping[str, Any], Mapping[str, Any], "Variant | None", str], "AfterLayers | None"]


@dataclass(frozen=True)
class DtypeFacts:
    """What the config and the overrides say of a model's dtypes, for an engine's rule to settle."""

    family: Family
    architectures: tuple[str, ...]
    config: tuple[str, str]           # the config's dtype and what gives it
    ssm: tuple[str, str] | None       # the family's SSM dtype key where the config sets it: (dtype, key)
    dtype: str | None                 # --dtype (None: auto)
    conv_dtype: str | None
    ssm_dtype: str | None
    given_by: Mapping[str, str]       # where --conv-dtype and --ssm-dtype came from
    indexer_kv_dtype: str | None = None   # --attention-config's, as given: an engine's rule settles it


# An engine's dtype rule: the facts -> ModelSpec's dtype fields, with ``origin``: what gave each.
DtypeRule = Callable[[DtypeFacts], dict[str, Any]]


class Startup(NamedTuple):
    """A serving engine's rules as a config is read (``spec_from_config``'s ``startup``): its check,
    and its dtype rule (None: the dtypes the config and the overrides name, ``config_dtypes``)."""

    check: Check | None = None
    dtypes: DtypeRule | None = None


NO_ENGINE = Startup()     # where the caller names no engine


def config_dtypes(facts: DtypeFacts) -> dict[str, Any]:
    """The dtypes as the config and the overrides name them, no engine's rule applied."""
    model = (facts.dtype, "--dtype") if facts.dtype else facts.config
    conv = (canonical_dtype(facts.conv_dtype), facts.given_by["conv_dtype"]) if facts.conv_dtype else model
    ssm = ((canonical_dtype(facts.ssm_dtype), facts.given_by["ssm_dtype"]) if facts.ssm_dtype else
           (facts.ssm[0], f"config key {facts.ssm[1]}") if facts.ssm else (conv[0], "the conv dtype"))
    return {"model_dtype": model[0], "conv_dtype": conv[0], "ssm_dtype": ssm[0],
            "origin": {"conv_dtype": conv[1], "ssm_dtype": ssm[1], "model_dtype": model[1]}}


def flatten_text_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """Multimodal configs keep the language model under ``text_config`` (Qwen3.5) or ``llm_config``
    (Nemotron-Nano-VL's Nemotron-H)."""
    key = next((k for k in ("text_config", "llm_config") if isinstance(config.get(k), Mapping)), None)
    if key is None:
        return dict(config)
    merged = {k: v for k, v in config.items() if k != key}
    merged.update(config[key])
    return merged


def nested_keys(config: Mapping[str, Any]) -> dict[str, Any]:
    """A KDA family may keep its dimensions under ``linear_attn_config``: each of its keys is also
    read as ``linear_attn_config.<key>``."""
    inner = config.get("linear_attn_config")
    if not isinstance(inner, Mapping):
        return dict(config)
    return {**config, **{f"linear_attn_config.{key}": value for key, value in inner.items()}}


def _lookup(config: Mapping[str, Any], alternatives, what: str, where: str) -> int:
    for keys in alternatives:
        if all(config.get(key) is not None for key in keys):
            value = 1
            for key in keys:
                part = config[key]
                if (isinstance(part, bool) or not isinstance(part, (int, float)) or not math.isfinite(part)
                        or part != int(part) or part <= 0):
                    raise UserError(f"{where}: key '{key}' must be a positive integer, got {quoted(part)}")
                value *= at_most(f"{where}: key '{key}'", int(part), MAX_DIM, "model's")
            return at_most(f"{where}: {what} ({'·'.join(keys)})", value, MAX_DIM, "model's")
    if not alternatives:       # a variant whose keys only its own family reads (--variant cca elsewhere)
        raise UserError(f"{where}: {what} is read from its family's own keys alone, and this is not a config of "
                        f"that family")
    wanted = " or ".join("·".join(keys) for keys in alternatives)
    raise UserError(f"{where}: missing key for {what}: expected {wanted}")


def _numbered(per_layer: Iterable[tuple[str, ...]]) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The cache-keeping layers of each decoder layer, in order, and each one's decoder layer."""
    pairs = [(kind, i) for i, kinds in enumerate(per_layer) for kind in kinds]
    return tuple(kind for kind, _ in pairs), tuple(i for _, i in pairs)


def _layer_kinds(config: Mapping[str, Any], family: Family, where: str,
                 notes: dict[str, str]) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """Each cache-keeping layer's kind and its decoder layer's index (empty where a family's hook reads
    the kinds); ``notes["layers"]`` says which key won when two disagree."""
    layer_key = next((k for k in ("num_hidden_layers", "n_layer", "num_layers")
                      if isinstance(config.get(k), int) and not isinstance(config.get(k), bool)), None)
    n_layers = None
    if layer_key is not None:   # bounded before a tuple of that many layers is built
        n_layers = within(f"{where}: {layer_key}", config[layer_key], 0, MAX_LAYERS, "model's")
    # A key set to null (as HF serialises unset fields) counts as absent.
    config = {k: v for k, v in config.items() if v is not None}
    own = family.layer_kinds(config, n_layers, where) if family.layer_kinds else None
    if own is not None:
        return own, ()
    if family.layers == "all_ssm" or family.layers == "parallel":
        if n_layers is None:
            raise UserError(f"{where}: missing key for the layer count: expected num_hidden_layers or n_layer")
        per_layer = (SSM,) if family.layers == "all_ssm" else (SSM, ATTENTION)
        return _numbered([per_layer] * n_layers)
    if "hybrid_override_pattern" in config:
        kinds = {"M": (SSM,), "*": (ATTENTION,), "-": (), "E": ()}
        pattern = config["hybrid_override_pattern"]
        if not isinstance(pattern, str):
            raise UserError(f"{where}: key 'hybrid_override_pattern' must be a string like 'M-M*', "
                            f"got {quoted(pattern)}")
        at_most(f"{where}: hybrid_override_pattern of length", len(pattern), 4 * MAX_LAYERS, "model's")
        bad = sorted(set(pattern) - set(kinds))
        if bad:
            raise UserError(f"{where}: hybrid_override_pattern has unknown layer symbols {bad}; known: M * - E")
        if n_layers is not None and n_layers != len(pattern):
            # vLLM's NemotronHModel builds one layer per pattern entry (make_layers over
            # len(hybrid_override_pattern)); transformers' config ignores num_hidden_layers then.
            notes["layers"] = (f"hybrid_override_pattern ({len(pattern)} layers; {layer_key} {n_layers} "
                               f"ignored, as vLLM builds one layer per pattern entry)")
        return _numbered(kinds[ch] for ch in pattern)
    if "layers_block_type" in config or "layer_types" in config:
        key = "layers_block_type" if "layers_block_type" in config else "layer_types"
        kinds = {"mamba": (SSM,), "linear_attention": (SSM,), "attention": (ATTENTION,),
                 "full_attention": (ATTENTION,), "sliding_attention": (ATTENTION,),
                 **{kind: (ATTENTION,) for kind in ATTENTION_KINDS},
                 "hybrid": (ATTENTION, SSM), "mlp": (), "moe": ()}
        entries = list_key(config, key, str, where)
        at_most(f"{where}: {key} of length", len(entries), 4 * MAX_LAYERS, "model's")
        for entry in entries:
            if entry not in kinds:
                raise UserError(f"{where}: {key} has unknown layer kind {quoted(entry)}; known: {', '.join(kinds)}")
        return _numbered(kinds[entry] for entry in entries)
    if n_layers is None:
        raise UserError(f"{where}: missing key for the layer count: expected num_hidden_layers or n_layer")
    if "attn_layer_indices" in config:
        indices = set(list_key(config, "attn_layer_indices", int, where))
        return _numbered((ATTENTION if i in indices else SSM,) for i in range(n_layers))
    if "attn_layer_period" in config and "attn_layer_offset" in config:
        period = int_key(config, "attn_layer_period", 1, where)
        offset = int_key(config, "attn_layer_offset", 0, where)
        return _numbered((ATTENTION if i % period == offset else SSM,) for i in range(n_layers))
    if "full_attention_interval" in config:
        interval = int_key(config, "full_attention_interval", 1, where)
        return _numbered((ATTENTION if (i + 1) % interval == 0 else SSM,) for i in range(n_layers))
    # A plain Mamba model: no layer-kind key, every layer is an SSM layer.
    return _numbered([(SSM,)] * n_layers)


def detect(config: Mapping[str, Any], variant: Variant | None, where: str) -> Family:
    """The config's family: by model_type, else (a guess) by its keys, or as --variant says."""
    model_type = str(config.get("model_type", ""))
    family = family_for(model_type)
    if variant is not None:
        if family is not None and family.variant == variant:
            return family
        return GENERIC[variant]
    if family is not None:
        return family
    if model_type in UNSUPPORTED:
        raise UserError(
            f"{where}: model_type '{model_type}' is a {UNSUPPORTED[model_type]} model, which mambaxfer "
            f"does not support; supported variants are {titles()} ({supported_summary()})")
    for candidate, keys in SIGNATURE_KEYS:
        if any(key in config for key in keys):
            return GENERIC[candidate]
    found = f"model_type '{model_type}'" if model_type else "no model_type"
    raise UserError(
        f"{where}: not a Mamba-family config ({found}, and none of the SSM keys such as "
        f"mamba_d_state, state_size or linear_num_value_heads); supported: {supported_summary()}; "
        f"use --variant to force one")


def _dtype(config: Mapping[str, Any], keys: tuple[str, ...], where: str) -> tuple[str, str] | None:
    """The first of ``keys`` the config sets: (dtype, the key)."""
    for key in keys:
        if config.get(key) and config[key] != "auto":
            if not isinstance(config[key], str):
                raise UserError(f"{where}: key '{key}' must be a dtype name such as 'bfloat16', "
                                f"got {quoted(config[key])}")
            try:
                return canonical_dtype(config[key]), key
            except UserError as exc:
                raise UserError(f"{where}: key '{key}': {exc}") from None
    return None


def spec_from_config(
    config: Mapping[str, Any],
    *,
    name: str,
    source: str,
    variant: Variant | None = None,
    conv_dtype: str | None = None,
    ssm_dtype: str | None = None,
    num_spec: int | None = None,
    kv_heads: int | None = None,
    head_size: int | None = None,
    revision: str | None = None,
    given_by: Mapping[str, str] | None = None,
    dtype: str | None = None,
    indexer_kv_dtype: str | None = None,
    startup: Startup | None = None,
    hf_overrides: Mapping[str, Any] | None = None,
) -> ModelSpec:
    """A model's SSM geometry from its HF config, overrides winning (``given_by``: where each came from);
    ``startup``: the serving engine's rules; ``hf_overrides``: a serve line's, over the config's top level."""
    where = source or name
    as_read = {**config, **hf_overrides} if hf_overrides else config
    archs = architecture_names(as_read)
    config = nested_keys(flatten_text_config(as_read))
    startup = NO_ENGINE if startup is None else startup
    after_layers = startup.check(as_read, config, variant, where) if startup.check else None
    family = labelled(detect(config, variant, where), archs)
    family = family.refine(family, config) if family.refine else family
    config = {**config, **family.derived(config, where)} if family.derived else config
    params = {param: _lookup(config, alts, param, where) for param, alts in family.params.items()}
    conv_kernel = at_most(f"{where}: conv_kernel", _lookup(config, family.conv_kernel, "conv_kernel", where),
                          MAX_CONV_KERNEL, "model's")
    given_by = {"conv_dtype": "--conv-dtype", "ssm_dtype": "--ssm-dtype", **(given_by or {})}
    found = _dtype(config, ("torch_dtype", "dtype"), where)
    named = None
    if dtype is not None and dtype.strip().lower() != "auto":
        try:
            named = canonical_dtype(dtype)       # float and half name float32 and float16 there too
        except UserError as exc:
            raise UserError(f"--dtype: {exc}") from None
    facts = DtypeFacts(family, archs, (found[0], f"config key {found[1]}") if found else (
        DEFAULT_DTYPE, f"{DEFAULT_DTYPE}, as the config names no torch_dtype"),
        _dtype(config, family.ssm_dtype_keys, where), named, conv_dtype, ssm_dtype, given_by, indexer_kv_dtype)
    dtypes = (startup.dtypes or config_dtypes)(facts)
    spec_num = config.get("num_speculative_tokens", 0) if num_spec is None else num_spec
    if isinstance(spec_num, bool) or not isinstance(spec_num, int) or spec_num < 0:
        raise UserError(f"--num-spec must be a non-negative integer, got {quoted(spec_num)}")
    within("--num-spec" if num_spec is not None else f"{where}: num_speculative_tokens", spec_num, 0,
           MAX_NUM_SPEC, "speculative decoding uses")
    notes: dict[str, str] = {}
    layers, layer_ids = _layer_kinds(config, family, where, notes)
    if SSM not in layers:
        raise UserError(f"{where}: the layer-kind keys name no SSM layer; nothing to transfer")
    if after_layers is not None:
        after_layers(layers)
    at_most(f"{where}: {len(layers)} cache-keeping layers", len(layers), MAX_LAYERS, "model's")
    heads = size = q_heads = None
    if ATTENTION in layers:
        heads, size = (_latent(config, where, kv_heads, head_size) if family.mla else
                       _attention_heads(config, family, where, kv_heads, head_size))
        q_heads = _positive(config.get("num_attention_heads"))
        q_heads = q_heads if q_heads is None or q_heads <= MAX_DIM else None
    own = family.parts(config, layers, where, dtypes.pop("indexer_kv_dtype", indexer_kv_dtype)) if family.parts else {}
    spec = ModelSpec(
        name=name, source=source, variant=family.variant, params=params, layers=layers,
        conv_kernel=conv_kernel, num_spec=spec_num, num_kv_heads=heads, family=family.label, head_size=size,
        num_q_heads=q_heads, revision=revision, mla=family.mla and heads is not None,
        ssm_backend=family.ssm_backend, hf_config=as_read, state_source=family.fixed_state_source,
        **own, hidden_layers=_positive(config.get("num_hidden_layers")) or 0, layer_ids=layer_ids,
        **{**dtypes, "origin": {**dtypes["origin"], **notes}},
    )
    from mambaxfer_cli.planning.layout import rank_layout

    state = rank_layout(spec, 1, 0).state_bytes     # one layer's, before anything allocates pages of it
    if state > MAX_LAYER_STATE:
        raise UserError(f"{where}: one layer's state would be {state / 2**20:.0f} MiB at TP 1, larger than any "
                        f"model's; at most {MAX_LAYER_STATE >> 20} MiB (check the dimensions)")
    return spec


def _positive(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return None
    return value


def _latent(config: Mapping[str, Any], where: str, kv_heads: int | None,
            head_size: int | None) -> tuple[int, int]:
    """MLA's KV cache as vLLM keeps it: one latent vector per token (``kv_lora_rank +
    qk_rope_head_dim`` elements), one "head" that every rank holds whole."""
    for flag, value in (("--kv-heads", kv_heads), ("--head-size", head_size)):
        if value is not None:
            raise UserError(f"{flag}: {where} is an MLA model, whose KV cache is one latent vector per token "
                            f"(kv_lora_rank + qk_rope_head_dim), not heads")
    rope = config.get("qk_rope_head_dim")      # 0 for a NoPE latent (GLM-5-Next)
    if rope != 0:
        rope = _lookup(config, (("qk_rope_head_dim",),), "qk_rope_head_dim", where)
    size = _lookup(config, (("kv_lora_rank",),), "kv_lora_rank", where) + rope
    return 1, at_most(f"{where}: kv_lora_rank + qk_rope_head_dim", size, MAX_DIM, "model's")


def _attention_heads(config: Mapping[str, Any], family: Family, where: str, kv_heads: int | None,
                     head_size: int | None) -> tuple[int, int]:
    """KV heads (``num_key_value_heads``, else ``num_attention_heads``) and head size (the family's
    key, else ``hidden_size / num_attention_heads``) of a model with attention layers."""
    for flag, value in (("--kv-heads", kv_heads), ("--head-size", head_size)):
        if value is not None and _positive(value) is None:
            raise UserError(f"{flag} must be a positive integer, got {quoted(value)}")
    heads = kv_heads if kv_heads is not None else _first_key(
        config, ("num_key_value_heads", "num_attention_heads"), "attention KV heads", where)
    if heads is None:
        raise UserError(f"{where}: the model has attention layers but no KV-head count: expected "
                        f"num_key_value_heads or num_attention_heads (or give --kv-heads)")
    size = head_size if head_size is not None else _first_key(
        config, family.head_size_keys, "attention head size", where)
    if size is None:
        hidden, q_heads = _positive(config.get("hidden_size")), _positive(config.get("num_attention_heads"))
        if hidden is None or q_heads is None or hidden % q_heads:
            raise UserError(f"{where}: the model has attention layers but no head size: expected "
                            f"{' or '.join(family.head_size_keys)}, or hidden_size divisible by "
                            f"num_attention_heads (or give --head-size)")
        size = at_most(f"{where}: hidden_size / num_attention_heads", hidden // q_heads, MAX_DIM, "model's")
    return heads, size


def _first_key(config: Mapping[str, Any], keys: Sequence[str], what: str, where: str) -> int | None:
    """The first of ``keys`` the config sets, a positive integer within the model bounds."""
    for key in keys:
        if config.get(key) is not None:
            value = _positive(config[key])
            if value is None:
                raise UserError(f"{where}: key '{key}' must be a positive integer ({what}), got {quoted(config[key])}")
            return at_most(f"{where}: key '{key}'", value, MAX_DIM, "model's")
    return None

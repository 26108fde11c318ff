"""SGLang's per-request state shapes and dtypes (configs/mamba_utils.py): what one slot of one
layer holds on one rank, in elements, and which of its axes TP slices."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

from mambaxfer_cli.engines.sglang.families import FamilyRule, merged
from mambaxfer_cli.engines.sglang.release import SGLANG_0_5_23, Release
from mambaxfer_cli.errors import Refused
from mambaxfer_cli.planning.model import ModelSpec


@dataclass(frozen=True)
class StateShape:
    """One rank's state per slot and layer: conv ``(dim, K-1)`` (Kimi: ``(K-1, dim)``, sliced on
    axis 1) and temporal ``(heads, head_dim, state)``."""

    conv: tuple[int, int]
    temporal: tuple[int, int, int]
    conv_slice_axis: int = 0
    conv_shard_groups: tuple[int, ...] | None = None     # full dims of sub-blocks sharded on their own
    conv_dim_full: int = 0            # the conv axis before TP (after n_groups padding)
    extra: tuple[tuple[str, int, int], ...] = ()   # conv tensors after the first: (field, dim, rows)

    @property
    def fields(self) -> tuple[str, ...]:
        """Its tensors in ``MambaPool``'s order: conv, the extra conv tensors, temporal."""
        return ("conv", *(name for name, _, _ in self.extra), "temporal")

    @property
    def conv_dim(self) -> int:
        """The size of the conv axis TP slices (``get_state_dim_per_tensor``)."""
        return self.conv[self.conv_slice_axis]

    @property
    def conv_outer(self) -> int:
        """Rows before the sliced conv axis (``get_state_slice_outer_counts``)."""
        return self.conv[0] if self.conv_slice_axis == 1 else 1


def divide(numerator: int, tp: int, what: str) -> int:
    # SGLang's distributed.utils.divide asserts; mambaxfer says which dimension.
    if numerator % tp:
        raise Refused(f"SGLang: TP {tp} does not divide {what} = {numerator}")
    return numerator // tp


def mamba2_state_shape(*, tp: int, intermediate_size: int, n_groups: int, num_heads: int,
                       head_dim: int, state_size: int, conv_kernel: int,
                       conv_shard_groups: tuple[int, ...] | None = None) -> StateShape:
    """``Mamba2StateShape.create``: conv ``((I + 2·G'·N) / tp, K-1)`` with ``G'`` the groups grown to
    ``tp`` where ``tp`` does not divide them (``extra_groups_for_head_shards``)."""
    conv_dim = intermediate_size + 2 * (n_groups if n_groups % tp == 0 else tp) * state_size
    return StateShape(conv=(divide(conv_dim, tp, "conv_dim"), conv_kernel - 1),
                      temporal=(divide(num_heads, tp, "num_heads"), head_dim, state_size),
                      conv_shard_groups=conv_shard_groups, conv_dim_full=conv_dim)


def mamba1_state_shape(*, tp: int, intermediate_size: int, state_size: int,
                       conv_kernel: int) -> StateShape:
    """``Mamba2StateShape.create_full_rank``: Mamba-1 as heads of one channel."""
    per_rank = divide(intermediate_size, tp, "intermediate_size")
    return StateShape(conv=(per_rank, conv_kernel - 1), temporal=(per_rank, 1, state_size),
                      conv_dim_full=intermediate_size)


def kda_state_shape(*, tp: int, num_heads: int, head_dim: int, num_k_heads: int | None = None,
                            head_k_dim: int | None = None, conv_kernel: int = 4) -> StateShape:
    """``KimiLinearStateShape.create``: conv transposed to ``(K-1, (P + 2·Pk) / tp)``."""
    num_k_heads = num_heads if num_k_heads is None else num_k_heads
    head_k_dim = head_dim if head_k_dim is None else head_k_dim
    proj, proj_k = num_heads * head_dim, num_k_heads * head_k_dim
    dim = divide(proj, tp, "num_heads · head_dim") + 2 * divide(proj_k, tp, "num_k_heads · head_k_dim")
    return StateShape(conv=(conv_kernel - 1, dim),
                      temporal=(divide(num_heads, tp, "num_heads"), head_dim, head_dim),
                      conv_slice_axis=1, conv_shard_groups=(proj, proj_k, proj_k),
                      conv_dim_full=proj + 2 * proj_k)


def state_shape(model: ModelSpec, tp: int, release: Release = SGLANG_0_5_23) -> StateShape:
    """The shape SGLang's config hook gives ``model`` at TP ``tp`` (``mamba2_cache_params``)."""
    p, own = model.params, merged("STATE_SHAPES").get(model.family)
    if own:      # a family whose config class builds its state itself
        return own(model, tp)
    if model.variant == "mamba1":
        return mamba1_state_shape(tp=tp, intermediate_size=p["intermediate_size"],
                                  state_size=p["d_state"], conv_kernel=model.conv_kernel)
    if model.variant == "kda":   # the config class's KimiLinearCacheParams (families/kimi.py, bailing.py)
        return kda_state_shape(tp=tp, num_heads=p["num_heads"], head_dim=p["head_dim"], conv_kernel=model.conv_kernel)
    return mamba2_state_shape(tp=tp, **mamba2_args(model, tp, release))


def mamba2_args(model: ModelSpec, tp: int, release: Release = SGLANG_0_5_23) -> dict[str, Any]:
    """The arguments the model's config class passes ``Mamba2StateShape.create`` at TP ``tp``."""
    p = model.params
    if model.variant == "mamba2":
        return {"intermediate_size": p["intermediate_size"], "n_groups": p["n_groups"], "num_heads": p["num_heads"],
                "head_dim": p["head_dim"], "state_size": p["d_state"], "conv_kernel": model.conv_kernel}
    if model.variant == "lightning":    # configs/minicpm.py: no conv (conv_kernel 1), nkv heads of hd × hd
        return {"intermediate_size": 0, "n_groups": 0, "num_heads": p["num_heads"], "head_dim": p["head_dim"],
                "state_size": p["head_dim"], "conv_kernel": 1}
    if model.variant == "short_conv":   # configs/lfm2*.py: the conv window over hidden_size, no SSM state
        return {"intermediate_size": p["hidden_size"], "n_groups": 1, "num_heads": tp, "head_dim": p["hidden_size"],
                "state_size": 0, "conv_kernel": model.conv_kernel}
    # GDN (configs/qwen3_next.py): conv_state is cat([query, key, value]), each sub-block sharded
    # on its own, so the config records their full dims; a family whose hook does not (GigaChat3.5's)
    # leaves SGLang to slice the conv state as one block.
    key_dim, value_dim = p["num_k_heads"] * p["head_k_dim"], p["num_v_heads"] * p["head_v_dim"]
    rule = release.families.get(model.family)
    return {"intermediate_size": value_dim, "n_groups": p["num_k_heads"], "num_heads": p["num_v_heads"],
            "head_dim": p["head_v_dim"], "state_size": p["head_k_dim"], "conv_kernel": model.conv_kernel,
            "conv_shard_groups": (key_dim, key_dim, value_dim) if rule is None or rule.conv_shard_groups else None}


@dataclass(frozen=True)
class StateDtypes:
    conv: str
    temporal: str
    origin: tuple[str, str]   # what gave each


def state_dtypes(*, config_ssm_dtype: str | None = None, reads_config: bool = True,
                 env: Mapping[str, str] | None = None, release: Release = SGLANG_0_5_23) -> StateDtypes:
    """``mamba2_state_dtype``: the conv and temporal dtypes from the release's defaults, the config's
    ``mamba_ssm_dtype`` (``reads_config``) and the environment."""
    env = env or {}
    known = release.state_dtypes
    conv_name = env.get(release.conv_dtype_env, release.conv_dtype_default)
    conv = conv_name if conv_name in known else "bfloat16"     # SGLang's for an unknown name, whatever the default
    conv_origin = (f"env {release.conv_dtype_env}" if release.conv_dtype_env in env and conv_name in known
                   else f"SGLang default ({release.conv_dtype_default})")
    temporal, origin = release.ssm_dtype_default, f"SGLang default ({release.ssm_dtype_default})"
    if reads_config and config_ssm_dtype is not None and config_ssm_dtype in known:
        temporal, origin = config_ssm_dtype, f"config key {release.ssm_dtype_config_key}"
    env_ssm = env.get(release.ssm_dtype_env)
    if env_ssm is not None and env_ssm in known:
        temporal, origin = env_ssm, f"env {release.ssm_dtype_env}"
    return StateDtypes(conv, temporal, (conv_origin, origin))


def family_rule(model: ModelSpec, release: Release = SGLANG_0_5_23) -> FamilyRule:
    """The family's row, where SGLang serves the model and mambaxfer answers for it: a family SGLang
    has no file for says so, then an architecture its registry lacks (Bamba, Kimi-K3.1)."""
    from mambaxfer_cli.engines.sglang.served import missing_class

    rule = release.families.get(model.family)
    why = (rule.note if rule is not None and not rule.served else None) or missing_class(model.hf_config,
                                                                                         release.version)
    if why is None and rule is None:
        why = f"SGLang {release.version} has no rule for the family '{model.family}'"
    if why is not None:          # SGLang does not serve it: its refusal
        raise Refused(f"{model.name}: {why}{_ANSWERS}")
    assert rule is not None
    return rule


_ANSWERS = "; mambaxfer answers for SGLang only where it serves the model"


def sglang_model(model: ModelSpec, env: Mapping[str, str] | None = None,
                 release: Release = SGLANG_0_5_23) -> ModelSpec:
    """``model`` as SGLang keeps its state: its dtypes, and conv rows ``K-1`` (no speculative room)."""
    rule = family_rule(model, release)
    reads = merged("SGLANG_READS").get(model.family)
    model = reads(model) if reads else model
    # The config's mamba_ssm_dtype, whether or not vLLM's class reads it.
    config_ssm = model.origin.get("config_mamba_ssm_dtype", model.ssm_dtype if model.origin.get("ssm_dtype")
                                  == "config key mamba_ssm_dtype" else None)
    dtypes = state_dtypes(config_ssm_dtype=config_ssm, reads_config=rule.config_ssm_dtype, env=env, release=release)
    # A float32 checkpoint runs in float16 under SGLang's --dtype auto (configs/model_config.py
    # _get_and_verify_dtype; Gemma aside): the attention KV's dtype.
    model_dtype = "float16" if model.checkpoint_dtype == "float32" else model.model_dtype
    return replace(model, num_spec=0, conv_dtype=dtypes.conv, ssm_dtype=dtypes.temporal, model_dtype=model_dtype,
                   origin={"conv_dtype": dtypes.origin[0], "ssm_dtype": dtypes.origin[1]})


def tp_refusal(model: ModelSpec, tp: int, release: Release = SGLANG_0_5_23) -> str | None:
    """Why SGLang cannot serve ``model`` at TP ``tp`` (its mixer's or attention's assert), or None."""
    p, rule = model.params, release.families.get(model.family)
    if rule and rule.whole_tp and tp > 1:
        return rule.whole_tp.format(tp=tp)
    own = merged("TP_REFUSALS").get(model.family, lambda *_: None)(model, tp)    # a family's own mixer's asserts
    if own:
        return own
    if model.variant == "mamba1" and p["intermediate_size"] % tp:
        return release.message("mamba1_intermediate", intermediate=p["intermediate_size"], tp=tp)
    if model.variant == "mamba2":
        if p["num_heads"] % tp:
            return release.message("mamba2_heads")
        if p["n_groups"] % tp and p["n_groups"] != 1:
            return release.message("mamba2_groups")
    if model.variant == "kda" and p["num_heads"] % tp:
        own = rule.kda_heads if rule else ""     # a family's own mixer, else Kimi's KimiDeltaAttention
        return own.format(heads=p["num_heads"], tp=tp) if own else release.message("kda_heads", heads=p["num_heads"],
                                                                                      tp=tp)
    if model.variant == "lightning" and p["num_heads"] % tp:     # Mamba2StateShape.create's divide
        return f"TP {tp} does not divide lightning_nkv = {p['num_heads']} (the lightning state's heads)"
    if model.variant == "short_conv" and p["hidden_size"] % tp:   # Mamba2StateShape.create's divide
        return f"TP {tp} does not divide hidden_size = {p['hidden_size']} (the short conv's channels)"
    if model.variant == "gdn":
        for key in ("num_k_heads", "num_v_heads"):
            if p[key] % tp:
                return f"TP {tp} does not divide {key} = {p[key]} (GDN heads are sharded whole)"
    queries = model.num_q_heads
    if queries and queries % tp:   # the attention layers' assert total_num_heads % tp_size == 0
        return f"TP {tp} does not divide the {queries} attention heads (attention's assert)"
    heads = model.num_kv_heads
    if heads is not None and heads % tp and tp % heads:
        return f"TP {tp} and the {heads} KV heads do not divide one another (attention's assert)"
    return None


def tp_sizes(model: ModelSpec, limit: int = 8) -> tuple[int, ...]:
    return tuple(tp for tp in range(1, limit + 1) if tp_refusal(model, tp) is None)

"""The conformance probe: SGLang's own functions, where SGLang is installed, against mambaxfer's
answers (``run``; ``python -m`` prints the JSON document of every preset SGLang serves). A
function that cannot be imported or called is reported as such, never replaced."""

from __future__ import annotations

import contextlib
import functools
import importlib
import itertools
import json
import os
import sys
import time
from dataclasses import astuple, dataclass, field, replace
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from unittest import mock
from typing import Any, Callable, Iterator, Mapping, Sequence

from mambaxfer_cli.engines.sglang.drafts import MTP_DRAFTS, draft_for
from mambaxfer_cli.engines.sglang.bootstrap import Server
from mambaxfer_cli.engines.sglang.entries import (
    CONV, FIELDS, QSA_INDEXER_DTYPES, TransferEntry, entry_for, qsa_entries, server_flags, side_entries,
    transfer_entries,
)
from mambaxfer_cli.engines.sglang.families import given, merged
from mambaxfer_cli.engines.sglang.heads import HeadSlice, head_slice
from mambaxfer_cli.engines.sglang.kv import INDEX_K, LATENT, KVSide, dsa_page_size, kv_entries
from mambaxfer_cli.engines.sglang.plan import plan
from mambaxfer_cli.engines.sglang.proof import replicated_wrong
from mambaxfer_cli.engines.sglang.served import ARCHITECTURES, startup
from mambaxfer_cli.engines.sglang.ranks import rank_mapping, writers
from mambaxfer_cli.engines.sglang.release import MOONCAKE, NIXL, RELEASES, SGLANG_0_5_23, Release
from mambaxfer_cli.engines.sglang.shapes import (
    StateShape, kda_state_shape, mamba1_state_shape, mamba2_args, mamba2_state_shape, sglang_model, state_dtypes,
    state_shape, tp_refusal, tp_sizes,
)
from mambaxfer_cli.engines.sglang.slices import byte_blocks, replicated_writer, slice_blocks
from mambaxfer_cli.engines.sglang.verdict import verdict
from mambaxfer_cli.engines.sglang.writes import Side, field_regions, sglang_writes
from mambaxfer_cli.conformance.report import AGREES, Outcomes, Result, plain, result_document
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.planning.layout import RankLayout, rank_layout
from mambaxfer_cli.planning.model import ModelSpec, Variant

MAX_TP = 8      # the largest TP size compared unless asked otherwise (--max-tp)


@dataclass(frozen=True)
class Source:
    """Where one of SGLang's functions lives, and what conformance compares it on."""

    module: str
    path: str           # the attribute path in the module
    compares: str       # what is compared, in a few words


_UTILS, _DISAGG = "sglang.srt.configs.mamba_utils", "sglang.srt.disaggregation"
KDA_SHAPES, KDA_SHAPES_COMPARED = given("KDA_SHAPES")
KDA_MIXER, _KDA_MIXER_MODULE, _KDA_MIXER_CLASS, _KDA_MIXER_COMPARED = given("KDA_MIXER")
KDA_MIXERS = merged("KDA_MIXERS")     # a family's own KDA mixer, by family label
PLE_POOLS, PLE_POOLS_COMPARED = given("PLE_POOLS")
QSA_POOL, QSA_POOL_COMPARED = given("QSA_POOL")
QSA_SEND, QSA_SEND_COMPARED = given("QSA_SEND")
SHORT_CONV_CONFIG, SHORT_CONV_MIXER = given("SHORT_CONV_CONFIG"), given("SHORT_CONV_MIXER")
CONFIG_STATES, TP_MIXERS = merged("CONFIG_STATES"), merged("TP_MIXERS")   # a family's own, by family label
OWN_SHAPES = merged("STATE_SHAPES")     # the families whose config class builds their state shape

# SGLang's functions, by the name conformance reports.
SOURCES: Mapping[str, Source] = {
    "Mamba2StateShape.create": Source(_UTILS, "Mamba2StateShape.create",
                                      "each rank's conv and temporal state shapes, conv_shard_groups"),
    "Mamba2StateShape.create_full_rank": Source(_UTILS, "Mamba2StateShape.create_full_rank",
                                                "Mamba-1's per-rank state shapes"),
    KDA_SHAPES: Source(_UTILS, KDA_SHAPES, KDA_SHAPES_COMPARED),
    "mamba2_state_dtype": Source(_UTILS, "mamba2_state_dtype",
                                 "the state dtypes from the config and the environment variables"),
    "compute_mamba_state_slice_blocks": Source(f"{_DISAGG}.utils", "compute_mamba_state_slice_blocks",
                                               "the blocks of a state dim each P rank sends a D rank"),
    "compute_mamba_state_slice_byte_blocks": Source(f"{_DISAGG}.utils", "compute_mamba_state_slice_byte_blocks",
                                                    "the byte blocks of each transfer entry"),
    "should_send_replicated_state": Source(f"{_DISAGG}.utils", "should_send_replicated_state",
                                           "which P ranks write replicated state"),
    "compute_head_slice_params": Source(f"{_DISAGG}.common.staging_buffer", "compute_head_slice_params",
                                        "the attention KV heads each P rank sends a D rank"),
    "MambaPool transfer entries": Source("sglang.srt.mem_cache.memory_pool", "MambaPool",
                                         "the pool's entries: item bytes, dims, rows, groups, layers"),
    PLE_POOLS: Source("sglang.srt.mem_cache.ple_state_pool", "ShortConvPool", PLE_POOLS_COMPARED),
    QSA_POOL: Source("sglang.srt.mem_cache.qsa_kv_pool", "QSATokenToKVPool", QSA_POOL_COMPARED),
    "mambaish_config state layers": Source("sglang.srt.configs.hybrid_arch", "mambaish_config",
                                           "the layer ids of the pool's state entries, from the config"),
    "MambaMixer2 conv channels": Source("sglang.srt.layers.attention.mamba.mamba", "MambaMixer2",
                                        "the checkpoint channels of a rank's conv state"),
    KDA_MIXER: Source(_KDA_MIXER_MODULE, _KDA_MIXER_CLASS, _KDA_MIXER_COMPARED),
    **{m[0]: Source(m[1], m[2], _KDA_MIXER_COMPARED) for m in KDA_MIXERS.values()},
    "Qwen3GatedDeltaNet conv channels": Source("sglang.srt.models.qwen3_next", "Qwen3GatedDeltaNet",
                                               "the checkpoint channels of a GDN rank's conv state"),
    SHORT_CONV_CONFIG[0]: Source(SHORT_CONV_CONFIG[1], SHORT_CONV_CONFIG[2],
                                 "a short-conv model's per-rank state shape and layers (mamba2_cache_params)"),
    **{m[0]: Source(m[1], m[2], "a family's per-rank state shape and layers from its config class")
       for m in CONFIG_STATES.values()},
    **{m[0]: Source(m[1], m[2], "the TP sizes whose projection its forward's split fits") for m in TP_MIXERS.values()},
    SHORT_CONV_MIXER[0]: Source(SHORT_CONV_MIXER[1], SHORT_CONV_MIXER[2],
                                "the checkpoint channels of a rank's short-conv state"),
    "NIXL state send": Source(f"{_DISAGG}.nixl.conn", "NixlKVManager",
                              "the state writes NIXL posts, and the decode bytes they leave wrong"),
    "Mooncake state send": Source(f"{_DISAGG}.mooncake.conn", "MooncakeKVManager",
                                  "the state writes Mooncake posts, and the decode bytes they leave wrong"),
    QSA_SEND: Source(f"{_DISAGG}.mooncake.conn", "MooncakeKVManager", QSA_SEND_COMPARED),
    "DSATokenToKVPool entries": Source("sglang.srt.mem_cache.memory_pool", "DSATokenToKVPool",
                                       "a DSA model's latent and index-key pages: item bytes per layer"),
    "draft KV pool entries": Source("sglang.srt.mem_cache.memory_pool", "MHATokenToKVPool",
                                    "a draft's KV entries (MTP, or --draft-model's): layer ids, item bytes"),
    "_resolve_rank_mapping": Source(f"{_DISAGG}.common.conn", "CommonKVManager._resolve_rank_mapping",
                                    "the P ranks each D rank reads, and the responses it waits for"),
}

Loaded = Mapping[str, "Callable[..., Any] | str"]     # a function, or why it could not be loaded


def load_functions(names: Sequence[str] = tuple(SOURCES)) -> dict[str, Callable[..., Any] | str]:
    """SGLang's functions from their own modules (the package's ordinary import chain)."""
    out: dict[str, Callable[..., Any] | str] = {}
    for name in names:
        source = SOURCES[name]
        try:
            obj: Any = importlib.import_module(source.module)
            for part in source.path.split("."):
                obj = getattr(obj, part)
            out[name] = obj
        except Exception as error:     # an import error is a finding, reported per function
            out[name] = f"{type(error).__name__}: {error}"
    return out


def installed_version() -> str | None:
    """The installed SGLang's version, from its package metadata (SGLang is not imported)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sglang")
    except PackageNotFoundError:
        return None


# --- results -------------------------------------------------------------------------------------

# How a case's inputs read (the rest: the key with spaces).
_WORDS = {"p_tp": "P TP", "d_tp": "D TP", "tp": "TP", "d_rank": "D rank", "p_rank": "P rank", "src_tp": "src TP",
          "dst_tp": "dst TP", "kv_heads": "KV heads", "env": "environment", "stand_in": "stand-in"}


def describe(case: Mapping[str, Any]) -> str:
    """A case's inputs in a line: ``nemotron-h-8b, field conv, P TP 1, D TP 2, D rank 0``."""
    parts = []
    for key, value in case.items():
        if key == "model":
            parts.append(str(value))
        elif isinstance(value, Mapping):
            parts.append(f"{_WORDS.get(key, key.replace('_', ' '))} "
                         + (" ".join(f"{k}={v}" for k, v in value.items()) or "none"))
        else:
            parts.append(f"{_WORDS.get(key, key.replace('_', ' '))} {plain(value)}")
    return ", ".join(parts)


@dataclass
class FunctionResult(Result):
    """One of SGLang's functions (``SOURCES``): its first difference the case and both values; no
    case is skipped (every case reaches SGLang's function)."""

    name: str
    EMPTY = AGREES

    @property
    def compares(self) -> str:
        return SOURCES[self.name].compares if self.name in SOURCES else ""

    def record(self, case: Mapping[str, Any], theirs: Any, ours: Any) -> None:
        if self.count(case.get("model"), theirs == ours):
            self.first = {"case": dict(case), "sglang": theirs, "mambaxfer": ours}

    def could_not_call(self, error: BaseException | str) -> None:
        self.not_called = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        if isinstance(error, AttributeError):
            self.attribute = error.name

    def to_dict(self) -> dict[str, Any]:
        first = None if self.first is None else {
            "case": describe(self.first["case"]), "inputs": plain(self.first["case"]),
            "sglang": plain(self.first["sglang"]), "mambaxfer": plain(self.first["mambaxfer"])}
        return result_document(self, first)


@dataclass
class Report(Outcomes):
    version: str                    # the installed SGLang's
    rules: str                      # the release whose rules mambaxfer compared
    models: list[str]
    max_tp: int
    results: list[FunctionResult] = field(default_factory=list)
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def engine_document(self) -> dict[str, Any]:
        return {"engine": "sglang", "sglang": {"version": self.version, "rules": self.rules}}


def _outcome(call: Callable[[], Any]) -> Any:
    """A value, or the refusal (any exception SGLang raises; ours are UserErrors) as one token: both
    sides refuse in their own words; conformance compares that they refuse."""
    try:
        return call()
    except (UserError, ValueError, AssertionError, ZeroDivisionError):
        return "refused"


# --- the cases ------------------------------------------------------------------------------------

def _shape_tuple(shape: Any) -> tuple[Any, ...]:
    groups = getattr(shape, "conv_shard_groups", None)
    return (tuple(tuple(c) for c in shape.conv), tuple(shape.temporal),
            tuple(groups) if groups is not None else None)


def _ours(shape: StateShape) -> tuple[Any, ...]:
    return ((shape.conv, *((dim, rows) for _, dim, rows in shape.extra)), shape.temporal, shape.conv_shard_groups)


def _call(fn: Callable[..., Any], after: Callable[[Any], Any], /, *args: Any, **kwargs: Any) -> Any:
    return after(fn(*args, **kwargs))


def _tuples(blocks: Any) -> list[tuple[int, ...]]:
    return [tuple(b.as_tuple()) if hasattr(b, "as_tuple") else tuple(b) for b in blocks]


# Stand-ins beside the presets: the shapes SGLang's configs pass for families mambaxfer has no
# preset of, and small odd dimensions.
KDA_STAND_INS: tuple[dict[str, int], ...] = given("KDA_STAND_INS")
MAMBA2_STAND_INS: tuple[dict[str, int], ...] = (
    {"intermediate_size": 4096, "n_groups": 1, "num_heads": 64, "head_dim": 64, "state_size": 128, "conv_kernel": 4},
    {"intermediate_size": 768, "n_groups": 2, "num_heads": 24, "head_dim": 32, "state_size": 16, "conv_kernel": 4})
MAMBA1_STAND_INS = ({"intermediate_size": 1536, "state_size": 16, "conv_kernel": 4},)


def _kda_args(args: Mapping[str, int]) -> dict[str, int]:
    """A KDA stand-in's dims as KimiLinearStateShape.create names them."""
    return {("conv_kernel_size" if k == "conv_kernel" else k): v for k, v in args.items()}


def _their_shape(create: Any, full: Any, kda: Any, model: ModelSpec, tp_world_size: int) -> Any:
    """The model's state shape from SGLang's own function for its variant."""
    if model.variant == "mamba1":
        p = model.params
        return full(tp_world_size=tp_world_size, intermediate_size=p["intermediate_size"], state_size=p["d_state"],
                    conv_kernel=model.conv_kernel)
    if model.variant == "kda":
        return _kda_from_config(kda, model, tp_world_size)
    if model.family in OWN_SHAPES:     # its config class builds its Mamba2StateShape itself
        with _on_rank(tp_world_size, 0):
            return _config_class(model.hf_config["model_type"])(**model.hf_config).mamba2_cache_params.shape
    args = mamba2_args(model, tp_world_size)
    groups = args.pop("conv_shard_groups", None)     # as the family's config class passes them, or none
    return create(tp_world_size=tp_world_size, **args, **({"conv_shard_groups": list(groups)} if groups else {}))


def _needs(name: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """A step of the probe that runs where SGLang's function ``name`` can be called, handed it."""
    def step(method: Callable[..., None]) -> Callable[..., None]:
        return lambda self, *args: None if (fn := self.fn(name)) is None else method(self, fn, *args)
    return step


class _Checker:
    """Runs each case on both sides and records it under its function."""

    def __init__(self, functions: Loaded, release: Release, max_tp: int = MAX_TP):
        self.functions, self.release, self.max_tp = functions, release, max_tp
        self.results = {name: FunctionResult(name) for name in SOURCES}
        for name, fn in functions.items():
            if isinstance(fn, str):
                self.results[name].could_not_call(fn)

    def sizes(self, *sizes: int) -> tuple[int, ...]:
        return tuple(tp for tp in sizes if tp <= self.max_tp)

    def fn(self, name: str) -> Callable[..., Any] | None:
        fn = self.functions.get(name)
        return None if fn is None or isinstance(fn, str) or self.results[name].not_called else fn

    def compare(self, name: str, case: Mapping[str, Any], theirs: Callable[[], Any], ours: Callable[[], Any]) -> None:
        result = self.results[name]
        try:
            value = _outcome(theirs)
        except Exception as error:   # what a refusal never is: SGLang's function could not be called
            result.could_not_call(error)
            return
        result.record(case, value, _outcome(ours))

    # --- shapes and dtypes ---

    def shape_fns(self) -> tuple[Any, Any, Any]:
        return self.fn("Mamba2StateShape.create"), self.fn("Mamba2StateShape.create_full_rank"), self.fn(KDA_SHAPES)

    def shapes(self, models: Sequence[ModelSpec]) -> None:
        create, full, kda = fns = self.shape_fns()
        for model, tp in itertools.product(models, range(1, self.max_tp + 1)):
            case = {"model": model.name, "tp": tp}
            name = {"mamba1": "Mamba2StateShape.create_full_rank", "kda": KDA_SHAPES}.get(
                model.variant, "" if model.family in OWN_SHAPES else "Mamba2StateShape.create")
            if self.fn(name):     # KDA: the dims its config class gives KimiLinearStateShape
                ours = sglang_model(model, {}, self.release) if model.variant == "kda" else model
                self.compare(name, case, partial(_call, _their_shape, _shape_tuple, *fns, model, tp),
                             partial(_call, state_shape, _ours, ours, tp))
            # A short-conv model's config class, and a family's own (the name "": none).
            for own in (SHORT_CONV_CONFIG[0] if model.variant == "short_conv" else "",
                        CONFIG_STATES.get(model.family, ("",))[0]):
                if self.fn(own):
                    self.compare(own, case, partial(_their_config_state, self.fn(own), model, tp),
                                 partial(_our_config_state, model, tp, self.release))
        stand_ins = (("Mamba2StateShape.create", create, mamba2_state_shape, MAMBA2_STAND_INS, dict),
                     ("Mamba2StateShape.create_full_rank", full, mamba1_state_shape, MAMBA1_STAND_INS, dict),
                     (KDA_SHAPES, kda, kda_state_shape, KDA_STAND_INS, _kda_args))
        for tp, (name, theirs, ours, cases, named) in itertools.product(range(1, self.max_tp + 1), stand_ins):
            for args in cases if theirs else ():
                self.compare(name, {"stand_in": args, "tp": tp},
                             partial(_call, theirs, _shape_tuple, tp_world_size=tp, **named(args)),
                             partial(_call, ours, _ours, tp=tp, **args))

    @_needs("mamba2_state_dtype")
    def dtypes(self, dtype: Callable[..., Any]) -> None:
        rel = self.release
        envs: list[dict[str, str]] = [{}]
        envs += [{rel.conv_dtype_env: c} for c in ("float32", "float16", "nonsense")]
        envs += [{rel.ssm_dtype_env: s} for s in ("bfloat16", "float16", "nonsense")]
        for config_dtype, env, text in itertools.product((None, "float32", "bfloat16", "float16", "float8"),
                                                         envs, (False, True)):
            config = None
            if config_dtype is not None:
                inner = SimpleNamespace(mamba_ssm_dtype=config_dtype)
                config = SimpleNamespace(text_config=inner) if text else inner
            self.compare("mamba2_state_dtype",
                         {"config_mamba_ssm_dtype": config_dtype, "in_text_config": text, "env": env},
                         partial(_their_dtypes, dtype, config, env), partial(
                             _call, state_dtypes, _dtype_names, config_ssm_dtype=config_dtype, env=env, release=rel))

    # --- slices ---

    def _slice_case(self, case: Mapping[str, Any], src: TransferEntry, dst: TransferEntry, p_tp: int, d_tp: int,
                    d: int, p: int, logical: bool = True) -> None:
        blocks, byte_fn = self.fn("compute_mamba_state_slice_blocks"), self.fn("compute_mamba_state_slice_byte_blocks")
        groups = list(src.conv_shard_groups) if src.conv_shard_groups else None
        if logical and blocks and src.dim:
            self.compare("compute_mamba_state_slice_blocks", case,
                         partial(_call, blocks, _tuples, src.dim, dst.dim, p_tp, d_tp, d, p, groups),
                         partial(_call, slice_blocks, _tuples, src_dim=src.dim, dst_dim=dst.dim, src_tp=p_tp,
                                 dst_tp=d_tp, dst_rank=d, src_rank=p, conv_shard_groups=src.conv_shard_groups))
        if byte_fn:
            self.compare("compute_mamba_state_slice_byte_blocks", case,
                         partial(_call, byte_fn, _tuples, src_item_len=src.item_len, dst_item_len=dst.item_len,
                                 src_dim=src.dim, dst_dim=dst.dim, outer_count=src.outer_count,
                                 src_attn_tp_size=p_tp, dst_attn_tp_size=d_tp, dst_tp_rank_in_group=d,
                                 local_tp_rank_in_group=p, conv_shard_groups=groups),
                         partial(_call, byte_blocks, _tuples, src, dst, src_tp=p_tp, dst_tp=d_tp, dst_rank=d,
                                 src_rank=p, release=self.release))

    def slices(self, models: Sequence[ModelSpec]) -> None:
        for model in models:
            spec = sglang_model(model, {}, self.release)
            sizes = tp_sizes(spec, self.max_tp)
            for p_tp, d_tp in itertools.permutations(sizes, 2):
                src_side, dst_side = Side(spec, p_tp), Side(spec, d_tp)
                for name in FIELDS:
                    src, dst = src_side.entry(name), dst_side.entry(name)
                    for d in range(d_tp):
                        for p in writers(p_tp, d_tp, d):
                            case = {"model": model.name, "field": name, "p_tp": p_tp, "d_tp": d_tp, "d_rank": d,
                                    "p_rank": p}
                            self._slice_case(case, src, dst, p_tp, d_tp, d, p)
        # KDA's transposed conv (one block per conv row), and items replicated across TP.
        for kargs in KDA_STAND_INS:
            for p_tp, d_tp in itertools.permutations(self.sizes(1, 2, 4, 8), 2):
                src, dst = (entry_for(CONV, kda_state_shape(tp=t, **kargs), "bfloat16", "float32")
                            for t in (p_tp, d_tp))
                for d in range(d_tp):
                    for p in writers(p_tp, d_tp, d):
                        case = {"stand_in": kargs, "p_tp": p_tp, "d_tp": d_tp, "d_rank": d, "p_rank": p}
                        self._slice_case(case, src, dst, p_tp, d_tp, d, p)
        for p_tp, d_tp in itertools.product(range(1, self.max_tp + 1), repeat=2):
            for p, d, dst_len in itertools.product(range(p_tp), range(d_tp), (4096, 2048)):
                src, dst = TransferEntry("ple", 0, 4096, 0), TransferEntry("ple", 0, dst_len, 0)
                case = {"replicated": True, "p_tp": p_tp, "d_tp": d_tp, "d_rank": d, "p_rank": p,
                        "dst_item_len": dst_len}
                self._slice_case(case, src, dst, p_tp, d_tp, d, p, logical=False)

    @_needs("should_send_replicated_state")
    def replicated(self, elect: Callable[..., Any]) -> None:
        for src, dst in itertools.product(range(0, self.max_tp + 1), repeat=2):
            for rank in range(-1, src + 1):
                self.compare("should_send_replicated_state", {"src_tp": src, "dst_tp": dst, "rank": rank},
                             partial(elect, src_attn_tp_size=src, dst_attn_tp_size=dst, local_tp_rank_in_group=rank),
                             partial(replicated_writer, src, dst, rank, self.release))

    @_needs("compute_head_slice_params")
    def heads(self, params: Callable[..., Any], models: Sequence[ModelSpec]) -> None:
        for kv in sorted({m.num_kv_heads for m in models if m.num_kv_heads} | {1, 2, 4, 8}):
            for p_tp, d_tp in itertools.permutations(range(1, self.max_tp + 1), 2):
                if any(kv % t and t % kv for t in (p_tp, d_tp)) or max(p_tp, d_tp) % min(p_tp, d_tp):
                    continue
                for d in range(d_tp):
                    for p in writers(p_tp, d_tp, d):
                        self.compare("compute_head_slice_params",
                                     {"kv_heads": kv, "p_tp": p_tp, "d_tp": d_tp, "d_rank": d, "p_rank": p},
                                     partial(_call, params, tuple, p_tp, d_tp, p, d, kv),
                                     partial(_call, head_slice, HeadSlice.as_tuple, src_tp=p_tp, dst_tp=d_tp,
                                             src_rank=p, dst_rank=d, kv_heads=kv))

    def mixer_channels(self, models: Sequence[ModelSpec]) -> None:
        """The premise of the Mamba2 finding, from SGLang's own mixers: which checkpoint channels a
        rank's conv input (so its conv state) holds, in order, once the mixer's loaders have run."""
        kda = [m for m in models if m.variant == "kda"]
        for mixer in (None, *KDA_MIXERS.values()):     # SGLang's KimiDeltaAttention, or a family's own
            name, config = (mixer[0], mixer[3:]) if mixer else (KDA_MIXER, given("KDA_MIXER_CONFIG"))
            self.per_rank(name, [m for m in kda if KDA_MIXERS.get(m.family) == mixer],
                          partial(_their_kda_channels, config_class=config),
                          partial(sglang_model, env={}, release=self.release))
        gdn = [m for m in models if any(ARCHITECTURES.get(a) in QWEN3_GDN_FILES
                                        for a in m.hf_config.get("architectures", ()))]
        self.per_rank("Qwen3GatedDeltaNet conv channels", gdn, _their_gdn_channels)
        for label, (name, *_) in TP_MIXERS.items():
            mixer = self.fn(name)
            if mixer is None:
                continue
            for model, tp in itertools.product([m for m in models if m.family == label], range(1, self.max_tp + 1)):
                self.compare(name, {"model": model.name, "tp": tp}, partial(_their_split_fits, mixer, model, tp),
                             partial(lambda m, t: tp_refusal(m, t, self.release) is None, model, tp))
        short = [m for m in models if m.variant == "short_conv"]
        self.per_rank(SHORT_CONV_MIXER[0], short, _their_short_conv_channels)
        stand_ins = [replace(model_stand_in, name=f"stand-in n_groups={g}", params={**model_stand_in.params,
                                                                                     "n_groups": g})
                     for g in (1, 2, 4)]
        mamba2 = [m for m in models if m.variant == "mamba2"] + stand_ins
        self.per_rank("MambaMixer2 conv channels", mamba2, _their_mixer_channels, pair=True)

    def per_rank(self, name: str, models: Sequence[ModelSpec], theirs: Callable[..., Any],
                 spec: Callable[[ModelSpec], ModelSpec] = lambda m: m, pair: bool = False) -> None:
        """Each rank's conv channels from ``theirs`` (SGLang's mixer ``name``) and ``conv_channels``
        (on ``spec`` of the model); ``pair``: both of the mixer's answers."""
        mixer = self.fn(name)
        for model, ours_of in ((m, spec(m)) for m in models) if mixer else ():
            for tp in tp_sizes(ours_of, self.max_tp):
                for rank in range(tp):
                    ours = partial(conv_channels, ours_of, tp, rank)
                    self.compare(name, {"model": model.name, "tp": tp, "rank": rank},
                                 partial(theirs, mixer, model, tp, rank),
                                 partial(_call, ours, lambda c: (c, c)) if pair else ours)

    def sends(self, models: Sequence[ModelSpec]) -> None:
        """SGLang's send methods between its pools on the CPU: the writes, and the decode bytes left wrong."""
        self.qsa_sends(models)
        pool, fns = self.fn("MambaPool transfer entries"), self.shape_fns()
        if pool is None or None in fns:
            return
        for name, backend in (("NIXL state send", NIXL), ("Mooncake state send", MOONCAKE)):
            manager = self.fn(name)
            if manager is None:
                continue
            for model in models:
                spec = sglang_model(model, FLOAT32_STATE, self.release)
                sizes = tp_sizes(spec, self.max_tp)
                for p_tp, d_tp in itertools.product(sizes, repeat=2):
                    shape = partial(_their_shape, *fns, model)
                    self.compare(name, {"model": model.name, "p_tp": p_tp, "d_tp": d_tp, "layers": SEND_LAYERS},
                                 partial(_their_send, manager, backend, pool, shape, spec, p_tp, d_tp),
                                 partial(_our_send, model, spec, p_tp, d_tp, backend, self.release))

    def pool_entries(self, models: Sequence[ModelSpec]) -> None:
        pool, fns = self.fn("MambaPool transfer entries"), self.shape_fns()
        self.side_states(models)
        self.qsa_pools(models)
        self.dsa_pools(models)
        if pool is None or None in fns:
            return
        layers = (0, 3)
        for model in models:
            spec = sglang_model(model, {}, self.release)
            for tp in tp_sizes(spec, self.max_tp):
                theirs_shape = partial(_their_shape, *fns, model, tp)
                params = given("KDA_CACHE_PARAMS") if model.variant == "kda" else "Mamba2CacheParams"
                self.compare("MambaPool transfer entries", {"model": model.name, "tp": tp, "layers": layers},
                             partial(_their_pool_entries, pool, theirs_shape, params, layers),
                             partial(_our_pool_entries, state_shape(spec, tp), spec.conv_dtype, spec.ssm_dtype,
                                     layers))
        for kargs, tp in itertools.product(KDA_STAND_INS, self.sizes(1, 2, 4, 8)):
            self.compare("MambaPool transfer entries", {"stand_in": kargs, "tp": tp, "layers": layers},
                         partial(_their_pool_entries, pool, partial(fns[2], tp_world_size=tp, **_kda_args(kargs)),
                                 given("KDA_CACHE_PARAMS"), layers),
                         partial(_our_pool_entries, kda_state_shape(tp=tp, **kargs), "bfloat16", "float32",
                                 layers))

    @_needs("DSATokenToKVPool entries")
    def dsa_pools(self, pool: Callable[..., Any], models: Sequence[ModelSpec]) -> None:
        """A DSA model's attention pool at the page SGLang sets (``PAGE_SIZES``) against ``kv_entries``."""
        for model in (m for m in models if m.kpool_indexer):
            spec = sglang_model(model, {}, self.release)
            page = dsa_page_size(spec) or 0
            self.compare("DSATokenToKVPool entries", {"model": model.name, "page_size": page},
                         partial(_their_dsa_entries, pool, model, page), partial(_our_dsa_entries, spec, page))

    @_needs(PLE_POOLS)
    def side_states(self, pools: Callable[..., Any], models: Sequence[ModelSpec]) -> None:
        """The replicated side states' entries (PLE pools), in the default and a float32 conv dtype."""
        from mambaxfer_cli.readers.model_config import spec_from_config
        from mambaxfer_cli.readers.model_source import load_model
        base = load_model(given("PLE_PRESET"), startup=startup(self.release.version))
        cases = [(m.name, m) for m in models if side_entries(sglang_model(m, {}, self.release))]
        for changed in given("PLE_STAND_INS"):
            config = {**base.hf_config, "text_config": {**base.hf_config["text_config"], **changed}}
            cases.append((changed, spec_from_config(config, name="stand-in", source="conformance")))
        for (label, model), env in itertools.product(cases, ({}, {self.release.conv_dtype_env: "float32"})):
            case = {"model": label, "env": env} if isinstance(label, str) else {"stand_in": label, "env": env}
            self.compare(PLE_POOLS, case, partial(_their_side_entries, pools, model, env),
                         partial(_our_side_entries, model, env, self.release))

    @_needs(QSA_POOL)
    def qsa_pools(self, pool: Callable[..., Any], models: Sequence[ModelSpec]) -> None:
        """A QSA model's pending and compressed entries, per --qsa-indexer-dtype: the presets with a QSA
        indexer and the PLE preset with its indexer keys changed."""
        from mambaxfer_cli.readers.model_config import spec_from_config
        from mambaxfer_cli.readers.model_source import load_model
        base = load_model(given("PLE_PRESET"), startup=startup(self.release.version))
        cases: list[tuple[Any, ModelSpec]] = [(m.name, m) for m in models if m.ple_qsa and m.ple_qsa.has_qsa]
        for changed in given("QSA_STAND_INS"):
            config = {**base.hf_config, "text_config": {**base.hf_config["text_config"], **changed}}
            cases.append((changed, spec_from_config(config, name="stand-in", source="conformance")))
        for (label, model), dtype in itertools.product(cases, QSA_INDEXER_DTYPES):
            case = {"model": label} if isinstance(label, str) else {"stand_in": label}
            self.compare(QSA_POOL, case | {"qsa_indexer_dtype": dtype}, partial(_their_qsa_entries, pool, model, dtype),
                         partial(_our_qsa_entries, model, dtype, self.release))

    @_needs(QSA_SEND)
    def qsa_sends(self, manager: Callable[..., Any], models: Sequence[ModelSpec]) -> None:
        """Mooncake's send of a QSA model's states between SGLang's own QSA pools, every pairing of
        TP sizes, D's compressed keys in each --qsa-indexer-dtype (P's: auto)."""
        pool = self.fn(QSA_POOL)
        if pool is None:
            return
        for model in (m for m in models if m.ple_qsa and m.ple_qsa.has_qsa):
            sizes = tp_sizes(sglang_model(model, {}, self.release), self.max_tp)
            for (p_tp, d_tp), dtype in itertools.product(itertools.product(sizes, repeat=2), given("QSA_SEND_DTYPES")):
                self.compare(QSA_SEND, {"model": model.name, "p_tp": p_tp, "d_tp": d_tp, "d_qsa_indexer_dtype": dtype},
                             partial(_their_qsa_send, manager, pool, model, p_tp, d_tp, dtype),
                             partial(_our_qsa_send, model, p_tp, d_tp, dtype, self.release))

    @_needs("mambaish_config state layers")
    def state_layers(self, hybrid: Callable[..., Any], models: Sequence[ModelSpec]) -> None:
        """The layer ids the pool's entries carry (the config class's mamba2_cache_params.layers)."""
        for model in models:
            self.compare("mambaish_config state layers", {"model": model.name},
                         partial(_call, _their_cache_params, lambda params: tuple(params.layers), hybrid, model),
                         partial(_our_state_layers, model, self.release))

    @_needs("draft KV pool entries")
    def drafts(self, pool: Callable[..., Any], models: Sequence[ModelSpec],
               drafter: tuple[str, str] | None = None) -> None:
        """The draft KV pool NEXTN builds from a model's checkpoint, or ``drafter``'s (its algorithm
        and config, an EAGLE3 or STANDALONE draft model), against ``drafts.Draft.entries``."""
        for model in models:
            if drafter is None and str((model.hf_config.get("architectures") or [""])[0]) not in MTP_DRAFTS:
                continue
            name = model.name + (f" + {drafter[0].upper()}" if drafter else "")
            theirs = partial(_their_drafter, *drafter) if drafter else _their_draft
            for tp, page in itertools.product(tp_sizes(model, self.max_tp), (1, 16)):
                self.compare("draft KV pool entries", {"model": name, "tp": tp, "page_size": page},
                             partial(theirs, pool, model, tp, page),
                             partial(_our_draft, model, tp, page, *(drafter or ("NEXTN", None))))

    @_needs("_resolve_rank_mapping")
    def rank_mapping(self, resolve: Callable[..., Any]) -> None:
        for p_tp, d_tp in itertools.product(range(1, self.max_tp + 1), repeat=2):
            for d in range(d_tp):
                self.compare("_resolve_rank_mapping", {"p_tp": p_tp, "d_tp": d_tp, "d_rank": d},
                             partial(_their_mapping, resolve, p_tp, d_tp, d),
                             partial(_call, rank_mapping, lambda m: astuple(m)[1:], p_tp, d_tp, d))


def _their_dtypes(dtype: Callable[..., Any], config: Any, env: Mapping[str, str]) -> tuple[str, str]:
    with mock.patch.dict(os.environ, env):
        return _dtype_names(dtype(config))


def _dtype_names(got: Any) -> tuple[str, str]:
    return (str(got.conv).removeprefix("torch."), str(got.temporal).removeprefix("torch."))


def _their_mapping(resolve: Callable[..., Any], p_tp: int, d_tp: int, d: int) -> tuple[Any, ...]:
    # A stand-in manager (the method reads these attributes) for a non-MLA model with one CP and
    # PP rank on each side; the method stores its answer on the prefill server info.
    manager = SimpleNamespace(
        is_mla_backend=False, is_hybrid_mla_backend=False, attn_tp_size=d_tp, kv_args=SimpleNamespace(engine_rank=d),
        attn_cp_size=1, attn_cp_rank=0, pp_size=1, pp_rank=0, enable_all_cp_ranks_for_transfer=False)
    info = SimpleNamespace(attn_tp_size=p_tp, attn_cp_size=1, pp_size=1, enable_kv_cache_sharding=False,
                           enable_dsa_cache_layer_split=False)
    resolve(manager, info)
    return (tuple(info.target_tp_ranks), info.required_dst_info_num, info.required_prefill_response_num)


# A small Mamba2 model whose groups the mixer check varies.
model_stand_in = ModelSpec(name="stand-in", source="conformance", variant=Variant("mamba2"),
                           params={"intermediate_size": 64, "d_state": 4, "n_groups": 1, "num_heads": 8,
                                   "head_dim": 8},
                           layers=("ssm",), conv_kernel=4, num_spec=0, conv_dtype="bfloat16", ssm_dtype="float32",
                           family="Mamba2")


def _on_rank(tp: int, rank: int, **more: Any) -> Any:
    """SGLang's parallel context of one rank, stated as SGLang allows before distributed start-up."""
    parallel = importlib.import_module("sglang.srt.runtime_context").get_parallel()
    return parallel.override(tp_size=tp, tp_rank=rank, tp_group=None, attn_tp_size=tp, attn_tp_rank=rank, **more)


def _their_mixer_channels(mixer: Callable[..., Any], model: ModelSpec, tp: int, rank: int) -> tuple[Any, ...]:
    """SGLang's MambaMixer2 of one rank, loaded with numbered channels: its conv input's, both ways."""
    import torch
    utils = importlib.import_module("sglang.srt.configs.mamba_utils")
    p = model.params
    i, g, n, h = p["intermediate_size"], p["n_groups"], p["d_state"], p["num_heads"]
    with _on_rank(tp, rank):
        shape = utils.Mamba2StateShape.create(tp_world_size=tp, intermediate_size=i, n_groups=g, num_heads=h,
                                              head_dim=p["head_dim"], state_size=n, conv_kernel=model.conv_kernel)
        built = mixer(utils.Mamba2CacheParams(shape=shape, layers=[0]), hidden_size=8, use_conv_bias=True,
                      use_bias=False, n_groups=g)
        bias = built.conv1d.bias
        bias.weight_loader(bias, torch.arange(i + 2 * g * n, dtype=torch.float32))
        proj = built.in_proj.weight
        rows = 2 * i + 2 * g * n + h        # the checkpoint's [z | x | B | C | dt]
        proj.weight_loader(proj, torch.arange(rows, dtype=torch.float32)[:, None].expand(rows, 8).contiguous())
    conv = [int(v) for v in bias.tolist()]
    local_i = i // tp
    xbc = [int(v) - i for v in proj[local_i:local_i + len(conv), 0].tolist()]
    return (tuple(conv), tuple(xbc))


def _config_class(model_type: str) -> Any:
    """SGLang's config class for a model_type: its registry's, else the one it puts in transformers'."""
    registry = importlib.import_module("sglang.srt.utils.hf_transformers.common")._CONFIG_REGISTRY
    return registry.get(model_type) or importlib.import_module("transformers").CONFIG_MAPPING[model_type]


def _their_config_state(loaded: Any, model: ModelSpec, tp: int) -> tuple[Any, ...]:
    """The model's SGLang config class at attention TP ``tp``: its cache params' shape and layers."""
    model_type = model.hf_config["model_type"]
    config = (loaded if loaded.model_type == model_type else _config_class(model_type))(**model.hf_config)
    with _on_rank(tp, 0):
        params = config.mamba2_cache_params
    return (_shape_tuple(params.shape), tuple(params.layers))


def _our_config_state(model: ModelSpec, tp: int, release: Release) -> tuple[Any, ...]:
    spec = sglang_model(model, {}, release)
    return (_ours(state_shape(spec, tp)), spec.ssm_layer_ids)


def _their_split_fits(mixer: Callable[..., Any], model: ModelSpec, tp: int) -> bool:
    """Whether the mixer builds at TP ``tp`` (its linear layers assert TP divides each output) with the
    width its forward splits its merged projection by (its q, k, v, a, b, g sizes)."""
    import torch
    config = _config_class(model.hf_config["model_type"])(**model.hf_config).get_text_config()
    config.hidden_size = 8
    device = SimpleNamespace(current_device=lambda: "cpu")     # what its gated norm asks a GPU for
    try:
        with _on_rank(tp, 0), mock.patch.object(torch, "get_device_module", lambda *a: device):
            built = mixer(config, layer_id=model.ssm_layer_ids[0])
    except AssertionError:
        return False
    return bool(built.qkvabz_proj.output_size_per_partition == 2 * (built.total_k_dim + built.total_v_dim
                                                                    + built.num_heads))


def _their_short_conv_channels(mixer: Any, model: ModelSpec, tp: int, rank: int) -> tuple[int, ...]:
    """SGLang's short conv of one rank, loaded with numbered channels: its conv state's channels."""
    import torch
    config = _config_class(model.hf_config["model_type"])(**model.hf_config)
    hidden = model.params["hidden_size"]
    with _on_rank(tp, rank):
        weight = mixer(config, 0).conv_weight
        weight.weight_loader(weight, torch.arange(hidden, dtype=torch.float32)[:, None].expand(
            hidden, weight.shape[1]).contiguous())
    return tuple(int(v) for v in weight[:, 0].tolist())


def conv_channels(model: ModelSpec, tp: int, rank: int) -> tuple[int, ...]:
    """The checkpoint channels of a rank's conv state in mambaxfer's layout (its conv regions, each
    at its offset in the unsharded conv: [x | B | C], [Q | K | V])."""
    full = [r for r in rank_layout(model, 1, 0).regions if r.kind == "conv"]
    base = dict(zip([r.name for r in full], itertools.accumulate([len(r.shard) for r in full], initial=0)))
    return tuple(base[r.name] + u for r in rank_layout(model, tp, rank).regions if r.kind == "conv"
                 for u in range(r.shard.start, r.shard.end))


# The srt/models/ files whose GDN layers are Qwen3GatedDeltaNet (each family module gives its own).
QWEN3_GDN_FILES = frozenset(merged("QWEN3_GDN_FILES"))


def _their_gdn_channels(mixer: Callable[..., Any], model: ModelSpec, tp: int, rank: int) -> tuple[int, ...]:
    """SGLang's Qwen3GatedDeltaNet of one rank (hidden size 8), its conv1d weight loaded from a
    checkpoint whose every channel carries its own number: the rank's conv state channels."""
    import torch
    config = _text_config(model)
    config.hidden_size = 8
    p = model.params
    n = 2 * p["num_k_heads"] * p["head_k_dim"] + p["num_v_heads"] * p["head_v_dim"]
    device = SimpleNamespace(current_device=lambda: "cpu")     # what its gated norm asks a GPU for
    with _on_rank(tp, rank), mock.patch.object(torch, "get_device_module", lambda *a: device):
        weight = mixer(config, layer_id=0).conv1d.weight
    weight.weight_loader(weight, torch.arange(n, dtype=torch.float32)[:, None, None].expand(
        n, 1, model.conv_kernel).contiguous())
    return tuple(int(v) for v in weight[:, 0, 0].tolist())


# The send check keeps both state fields in float32, so that every element carries its own
# label (int32) whatever the model; two layers, the request in slot 1 of each pool.
FLOAT32_STATE = {"SGLANG_MAMBA_CONV_DTYPE": "float32", "SGLANG_MAMBA_SSM_DTYPE": "float32"}
SEND_LAYERS = (0, 1)
P_SLOT, D_SLOT = 1, 1
UNWRITTEN, OTHER_SLOT = -2, -1


def _entry_at(ptrs: Sequence[int], sizes: Sequence[int], address: int) -> Any:
    """The entry whose buffer holds ``address`` (None: none of them)."""
    return next((i for i, (ptr, size) in enumerate(zip(ptrs, sizes)) if ptr <= address < ptr + size), None)


def _labels(layout: RankLayout, field: str, layer: int, outer: int = 1) -> Any:
    """One item's elements (an int32 tensor), each labelled with its layer, region and global element;
    a ``(K-1, dim)`` conv (``outer`` rows) row by row."""
    import torch
    parts = []
    for region, _ in field_regions(layout, field):
        per_unit = region.unit_bytes // 4
        first = (layer << 29) + ((layout.regions.index(region) + 1) << 25) + region.shard.start * per_unit
        parts.append(torch.arange(first, first + len(region.shard) * per_unit, dtype=torch.int32))
    labels = torch.cat(parts)
    return labels.view(-1, outer).T.reshape(-1) if field == CONV and outer > 1 else labels


def _kept(blocks: list[tuple[int, int, int]], session: str, posted: list[tuple[int, int, int]]) -> int:
    """A stand-in for Mooncake's ``_transfer_data``: keeps the blocks, reports success."""
    blocks.extend(posted)
    return 0


class _Agent:
    """A stand-in NIXL agent that keeps the descriptors SGLang posts."""

    def __init__(self, blocks: list[tuple[int, int, int]]):
        self.blocks = blocks

    def get_xfer_descs(self, addrs: list[tuple[int, int, int]], memory: str) -> list[tuple[int, int, int]]:
        return list(addrs)

    def initialize_xfer(self, op: str, src: list[tuple[int, int, int]], dst: list[tuple[int, int, int]],
                        peer: str) -> str:
        assert op == "WRITE", op
        self.blocks.extend((s[0], d[0], s[1]) for s, d in zip(src, dst))
        return "posted"


def _their_send(manager: Any, backend: str, pool_class: Callable[..., Any], shape: Callable[..., Any],
                spec: ModelSpec, p_tp: int, d_tp: int) -> tuple[Any, ...]:
    """Labelled prefill pools, empty decode pools, SGLang's send method for every (decode rank,
    writer); the posted writes as (field, layer, d, p, src, dst, length) and the bad decode bytes."""
    import ctypes

    import torch
    utils = importlib.import_module("sglang.srt.configs.mamba_utils")
    dtype = utils.Mamba2StateDType(conv=torch.float32, temporal=torch.float32)
    params_class = getattr(utils, given("KDA_CACHE_PARAMS") if spec.variant == "kda" else "Mamba2CacheParams")

    def pools(tp: int, fill: bool) -> list[Any]:
        out = []
        for rank in range(tp):
            params = params_class(shape=shape(tp_world_size=tp), layers=list(SEND_LAYERS), dtype=dtype)
            built = pool_class(size=3, spec_state_size=0, cache_params=params, mamba_layer_ids=list(SEND_LAYERS),
                               device="cpu")
            layout, outer = rank_layout(spec, tp, rank), state_shape(spec, tp).conv_outer
            for field_name, tensor in _state_tensors(built, spec, tp):
                ints = tensor.view(torch.int32)
                ints.fill_(OTHER_SLOT if fill else UNWRITTEN)
                if fill and tensor.numel():    # a short conv's temporal state is empty
                    for layer in SEND_LAYERS:
                        ints[layer, P_SLOT] = _labels(layout, field_name, layer, outer).view(ints.shape[2:])
            for sibling in _their_siblings(spec):
                built.register_slot_state(sibling)
            for k, ints in enumerate(_side_items(built)):
                ints.fill_(OTHER_SLOT if fill else UNWRITTEN)
                if fill:
                    ints[P_SLOT] = _side_labels(k, ints[P_SLOT])
            out.append(built)
        return out

    prefill, decode = pools(p_tp, True), pools(d_tp, False)
    meta = [(b.get_contiguous_buf_infos(), b.get_state_dim_per_tensor(), b.get_state_conv_shard_groups(),
             b.get_state_slice_outer_counts(), b.get_state_layer_ids(),
             [e[0] for e in b._iter_transfer_state_entries()]) for b in (*prefill, *decode)]
    writes, bad = [], 0
    for d in range(d_tp):
        (d_ptrs, d_lens, d_items), d_dims, _, _, d_ids, _ = meta[p_tp + d]
        for p in writers(p_tp, d_tp, d):
            (s_ptrs, s_lens, s_items), s_dims, s_groups, s_outer, s_ids, s_fields = meta[p]
            blocks: list[tuple[int, int, int]] = []
            if backend == NIXL:
                stand_in = SimpleNamespace(state_tp_size=p_tp, kv_args=SimpleNamespace(engine_rank=p, gpu_id=0),
                                           pp_size=1, agent=_Agent(blocks), _post_xfer=lambda handle, message: None)
                if p_tp == d_tp:
                    manager._send_mamba_state(stand_in, "peer", [P_SLOT], s_ptrs, s_items, d_ptrs, [D_SLOT], 0,
                                              s_ids, d_ids)
                else:
                    manager._send_mamba_state_slice(stand_in, "peer", [P_SLOT], s_ptrs, s_items, s_dims, d_ptrs,
                                                    [D_SLOT], d_items, d_dims, 0, d_tp, d, s_groups, s_outer,
                                                    s_ids, d_ids)
            else:
                stand_in = SimpleNamespace(state_tp_size=p_tp, kv_args=SimpleNamespace(engine_rank=p), pp_size=1,
                                           _transfer_data=partial(_kept, blocks))
                request = SimpleNamespace(mooncake_session_id="session")
                if p_tp == d_tp:
                    manager._send_mamba_state(stand_in, request, [P_SLOT], s_ptrs, s_items, d_ptrs, [D_SLOT],
                                              s_ids, d_ids, d_items)
                else:
                    manager._send_mamba_state_slice(stand_in, request, [P_SLOT], s_ptrs, s_items, s_dims, d_ptrs,
                                                    [D_SLOT], d_items, d_dims, d, d_tp, s_groups, s_outer,
                                                    s_ids, d_ids)
            for src, dst, length in blocks:
                i, j = _entry_at(s_ptrs, s_lens, src), _entry_at(d_ptrs, d_lens, dst)
                src_off, dst_off = src - s_ptrs[i] - s_items[i] * P_SLOT, dst - d_ptrs[j] - d_items[j] * D_SLOT
                writes.append((s_fields[i], s_ids[i], d, p, src_off, dst_off, length))
                bad += length - max(0, min(dst_off + length, d_items[j]) - max(dst_off, 0))   # outside the item
                # Copy only within the two pools' memory (a block past them is counted, not made).
                if src + length <= s_ptrs[i] + s_lens[i] and dst + length <= d_ptrs[j] + d_lens[j]:
                    ctypes.memmove(dst, src, length)
    for d, built in enumerate(decode):
        layout, outer = rank_layout(spec, d_tp, d), state_shape(spec, d_tp).conv_outer
        for field_name, tensor in _state_tensors(built, spec, d_tp):
            ints = tensor.view(torch.int32)
            for layer in SEND_LAYERS if tensor.numel() else ():
                want = _labels(layout, field_name, layer, outer)
                bad += 4 * int((ints[layer, D_SLOT].reshape(-1) != want).sum())
        for k, ints in enumerate(_side_items(built)):
            bad += 4 * int((ints[D_SLOT] != _side_labels(k, ints[D_SLOT])).sum())
    return (tuple(sorted(writes)), bad)


def _state_tensors(built: Any, spec: ModelSpec, tp: int) -> list[tuple[str, Any]]:
    """The pool's state tensors, each with the field mambaxfer names it: its conv list, then temporal."""
    return list(zip(state_shape(spec, tp).fields, [*built.mamba_cache.conv, built.mamba_cache.temporal]))


def _their_side_entries(short_conv: Callable[..., Any], model: ModelSpec, env: Mapping[str, str]) -> tuple[Any, ...]:
    """SGLang's PLE pools of one slot for the model, their entries: (field, layer id, bytes, replicated)."""
    config = _text_config(model)
    with mock.patch.dict(os.environ, env):
        dtype = importlib.import_module("sglang.srt.configs.mamba_utils").mamba2_state_dtype(config).conv
    ngram = importlib.import_module(SOURCES[PLE_POOLS].module).NGramPool
    built = [short_conv(size=1, state_shape=config.short_conv_state_shape, layer_ids=config.short_conv_layer_ids,
                        dtype=dtype, device="cpu")]
    if config.short_conv_layer_ids:
        built.append(ngram(size=1, context_len=config.ngram_context_len, eos_token_id=0, device="cpu"))
    return tuple((name, layer, t[0].nbytes, axis is None) for pool in built
                 for name, t, axis, layer in pool.iter_transfer_state_entries())


def _text_config(model: ModelSpec) -> Any:
    """SGLang's config class for the model's config.json (``_config_class``), its text config."""
    return _config_class(model.hf_config["model_type"])(**model.hf_config).get_text_config()


def _our_side_entries(model: ModelSpec, env: Mapping[str, str], release: Release) -> tuple[Any, ...]:
    entries = side_entries(sglang_model(model, env, release))
    return tuple((e.field, e.layer_id, e.item_len, e.replicated) for e in entries)


def _qsa_pool(pool: Callable[..., Any], model: ModelSpec, dtype: str, slots: int = 2) -> Any:
    """SGLang's QSA pool of the model on the CPU (``parse_qsa_profile`` of its config class, its full
    attention layers, at the page SGLang sets, 64), with ``slots`` request rows; None without QSA."""
    import torch

    config = _text_config(model)
    profile = importlib.import_module("sglang.srt.layers.attention.qsa.config").parse_qsa_profile(config)
    if profile is None:
        return None
    utils = importlib.import_module(_UTILS)
    shape = utils.Mamba2StateShape.create(tp_world_size=1, intermediate_size=64, n_groups=1, num_heads=2, head_dim=32,
                                          state_size=16, conv_kernel=4)
    mamba = importlib.import_module("sglang.srt.mem_cache.memory_pool").MambaPool(
        size=1, spec_state_size=0, cache_params=utils.Mamba2CacheParams(shape=shape, layers=[0]), mamba_layer_ids=[0],
        device="cpu")
    resolve = importlib.import_module(SOURCES[QSA_POOL].module).resolve_qsa_indexer_dtype
    return pool(size=64 * slots, dtype=torch.bfloat16, page_size=64, head_num=1, head_dim=8, device="cpu",
                full_attention_layer_ids=list(config.full_attention_layer_ids), mamba_pool=mamba,
                qsa_index_kv_heads=profile.kv_heads, qsa_index_head_dim=profile.head_dim,
                qsa_compress_ratio=profile.compress_ratio, qsa_token_topk=profile.budget, num_request_slots=slots,
                qsa_indexer_dtype=resolve(dtype))


def _qsa_lists(built: Any) -> tuple[Any, ...]:
    """A QSA pool's two state lists as SGLang registers them: (pointers, bytes, item bytes, layer ids) each."""
    return ((*built.get_qsa_pending_state_buf_infos(), built.get_qsa_pending_state_layer_ids()),
            (*built.get_qsa_compressed_state_buf_infos(), built.get_qsa_compressed_state_layer_ids()))


def _their_qsa_entries(pool: Callable[..., Any], model: ModelSpec, dtype: str) -> tuple[Any, ...]:
    """The QSA pool's pending list's item bytes and layer ids, then the compressed list's."""
    built = _qsa_pool(pool, model, dtype)
    if built is None:
        return (), (), (), ()
    (_, _, pending, pending_ids), (_, _, compressed, compressed_ids) = _qsa_lists(built)
    return tuple(pending), tuple(pending_ids), tuple(compressed), tuple(compressed_ids)


QSA_ROW, QSA_D_ROW = 1, 2      # the request's row (and full-KV page) on P and on D: other places


def _their_qsa_send(manager: Any, pool: Callable[..., Any], model: ModelSpec, p_tp: int, d_tp: int,
                    d_dtype: str) -> Any:
    """SGLang's QSA pools on every rank, P's filled alike (the state is replicated) and D's empty;
    Mooncake's ``maybe_send_extra`` on a stand-in manager for every (decode rank, writer): the posted
    writes as (field, layer, d, p, src, dst, length) within the request's items, and the bad decode
    bytes; its refusal ("refused") where it raises."""
    import ctypes

    import torch
    base = importlib.import_module(f"{_DISAGG}.base.conn")
    rope = importlib.import_module(SOURCES[QSA_POOL].module).QSA_ROPE_STATE_LAYER_ID
    states = [base.StateType.QSA_PENDING, base.StateType.QSA_COMPRESSED]
    prefill = [_qsa_pool(pool, model, "auto", 3) for _ in range(p_tp)]
    decode = [_qsa_pool(pool, model, d_dtype, 3) for _ in range(d_tp)]
    for built in prefill:
        for k, tensor in enumerate([*built.qsa_key_state_buffer_pool, built.qsa_rope_position_buffer,
                                    *built.qsa_compressed_k_buffer_pool]):
            data = tensor.view(-1).view(torch.uint8)
            data.copy_((torch.arange(data.numel()) * 7 + 13 * k + 1) % 251 + 1)
    lists = [_qsa_lists(b) for b in (*prefill, *decode)]
    writes, bad = [], 0
    for d in range(d_tp):
        dst = lists[p_tp + d]
        for p in writers(p_tp, d_tp, d):
            src = lists[p]
            blocks: list[tuple[int, int, int]] = []
            stand_in = object.__new__(manager)
            stand_in.__dict__.update(
                kv_args=SimpleNamespace(state_types=states, state_data_ptrs=[x[0] for x in src],
                                        state_item_lens=[x[2] for x in src], state_dim_per_tensor=[[], []],
                                        state_layer_ids=[x[3] for x in src], engine_rank=p),
                state_tp_size=p_tp, attn_tp_size=p_tp, pp_size=1, is_mla_backend=False, is_hybrid_mla_backend=False,
                state_strides_validated=set(), request_status={0: 1}, enable_custom_mem_pool=False,
                max_transfer_batch_indices=0, _transfer_data=partial(_kept, blocks))
            stand_in.conclude_failure = _refuse
            info = SimpleNamespace(dst_state_data_ptrs=[x[0] for x in dst], dst_state_item_lens=[x[2] for x in dst],
                                   dst_state_dim_per_tensor=[[], []], dst_state_layer_ids=[x[3] for x in dst],
                                   dst_attn_tp_size=d_tp, dst_tp_rank=d)
            request = SimpleNamespace(dst_state_indices=[[QSA_D_ROW], [QSA_D_ROW]], mooncake_session_id="session",
                                      room=0)
            try:
                manager.maybe_send_extra(stand_in, request, [[QSA_ROW], [QSA_ROW]], None, info)
            except RuntimeError:      # Mooncake's refusal of the pairing's layouts
                return "refused"
            for src_at, dst_at, length in blocks:
                kind = next(k for k, x in enumerate(src) if _entry_at(x[0], x[1], src_at) is not None)
                (ptrs, sizes, items, ids), (d_ptrs, d_sizes, d_items, _) = src[kind], dst[kind]
                i, j = _entry_at(ptrs, sizes, src_at), _entry_at(d_ptrs, d_sizes, dst_at)
                name = "qsa_compressed" if kind else "qsa_rope" if ids[i] == rope else "qsa_pending"
                src_off, dst_off = src_at - ptrs[i] - items[i] * QSA_ROW, dst_at - d_ptrs[j] - d_items[j] * QSA_D_ROW
                writes.append((name, ids[i], d, p, src_off, dst_off, length))
                bad += length - max(0, min(dst_off + length, d_items[j]) - max(dst_off, 0))    # outside the item
                if src_at + length <= ptrs[i] + sizes[i] and dst_at + length <= d_ptrs[j] + d_sizes[j]:
                    ctypes.memmove(dst_at, src_at, length)
    want = _qsa_items(prefill[0], QSA_ROW)
    for built in decode:
        bad += sum(int((got != w).sum()) for got, w in zip(_qsa_items(built, QSA_D_ROW), want))
    return tuple(sorted(writes)), bad


def _refuse(**failure: Any) -> None:
    """A stand-in for the manager's ``conclude_failure``: the request fails with SGLang's reason."""
    raise RuntimeError(failure["failure_reason"])


def _qsa_items(built: Any, row: int) -> list[Any]:
    """The bytes of a request's items in a QSA pool: each ring's rows and each layer's compressed page."""
    import torch
    ratio, page = built.qsa_compress_ratio, built.qsa_compressed_page_size
    rings = [*built.qsa_key_state_buffer_pool, built.qsa_rope_position_buffer]
    return ([t[row * ratio:(row + 1) * ratio].contiguous().view(-1).view(torch.uint8) for t in rings]
            + [t[row * page:(row + 1) * page].contiguous().view(-1).view(torch.uint8)
               for t in built.qsa_compressed_k_buffer_pool])


def _our_qsa_send(model: ModelSpec, p_tp: int, d_tp: int, d_dtype: str, release: Release) -> Any:
    """The plan's QSA writes over Mooncake, every entry; the bytes mambaxfer's proof finds wrong; or the
    verdict's refusal where D keeps the compressed keys otherwise."""
    spec = sglang_model(model, {}, release)
    found = verdict(model, p_tp, d_tp, backend=MOONCAKE, release=release, prefill=Server(p_tp, **server_flags(spec)),
                    decode=Server(d_tp, **server_flags(spec, QSA_INDEXER_DTYPES[d_dtype])))
    if found.refusal is not None:
        return "refused"
    planned = plan(model, p_tp, d_tp, backend=MOONCAKE, release=release)
    entries = qsa_entries(planned.model)
    writes = sorted((w.field, e.layer_id, w.d_rank, w.p_rank, w.src, w.dst, w.length)
                    for e in entries for w in planned.writes if w.field == e.field)
    return tuple(writes), sum(replicated_wrong(planned.writes, entries, d_tp).values())


def _our_qsa_entries(model: ModelSpec, dtype: str, release: Release) -> tuple[Any, ...]:
    entries = qsa_entries(sglang_model(model, {}, release), QSA_INDEXER_DTYPES[dtype])
    paged = merged("PAGED_STATES")
    pending, compressed = ([e for e in entries if (e.field in paged) == page] for page in (False, True))
    return (tuple(e.item_len for e in pending), tuple(e.layer_id for e in pending),
            tuple(e.item_len for e in compressed), tuple(e.layer_id for e in compressed))


def _their_siblings(spec: ModelSpec) -> list[Any]:
    """SGLang's own PLE pools of the model (float32, as the send check keeps the state), if any."""
    if not side_entries(spec):
        return []
    import torch
    config = _text_config(spec)
    pools = importlib.import_module(SOURCES[PLE_POOLS].module)
    return [pools.ShortConvPool(size=3, state_shape=config.short_conv_state_shape,
                                layer_ids=config.short_conv_layer_ids, dtype=torch.float32, device="cpu"),
            pools.NGramPool(size=3, context_len=config.ngram_context_len, eos_token_id=0, device="cpu")]


def _side_items(built: Any) -> list[Any]:
    """The pool's replicated side entries (its slot siblings'), each ``[slot, ...]`` as int32."""
    import torch
    return [t.view(torch.int32).reshape(t.shape[0], -1) for name, t, _, _ in built._iter_transfer_state_entries()
            if name not in FIELDS]


def _side_labels(k: int, row: Any) -> Any:
    """Side entry ``k``'s labels, alike on every rank (the state is replicated)."""
    import torch
    return torch.arange((k + 16) << 25, ((k + 16) << 25) + row.numel(), dtype=torch.int32).view(row.shape)


def _our_send(model: ModelSpec, spec: ModelSpec, p_tp: int, d_tp: int, backend: str,
              release: Release) -> tuple[Any, ...]:
    prefill, decode = Side(spec, p_tp), Side(spec, d_tp)
    layers = {f: SEND_LAYERS for f in prefill.fields}
    named = {f: CONV for f in prefill.fields[1:-1]}     # every conv tensor is SGLang's "conv"
    for e in side_entries(spec):
        layers[e.field] = (*layers.get(e.field, ()), e.layer_id)
    # The MambaPool's entries and its siblings' (the QSA states are another pool's, compared on their own).
    writes = sorted((named.get(w.field, w.field), layer, w.d_rank, w.p_rank, w.src, w.dst, w.length)
                    for w in sglang_writes(prefill, decode, backend, release) for layer in layers.get(w.field, ()))
    outcome = verdict(model, p_tp, d_tp, backend=backend, p_env=FLOAT32_STATE, d_env=FLOAT32_STATE, release=release)
    return (tuple(writes), outcome.bad_bytes() // outcome.ssm_layers * len(SEND_LAYERS))


def _their_pool_entries(pool: Callable[..., Any], shape: Callable[[], Any], params_class: str,
                        layers: Sequence[int]) -> tuple[Any, ...]:
    """SGLang's own pool of one slot on the CPU, and the entry metadata it registers for PD."""
    params = getattr(importlib.import_module("sglang.srt.configs.mamba_utils"), params_class)
    built = pool(size=1, spec_state_size=0, cache_params=params(shape=shape(), layers=list(layers)),
                 mamba_layer_ids=list(layers), device="cpu")
    groups = built.get_state_conv_shard_groups()
    return (tuple(built.get_contiguous_buf_infos()[2]), tuple(built.get_state_dim_per_tensor()),
            tuple(built.get_state_slice_outer_counts()), tuple(tuple(g) if g else None for g in groups),
            tuple(built.get_state_layer_ids()))


def _their_dsa_entries(pool: Callable[..., Any], model: ModelSpec, page: int) -> tuple[Any, ...]:
    """SGLang's DSA pool on the CPU with its config class's dims, one page a layer: the latent's item
    bytes per attention layer (``get_contiguous_buf_infos``), then the index keys' (``get_state_buf_infos``)."""
    import torch

    c = _text_config(model)
    kpool = importlib.import_module("sglang.srt.configs.model_config").get_dsa_index_kpool(c)
    built = pool(size=page, page_size=page, kv_lora_rank=c.kv_lora_rank, dtype=getattr(torch, model.model_dtype),
                 qk_rope_head_dim=c.qk_rope_head_dim, layer_num=len(c.full_attention_layer_ids), device="cpu",
                 index_head_dim=c.index_head_dim, enable_memory_saver=False,
                 kv_cache_dim=c.kv_lora_rank + c.qk_rope_head_dim, index_buf_size=page, index_kpool=kpool)
    return tuple(built.get_contiguous_buf_infos()[2]), tuple(built.get_state_buf_infos()[2])


def _our_dsa_entries(spec: ModelSpec, page: int) -> tuple[Any, ...]:
    entries = kv_entries(KVSide(spec, 1, page))
    return tuple(tuple(e.item_len for e in entries if e.field == f) for f in (LATENT, INDEX_K))


def _their_draft(pool: Callable[..., Any], model: ModelSpec, tp: int, page: int) -> tuple[Any, ...]:
    """SGLang's MTP draft for the model's own checkpoint: its layer count from the draft config,
    its KV pool on the CPU (``max(1, heads // tp)`` heads a rank) and the ids its entries carry."""
    import torch

    config = model.hf_config
    hf = SimpleNamespace(**{k: v for k, v in config.items() if k != "text_config"})
    hf.architectures, hf.num_nextn_predict_layers = list(config["architectures"]), None
    if "text_config" in config:
        hf.text_config = SimpleNamespace(**{**config["text_config"], "num_nextn_predict_layers": None})
    # get_hf_text_config: the text config, else the config itself; a rewrite may replace either.
    seen = SimpleNamespace(is_draft_model=True, hf_config=hf, hf_text_config=getattr(hf, "text_config", hf),
                           speculative_algorithm="EAGLE")
    importlib.import_module("sglang.srt.configs.model_config").ModelConfig._config_draft_model(seen)
    # ModelConfig.num_nextn_predict_layers: read from its text config.
    config_seen = SimpleNamespace(num_nextn_predict_layers=seen.hf_text_config.num_nextn_predict_layers,
                                  hf_config=seen.hf_config,
                                  num_hidden_layers=model.hidden_layers,
                                  num_attention_layers=len(model.attention_indices))
    assert model.num_kv_heads and model.head_size
    return _draft_entries(pool, model, page, config_seen, dtype=getattr(torch, model.model_dtype),
                          head_num=max(1, model.num_kv_heads // tp), head_dim=model.head_size)


def _draft_entries(pool: Callable[..., Any], model: ModelSpec, page: int, config: Any, **dims: Any) -> tuple[Any, ...]:
    """SGLang's draft pool of the layers its draft worker counts in ``config``, on the CPU: each entry's
    id (build_kv_layer_ids) and item bytes."""
    setup = importlib.import_module("sglang.srt.model_executor.model_runner_components.layer_setup")
    layers = setup._compute_model_num_layers(model=SimpleNamespace(), is_draft_worker=True, model_config=config)
    built = pool(size=2 * page, page_size=page, layer_num=layers, device="cpu", enable_memory_saver=False, **dims)
    items = built.get_contiguous_buf_infos()[2]
    utils = importlib.import_module("sglang.srt.disaggregation.utils")
    ids = utils._remap_draft_layer_ids(utils._draft_entry_layer_ids(pool=built, num_entries=len(items)),
                                       model.hidden_layers)
    return tuple(zip(ids, items))


@functools.cache
def _drafter_config(algorithm: str, path: str) -> Any:
    """SGLang's ModelConfig of a draft model (is_draft_model), read from its own config.json."""
    import shutil
    import tempfile

    where = Path(path).expanduser()
    with tempfile.TemporaryDirectory() as folder:
        if not where.is_dir():          # a config.json alone: ModelConfig reads a folder
            shutil.copy(where, Path(folder) / "config.json")
        config = importlib.import_module("sglang.srt.configs.model_config").ModelConfig
        return config(model_path=str(where if where.is_dir() else folder), is_draft_model=True,
                      speculative_algorithm=algorithm.upper())


def _their_drafter(algorithm: str, path: str, pool: Callable[..., Any], model: ModelSpec, tp: int,
                   page: int) -> tuple[Any, ...]:
    """SGLang's pool of a separate draft model as its draft worker builds it: the layers
    _compute_model_num_layers gives, its ModelConfig's heads a rank, head sizes and dtype."""
    config = _drafter_config(algorithm, path)
    return _draft_entries(pool, model, page, config, dtype=config.dtype, head_num=config.get_num_kv_heads(tp),
                          head_dim=config.head_dim, v_head_dim=config.v_head_dim)


def _our_draft(model: ModelSpec, tp: int, page: int, algorithm: str, path: str | None) -> tuple[Any, ...]:
    draft = draft_for(model, algorithm, path)
    assert draft is not None
    return tuple((e.layer_id, e.item_len) for e in draft.entries(sglang_model(model, {}), tp, page))


def _our_pool_entries(shape: StateShape, conv_dtype: str, ssm_dtype: str, layers: Sequence[int]) -> tuple[Any, ...]:
    entries = transfer_entries(shape, conv_dtype, ssm_dtype, layers)
    return (tuple(e.item_len for e in entries), tuple(e.dim for e in entries), tuple(e.outer_count for e in entries),
            tuple(e.conv_shard_groups for e in entries), tuple(e.layer_id for e in entries))


def _their_cache_params(hybrid: Callable[..., Any], model: ModelSpec) -> Any:
    """The cache params ``mambaish_config`` gives the pool for the model's config class, at TP 1."""
    config = _config_class(model.hf_config["model_type"])(**model.hf_config)
    with _on_rank(1, 0, enable_cp_tp_group_sharing=False):
        registered = importlib.import_module("sglang.srt.configs.linear_attn_model_registry")
        found = hybrid(SimpleNamespace(hf_config=config, is_draft_model=False,
                                       linear_attn_registry_result=registered.get_linear_attn_config(config)))
        return found.mamba2_cache_params


def _kda_from_config(kda: Callable[..., Any], model: ModelSpec, tp_world_size: int) -> Any:
    """``kda`` (KimiLinearStateShape.create) with the dims the model's own config class gives it."""
    hybrid = importlib.import_module("sglang.srt.configs.hybrid_arch").mambaish_config
    s = _their_cache_params(hybrid, model).shape
    return kda(tp_world_size=tp_world_size, num_heads=s.num_heads, head_dim=s.head_dim, num_k_heads=s.num_k_heads,
               head_k_dim=s.head_k_dim, conv_kernel_size=s.conv_kernel)


def _their_kda_channels(build: Callable[..., Any], model: ModelSpec, tp: int, rank: int,
                        config_class: Sequence[str]) -> tuple[int, ...]:
    """SGLang's KDA mixer of one rank (hidden size 8, LoRA off), its qkv_conv1d loaded from q, k
    and v weights numbered 0.., P.., 2P..: the rank's conv state channels, in order."""
    import torch
    shape = _kda_from_config(lambda **k: SimpleNamespace(**k), model, 1)
    heads, dim, kernel = shape.num_heads, shape.head_dim, shape.conv_kernel_size
    config = getattr(importlib.import_module(config_class[0]), config_class[1])(
        hidden_size=8, linear_attn_config={"num_heads": heads, "head_dim": dim, "short_conv_kernel_size": kernel,
                                           "kda_layers": [], "full_attn_layers": []})
    context = importlib.import_module("sglang.srt.runtime_context")
    lora = context._ConfigBag("lora")     # GLM-5-Next's mixer asks get_lora() whether to fuse its projections
    lora._set("enable_lora", False)
    lora._set("lora_paths", None)
    bags = context._CONTEXT._config_bags
    context._CONTEXT._config_bags = {**(bags or {}), "lora": lora}
    try:
        with _on_rank(tp, rank, enable_cp_tp_group_sharing=False):
            weight = build(layer_idx=0, hidden_size=8, config=config).qkv_conv1d.weight
            size = heads * dim
            for shard in range(3):
                numbered = torch.arange(shard * size, (shard + 1) * size, dtype=torch.float32)
                weight.weight_loader(weight, numbered[:, None, None].expand(size, 1, kernel).contiguous(), shard)
    finally:
        context._CONTEXT._config_bags = bags
    return tuple(int(v) for v in weight[:, 0, 0].tolist())


def _our_state_layers(model: ModelSpec, release: Release) -> tuple[int, ...]:
    """The layer ids of plan's state entries (each layer has one per field)."""
    return tuple(dict.fromkeys(e.layer_id for e in plan(model, 1, 1, release=release).prefill_entries
                               if e.field in FIELDS))


def probe(models: Sequence[ModelSpec], functions: Loaded, *, version: str = "?",
          release: Release = SGLANG_0_5_23, max_tp: int = MAX_TP,
          done: Callable[[str], None] | None = None, drafter: tuple[str, str] | None = None) -> Report:
    """Every case for ``models`` to TP ``max_tp``; ``done`` is told each step (``STEPS``) as it ends;
    ``drafter``: a draft model's algorithm and config, whose pool the draft step compares."""
    start = time.monotonic()
    checker = _Checker(functions, release, max_tp)
    steps: tuple[Callable[[], None], ...] = (
        partial(checker.shapes, models), checker.dtypes, partial(checker.slices, models), checker.replicated,
        partial(checker.heads, models), partial(checker.mixer_channels, models), partial(checker.pool_entries, models),
        partial(checker.sends, models), partial(checker.state_layers, models), partial(checker.drafts, models, drafter),
        checker.rank_mapping)
    for label, step in zip(STEPS, steps, strict=True):
        step()
        if done is not None:
            done(label)
    return Report(version, release.label, [m.name for m in models], max_tp, list(checker.results.values()),
                  time.monotonic() - start)


# The probe's steps, as its progress names them.
STEPS = ("state shapes", "state dtypes", "slice blocks", "replicated state", "head slices", "conv channels",
         "pool entries", "state sends", "state layers", "draft entries", "rank mapping")
IMPORT_STEP = "SGLang's import"


def served_presets(release: Release = SGLANG_0_5_23) -> list[ModelSpec]:
    """The presets of the families SGLang serves (read through mambaxfer's preset reader)."""
    from mambaxfer_cli.readers.model_source import load_model, preset_names
    models = (load_model(name, startup=startup(release.version)) for name in preset_names())
    return [model for model in models if getattr(release.families.get(model.family), "served", False)]


def served_model(name: str, release: Release = SGLANG_0_5_23) -> ModelSpec:
    """``--model``'s model (a preset or a config), where SGLang serves its family."""
    from mambaxfer_cli.readers.model_source import load_model

    model = load_model(name, startup=startup(release.version))
    rule = release.families.get(model.family)
    if rule is None or not rule.served:
        why = rule.note if rule is not None else f"{release.label} serves no {model.family} model"
        served = ", ".join(m.name for m in served_presets(release))
        raise UserError(f"--model {name}: {why}; the presets SGLang serves: {served}")
    return model


NOT_INSTALLED = ("no SGLang is installed beside mambaxfer (in {python}); conformance --engine sglang runs "
                 "SGLang's own code, so run it where SGLang is installed: in a new virtual environment, pip "
                 "install torch==2.14.1 torchvision==0.29.1 sglang==0.5.23, then pip install --no-deps -e . "
                 "from your mambaxfer clone (docs/conformance.md)")


def run(names: Sequence[str] | None, max_tp: int = MAX_TP, start: Callable[[int], None] | None = None,
        done: Callable[[str], None] | None = None, algorithm: str | None = None,
        draft_path: str | None = None) -> Report:
    """``conformance --engine sglang`` on ``names`` (None: every preset SGLang serves), with the draft
    model ``draft_path`` of ``algorithm``; a model SGLang does not serve, or no SGLang, is a UserError."""
    version = installed_version()
    release = RELEASES.get(version or "", RELEASES[tuple(RELEASES)[-1]])
    models = served_presets(release) if names is None else [served_model(n, release) for n in names]
    if algorithm is not None and draft_path is None:
        raise UserError(f"--speculative-algorithm {algorithm} needs --draft-model here: conformance --engine sglang "
                        "compares the MTP draft of each model that has one without either")
    if draft_path is not None and any(draft_for(m, algorithm, draft_path) is None for m in models):
        raise UserError(f"--speculative-algorithm {algorithm}: no draft KV pool to compare")
    if version is None:
        raise UserError(NOT_INSTALLED.format(python=sys.prefix))
    if start is not None:
        start(1 + len(STEPS))
    with _sglang_quiet():
        functions = load_functions()
        if done is not None:
            done(IMPORT_STEP)
        report = probe(models, functions, version=version, release=release, max_tp=max_tp, done=done,
                       drafter=None if algorithm is None or draft_path is None else (algorithm, draft_path))
    if version not in RELEASES:
        report.notes.append(f"mambaxfer has no rules for SGLang {version}: compared with the newest it knows, "
                            f"{release.version}'s")
    return report


@contextlib.contextmanager
def _sglang_quiet() -> Iterator[None]:
    """SGLang's log at errors only and its warnings unsaid for the run: it warns of the invalid
    dtypes the probe gives it on purpose, and that Triton falls back to the CPU."""
    import logging
    import warnings

    logger = logging.getLogger("sglang")
    level = logger.level
    logger.setLevel(max(level, logging.ERROR))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def main(argv: Sequence[str] | None = None) -> int:
    """Print ``conformance --engine sglang --all-presets --format json``'s document."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        report = run(None)
    except UserError as error:
        sys.stderr.write(f"error: {error}\n")
        return 2
    json.dump(report.to_dict(), sys.stdout, indent=1 if "--indent" in argv else None)
    sys.stdout.write("\n")
    return report.exit_code


if __name__ == "__main__":
    raise SystemExit(main())

"""A vLLM release's rules for P/D transfers, as one frozen value the planning core takes.

What differs from one release to the next (a default, which regions a group's descriptor IDs
cover, a handshake check and its message, what the compatibility hash takes, the serve flags it
knows) is data and small functions here; each release is one module of ``releases/`` that fills
a ``Release``. The handshake checks take a ``Meeting``: the two engines as the side whose code
runs them sees them (D when it pulls, P when it pushes), so they need nothing else of the core.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from mambaxfer_cli.engines.vllm.families import gathered
from mambaxfer_cli.engines.vllm.startup import ReplaySSM
from mambaxfer_cli.errors import Refused
from mambaxfer_cli.planning.reads import tp_ratio

PULL, PUSH = "pull", "push"


# Every code a plan's verdict (the handshake and the checks before it) can give, in the plan's and
# execute's JSON ("vllm": "refusals"); their published schemas list the same (a test keeps them so).
VERDICT_CODES = ("compat-hash", "tp-sizes", "push-block-sizes", "block-size", "prefix-caching", "host-buffer",
                 "head-sharded-block-size", "no-attention", "layout", "dcp-sizes", "mla-block-lens",
                 "region-layers", "qsa-ring", "csa-linear-tp", "kv-cache-layout-heads",
                 "ple-geometry", "ple-without-qsa", "kpool-ring", "draft-groups", "attention-backend")


@dataclass(frozen=True)
class Refusal:
    code: str       # one of VERDICT_CODES in a plan; preflight adds its own start-up codes
    message: str    # vLLM's own words; where it has none, what it raises and what that means
    raised: str = ""    # where vLLM's exception carries no words: the exception and the vLLM function
                        # it escapes from, e.g. "StopIteration in _build_fa_remote"

    @property
    def vllm_says(self) -> str:
        """What vLLM's own code raises: its message, or the bare exception where it has none."""
        return self.raised or self.message

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message}


@dataclass(frozen=True)
class Speculative:
    """An engine's ``--speculative-config`` as vLLM's compatibility hash reads it."""

    method: str | None
    model: str | None = None             # the draft model; None: the target model (MTP)
    parallel_drafting: bool = False
    kv_cache_dtype: str | None = None    # None: the engine's own


@dataclass(frozen=True)
class EngineFacts:
    """What ``compute_nixl_compatibility_hash`` reads of one engine, besides its release."""

    model: str
    dtype: str
    kv_heads: int | None
    head_size: int | None
    layers: int
    backend: str                         # the first cache layer's backend (``attn_backends[0]``)
    cache_dtype: str
    hybrid_kv_cache_manager: bool = True
    speculative: Speculative | None = None
    transfer_mode: str | None = PULL


Hash = tuple[tuple[str, object], ...]


@dataclass(frozen=True)
class Meeting:
    """Two engines at handshake, as the local engine's checks see them (D local when it pulls,
    P local when it pushes). Kernel blocks and blocks per logical block are each engine's own."""

    mode: str
    local_tp: int
    remote_tp: int
    has_attention: bool
    local_kernel: int
    remote_kernel: int
    local_per_logical: int
    remote_per_logical: int
    local_prefix_caching: bool
    attention_sources: int               # remote ranks a local rank reads attention from
    local_hash: Hash = ()
    remote_hash: Hash = ()
    remote_name: str = "P"
    host_buffer: bool = False            # kv_buffer_device = cpu
    enforce_hash: bool = True            # kv_connector_extra_config.enforce_handshake_compat (local)
    mla: bool = False                    # the model's attention is MLA (hybrid MLA+SSM)
    local_block_bytes: int = 0           # one kernel block of one region (block_len_per_layer)
    remote_block_bytes: int = 0          # the remote's, as the local engine views it
    local_dcp: int = 1                   # --decode-context-parallel-size
    remote_dcp: int = 1
    # Every region's block length as the local worker registers it and as the remote advertises it
    # (block_len_per_layer, NixlAgentMetadata.block_lens), where mambaxfer models each region:
    # GLM-5-Next's packed rows (latent, KDA, compressed keys, tail ring); empty elsewhere, where
    # every region is one kernel block (local_block_bytes, remote_block_bytes).
    local_block_lens: tuple[int, ...] = ()
    remote_block_lens: tuple[int, ...] = ()
    # P and D bucket an EAGLE drafter's layers otherwise: its pages are the target's at one TP size
    # only (past its KV heads, every rank holds one head of each: drafts.past_heads)
    draft_groups: bool = False

    @property
    def tp_ratio(self) -> int | None:
        """``TransferTopology.tp_ratio``: local/remote when local >= remote, -(remote/local)
        otherwise; None where neither divides the other (the core's, the local side as D)."""
        return tp_ratio(self.remote_tp, self.local_tp)

    @property
    def block_ratio(self) -> int | None:
        """``TransferTopology.block_size_ratio``: only local % remote is tested."""
        if self.local_kernel % self.remote_kernel:
            return None
        return self.local_kernel // self.remote_kernel

    @property
    def geometry_meets(self) -> bool:
        """The TP sizes and kernel blocks pass, so the checks after them are reached."""
        return self.has_attention and self.tp_ratio is not None and self.block_ratio is not None


Check = Callable[[Meeting], "Refusal | None"]


# --- the checks both releases make, each with vLLM's message --------------------------------------

def tp_sizes(m: Meeting) -> Refusal | None:
    """``handshake_target_ranks`` -> ``tp_ratio`` (kv_connector/utils.py): before any metadata is
    exchanged, so before the compatibility hash."""
    if m.tp_ratio is not None:
        return None
    if m.local_tp >= m.remote_tp:
        text = f"Local tensor parallel size {m.local_tp} is not divisible by remote tensor parallel size {m.remote_tp}."
    else:
        text = f"Remote tensor parallel size {m.remote_tp} is not divisible by local tensor parallel size {m.local_tp}."
    return Refusal("tp-sizes", text)


def compat_hash(m: Meeting) -> Refusal | None:
    """The compatibility hash, compared before the agent metadata is decoded (unless the local
    engine's ``enforce_handshake_compat`` is false)."""
    mine, theirs = dict(m.local_hash), dict(m.remote_hash)
    differs = [f"{name} {mine.get(name)} vs {theirs.get(name)}" for name in mine | theirs
               if mine.get(name) != theirs.get(name)]
    if not differs or not m.enforce_hash:
        return None
    local, remote = ("D", "P") if m.mode == PULL else ("P", "D")
    return Refusal("compat-hash", (
        "NIXL compatibility hash mismatch. Prefill and decode instances have incompatible configurations. This "
        "may be due to: different vLLM versions, models, dtypes, KV cache layouts, attention backends, etc. Both "
        f"instances must use identical configurations. ({'; '.join(differs)}, {local} vs {remote})"))


def block_size(m: Meeting) -> Refusal | None:
    """``TransferTopology.block_size_ratio`` on the kernel blocks."""
    if not m.has_attention or m.tp_ratio is None or m.block_ratio is not None:
        return None
    return Refusal("block-size", f"Local block size {m.local_kernel} is not divisible by remote block size "
                                 f"{m.remote_kernel} or vice versa.")


def draft_groups(m: Meeting) -> Refusal | None:
    """0.34's ``_pair_regions`` (``_pair_ssm_regions``), after the layers each region holds and before
    the block sizes: the remote holds the drafter's layers in other KV-cache groups."""
    if not m.draft_groups:
        return None
    return Refusal("draft-groups", f"Engine {m.remote_name} puts Mamba/SSM hybrid KV layers in other cache groups "
                                   "than this worker; use the same KV cache plan on P and D.")


def draft_regions(m: Meeting) -> Refusal | None:
    """0.33's ``_validate_remote_agent_handshake``: its asserts on the remote's regions, after the
    block sizes, prefix caching and host buffer, fail where the two group the drafter's layers otherwise."""
    if not m.draft_groups or not m.geometry_meets:
        return None
    return Refusal("draft-groups", "the KV regions do not pair: P and D hold the drafter's layers in other KV-cache "
                                   "groups (its pages are the target's on one side only)",
                   raised="AssertionError in _validate_remote_agent_handshake")


def prefix_caching(m: Meeting) -> Refusal | None:
    """``_validate_remote_agent_handshake``: the local engine's prefix caching refuses different
    kernel blocks per logical block."""
    if not m.geometry_meets or not m.local_prefix_caching or m.local_per_logical == m.remote_per_logical:
        return None
    return Refusal("prefix-caching", (
        "Prefix caching with heterogeneous physical_blocks_per_logical is not supported for Mamba hybrid "
        f"models. Local: {m.local_per_logical}, Remote: {m.remote_per_logical}. "
        "Disable prefix caching with --disable-prefix-caching."))


def host_buffer(m: Meeting) -> Refusal | None:
    """``_validate_remote_agent_handshake``: a host (CPU) staging buffer needs equal kernel blocks."""
    if not m.geometry_meets or not m.host_buffer or m.block_ratio == 1:
        return None
    return Refusal("host-buffer", "Heterogeneous block sizes are not supported with host buffer")


def dcp_sizes(m: Meeting) -> Refusal | None:
    """``_validate_remote_agent_handshake``: a model with Mamba layers needs equal decode context
    parallel sizes on both sides (RuntimeError), checked before its other geometry checks."""
    if m.local_dcp == m.remote_dcp or not m.geometry_meets:
        return None
    return Refusal("dcp-sizes", (f"Hybrid MLA+Mamba NIXL transfers require matching DCP sizes, got "
                                 f"local={m.local_dcp}, remote={m.remote_dcp}."))


def mla_block_lens(m: Meeting) -> Refusal | None:
    """``_validate_remote_agent_handshake`` for hybrid MLA+SSM (an assert): the MLA page per token does not
    depend on TP, so local block lengths must be the remote's times ``block_size_ratio`` even across TP."""
    if not m.mla or not m.geometry_meets or m.block_ratio is None:
        return None
    if m.local_block_lens:      # every region modelled (GLM-5-Next: a ring's page does not grow with the block)
        # the assert's message names every region's length, as vLLM 0.33 and 0.34 write it
        local, remote, raised = str(list(m.local_block_lens)), str(list(m.remote_block_lens)), ""
        fits = list(m.local_block_lens) == [length * m.block_ratio for length in m.remote_block_lens]
    else:
        local, remote = f"[{m.local_block_bytes}, ...]", f"[{m.remote_block_bytes}, ...]"
        fits = m.local_block_bytes == m.remote_block_bytes * m.block_ratio
        raised = "AssertionError in _validate_remote_agent_handshake"
    return None if fits else Refusal("mla-block-lens", (
        f"Hybrid MLA kernel-granularity block lengths must match between P and D (block_size_ratio="
        f"{m.block_ratio}): local={local}, remote={remote}."), raised=raised)


def head_sharded(m: Meeting) -> Refusal | None:
    """``_build_local_splits_from_plan``: reads from several remote ranks across different kernel blocks need
    one source per attention region (MLA); ranks that replicate a KV head are not exempt."""
    ratio = m.tp_ratio
    if not m.geometry_meets or ratio is None or ratio >= 0 or m.block_ratio == 1 or m.attention_sources <= 1 or m.mla:
        return None
    return Refusal("head-sharded-block-size", "Head-sharded attention reads with P_TP > D_TP and "
                                              "heterogeneous block sizes are not supported")


def attention_free(m: Meeting) -> Refusal | None:
    """``add_remote_agent``'s bare ``next()`` over the attention KV-cache groups, after every check above: a
    model without attention never completes the handshake, at any TP sizes, pulling or pushing."""
    if m.has_attention:
        return None
    if m.local_tp < m.remote_tp:
        where, raised = "_build_local_splits_from_plan", "RuntimeError: generator raised StopIteration"
    else:
        where, raised = "_build_fa_remote", "StopIteration"
    return Refusal("no-attention", (
        f"vLLM's NIXL connector cannot transfer a model without attention layers: {where} raises "
        f"{raised} (its next() finds no attention KV-cache group), so the handshake never completes."),
        raised=f"StopIteration in {where}")


# --- --use-replayssm: VllmConfig.validate_mamba_cached_kernel ----------------------------------
# Its messages that both releases' own checks (Release.replayssm_rules) raise.

RECOVERSSM_BACKEND = "RecoverSSM requires --mamba-backend triton"
MAMBA2_SPEC_BACKEND = "Mamba2 ReplaySSM speculative decoding requires --mamba-backend flashinfer"
REPLAYSSM_BACKEND = "--use-replayssm requires --mamba-backend triton or flashinfer"


def flashinfer_spec_buffer(c: ReplaySSM) -> str | None:
    """FlashInfer ReplaySSM's ring holds the verify window: 1 + the speculative tokens."""
    query = 1 + c.num_spec
    if c.buffer_len >= query:
        return None
    return (f"FlashInfer ReplaySSM speculative decoding requires --replayssm-buffer-len >= 1 + num_speculative_tokens "
            f"({query}); got {c.buffer_len}")


# --- the release ---------------------------------------------------------------------------------

HIDDEN_STATE_METHODS = ("eagle", "eagle3", "mtp", "dflash", "dspark")
# SpeculativeMethod's names besides the MTP model types (0.33 adds custom_class)
SPECULATIVE_METHODS = ("ngram", "ngram_gpu", "suffix", "draft_model", "eagle", "eagle3", "extract_hidden_states",
                       "dflash", "dspark")


@dataclass(frozen=True)
class Release:
    """One vLLM release's rules for P/D transfers of Mamba-family state through NIXL."""

    connector_version: int                     # NIXL_CONNECTOR_VERSION, hashed
    default_block_size: int                    # CacheConfig.DEFAULT_BLOCK_SIZE
    pull_checks: tuple[Check, ...]             # the handshake's checks in vLLM's order, D local
    push_checks: tuple[Check, ...]             # the same for NixlPushConnector, P local
    hashed_speculative: tuple[str, ...]        # speculative fields the hash takes
    mtp_methods: frozenset[str]                # method names vLLM rewrites to "mtp" (and the families')
    # validate_mamba_cached_kernel's checks of ReplaySSM (not RecoverSSM) after the model class and
    # FlashInfer's ring bound, in the release's order: None, or its message
    replayssm_rules: Callable[[ReplaySSM], str | None]
    name: str = ""                             # "0.34": the registry names it after its folder
    version: str = ""                          # "0.34.0": vLLM's __version__, hashed
    flag_table: Path | None = None             # its serve_flags.json (the registry finds it)
    cuda: int = 13                             # the CUDA runtime major of its wheels' torch
    serve_keys: tuple[tuple[str, ...], ...] = ()   # keys inside a JSON serve flag that older releases ignore
    pairs_from_last_token: bool = False        # pulls across block sizes need remote_num_tokens
    every_region: bool = True                  # a group's descriptor IDs cover every region of its kind
    model_runner_v1: bool = True               # it still has Model Runner V1 (0.34 removed it)
    # register_kv_caches: views of one address share a region only if their block lengths match too
    # (0.34); before, any views of one address did, the region taking the MLA view's length.
    regions_keyed_by_length: bool = False
    fatal_env: Mapping[str, tuple[str, str]] = field(default_factory=dict)   # VAR -> (value, vLLM's message)
    # Where num_speculative_tokens is checked against the drafter's n_predict (vLLM's words name none).
    speculative_tokens_check: str = "SpeculativeConfig.__post_init__"
    speculative_methods: tuple[str, ...] = SPECULATIVE_METHODS
    # vLLM's words for another method ({} its name) and the function that says them
    unknown_method: str = ("\"Unknown speculative method {!r}. Built-in methods: [...]\" "
                           "(SpeculativeConfig._validate_method)")

    def __str__(self) -> str:
        return self.name

    def speculative_method(self, method: str | None) -> str | None:
        """``SpeculativeConfig.__post_init__``: every MTP model type becomes ``mtp``."""
        if method is None:
            return None
        if method in self.mtp_methods or method in self.family_mtp_methods():
            return "mtp"
        if method not in self.speculative_methods:
            raise Refused("vLLM does not start: " + self.unknown_method.format(method))
        return method

    def family_mtp_methods(self) -> frozenset[str]:
        """The MTP method names the family modules declare (``MTP_METHODS``, by the release that
        added them) for this release."""
        def minor(name: str) -> tuple[int, ...]:
            return tuple(int(n) for n in name.split(".") if n)
        return frozenset(method for declared in gathered("MTP_METHODS") for since, methods in declared.items()
                         if minor(since) <= minor(self.name) for method in methods)

    def speculative_factors(self, spec: Speculative | None, model: str, cache_dtype: str) -> Hash | None:
        """``_get_speculative_compatibility_factors``: only speculators that read the target's hidden
        states are hashed, and ``num_speculative_tokens`` never is."""
        if spec is None:
            return None
        method = self.speculative_method(spec.method)
        if method not in HIDDEN_STATE_METHODS:
            return None
        values = {"method": method, "model": spec.model or model, "parallel_drafting": spec.parallel_drafting,
                  "kv_cache_dtype": spec.kv_cache_dtype or cache_dtype}
        return tuple((name, values[name]) for name in self.hashed_speculative)

    def hashed(self, facts: EngineFacts) -> Hash:
        """The fields ``compute_nixl_compatibility_hash`` takes, by name, with their values."""
        spec = self.speculative_factors(facts.speculative, facts.model, facts.cache_dtype)
        return (("vLLM version", self.version), ("NIXL connector version", self.connector_version),
                ("model", facts.model), ("dtype", facts.dtype), ("KV heads", facts.kv_heads),
                ("head size", facts.head_size), ("layers", facts.layers), ("hashed backend", facts.backend),
                ("KV-cache dtype", facts.cache_dtype),
                ("hybrid KV-cache manager", "on" if facts.hybrid_kv_cache_manager else "off"),
                ("speculative (hidden-state drafts)", None if spec is None else ", ".join(f"{n}={v}" for n, v in spec)),
                ("transfer mode", facts.transfer_mode))

    def replayssm(self, c: ReplaySSM) -> str | None:
        """``VllmConfig.validate_mamba_cached_kernel`` of an engine with ``--use-replayssm``: None, or its message."""
        if not c.supported:
            return f"--use-replayssm is not supported for architecture {c.named}"
        if c.backend == "flashinfer" and c.buffer_len > 16:
            return "FlashInfer ReplaySSM requires --replayssm-buffer-len <= 16"
        if not c.recoverssm:      # ReplaySSM's rings live in the mamba page, which no connector moves
            return self.replayssm_rules(c) or ("--use-replayssm is incompatible with KV connectors (P/D "
                                               "disaggregation, KV cache offload)" if c.kv_connector else None)
        # RecoverSSM keeps the stock page, which connectors move as usual
        if c.stochastic_rounding:
            return ("RecoverSSM supports bfloat16/float32 SSM state caches, not --enable-mamba-cache-stochastic-"
                    "rounding, which requires an explicit float16 cache")
        if self.model_runner_v1 and c.cache_mode == "align" and not c.v2_runner:
            return "RecoverSSM with prefix caching requires VLLM_USE_V2_MODEL_RUNNER=1"
        if c.pipeline > 1:
            return "RecoverSSM currently requires pipeline_parallel_size=1"
        return RECOVERSSM_BACKEND if c.backend != "triton" else None

    def group_regions(self, layers: int | None, tensors: int) -> int:
        """The regions a group's descriptor IDs cover: every one of its kind, or (0.34) only those holding
        one of its layers (tensor ``t`` holds the group's ``t``-th layer, so the first ``layers``)."""
        return tensors if self.every_region or layers is None else min(layers, tensors)

    def checks(self, mode: str) -> tuple[Check, ...]:
        return self.push_checks if mode == PUSH else self.pull_checks

    def needs_remote_num_tokens(self, p_kernel: int, p_per_logical: int, d_kernel: int, d_per_logical: int) -> bool:
        """Whether a pull pairs blocks from the request's last token, which D can do only when
        the proxy forwards ``remote_num_tokens`` (kernel blocks or blocks per logical differ)."""
        return self.pairs_from_last_token and (p_kernel, p_per_logical) != (d_kernel, d_per_logical)


def label(prefill: Release, decode: Release) -> str:
    """How answers name the release(s): ``vLLM 0.34``, or ``vLLM 0.33 (P) / 0.34 (D)``."""
    if prefill == decode:
        return f"vLLM {decode.name}"
    return f"vLLM {prefill.name} (P) / {decode.name} (D)"


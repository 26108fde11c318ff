"""Will these two ``vllm serve`` engines work together as P and D, and if not, what to change?

Each line becomes the engine its vLLM release builds from it on the GPU (model, dtypes, geometry);
then the pairing gets vLLM's own verdict (what its engines refuse at start-up and its handshake refuses), a
byte-level check of the reads vLLM would issue (``check``'s simulation, D reading P's pages with
D's offsets), and, when anything fails, the smallest set of flag changes that makes it work.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, replace
from typing import Any, Callable

from mambaxfer_cli.errors import UserError
from mambaxfer_cli.exits import EXIT_OK, EXIT_WRONG
from mambaxfer_cli.engines.vllm.engine import Engines, EngineLayout, engine_layout
from mambaxfer_cli.engines.vllm.geometry import EngineFlags, Geometry
from mambaxfer_cli.engines.vllm.geometry import kv_cache_dtype as resolve_kv_dtype
from mambaxfer_cli.engines.vllm.handshake import NOT_CHECKED, PULL, PUSH, Refusal, handshake_verdict
from mambaxfer_cli.planning.layout import rank_layout
from mambaxfer_cli.planning.dtypes import DTYPE_BYTES
from mambaxfer_cli.planning.model import ModelSpec
from mambaxfer_cli.engines.vllm.plan import Plan, PlanOptions, build_plan
from mambaxfer_cli.planning.reads import VLLM, LengthMismatch, vllm_length_mismatches
from mambaxfer_cli.engines.vllm.release import EngineFacts, Meeting, Speculative
from mambaxfer_cli.proof import CHECK_NUM_BLOCKS
from mambaxfer_cli.proof.check import PairingResult, check_plan
from mambaxfer_cli.proof.simulate import Simulation
from mambaxfer_cli.engines.vllm.serve_args import (
    CONV_LAYOUT_VAR, KV_LAYOUT_VAR, NIXL_CONNECTORS, RELEASES, ServeLine, reparse,
)

SCHEMA = "mambaxfer.preflight/v1"
PREFILL, DECODE = "prefill", "decode"
KV_ROLES = {PREFILL: ("kv_producer", "kv_both"), DECODE: ("kv_consumer", "kv_both")}
KV_ROLE_FOR = {PREFILL: "kv_producer", DECODE: "kv_consumer"}
SIDE_NAME = {PREFILL: "P", DECODE: "D"}
VLLM_DTYPES = {"float": "float32", "half": "float16"}


# --- one engine ------------------------------------------------------------------------------

@dataclass(frozen=True)
class ServedEngine:
    """One engine as its vLLM release builds it from its command line on its GPU."""

    side: str                 # prefill | decode
    line: ServeLine
    model: ModelSpec
    flags: EngineFlags
    base: EngineFlags = EngineFlags()   # what the command gave: release, GPU, defaults the line may change

    @property
    def tp(self) -> int:
        return self.line.tp

    @property
    def release(self):
        return self.flags.release

    @property
    def attention_backend(self) -> str:
        """The line's backend, else vLLM's pick for the GPU."""
        from mambaxfer_cli.engines.vllm.gpu import default_attention_backend

        return self.flags.attention_backend or default_attention_backend(self.flags.gpu)

    @property
    def conv_layout(self) -> str:
        return self.line.conv_layout or "SD"     # vLLM's default on CUDA when unset

    def summary(self) -> dict:
        m = self.model
        return {"model": self.line.model, "vllm_version": self.release.name, "gpu": self.flags.gpu.spec,
                "tp": self.tp, "dtype": m.model_dtype,
                "kv_cache_dtype": self.flags.kv_cache_dtype, "attention_backend": self.attention_backend,
                "requested_block_size": self.line.block_size, "prefix_caching": self.flags.prefix_caching,
                "conv_dtype": m.conv_dtype, "ssm_dtype": m.ssm_dtype, "num_spec": m.num_spec,
                "conv_rows": m.conv_rows, "conv_layout": self.conv_layout,
                "kv_connector": self.line.kv_connector, "kv_role": self.line.kv_role,
                "transfer_mode": self.line.transfer_mode, "kv_cache_layout": self.kv_cache_layout,
                "kv_buffer_device": self.kv_buffer_device, "hybrid_kv_cache_manager": self.hma,
                "enforce_handshake_compat": self.line.enforce_handshake_compat,
                "gdn_prefill_backend": self.line.gdn_prefill_backend,
                "release_only_flags": [f"{flag} ({', '.join(releases)})" for flag, releases in self.line.release_only]}

    @property
    def kv_cache_layout(self) -> str:
        """The KV-cache layout the engine resolves: VLLM_KV_CACHE_LAYOUT (NHD and HND being the old
        names of LBNHC and LBHNC), else the NIXL connector's LBHNC (``get_required_kvcache_layout``)."""
        name = self.line.kv_cache_layout
        return LAYOUT_ALIASES.get(name, name) if name is not None else "LBHNC"

    @property
    def kv_buffer_device(self) -> str:
        return self.line.kv_buffer_device or "cuda"     # kv_buffer_device_default_factory: the platform's

    @property
    def hma(self) -> bool:
        """Whether the hybrid KV-cache manager runs: unless disabled (the NIXL connector supports it)."""
        return not self.line.disable_hybrid_kv_cache_manager

    @property
    def transfer_layout(self) -> str:
        """The layout the engine advertises and transfers in: with a host buffer, an LBNHC device
        cache is staged as LBHNC when enable_permute_local_kv is set (``initialize_host_xfer_buffer``)."""
        if self.kv_buffer_device == "cpu" and self.kv_cache_layout == "LBNHC" and self.line.enable_permute_local_kv:
            return "LBHNC"
        return self.kv_cache_layout


ModelLoader = Callable[..., ModelSpec]


def vllm_dtype(requested: str, config_dtype: str) -> str:
    """``--dtype``: auto is the config's dtype, float32 checkpoints downcast to bfloat16 on GPUs."""
    if requested == "auto":
        return "bfloat16" if config_dtype == "float32" else config_dtype
    return VLLM_DTYPES.get(requested, requested)


def build_engine(side: str, line: ServeLine, load: ModelLoader, base: EngineFlags = EngineFlags()) -> ServedEngine:
    """The engine vLLM builds from ``line``: ``load(model, conv_dtype=, ssm_dtype=, num_spec=,
    hf_overrides=)`` resolves the model as ``--model`` does elsewhere; ``base`` gives its release,
    GPU and what the line leaves unsaid."""
    try:
        base_model = load(line.model, hf_overrides=line.hf_overrides)
    except UserError as exc:
        raise UserError(f"--{side}: {exc}") from None
    dtype = vllm_dtype(line.dtype, base_model.model_dtype)
    conv = dtype if line.mamba_cache_dtype == "auto" else line.mamba_cache_dtype
    ssm = None if line.mamba_ssm_cache_dtype == "auto" else line.mamba_ssm_cache_dtype
    model = load(line.model, conv_dtype=conv, ssm_dtype=ssm, num_spec=line.num_speculative_tokens,
                 hf_overrides=line.hf_overrides)
    model = replace(model, model_dtype=dtype)
    where = f"--{side}"
    gdn = _line_gdn_backend(line) or base.gdn_prefill_backend
    try:
        resolve_kv_dtype(line.kv_cache_dtype, dtype)
        flags = replace(base, attention_backend=line.attention_backend or base.attention_backend,
                        block_size=line.block_size, kv_cache_dtype=line.kv_cache_dtype,
                        prefix_caching=model.has_attention if line.prefix_caching is None else line.prefix_caching,
                        gdn_prefill_backend=gdn, num_blocks=CHECK_NUM_BLOCKS[side])
        if model.variant.value == "gdn" and gdn is not None:
            from mambaxfer_cli.engines.vllm.gpu import gdn_prefill_backend

            gdn_prefill_backend(flags.gpu, model.params.get("head_k_dim"), gdn)
    except UserError as exc:
        raise UserError(f"{where}: {exc}") from None
    return ServedEngine(side, line, model, flags, base)


def _line_gdn_backend(line: ServeLine) -> str | None:
    """The line's GDN prefill backend (``--gdn-prefill-backend``, else ``--additional-config``'s);
    None leaves vLLM's choice for the GPU (or the command's --gdn-prefill-backend)."""
    return None if line.gdn_prefill_backend in (None, "auto") else line.gdn_prefill_backend


# --- what is compared --------------------------------------------------------------------------

@dataclass(frozen=True)
class Field:
    name: str
    prefill: object
    decode: object
    compared: bool            # by vLLM (compatibility hash or handshake)
    ok: bool | None = None    # the rule when it is not equality (TP sizes, kernel blocks)

    @property
    def agree(self) -> bool:
        return self.prefill == self.decode if self.ok is None else self.ok

    def to_dict(self) -> dict:
        return {"field": self.name, "prefill": self.prefill, "decode": self.decode, "agree": self.agree}


def speculative(e: ServedEngine) -> Speculative | None:
    """The line's ``--speculative-config`` as the hash reads it."""
    if not e.line.speculative:
        return None
    spec = dict(e.line.speculative)
    model = spec.get("model")
    kv = spec.get("kv_cache_dtype")
    return Speculative(e.line.speculative_method, e.line.num_speculative_tokens,
                       None if model is None else str(model), bool(spec.get("parallel_drafting", False)),
                       None if kv is None else str(kv))


def engine_facts(e: ServedEngine, plan: Plan | None) -> EngineFacts:
    """What ``compute_nixl_compatibility_hash`` reads of one engine."""
    layout = None if plan is None else (plan.prefill if e.side == PREFILL else plan.decode)
    backend = layout.hashed_backend if layout is not None else e.attention_backend
    return EngineFacts(e.line.model, e.model.model_dtype, e.model.num_kv_heads, e.model.head_size,
                       len(e.model.layers), backend, e.flags.kv_cache_dtype, speculative=speculative(e),
                       transfer_mode=e.line.transfer_mode, hybrid_kv_cache_manager=e.hma)


def hashed_fields(p: ServedEngine, d: ServedEngine, plan: Plan | None) -> list[Field]:
    """What each engine's compatibility hash takes (``compute_nixl_compatibility_hash``, its
    release's fields), side by side."""
    theirs = dict(p.release.hashed(engine_facts(p, plan)))
    mine = dict(d.release.hashed(engine_facts(d, plan)))
    names = list(theirs) + [n for n in mine if n not in theirs]
    return [Field(n, theirs.get(n), mine.get(n), True) for n in names]


PUSH_IDENTICAL = "push_identical_blocks"


def handshake_fields(p: ServedEngine, d: ServedEngine, plan: Plan | None) -> list[Field]:
    """What the handshake compares besides the hash (TP, kernel blocks, blocks per logical), as
    the local engine does: D when it pulls, P when it pushes."""
    big, small = max(p.tp, d.tp), min(p.tp, d.tp)
    rows = [Field("TP size (one divides the other)", p.tp, d.tp, True, big % small == 0)]
    if plan is not None and plan.prefill.has_attention:
        pg, dg = plan.prefill.geometry, plan.decode.geometry
        push = _push(p, d)
        if push and PUSH_IDENTICAL in [c.__name__ for c in p.release.push_checks]:
            rows.append(Field("kernel block and blocks per logical (identical for push)",
                              f"{pg.kernel_block_size} × {pg.blocks_per_logical}",
                              f"{dg.kernel_block_size} × {dg.blocks_per_logical}", True))
        elif push:
            rows.append(Field("kernel block (P's a multiple of D's)", pg.kernel_block_size, dg.kernel_block_size,
                              True, pg.kernel_block_size % dg.kernel_block_size == 0))
        else:
            rows.append(Field("kernel block (D's a multiple of P's)", pg.kernel_block_size, dg.kernel_block_size,
                              True, dg.kernel_block_size % pg.kernel_block_size == 0))
        local = pg if push else dg
        if local.prefix_caching:
            rows.append(Field("blocks per logical (prefix caching)", pg.blocks_per_logical, dg.blocks_per_logical,
                              True))
    return rows


def unchecked_fields(p: ServedEngine, d: ServedEngine, plan: Plan | None) -> list[Field]:
    """What vLLM never compares (docs/reference.md): a mismatch is accepted and corrupts the state."""
    rows = [Field("conv dtype", p.model.conv_dtype, d.model.conv_dtype, False),
            Field("SSM (temporal) dtype", p.model.ssm_dtype, d.model.ssm_dtype, False),
            Field("conv layout", p.conv_layout, d.conv_layout, False),
            Field("num_spec / conv rows", f"{p.model.num_spec} / {p.model.conv_rows}",
                  f"{d.model.num_spec} / {d.model.conv_rows}", False)]
    try:   # what D's offsets assume of P's state, rank for rank: both models laid out at D's TP
        sizes = [rank_layout(e.model, d.tp, 0) for e in (p, d)]
        p_bytes, d_bytes = (f"{r.conv_bytes} + {r.ssm_bytes}" for r in sizes)
        rows.append(Field("SSM state bytes per rank (at D's TP)", p_bytes, d_bytes, False))
    except UserError:
        pass
    return rows


# --- the verdict --------------------------------------------------------------------------------

def startup_refusals(e: ServedEngine) -> list[Refusal]:
    """What stops the engine before any handshake, as its release's NIXL worker asserts it."""
    name, out = SIDE_NAME[e.side], []
    line = e.line
    if line.kv_connector is None:
        out.append(Refusal("no-connector", f"{name} has no --kv-transfer-config: it neither sends nor receives "
                                           f"KV cache"))
    elif line.kv_connector not in NIXL_CONNECTORS:
        out.append(Refusal("connector", f"{name} uses {line.kv_connector}; mambaxfer checks vLLM's NIXL "
                                        f"connector ({', '.join(NIXL_CONNECTORS)})"))
    elif line.kv_role not in KV_ROLES[e.side]:
        out.append(Refusal("kv-role", f"{name} is the {e.side} engine but its kv_role is {line.kv_role} "
                                      f"(use {KV_ROLE_FOR[e.side]})"))
    for var, (value, message) in e.release.fatal_env.items():
        if dict(line.environment()).get(var) == value:
            out.append(Refusal("environment", f"{name}: vLLM {e.release.name} refuses to start: {message}"))
    if e.conv_layout not in ("SD", "DS"):
        out.append(Refusal("conv-layout", f"{name}: {CONV_LAYOUT_VAR}={e.conv_layout} is not one of SD, DS; "
                                          f"vLLM refuses to start"))
    elif e.conv_layout != "DS" and line.kv_connector in NIXL_CONNECTORS:
        how = "is unset (vLLM uses SD)" if line.conv_layout is None else f"is {line.conv_layout}"
        out.append(Refusal("conv-layout", f"{name}: {CONV_LAYOUT_VAR} {how}; its NIXL worker asserts: "
                                          f"3-read Mamba conv transfer requires DS conv state layout. Set "
                                          f"{CONV_LAYOUT_VAR}=DS"))
    return out + flag_startup_refusals(e)


# --- flags that change the verdict: the KV-cache layout, the host buffer, HMA, the hash check -----

LAYOUT_ALIASES = {"NHD": "LBNHC", "HND": "LBHNC"}                   # config/cache.py _LAYOUT_COMPAT_ALIASES
ENV_LAYOUTS = ("LBNHC", "LBHNC", "LHBNC", "NHD", "HND", "BLHNC", "BLNHC", "BHLNC")   # envs.py's choices
# attention/backends/utils.py _DEFAULT_LAYOUT_PREFERENCE: what the engine may resolve when no backend
# declares layouts (FLASH_ATTN, TRITON_ATTN, FlashInfer before Blackwell, the Mamba backends)
DEFAULT_LAYOUTS = ("LBNHC", "LBHNC", "BLNHC", "BLHNC", "BHLNC", "LHBNC")
BLOCK_COMPACT = ("LBHNC", "LBNHC", "BLHNC", "BLNHC")     # KVCacheLayout.is_block_compact: L and B outermost
BLOCK_CONTIGUOUS = ("LBHNC", "BLHNC")                    # KVCacheLayout.is_block_contiguous: [H, N, C] last
# Met before the layout checks, in the release's order (the head-sharded check comes after them).
HANDSHAKE_FIRST = ("tp-sizes", "compat-hash", "region-layers", "push-block-sizes", "block-size", "prefix-caching",
                   "host-buffer")


def layout_candidates(model: ModelSpec) -> tuple[str, ...]:
    """The layouts ``resolve_kv_cache_layout`` may pick: a hybrid's Mamba and attention specs have
    different (heads, states) shapes, which leaves only block-compact layouts."""
    return tuple(x for x in DEFAULT_LAYOUTS if x in BLOCK_COMPACT) if model.has_attention else DEFAULT_LAYOUTS


def flag_startup_refusals(e: ServedEngine) -> list[Refusal]:
    """What stops one engine at start-up among the flags beyond section 8's: HMA off, a buffer
    device or a KV-cache layout vLLM does not take."""
    name, line, out = SIDE_NAME[e.side], e.line, []
    nixl = line.kv_connector in NIXL_CONNECTORS
    if nixl and not e.hma:
        out.append(Refusal("hma", (
            f"{name}: --disable-hybrid-kv-cache-manager: vLLM's NIXL worker requires the hybrid KV-cache "
            f"manager for Mamba layers (NixlConnectorWorker asserts _is_hma_required, nixl/base_worker.py), "
            f"so the engine does not start")))
    if nixl and e.kv_buffer_device not in ("cuda", "cpu"):
        out.append(Refusal("kv-buffer-device", f"{name}: cuda with {e.kv_buffer_device} kv_buffer is not supported."))
    layout = line.kv_cache_layout
    if layout is not None and layout not in ENV_LAYOUTS:
        out.append(Refusal("kv-cache-layout", f"{name}: Invalid value '{layout}' for {KV_LAYOUT_VAR}. Valid "
                                              f"options: {list(ENV_LAYOUTS)}."))
    elif layout is not None and e.kv_cache_layout not in layout_candidates(e.model):
        out.append(Refusal("kv-cache-layout", (
            f"{name}: {KV_LAYOUT_VAR}={layout} does not satisfy every supported set; valid layouts: "
            f"{list(layout_candidates(e.model))}.")))
    return out


def handshake_sides(p: ServedEngine, d: ServedEngine) -> tuple[ServedEngine, ServedEngine]:
    """(local, remote) of the handshake: D checks P when it pulls; P checks D when it pushes."""
    return (p, d) if _push(p, d) else (d, p)


def layout_refusals(p: ServedEngine, d: ServedEngine, plan: Plan) -> list[Refusal]:
    """``_validate_remote_agent_handshake`` after its block checks (the release's, the host buffer's
    among them): the two engines' KV-cache layouts, then head splitting across TP sizes."""
    local, remote = handshake_sides(p, d)
    out = []
    mine, theirs = local.transfer_layout, remote.transfer_layout
    permute = False
    if mine != theirs:
        if local.line.enable_permute_local_kv and theirs == "LBHNC" and mine == "LBNHC":
            permute = True
            if local.hma:     # Mamba layers need HMA, and the permute asserts it is off
                out.append(Refusal("kv-cache-layout", "HMA does not support block size post processing"))
        else:
            out.append(Refusal("kv-cache-layout", (
                f"Heterogeneous TP expects same kv_cache_layout (local {mine}, remote {theirs}). Or enable "
                f"experimental feature to receive LBHNC into a local LBNHC cache by setting "
                f"'enable_permute_local_kv'=True in --kv-transfer-config.")))
    replicated = remote.tp > (remote.model.num_kv_heads or 0)      # TransferTopology.is_kv_replicated
    if (p.tp != d.tp and p.model.has_attention and not replicated and mine not in BLOCK_CONTIGUOUS
            and not permute):
        out.append(Refusal("kv-cache-layout-heads", (
            "Heterogeneous TP head-dimension splitting requires contiguous heads. Use a block-contiguous "
            "layout (e.g. LBHNC) on the prefill side.")))
    return out


def skipped_hash(p: ServedEngine, d: ServedEngine, plan: Plan | None) -> list[str]:
    """What the compatibility hash would refuse, when the handshake's local side skips it
    (``enforce_handshake_compat`` false): the fields that differ and now pass."""
    local, _ = handshake_sides(p, d)
    if local.line.enforce_handshake_compat:
        return []
    return [f"{f.name} (P {f.prefill}, D {f.decode})" for f in hashed_fields(p, d, plan) if not f.agree]


def hash_warnings(p: ServedEngine, d: ServedEngine, plan: Plan | None) -> list[str]:
    local, remote = handshake_sides(p, d)
    out = []
    if not local.line.enforce_handshake_compat:
        let = skipped_hash(p, d, plan)
        out.append(f"{SIDE_NAME[local.side]}: enforce_handshake_compat is false, so vLLM skips its "
                   f"compatibility hash check; " + (
                       f"it would have refused this pairing, and lets through: {'; '.join(let)}" if let else
                       "P and D agree on every hashed field here, so it lets nothing through"))
    if not remote.line.enforce_handshake_compat:
        out.append(f"{SIDE_NAME[remote.side]}: enforce_handshake_compat has no effect on this side: "
                   f"{SIDE_NAME[local.side]} runs the handshake ({'push' if _push(p, d) else 'pull'} mode)")
    return out


@dataclass(frozen=True)
class Assessment:
    """One pairing's answer, before any fix."""

    prefill: ServedEngine
    decode: ServedEngine
    plan: Plan | None
    refusals: tuple[Refusal, ...]           # start-up and handshake, in the order vLLM meets them
    suggested_block_size: int | None
    byte_check: PairingResult | None
    byte_check_skipped: str = ""            # why there is no byte check
    let_through: tuple[str, ...] = ()       # what the compatibility hash would refuse, when it is skipped

    @property
    def refused(self) -> bool:
        return bool(self.refusals)

    @property
    def releases(self) -> str:
        return Engines(self.prefill.flags, self.decode.flags).releases

    @property
    def length_mismatches(self) -> list[LengthMismatch]:
        """vLLM's descriptor pairs of unequal length: NIXL refuses every READ (the plan's
        ``vllm-length-mismatch``)."""
        if self.plan is None:
            return []
        return vllm_length_mismatches(self.plan.prefill.ranks, self.plan.decode.ranks)

    @property
    def fails(self) -> bool:
        """vLLM accepts the pairing, but every transfer fails before it moves a byte."""
        return not self.refused and bool(self.length_mismatches)

    @property
    def reinterpreted(self) -> list[tuple[str, str, str]]:
        """(what, P's dtype, D's dtype) where D reads P's values as another dtype of the same size
        (float16 and bfloat16): every byte lands where D expects it, and every number is wrong."""
        p, d = self.prefill, self.decode
        rows: list[tuple[str, str | None, str | None]] = [
            ("conv state", p.model.conv_dtype, d.model.conv_dtype), ("SSM state", p.model.ssm_dtype, d.model.ssm_dtype)]
        if self.plan is not None and self.plan.prefill.has_attention:
            rows.append(("attention KV cache", self.plan.prefill.kv_dtype, self.plan.decode.kv_dtype))
        return [(what, a, b) for what, a, b in rows
                if a is not None and b is not None and a != b and a in DTYPE_BYTES
                and DTYPE_BYTES[a] == DTYPE_BYTES.get(b)]

    @property
    def simulation(self) -> Simulation | None:
        """The byte check's simulation of vLLM's reads; None without a byte check."""
        return None if self.byte_check is None else _simulation(self.byte_check)

    @property
    def corrupt(self) -> bool:
        return self.byte_check is not None and (not _simulation(self.byte_check).ok or bool(self.reinterpreted))

    @property
    def verdict(self) -> str:
        return "refused" if self.refused else "fails" if self.fails else "corrupt" if self.corrupt else "works"

    @property
    def works(self) -> bool:
        return self.verdict == "works" and self.byte_check is not None

    @property
    def unchecked_mismatches(self) -> list[Field]:
        return [f for f in unchecked_fields(self.prefill, self.decode, self.plan) if not f.agree]

    @property
    def fields(self) -> list[Field]:
        p, d = self.prefill, self.decode
        return hashed_fields(p, d, self.plan) + handshake_fields(p, d, self.plan) + unchecked_fields(p, d, self.plan)


def _push(p: ServedEngine, d: ServedEngine) -> bool:
    return p.line.transfer_mode == "push" and d.line.transfer_mode == "push"


def _host_buffer(e: ServedEngine) -> bool:
    return e.kv_buffer_device == "cpu"


def enforces_hash(e: ServedEngine) -> bool:
    """``kv_connector_extra_config.enforce_handshake_compat`` (default true; vLLM tests it as Python
    truth, so the string "false" still enforces)."""
    return bool(e.line.enforce_handshake_compat)


def _no_geometry(p: ServedEngine, d: ServedEngine, mode: str) -> list[Refusal]:
    """The checks that need no geometry (TP sizes, hash, a model without attention) where no plan
    could be made; the geometry checks pass on the equal stand-in blocks."""
    local, remote = (d, p) if mode == PULL else (p, d)
    hashes = {e.side: e.release.hashed(engine_facts(e, None)) for e in (p, d)}
    seen = Meeting(mode, local.tp, remote.tp, remote.model.has_attention, 1, 1, 1, 1, False, 0, hashes[local.side],
                   hashes[remote.side], SIDE_NAME[remote.side], enforce_hash=enforces_hash(local))
    return [found for check in local.release.checks(mode) if (found := check(seen)) is not None]


def assess(p: ServedEngine, d: ServedEngine) -> Assessment:
    """The releases' verdict on the pairing and the byte-level check of what vLLM would read."""
    refusals = startup_refusals(p) + startup_refusals(d)
    plan, skipped = None, ""
    options = PlanOptions(semantics=VLLM, prefill=p.flags, decode=d.flags, prefill_model=p.model)
    try:
        plan = build_plan(d.model, p.tp, d.tp, options)
    except UserError as exc:
        skipped = str(exc)
    mode = PUSH if _push(p, d) else PULL
    let_through = skipped_hash(p, d, plan)
    suggestion = None
    if plan is not None:
        def rebuild(size: int) -> tuple[EngineLayout, EngineLayout]:
            def at(e: ServedEngine) -> EngineLayout:
                return engine_layout(e.model, e.tp, replace(e.flags, block_size=size), plan.grouping)

            return at(p), at(d)

        layout = tuple(r for r in plan.verdict.refusals if r.code == "layout")
        local = d if mode == PULL else p
        found = handshake_verdict(plan.prefill, plan.decode, rebuild, layout, mode,
                                  (engine_facts(p, plan), engine_facts(d, plan)), _host_buffer(local),
                                  enforces_hash(local))
        first = [r for r in found.refusals if r.code in HANDSHAKE_FIRST]
        refusals += first + layout_refusals(p, d, plan) + [r for r in found.refusals if r.code not in HANDSHAKE_FIRST]
        suggestion = found.suggested_block_size
    else:
        refusals += _no_geometry(p, d, mode)
        if let_through:
            skipped = (f"{skipped}; vLLM's handshake lets it through (the hash check is skipped), and what it "
                       f"moves is not checked")
        elif not any(r.code in ("compat-hash", "tp-sizes") for r in refusals):   # a TP size the heads do not divide
            refusals.append(Refusal("tp-layout", skipped))
    mismatched = vllm_length_mismatches(plan.prefill.ranks, plan.decode.ranks) if plan is not None else []
    result = check_plan(plan) if plan is not None and not mismatched else None
    if mismatched:
        skipped = (f"vLLM's reads move no byte: NIXL refuses each READ whose descriptors differ in length "
                   f"({mismatched[0]})")
    elif result is None and not skipped:
        skipped = "no plan"
    return Assessment(p, d, plan, tuple(refusals), suggestion, result, skipped, tuple(let_through))


# --- fixes ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Change:
    side: str
    flag: str                 # a flag, or VAR= for the environment
    old: str | None           # as it was (None: absent)
    new: str | None           # as it becomes (None: removed)
    why: str

    def describe(self) -> str:
        name = SIDE_NAME[self.side]
        if self.flag.endswith("="):
            return f"{name}: export {self.flag}{self.new}  ({self.why})"
        if self.new == "":
            return f"{name}: {self.flag}  ({self.why})"
        if self.new is None:
            return f"{name}: remove {self.flag}  ({self.why})"
        return f"{name}: {self.flag} {self.new}  ({self.why})"

    def to_dict(self) -> dict:
        return {"side": self.side, "flag": self.flag.rstrip("="), "old": self.old, "new": self.new, "why": self.why}


FIELD_FLAG = {"gdn_prefill_backend": "--gdn-prefill-backend", "block_size": "--block-size", "dtype": "--dtype",
              "kv_cache_dtype": "--kv-cache-dtype",
              "mamba_cache_dtype": "--mamba-cache-dtype", "mamba_ssm_cache_dtype": "--mamba-ssm-cache-dtype",
              "attention_backend": "--attention-backend", "speculative_config": "--speculative-config",
              "kv_transfer_config": "--kv-transfer-config", "tp": "--tensor-parallel-size",
              "hf_overrides": "--hf-overrides", "disable_hybrid_kv_cache_manager": "--disable-hybrid-kv-cache-manager"}


def _set_words(line: ServeLine, key: str, new: list[str]) -> list[str]:
    """The line's words with every occurrence of ``key``'s flag replaced by ``new`` (at the first)."""
    words = list(line.words)
    occ = sorted(line.occurrences.get(key, ()), key=lambda o: o.start)
    if not occ:
        return words + new
    first = occ[0].start
    for o in reversed(occ):
        del words[o.start:o.end]
    return words[:first] + new + words[first:]


def apply_change(line: ServeLine, change: Change) -> ServeLine:
    where = f"--{change.side}"
    if change.flag.endswith("="):
        assert change.new is not None, "an environment change sets a value"
        env = tuple((k, v) for k, v in line.env_prefix if k != change.flag[:-1]) + ((change.flag[:-1], change.new),)
        return reparse(line, list(line.words), env, where)
    if change.flag in ("--enable-prefix-caching", "--no-enable-prefix-caching"):
        return reparse(line, _set_words(line, "prefix_caching", [change.flag]), line.env_prefix, where)
    key = next(k for k, f in FIELD_FLAG.items() if f == change.flag)
    return reparse(line, _set_words(line, key, [] if change.new is None else [change.flag, change.new]),
                   line.env_prefix, where)


def _align(p: ServedEngine, d: ServedEngine) -> list[Change]:
    """Changes that make D agree with P (and both engines start), flag by flag."""
    out: list[Change] = []
    for e in (p, d):
        if e.line.kv_connector is None or e.line.kv_role not in KV_ROLES[e.side]:
            config = {**e.line.kv_transfer, "kv_connector": e.line.kv_connector
                      if e.line.kv_connector in NIXL_CONNECTORS else
                      (p.line.kv_connector if p.line.kv_connector in NIXL_CONNECTORS else "NixlConnector"),
                      "kv_role": KV_ROLE_FOR[e.side]}
            out.append(Change(e.side, "--kv-transfer-config", None, json.dumps(config, separators=(",", ":")),
                              "the engine's NIXL connector and role"))
        if e.conv_layout != "DS":
            out.append(Change(e.side, f"{CONV_LAYOUT_VAR}=", e.line.conv_layout, "DS",
                              "vLLM's NIXL worker requires it"))
        if e.line.disable_hybrid_kv_cache_manager:
            out.append(Change(e.side, "--disable-hybrid-kv-cache-manager", "", None,
                              "vLLM's NIXL worker requires the hybrid KV-cache manager for Mamba layers"))
        if e.line.kv_cache_layout is not None and e.transfer_layout != "LBHNC":
            out.append(Change(e.side, f"{KV_LAYOUT_VAR}=", e.line.kv_cache_layout, "LBHNC",
                              "the NIXL connector's block-contiguous layout, the same on P and D"))
    pairs = [("dtype", p.model.model_dtype, d.model.model_dtype, p.line.dtype, "the hash compares it"),
             ("kv_cache_dtype", p.flags.kv_cache_dtype, d.flags.kv_cache_dtype, p.line.kv_cache_dtype,
              "the hash compares it"),
             ("mamba_cache_dtype", p.model.conv_dtype, d.model.conv_dtype, p.model.conv_dtype,
              "vLLM does not compare it: D would read P's conv state as its own"),
             ("mamba_ssm_cache_dtype", p.model.ssm_dtype, d.model.ssm_dtype, p.model.ssm_dtype,
              "vLLM does not compare it: D would read P's SSM state as its own")]
    for key, pv, dv, value, why in pairs:
        if pv != dv:
            out.append(Change(DECODE, FIELD_FLAG[key], getattr(d.line, key), value, f"as P's; {why}"))
    if p.flags.attention_backend != d.flags.attention_backend:
        out.append(Change(DECODE, "--attention-backend", d.line.attention_backend, p.flags.attention_backend,
                          "as P's"))
    if p.model.num_spec != d.model.num_spec or _spec_factors(p) != _spec_factors(d):
        def spec(e: ServedEngine) -> str | None:
            return json.dumps(dict(e.line.speculative), separators=(",", ":")) if e.line.speculative else None
        why = ("as P's: the hash compares the speculative method and draft, and conv rows follow the tokens"
               if _spec_factors(p) != _spec_factors(d) else
               "as P's: conv rows follow num_speculative_tokens, which vLLM's hash does not compare")
        out.append(Change(DECODE, "--speculative-config", spec(d), spec(p), why))
    if dict(p.line.hf_overrides) != dict(d.line.hf_overrides):
        wanted = json.dumps(dict(p.line.hf_overrides), separators=(",", ":")) if p.line.hf_overrides else None
        was = json.dumps(dict(d.line.hf_overrides), separators=(",", ":")) if d.line.hf_overrides else None
        out.append(Change(DECODE, "--hf-overrides", was, wanted, "as P's: the model's dimensions follow it"))
    if p.line.transfer_mode != d.line.transfer_mode and p.line.kv_connector and d.line.kv_connector:
        config = {**d.line.kv_transfer, "kv_connector": p.line.kv_connector}
        out.append(Change(DECODE, "--kv-transfer-config", None, json.dumps(config, separators=(",", ":")),
                          "the same transfer mode as P"))
    return out


def _spec_factors(e: ServedEngine):
    return e.release.speculative_factors(speculative(e), e.line.model, e.flags.kv_cache_dtype)


def _both(flag: str, old: tuple[str | None, str | None], value: str, why: str) -> list[Change]:
    return [Change(side, flag, o, value, why) for side, o in zip((PREFILL, DECODE), old)]


@dataclass(frozen=True)
class Fix:
    changes: tuple[Change, ...]
    prefill: ServeLine
    decode: ServeLine
    after: Assessment

    def to_dict(self) -> dict:
        return {"changes": [c.to_dict() for c in self.changes], "prefill": self.prefill.command(),
                "decode": self.decode.command(), "verdict_after": self.after.verdict}


def find_fix(first: Assessment, load: ModelLoader) -> Fix | None:
    """The smallest set of changes (D aligned to P, then the block geometry, then TP) that works."""
    def run(changes: list[Change]) -> tuple[ServeLine, ServeLine, Assessment]:
        lines = {PREFILL: first.prefill.line, DECODE: first.decode.line}
        for c in changes:
            lines[c.side] = apply_change(lines[c.side], c)
        p = build_engine(PREFILL, lines[PREFILL], load, first.prefill.base)
        d = build_engine(DECODE, lines[DECODE], load, first.decode.base)
        return lines[PREFILL], lines[DECODE], assess(p, d)

    base = _align(first.prefill, first.decode)
    pl, dl, after = run(base)
    candidates: list[list[Change]] = [base]
    p_line, d_line = first.prefill.line, first.decode.line
    p_bs, d_bs = p_line.block_size, d_line.block_size
    old_bs = (None if p_bs is None else str(p_bs), None if d_bs is None else str(d_bs))
    if after.suggested_block_size:
        candidates.append(base + _both("--block-size", old_bs, str(after.suggested_block_size),
                                       "vLLM's handshake accepts both engines' blocks"))
    no_pc = _both("--no-enable-prefix-caching", (None, None), "", "vLLM refuses prefix caching with "
                  "different blocks per logical block")
    candidates.append(base + no_pc)
    _, _, off = run(base + no_pc)
    if off.suggested_block_size:
        candidates.append(base + no_pc + _both("--block-size", old_bs, str(off.suggested_block_size),
                                               "vLLM's handshake accepts both engines' blocks"))
    if first.prefill.tp != first.decode.tp:
        same_tp = [Change(PREFILL, "--tensor-parallel-size", str(p_line.tp), str(first.decode.tp),
                          "vLLM's reads are right only when P and D shard alike")]
        reshaped = [c + same_tp for c in candidates]
    else:
        reshaped = []
    tried = set()
    # Flag changes first, fewest first; a different TP (the deployment's shape) only as a last resort.
    for changes in sorted(candidates, key=len) + sorted(reshaped, key=len):
        key = tuple(changes)
        if key in tried or not changes:
            continue
        tried.add(key)
        pl, dl, after = run(changes)
        if after.works:
            return Fix(tuple(_drop_noops(changes)), pl, dl, after)
    return None


def _drop_noops(changes: list[Change]) -> list[Change]:
    return [c for c in changes if c.old != c.new or c.new == ""]


# --- the report ----------------------------------------------------------------------------------

def _fails_headline(a: Assessment) -> str:
    """The state sizes differ, vLLM accepts, and NIXL refuses every READ: say which field and which
    sizes."""
    bad = a.length_mismatches[0]
    differs = [f for f in a.unchecked_mismatches if "bytes" not in f.name]
    cause = (f"P and D differ in {differs[0].name} (P {differs[0].prefill}, D {differs[0].decode}), which vLLM's "
             f"handshake does not compare: " if differs else "")
    return (f"FAILS: {cause}{a.releases} accepts this pairing, but every transfer fails: each P rank's SSM "
            f"temporal state is {bad.remote_bytes} bytes and D reads it into a {bad.local_bytes}-byte slice; "
            f"NIXL refuses descriptors of unequal length, so vLLM ends each request in error "
            f"(kv_load_failure_policy 'fail', its default) or prefills it again on D ('recompute')")


@dataclass(frozen=True)
class Report:
    assessment: Assessment
    fix: Fix | None
    warnings: tuple[str, ...]

    @property
    def verdict(self) -> str:
        return self.assessment.verdict

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.assessment.works else EXIT_WRONG

    def headline(self) -> str:
        a = self.assessment
        releases = a.releases
        if a.refused:
            return f"REFUSED: {releases} would not run this pairing ({a.refusals[0].code}: {a.refusals[0].message})"
        if a.fails:
            return _fails_headline(a)
        if a.byte_check is None:
            return f"UNCHECKED: {a.byte_check_skipped}"
        sim = _simulation(a.byte_check)
        if a.corrupt and sim.ok and a.reinterpreted:
            what, pv, dv = a.reinterpreted[0]
            unchecked = ("the compatibility hash that would refuse this pairing is skipped (enforce_handshake_"
                         "compat false)" if a.let_through else "vLLM's handshake does not compare it")
            return (f"CORRUPT: P keeps its {what} in {pv}, D in {dv}, and {unchecked}: every byte lands where D "
                    f"expects it, but D reads P's {pv} values as {dv}")
        if a.corrupt and a.unchecked_mismatches:
            f = a.unchecked_mismatches[0]
            return (f"CORRUPT: P and D differ in {f.name} (P {f.prefill}, D {f.decode}), which vLLM's handshake "
                    f"does not compare: {releases} accepts the pairing and D reads P's bytes with its own "
                    f"offsets ({sim.wrong_bytes} wrong bytes)")
        if a.corrupt and a.plan is not None and any(w.code == "vllm-replicated-groups" for w in a.plan.warnings):
            groups = a.decode.model.params.get("n_groups")
            return (f"CORRUPT: {releases} accepts this pairing, but its reads corrupt the SSM state: its offsets "
                    f"assume every region is evenly sharded across ranks, while this model's B/C groups "
                    f"(n_groups={groups}) are replicated on the D ranks ({sim.wrong_bytes} "
                    f"wrong bytes)")
        if a.corrupt:
            lines = a.byte_check.explanation()
            return (f"CORRUPT: {releases} accepts this pairing, but D's reads land wrong bytes "
                    f"({sim.wrong_bytes} bytes; {lines[0] if lines else 'see below'})")
        return (f"WORKS: {releases} accepts this pairing and its reads move the right bytes "
                f"({sim.bytes_verified} bytes verified)")

    def to_dict(self) -> dict:
        a = self.assessment

        def engine(e: ServedEngine, g: Geometry | None) -> dict:
            return {"command": e.line.command(), **e.summary(), "geometry": g.to_dict() if g else None,
                    "ignored_flags": list(e.line.ignored), "unknown_flags": list(e.line.unknown)}

        plan = a.plan
        check = a.byte_check
        return {
            "schema": SCHEMA, **Engines(a.prefill.flags, a.decode.flags).to_dict(),
            "verdict": self.verdict if a.byte_check or a.refused or a.fails else "unchecked",
            "exit_code": self.exit_code, "headline": self.headline(),
            "engines": {PREFILL: engine(a.prefill, plan.prefill.geometry if plan else None),
                        DECODE: engine(a.decode, plan.decode.geometry if plan else None)},
            "compared": [f.to_dict() for f in hashed_fields(a.prefill, a.decode, plan)
                         + handshake_fields(a.prefill, a.decode, plan)],
            "not_compared": [f.to_dict() for f in unchecked_fields(a.prefill, a.decode, plan)],
            "vllm": {"releases": a.releases, "accepts": not a.refused, "refusals": [r.to_dict() for r in a.refusals],
                     "suggested_block_size": a.suggested_block_size, "not_checked": list(NOT_CHECKED)},
            "byte_check": None if check is None else _byte_check(check),
            "byte_check_skipped": a.byte_check_skipped or None,
            "unchecked_mismatches": [f"{f.name}: P {f.prefill}, D {f.decode}" for f in a.unchecked_mismatches],
            "plan_warnings": [w.to_dict() for w in plan.warnings] if plan else [],
            "fix": self.fix.to_dict() if self.fix else None,
            "warnings": list(self.warnings),
        }


def preflight(prefill: ServeLine, decode: ServeLine, load: ModelLoader, engines: Engines = Engines()) -> Report:
    """The verdict on two serve lines; ``engines``: each side's release and GPU (and what the
    lines leave unsaid)."""
    p = build_engine(PREFILL, prefill, load, engines.prefill)
    d = build_engine(DECODE, decode, load, engines.decode)
    first = assess(p, d)
    fix = None if first.works else find_fix(first, load)
    warnings = []
    for e in (p, d):
        name = SIDE_NAME[e.side]
        if e.line.unknown:
            warnings.append(f"{name}: no vLLM release mambaxfer knows ({', '.join(RELEASES)}) has "
                            f"{', '.join(e.line.unknown)}: vllm serve exits with 'unrecognized arguments'")
        for flag, releases in e.line.release_only:
            if e.release.name not in releases:
                warnings.append(f"{name}: {flag} is known to vLLM {', '.join(releases)} only, and this engine "
                                f"runs vLLM {e.release.name}: vllm serve exits with 'unrecognized arguments'")
        if e.line.attention_backend is None and e.model.has_attention and e.flags.attention_backend is None:
            warnings.append(f"{name}: no --attention-backend: {e.attention_backend} assumed (vLLM's pick on "
                            f"{e.flags.gpu.name})")
        if e.line.kv_role == "kv_both":
            warnings.append(f"{name}: kv_role kv_both is deprecated for NIXL")
        warnings += [f"{name}: {n}" for n in e.line.notes]
    warnings += hash_warnings(p, d, first.plan)
    if _push(p, d):
        warnings.append("push mode (NixlPushConnector): vLLM's handshake rules are applied with P as the local "
                        "side, as its push worker does; the byte-level check simulates D's pull reads "
                        "(mambaxfer does not model push WRITEs)")
    a = first
    if a.plan is not None and not a.refused and a.plan.verdict.needs_remote_num_tokens and not _push(p, d):
        warnings.append(f"{a.releases} pairs P's and D's blocks from the request's last token here: the proxy "
                        f"must forward remote_num_tokens in kv_transfer_params, or D declines the reads")
    return Report(first, fix, tuple(warnings))


def _simulation(check: PairingResult) -> Simulation:
    assert check.simulation is not None, "preflight's byte check simulates the reads"
    return check.simulation


def _byte_check(check: PairingResult) -> dict[str, Any]:
    sim = _simulation(check)
    return {"verdict": "pass" if sim.ok else "fail", "bytes_moved": check.bytes, "bytes_verified": sim.bytes_verified,
            "wrong_bytes": sim.wrong_bytes, "explanation": check.explanation(limit=1000) if not sim.ok else []}


def quote_lines(line: ServeLine, width: int = 78) -> list[str]:
    """A corrected command as shell lines of at most ``width`` columns (``\\`` continuations),
    never cutting a word."""
    quoted = [f"{k}={shlex.quote(v)}" for k, v in line.environment()] + [shlex.quote(w) for w in line.words]
    words: list[str] = []
    for w in quoted:   # a flag and its value stay on one line
        if words and words[-1].startswith("-") and " " not in words[-1] and not w.startswith("-") \
                and len(words[-1]) + 1 + len(w) + 4 <= width:
            words[-1] += " " + w
        else:
            words.append(w)
    lines, current = [], ""
    for w in words:
        if current and len(current) + 1 + len(w) + 2 > width:
            lines.append(current + " \\")
            current = "  " + w
        else:
            current = f"{current} {w}" if current else w
    lines.append(current)
    return lines

"""What vLLM refuses of the pairing, at start-up (each engine's flags and environment) and at
handshake (its checks, the KV-cache layout, the host buffer, the hash): one ``Assessment``."""

from __future__ import annotations

from dataclasses import dataclass, replace

from mambaxfer_cli.errors import UserError
from mambaxfer_cli.engines.vllm.engine import Engines, EngineLayout, engine_layout
from mambaxfer_cli.engines.vllm import families
from mambaxfer_cli.engines.vllm.handshake import PULL, PUSH, Refusal, handshake_verdict
from mambaxfer_cli.engines.vllm.drafts import drafter_of, drafts
from mambaxfer_cli.engines.vllm.kv_layout import heads_refusal, layout_error
from mambaxfer_cli.planning.dtypes import DTYPE_BYTES
from mambaxfer_cli.engines.vllm.plan import Plan, PlanOptions, build_plan
from mambaxfer_cli.engines.vllm.reads import VLLM, LengthMismatch, vllm_length_mismatches
from mambaxfer_cli.engines.vllm.release import Meeting, draft_groups
from mambaxfer_cli.engines.vllm.proof.check import PairingResult, check_plan
from mambaxfer_cli.engines.vllm.proof.simulate import Simulation
from mambaxfer_cli.planning.startup import parallel_refusal
from mambaxfer_cli.engines.vllm.startup import (
    ReplaySSM, mamba_cache_mode, mla_dtype_refusal, replayssm_case, vllm_error,
)
from mambaxfer_cli.engines.vllm.serve_args import CONV_LAYOUT_VAR, NIXL_CONNECTORS, flag_table
from mambaxfer_cli.engines.vllm.preflight.served import KV_ROLES, KV_ROLE_FOR, ServedEngine, pushes
from mambaxfer_cli.preflight.report import SIDE_NAME, Field, unrecognized
from mambaxfer_cli.engines.vllm.preflight.fields import engine_facts, handshake_fields, hashed_fields, unchecked_fields


def startup_refusals(e: ServedEngine) -> list[Refusal]:
    """What stops the engine before any handshake, as its release's NIXL worker asserts it; then
    HMA off, a buffer device or a KV-cache layout vLLM does not take."""
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
    nixl = line.kv_connector in NIXL_CONNECTORS
    if nixl and not e.hma:
        out.append(Refusal("hma", (
            f"{name}: --disable-hybrid-kv-cache-manager: vLLM's NIXL worker requires the hybrid KV-cache "
            f"manager for Mamba layers (NixlConnectorWorker asserts _is_hma_required, nixl/base_worker.py), "
            f"so the engine does not start")))
    if nixl and e.kv_buffer_device not in ("cuda", "cpu"):
        out.append(Refusal("kv-buffer-device", f"{name}: cuda with {e.kv_buffer_device} kv_buffer is not supported."))
    said = layout_error(e.model, line.kv_cache_layout)
    if said is not None:
        out.append(Refusal("kv-cache-layout", f"{name}: {said}"))
    return out


# Met before the layout checks, in the release's order (the head-sharded check comes after them);
# Qwen4Exp's QSA ring and GLM-5-Next's tail ring (start-up) and CSA-linear TP check (_nixl_handshake,
# before the hash) come first.
HANDSHAKE_FIRST = ("qsa-ring", "kpool-ring", "csa-linear-tp", "tp-sizes", "compat-hash", "region-layers",
                   "push-block-sizes", "block-size", "prefix-caching", "host-buffer")


def handshake_sides(p: ServedEngine, d: ServedEngine) -> tuple[ServedEngine, ServedEngine]:
    """(local, remote) of the handshake: D checks P when it pulls; P checks D when it pushes."""
    return (p, d) if pushes(p, d) else (d, p)


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
    heads = heads_refusal(local.model, local.tp, remote.tp, mine, permute)
    return out + ([heads] if heads is not None else [])


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
                   f"{SIDE_NAME[local.side]} runs the handshake ({'push' if pushes(p, d) else 'pull'} mode)")
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
        return None if self.byte_check is None else simulation_of(self.byte_check)

    @property
    def corrupt(self) -> bool:
        return self.byte_check is not None and (not simulation_of(self.byte_check).ok or bool(self.reinterpreted)
                                                or self.indexer_keys_differ)

    @property
    def indexer_keys_differ(self) -> bool:
        """vLLM accepts P's and D's QSA compressed keys in different dtypes and D reads them as its
        own (plan warning ``vllm-indexer-key-dtype``)."""
        return self.plan is not None and any(w.code == "vllm-indexer-key-dtype" for w in self.plan.warnings)

    @property
    def verdict(self) -> str:
        return "refused" if self.refused else "fails" if self.fails else "corrupt" if self.corrupt else "works"

    outcome = verdict      # as the shared report names it

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


def _no_geometry(p: ServedEngine, d: ServedEngine, mode: str) -> list[Refusal]:
    """The checks that need no geometry (TP sizes, hash, a model without attention) where no plan
    could be made; the geometry checks pass on the equal stand-in blocks."""
    local, remote = (d, p) if mode == PULL else (p, d)
    hashes = {e.side: e.release.hashed(engine_facts(e, None)) for e in (p, d)}
    seen = Meeting(mode, local.tp, remote.tp, remote.model.has_attention, 1, 1, 1, 1, False, 0, hashes[local.side],
                   hashes[remote.side], SIDE_NAME[remote.side], enforce_hash=local.line.enforce_handshake_compat)
    return [found for check in local.release.checks(mode) if (found := check(seen)) is not None]


# Speculative settings Model Runner V2 does not run in vLLM 0.33 (_get_v2_model_runner_unsupported_features):
# the engine falls back to V1 unless VLLM_USE_V2_MODEL_RUNNER says otherwise.
V1_ONLY_METHODS = ("suffix", "custom_class")
NATIVE_PARALLEL_DRAFTING = ("dflash", "dspark")


def v2_runner(e: ServedEngine) -> bool:
    """Whether the engine runs Model Runner V2: VLLM_USE_V2_MODEL_RUNNER as vLLM reads it
    (``bool(int(value))``), else V2 unless its speculative settings need V1."""
    given = dict(e.line.environment()).get("VLLM_USE_V2_MODEL_RUNNER")
    if given is not None and given.strip().lstrip("-").isdigit():
        return bool(int(given))
    spec = e.line.speculative
    method = e.line.speculative_method
    drafting = bool(spec.get("parallel_drafting")) and method not in NATIVE_PARALLEL_DRAFTING
    return not (method in V1_ONLY_METHODS or drafting)


def replayssm_of(e: ServedEngine) -> ReplaySSM:
    """What ``validate_mamba_cached_kernel`` reads of one engine started with --use-replayssm."""
    line = e.line
    return replayssm_case(e.model, backend=line.mamba_backend, buffer_len=line.replayssm_buffer_len,
                          cache_mode=mamba_cache_mode(e.flags.prefix_caching, line.mamba_cache_mode),
                          pipeline=line.pipeline, stochastic_rounding=line.mamba_stochastic_rounding,
                          kv_connector=line.kv_connector is not None, v2_runner=v2_runner(e))


def stochastic_rounding_refusal(e: ServedEngine) -> str | None:
    """``MambaConfig.__post_init__``: the triton kernels round stochastically with ``cvt.rs``, which
    only data-center Blackwell (compute capability 10.x) has."""
    if not e.line.mamba_stochastic_rounding or e.line.mamba_backend != "triton" or e.flags.gpu.capability[0] == 10:
        return None
    return ("Stochastic rounding for Mamba cache with triton backend requires compute capability 10.0 (data center "
            "Blackwell). The `cvt.rs` PTX instruction is not supported on your GPU. Please do not specify "
            "`--enable-mamba-cache-stochastic-rounding`, or set `--mamba-backend flashinfer`.")


def before_connector(e: ServedEngine) -> list[Refusal]:
    """startup: what stops one engine before its connector exists, in vLLM's order (the serve line's
    parser first, then the engine's config checks)."""
    start = f"vLLM {e.release.name} does not start the {e.side} engine"
    unknown = list(e.line.unknown) + [flag for flag, releases in e.line.release_only
                                      if e.release.name not in releases]
    if unknown:
        why = unrecognized(unknown, flag_table(e.release.name))
        return [Refusal("unrecognized-arguments", f"{start}: vllm serve exits with {why}")]
    if e.speculative_refusal:     # SpeculativeConfig, as create_engine_config builds the engine's config
        return [Refusal("speculative-config", f"{start}: {e.speculative_refusal}")]
    rounding = stochastic_rounding_refusal(e)
    if rounding:       # MambaConfig.__post_init__, as create_engine_config builds the engine's config
        return [Refusal("mamba-config", f"{start} on {e.flags.gpu.describe()}: {rounding} (MambaConfig)")]
    refusal = parallel_refusal(e.model, e.tp)
    if refusal:
        return [Refusal("parallel-config", f"{start}: {refusal} (ModelConfig.verify_with_parallel_config: "
                                           f"{vllm_error(e.model, e.tp)})")]
    backend = families.first("startup_refusal", e.model, e.flags.gpu)
    if backend:     # MLAAttention.__init__ -> get_attn_backend, while the model is built
        return [Refusal("attention-backend", f"{start} on {e.flags.gpu.describe()}: {backend}")]
    chosen = families.first("backend_refusal", e.model, e.flags)
    if chosen:
        return [Refusal("attention-backend", f"{start} on --attention-backend {e.flags.attention_backend}: {chosen}")]
    replay = e.release.replayssm(replayssm_of(e)) if e.line.use_replayssm else None
    if replay:
        return [Refusal("replayssm", f"{start}: {replay} (VllmConfig.validate_mamba_cached_kernel)")]
    dtype = mla_dtype_refusal(e.model, e.flags.attention_backend)
    if dtype:       # get_attn_backend_cls as the MLA layers are built, after the config's checks
        return [Refusal("attention-backend", f"{start} with --dtype {e.model.model_dtype}: {dtype}")]
    return []


def assess(p: ServedEngine, d: ServedEngine) -> Assessment:
    """The releases' verdict on the pairing and the byte-level check of what vLLM would read."""
    refusals = before_connector(p) + before_connector(d)     # startup: vLLM's first steps
    refusals += startup_refusals(p) + startup_refusals(d)
    plan, skipped = None, ""
    options = PlanOptions(semantics=VLLM, prefill=p.flags, decode=d.flags, prefill_model=p.model,
                          drafted=any(drafts(e.line.speculative) for e in (p, d)),
                          drafter=drafter_of(d.line.speculative or {}))
    try:
        plan = build_plan(d.model, p.tp, d.tp, options)
    except UserError as exc:
        skipped = str(exc)
    mode = PUSH if pushes(p, d) else PULL
    let_through = skipped_hash(p, d, plan)
    suggestion = None
    if plan is not None:
        def rebuild(size: int) -> tuple[EngineLayout, EngineLayout]:
            at = [engine_layout(e.model, e.tp, replace(e.flags, block_size=size), plan.grouping) for e in (p, d)]
            return at[0], at[1]

        layout = tuple(r for r in plan.verdict.refusals if r.code == "layout")
        local = d if mode == PULL else p
        found = handshake_verdict(*plan.served, rebuild, layout, mode,
                                  (engine_facts(p, plan), engine_facts(d, plan)), local.kv_buffer_device == "cpu",
                                  local.line.enforce_handshake_compat, plan.draft_groups)
        # a family's own checks: its connector's (CSA-linear, PLE), an engine whose ring does not divide its block
        found = families.first("with_refusals", found, d.model, plan.prefill, plan.decode, rebuild, p.model,
                               mode == PUSH) or found
        # a drafter grouped otherwise: 0.34 refuses it before the block sizes, 0.33 after the layouts
        early = HANDSHAKE_FIRST + (("draft-groups",) if draft_groups in local.release.checks(mode) else ())
        first = [r for r in found.refusals if r.code in early]
        refusals += first + layout_refusals(p, d, plan) + [r for r in found.refusals if r.code not in early]
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


def simulation_of(check: PairingResult) -> Simulation:
    assert check.simulation is not None, "preflight's byte check simulates the reads"
    return check.simulation

"""Run vLLM's functions and mambaxfer's rules on the same inputs, function by function (descriptor
IDs on mambaxfer's geometry on both sides, so that they compare the ID layout alone)."""

from __future__ import annotations

import functools
import json
import math
import time
from dataclasses import replace
from typing import Any, Callable

from mambaxfer_cli.engines.vllm.conformance.adapter import OurEngine, Ours
from mambaxfer_cli.engines.vllm.conformance.cases import (
    D_NUM_BLOCKS, DRAFT_CONFIG, MLA_BACKENDS, P_NUM_BLOCKS, SPARSE_MLA_BACKEND, Case, Flags, Geometry,
    HashedEngine, ReplaySSMSetting, Variation, drafted, flag_variants, hash_variations, pairings, replayssm_settings,
)
from mambaxfer_cli.engines.vllm.drafts import drafter_apart, drafter_config, drafter_of
from mambaxfer_cli.engines.vllm.kv_groups import KVGrouping
from mambaxfer_cli.engines.vllm.handshake import attention_sources
from mambaxfer_cli.engines.vllm.kv_layout import ENV_LAYOUTS
from mambaxfer_cli.engines.vllm.serve_args import KV_LAYOUT_VAR
from mambaxfer_cli.engines.vllm.startup import registry_outcome
from mambaxfer_cli.engines.vllm.conformance.report import Function, FunctionResult, Report
from mambaxfer_cli.engines.vllm.probe import CouldNotCall, VllmFails
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.families import LABELS
from mambaxfer_cli.planning.dtypes import dtype_bytes
from mambaxfer_cli.planning.layout import rank_layout, valid_tp_sizes
from mambaxfer_cli.planning.model import ModelSpec
from mambaxfer_cli.planning.startup import architecture_names
from mambaxfer_cli.engines.vllm.reads import vllm_reads
from mambaxfer_cli.planning.reads import Read, Segment, misreads, tp_ratio

KDA_FIXED = LABELS["float32 KDA state"]     # the family whose KDA layers fix their state's dtype

CONV_SPLIT = Function("derive_mamba_conv_split", "each rank's sub-projections, conv rows and state bytes")
REMOTE_CONV = Function("remote_conv_offsets", "the conv bytes each D rank reads in a P page")
REMOTE_SSM = Function("_build_mamba_remote", "every SSM byte range each D rank reads in a P page")
LOCAL_SSM = Function("_build_mamba_local", "where each read lands in the D page (split per P source)")
BYTES = Function("bytes right (exact plan)", "which of vLLM's reads land wrong bytes")
SOURCES = Function("compute_tp_mapping", "the P ranks each D rank reads attention and SSM state from")
DESC_IDS = Function("_compute_desc_ids", "the descriptor IDs each D rank posts for a request")
BLOCK = Function("update_block_size_for_backend", "each engine's block size and page bytes")
KERNEL = Function("select_common_block_size", "each engine's kernel block and blocks per logical block")
GDN_ALIGNMENT = Function("GDN checkpoint alignment", "the SSM layers' prefill checkpoint alignment on the GPU")
HANDSHAKE = Function("handshake verdict", "block_size_ratio, _validate_remote_agent_handshake, "
                                          "_build_local_splits_from_plan (and push's "
                                          "_validate_remote_parallel_config): accepted, or the first refusal")
HASH = Function("compute_nixl_compatibility_hash", "which engine settings the compatibility hash tells apart")
PARALLEL = Function("verify_with_parallel_config",
                    "ModelConfig's check: whether vLLM starts the engine at each TP size, on its own reading of "
                    "the config")
REGISTRY = Function("ModelRegistry", "whether the release serves the config's architectures, or removed them")
STATE = Function("get_mamba_state_*_from_config",
                 "the model class's own state shapes and dtypes at each TP size (its conv and temporal state "
                 "bytes per rank), on the config as vLLM reads it")
LAYOUT = Function("resolve_kv_cache_layout",
                  "the KV-cache layout each engine runs under the NIXL connector, for each VLLM_KV_CACHE_LAYOUT "
                  "(or vLLM's refusal of it)")
REPLAYSSM = Function("validate_mamba_cached_kernel",
                     "whether an engine with --use-replayssm starts beside the connector, for each --mamba-backend, "
                     "--replayssm-buffer-len, prefix caching, dtype, pipeline size, speculative tokens and model "
                     "runner (or vLLM's refusal)")
DRAFT_GROUPS = Function("unify_kv_cache_spec_page_size",
                        "the KV-cache groups of an EAGLE drafter whose pages are not the target's (said by "
                        "draft-layers, not planned)")
QSA_CACHES = Function("get_kv_cache_spec (QSA caches)",
                      "the QSA indexer's raw-key ring and compressed-key pages, from their classes, and the "
                      "KV-cache groups get_kv_cache_groups puts them in")
FUNCTIONS = (CONV_SPLIT, REMOTE_CONV, REMOTE_SSM, LOCAL_SSM, BYTES, SOURCES, DESC_IDS, BLOCK, KERNEL, GDN_ALIGNMENT,
             HANDSHAKE, HASH, PARALLEL, REGISTRY, STATE, LAYOUT, REPLAYSSM, DRAFT_GROUPS, QSA_CACHES)
OPTIONAL = (DRAFT_GROUPS, QSA_CACHES)     # reported only where a model has cases of them

# Progress: ``start(total)`` once with the number of pairings, ``done(model, p_tp, d_tp)`` after each.
Start = Callable[[int], None]
Done = Callable[[str, int, int], None]


def compares(*functions: Function) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """A comparison of ``functions``: it runs while one of them can be called, and ends where vLLM's
    cannot be called (CouldNotCall), said once per function."""
    def compare(method: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(method)
        def run(self: Comparison, *args: Any, **kwargs: Any) -> None:
            if self.live(*functions):
                try:
                    method(self, *args, **kwargs)
                except CouldNotCall as exc:
                    self.cannot(functions, exc)
        return run
    return compare


class Comparison:
    """One run: the installed vLLM against mambaxfer's rules for its release."""

    def __init__(self, vllm, ours: Ours, draft_config: str = DRAFT_CONFIG) -> None:
        self.vllm = vllm
        self.draft_config = draft_config
        self.ours = ours
        self.results = {f.name: FunctionResult(f) for f in FUNCTIONS}
        self.notes: list[str] = []
        self._ids: dict = {}
        self._verdicts: dict = {}
        self._drafted: dict[tuple[int, int], list[bool]] = {}   # per pairing: each variant planned its drafter
        self.speculative = ""      # the model's --speculative-config, for its cases' commands

    # --- bookkeeping ---------------------------------------------------------------------------

    def case(self, model: str, *args, **kwargs) -> Case:
        """A case whose command names the release and GPU mambaxfer answered for."""
        return replace(Case(model, *args, **kwargs), speculative=self.speculative,
                       rules=("--vllm-version", self.ours.release, "--gpu", self.ours.device.spec))

    def live(self, *functions: Function) -> bool:
        return any(self.results[f.name].not_called is None for f in functions)

    def cannot(self, functions: tuple[Function, ...], exc: CouldNotCall) -> None:
        for f in functions:
            result = self.results[f.name]
            if result.not_called is None:
                result.not_called = f"{exc.function}: {exc.reason}"
                result.attribute = exc.attribute

    def skip(self, functions: tuple[Function, ...], reason: str) -> None:
        for f in functions:
            result = self.results[f.name]
            result.skipped += 1
            result.skip_reason = result.skip_reason or reason

    def record(self, function: Function, case: Case, vllm, ours, shown: tuple | None = None) -> None:
        result = self.results[function.name]
        if result.not_called is None:
            result.record(case, vllm, ours, shown)

    # --- one model -------------------------------------------------------------------------------

    def model(self, name: str, model: ModelSpec, max_tp: int, done: Done | None = None) -> None:
        drafting = json.loads(self.draft_config or "{}")      # vLLM's side reads an EAGLE drafter itself
        drafter = drafter_of(drafting)
        apart = None if model.draft_layers else drafter_apart(model, drafting)
        self.speculative = self.draft_config if model.draft_layers or apart else ""
        self.vllm.drafter = ((drafting["method"], drafter_config(drafter) or {})
                             if drafter and self.speculative else None)
        if apart is not None:
            return self.draft_groups(name, model, max_tp, apart)
        self.registry(name, model)
        self.replayssm(name, model)
        self.kv_layouts(name, model)
        for tp in range(1, max_tp + 1):
            self.start(name, model, tp)
        sizes = valid_tp_sizes(model, max_tp)
        if model.kpool_indexer is not None:
            self.notes.append(f"{name}: its MLA layers run {SPARSE_MLA_BACKEND}, vLLM's sparse MLA pick for the "
                              f"modelled GPU (no --attention-backend: the dense MLA backends refuse it); its hash "
                              f"variations leave out --mamba-ssm-cache-dtype and another backend on P")
        elif model.mla:
            self.notes.append(f"{name}: its MLA engines run {', '.join(MLA_BACKENDS)} (FLASH_ATTN_MLA and "
                              f"CUTLASS_MLA do not import without a GPU); its hash variations leave out "
                              f"--mamba-ssm-cache-dtype" + ("" if model.ssm_backend else f" ({KDA_FIXED}'s KDA "
                                                            "layers keep a float32 state whatever it says)"))
        for tp in sizes:
            self.conv_split(name, model, tp)
            self.class_state(name, model, tp)
            if model.ple_qsa is not None and model.ple_qsa.has_qsa:
                self.qsa_caches(name, model, tp)
            for flags in flag_variants(model):
                self.geometry(name, model, tp, flags)
        for p_tp, d_tp in pairings(sizes):
            self.reads(name, model, p_tp, d_tp)
            for flags in flag_variants(model):
                for push in (False, True):
                    self.handshake(name, model, p_tp, d_tp, flags, push)
                self.descriptor_ids(name, model, p_tp, d_tp, flags)
            if done is not None:
                done(name, p_tp, d_tp)
        drafted = sorted(self._drafted.items())
        never = ", ".join(f"{p}/{d}" for (p, d), planned in drafted if not any(planned))
        some = ", ".join(f"{p}/{d}" for (p, d), planned in drafted if any(planned) and not all(planned))
        if never or some:
            said = "; ".join(filter(None, (never and f"at P/D TP {never}",
                                           some and f"for some backends and block sizes at {some}")))
            self.notes.append(f"{name}: descriptor IDs not compared where mambaxfer's plan leaves the drafter out "
                              f"({said}): past its KV heads vLLM slices its pages by the target's heads or refuses "
                              f"P and D that group them otherwise, and P's and D's kernel blocks may differ "
                              f"(plan's draft-layers warning)")
        self._drafted.clear()
        self.compatibility_hash(name, model)

    @compares(DRAFT_GROUPS)
    def draft_groups(self, name: str, model: ModelSpec, max_tp: int, apart: KVGrouping) -> None:
        """The groups alone: mambaxfer plans no layer of such a drafter, so nothing else is compared."""
        flags = flag_variants(model)[0]
        for tp in valid_tp_sizes(model, max_tp):
            theirs = self.vllm.apart_groups(model, tp, self.ours.engine(model, tp, flags, D_NUM_BLOCKS).geometry)
            self.record(DRAFT_GROUPS, self.case(name, tp=tp), theirs, [list(m) for m in apart.members])
        self.notes.append(f"{name}: its EAGLE drafter's pages are not its own, so only their KV-cache groups "
                          f"are compared (mambaxfer plans no layer of it)")

    # --- start-up: the registry and the parallel config -------------------------------------------

    @compares(REGISTRY)
    def registry(self, name: str, model: ModelSpec) -> None:
        archs = architecture_names(model.hf_config)
        theirs = self.vllm.registry_outcome(archs)
        self.record(REGISTRY, self.case(name), theirs, registry_outcome(archs, self.ours.release))

    @compares(REPLAYSSM)
    def replayssm(self, name: str, model: ModelSpec) -> None:
        """--use-replayssm on the model's first architecture, under every setting vLLM's check reads."""
        default = self.ours.replayssm_case(model, ReplaySSMSetting())
        if not default.architecture:
            return self.skip((REPLAYSSM,), "the config names no architecture")
        supported = self.vllm.supports_replayssm(default.architecture)
        if supported is None:
            return self.skip((REPLAYSSM,), f"vLLM's registry loads no class for {default.architecture}")
        for setting in replayssm_settings(supported or default.supported, self.ours.rules.model_runner_v1):
            ours = self.ours.replayssm_case(model, setting)
            theirs = self.vllm.replayssm_refusal(replace(ours, supported=supported))
            mine = self.ours.rules.replayssm(ours)
            shown = tuple("starts" if v is None else f"refuses: {v}" for v in (theirs, mine))
            self.record(REPLAYSSM, self.case(name, variation=setting.variation()), theirs, mine, shown)

    @compares(LAYOUT)
    def kv_layouts(self, name: str, model: ModelSpec) -> None:
        """Each VLLM_KV_CACHE_LAYOUT a line may set (none, and a misspelt one too), on its first backend."""
        backend = flag_variants(model)[0].backend
        for requested in (None, *ENV_LAYOUTS, "LBHCN"):
            theirs = self.vllm.kv_cache_layout(model, backend, requested)
            engine = HashedEngine(backend=backend, kv_cache_layout=requested)
            said = f"{KV_LAYOUT_VAR}={requested}" if requested else f"{KV_LAYOUT_VAR} unset"
            case = self.case(name, variation=Variation(said, engine, engine))
            self.record(LAYOUT, case, theirs, self.ours.kv_cache_layout(model, requested))

    @compares(PARALLEL)
    def start(self, name: str, model: ModelSpec, tp: int) -> None:
        """Every TP size to the largest, those vLLM refuses included: which it starts is the answer."""
        try:
            theirs: str | None = self.vllm.start_refusal(model, tp)
        except VllmFails as exc:     # vLLM cannot read the config at all: nothing to compare
            return self.skip((PARALLEL,), f"vLLM's config reader fails on it: {exc.message}")
        ours = self.ours.start_refusal(model, tp)
        shown = tuple("starts" if v is None else f"refuses: {v}" for v in (theirs, ours))
        self.record(PARALLEL, self.case(name, tp=tp), theirs, ours, shown)

    # --- the model class's state -----------------------------------------------------------------

    @compares(STATE)
    def class_state(self, name: str, model: ModelSpec, tp: int) -> None:
        """The class's shapes and dtypes, with no SSM cache dtype and, for KDA, with
        ``--mamba-ssm-cache-dtype bfloat16`` (which some KDA classes read and some do not)."""
        for ssm_flag in ("auto", "bfloat16") if model.variant == "kda" else ("auto",):
            flags = Flags() if ssm_flag == "auto" else Flags(ssm_dtype=ssm_flag)
            case = self.case(name, tp=tp, flags=flags)
            try:
                shapes, dtypes = self.vllm.class_state(model, tp, ssm_flag)
                theirs: dict | str = {"state bytes (conv, temporal)": [
                    math.prod(shape) * dtype_bytes(dtype) for shape, dtype in zip(shapes, dtypes)],
                    "dtypes (conv, temporal)": list(dtypes)}
            except VllmFails as exc:
                theirs = f"fails: {exc.message}"
            ours: dict | str
            try:
                spec = model if ssm_flag == "auto" else self.ours.with_ssm_cache_dtype(model, ssm_flag)
                # The class sizes the blocks for the SSM dtype it is given (KDA: sizing_ssm_dtype).
                sized = replace(spec, ssm_dtype=spec.sizing_ssm_dtype) if spec.sizing_ssm_dtype else spec
                layout = rank_layout(sized, tp, 0)
                ours = {"state bytes (conv, temporal)": [layout.conv_bytes, layout.ssm_bytes],
                        "dtypes (conv, temporal)": [sized.conv_dtype, sized.ssm_dtype]}
            except UserError as exc:
                ours = f"fails: {exc}"
            if isinstance(theirs, str) or isinstance(ours, str):
                self.record(STATE, case, isinstance(theirs, str), isinstance(ours, str), (str(theirs), str(ours)))
            else:
                self.record(STATE, case, theirs, ours)

    @compares(QSA_CACHES)
    def qsa_caches(self, name: str, model: ModelSpec, tp: int) -> None:
        geometry = self.ours.engine(model, tp, flag_variants(model)[0]).geometry
        theirs = _or_fails(self.vllm.qsa_caches, model, tp, geometry)
        self.record(QSA_CACHES, self.case(name, tp=tp), theirs, self.ours.qsa_caches(model, geometry.block_size))

    # --- conv split --------------------------------------------------------------------------------

    @compares(CONV_SPLIT)
    def conv_split(self, name: str, model: ModelSpec, tp: int) -> None:
        case = self.case(name, tp=tp)
        try:
            info = self.vllm.conv_split(model, tp)
            theirs = {"sub-projection dims": list(info.local_proj_dims), "conv rows": info.conv_rows,
                      "conv dtype bytes": info.conv_dtype_size, "state bytes (conv, temporal)": list(info.ssm_sizes)}
        except VllmFails as exc:
            theirs = {"fails": exc.message}
        layout = rank_layout(model, tp, 0)
        conv = next(r for r in layout.regions if r.kind == "conv")
        ours = {"sub-projection dims": list(layout.sub_projection_dims), "conv rows": layout.conv_rows,
                "conv dtype bytes": conv.unit_bytes // layout.conv_rows,
                "state bytes (conv, temporal)": [layout.conv_bytes, layout.ssm_bytes]}
        self.record(CONV_SPLIT, case, theirs, ours)

    # --- geometry ----------------------------------------------------------------------------------

    @compares(BLOCK, KERNEL, GDN_ALIGNMENT)
    def geometry(self, name: str, model: ModelSpec, tp: int, flags: Flags) -> None:
        case = self.case(name, tp=tp, flags=flags)
        try:
            theirs, alignment = self.vllm.geometry(model, tp, flags, D_NUM_BLOCKS)
        except VllmFails as exc:
            theirs, alignment = f"the engine fails: {exc.message}", None
        ours: Geometry | str
        try:
            ours = self.ours.engine(model, tp, flags).geometry
        except UserError as exc:
            ours = f"the engine fails: {exc}"
        shown = tuple(g if isinstance(g, str) else g.shown() for g in (theirs, ours))
        for function, fields in ((BLOCK, ("block_size", "page_bytes")),
                                 (KERNEL, ("kernel_block_size", "blocks_per_logical"))):
            if isinstance(theirs, str) or isinstance(ours, str):
                self.record(function, case, tuple(isinstance(g, str) for g in (theirs, ours)), (True, True), shown)
            else:    # without attention an engine's page is its state and its block size means nothing
                their_key, our_key = (tuple(getattr(g, f) for f in fields[0 if model.has_attention else 1:])
                                      for g in (theirs, ours))
                self.record(function, case, their_key, our_key, shown)
        if alignment is not None:
            self.record(GDN_ALIGNMENT, case, alignment, self.ours.checkpoint_alignment(model, flags))

    # --- the SSM reads and sources -----------------------------------------------------------------

    @compares(REMOTE_CONV, REMOTE_SSM, LOCAL_SSM, BYTES, SOURCES)
    def reads(self, name: str, model: ModelSpec, p_tp: int, d_tp: int) -> None:
        ratio = tp_ratio(p_tp, d_tp)
        assert ratio is not None, "conformance pairs TP sizes one of which divides the other"
        layouts = self.ours.layouts(model, p_tp), self.ours.layouts(model, d_tp)
        ours_reads = vllm_reads(*layouts)
        try:
            p_ours, d_ours, p_vllm, d_vllm = self.engines(model, p_tp, d_tp, Flags())
        except VllmFails as exc:    # vLLM's own registration of an engine's KV caches refused
            return self.skip((REMOTE_CONV, REMOTE_SSM, LOCAL_SSM, BYTES, SOURCES),
                             f"an engine fails to start: {exc.message} ({name}, P TP {p_tp} / D TP {d_tp})")
        for d_rank in range(d_tp):
            case = self.case(name, p_tp, d_tp, d_rank=d_rank)
            mine = sorted((r for r in ours_reads if r.d_rank == d_rank), key=lambda r: r.p_rank)
            self.sources(case, model, p_ours, d_ours, d_vllm, p_tp, d_rank, mine)
            self.remote_conv(case, d_vllm, d_rank, ratio, mine)
            if not self.live(REMOTE_SSM, LOCAL_SSM, BYTES):
                continue
            try:
                theirs = self.vllm.ssm_reads(p_vllm, d_vllm, d_rank, ratio)
                _, ssm_sources = self.vllm.sources(d_vllm, p_tp, d_rank)
            except CouldNotCall as exc:
                self.cannot((REMOTE_SSM, LOCAL_SSM, BYTES), exc)
                continue
            except VllmFails as exc:
                self.skip((REMOTE_SSM, LOCAL_SSM, BYTES), f"vLLM's own code fails before the reads: {exc.message} "
                          f"({case.describe()}; the handshake verdict reports it)")
                continue
            self.record(REMOTE_SSM, case, [(ro, rs) for _, ro, _, rs in theirs[0]],
                        [(s.remote_offset, s.size) for s in mine[0].segments])
            self.record(LOCAL_SSM, case, [[(lo, ls) for lo, _, ls, _ in rows] for rows in theirs],
                        [[(s.local_offset, s.size) for s in r.segments] for r in mine])
            names = [s.region for s in mine[0].segments]
            as_reads = tuple(Read(d_rank, p_rank, tuple(Segment(n, ro, lo, min(ls, rs))
                                                         for n, (lo, ro, ls, rs) in zip(names, rows)))
                             for p_rank, rows in zip(ssm_sources, theirs))
            wrong, ours_wrong = misreads(as_reads, *layouts), misreads(mine, *layouts)
            self.record(BYTES, case, len(wrong), len(ours_wrong),
                        (_misread_text(wrong), _misread_text(ours_wrong)))

    @compares(SOURCES)
    def sources(self, case: Case, model: ModelSpec, p_ours: OurEngine, d_ours: OurEngine, d_vllm, p_tp: int,
                d_rank: int, mine: list[Read]) -> None:
        theirs = _or_fails(self.vllm.sources, d_vllm, p_tp, d_rank)
        attention = attention_sources(p_ours.layout, d_ours.layout, d_rank) if model.has_attention else []
        ours = [attention, [r.p_rank for r in mine]]
        self.record(SOURCES, case, theirs if isinstance(theirs, str) else [list(v) for v in theirs], ours)

    @compares(REMOTE_CONV)
    def remote_conv(self, case: Case, decode, d_rank: int, ratio: int, mine: list[Read]) -> None:
        theirs = _or_fails(self.vllm.remote_conv_offsets, decode, d_rank, ratio)
        conv = [[s.remote_offset, s.size] for s in mine[0].segments if s.region != "ssm"]
        self.record(REMOTE_CONV, case, theirs, conv)

    def engines(self, model: ModelSpec, p_tp: int, d_tp: int, flags: Flags, vllm_geometry: bool = False):
        """Both sides' engines, vLLM's on mambaxfer's geometry (on its own with ``vllm_geometry``)."""
        p_ours = self.ours.engine(model, p_tp, flags, P_NUM_BLOCKS)
        d_ours = self.ours.engine(model, d_tp, flags, D_NUM_BLOCKS)
        if vllm_geometry:
            p_geometry = self.vllm.geometry(model, p_tp, flags, P_NUM_BLOCKS)[0]
            d_geometry = self.vllm.geometry(model, d_tp, flags, D_NUM_BLOCKS)[0]
        else:
            p_geometry, d_geometry = p_ours.geometry, d_ours.geometry
        backend = flags.backend
        return (p_ours, d_ours, self.vllm.engine(model, p_tp, p_geometry, "prefill", backend),
                self.vllm.engine(model, d_tp, d_geometry, "decode", backend))

    # --- the handshake -----------------------------------------------------------------------------

    @compares(HANDSHAKE)
    def handshake(self, name: str, model: ModelSpec, p_tp: int, d_tp: int, flags: Flags, push: bool) -> None:
        case = self.case(name, p_tp, d_tp, flags=flags, push=push)
        try:
            p_ours, d_ours, prefill, decode = self.engines(model, p_tp, d_tp, flags, vllm_geometry=True)
        except VllmFails as exc:      # after mambaxfer's engines were built (cached)
            theirs = shown_theirs = f"an engine fails to start: {exc.message}"
            p_ours, d_ours = self.ours.engine(model, p_tp, flags, P_NUM_BLOCKS), self.ours.engine(model, d_tp, flags)
        except UserError as exc:
            return self.record(HANDSHAKE, case, "?", f"mambaxfer cannot build the engines: {exc}")
        else:
            key = (model.name, p_tp, d_tp, prefill.geometry, decode.geometry, push)
            if key not in self._verdicts:
                self._verdicts[key] = self.vllm.handshake(prefill, decode, push)
            theirs = self._verdicts[key]
            shown_theirs = _verdict_text(theirs, prefill.geometry, decode.geometry)
        ours = self.ours.verdict(p_ours, d_ours, push, model)
        self.record(HANDSHAKE, case, theirs, ours,
                    (shown_theirs, _verdict_text(ours, p_ours.geometry, d_ours.geometry)))

    # --- descriptor IDs ----------------------------------------------------------------------------

    @compares(DESC_IDS)
    def descriptor_ids(self, name: str, model: ModelSpec, p_tp: int, d_tp: int, flags: Flags) -> None:
        built = self.vllm.mtp_layers(model)
        if built != model.draft_layers:     # other MTP layers: other groups and IDs, which vLLM cannot pair
            return self.record(DESC_IDS, self.case(name, p_tp, d_tp, flags=flags), f"{built} MTP layers",
                               f"{model.draft_layers} MTP layers")
        p_ours, d_ours, prefill, decode = self.engines(model, p_tp, d_tp, flags)
        key = (model.name, p_tp, d_tp, prefill.geometry, decode.geometry)
        if key not in self._ids:
            self._ids[key] = self._compute_ids(model, p_tp, d_tp, flags, p_ours, d_ours, prefill, decode)
        request, per_rank = self._ids[key]
        self._drafted.setdefault((p_tp, d_tp), []).append(per_rank is not None)
        if per_rank is None:
            return
        for d_rank, (theirs, ours, shown) in enumerate(per_rank):
            case = self.case(name, p_tp, d_tp, flags=flags, d_rank=d_rank, request=request)
            if theirs is None:
                self.skip((DESC_IDS,), f"vLLM's own code refuses to pair the blocks: {shown} ({case.describe()})")
                continue
            self.record(DESC_IDS, case, theirs, ours, shown)

    def _compute_ids(self, model, p_tp, d_tp, flags, p_ours, d_ours, prefill, decode):
        """Both sides' IDs for one request on mambaxfer's geometry, whatever the handshake says of
        it (the ID layout is compared on its own), except where vLLM cannot pair the blocks."""
        request = self.ours.request(model, p_ours, d_ours)
        try:
            mine = self.ours.descriptor_ids(model, p_tp, d_tp, flags, request)
        except UserError as exc:
            mine = {(d, -1): (f"mambaxfer cannot plan it: {exc}", []) for d in range(d_tp)}
        if mine is None:
            return request, None
        per_rank = []
        for d_rank in range(d_tp):
            ours = {p: ids for (d, p), ids in mine.items() if d == d_rank}
            try:
                theirs = self.vllm.descriptor_ids(prefill, decode, d_rank, request)
            except VllmFails as exc:
                per_rank.append((None, ours, exc.message))
                continue
            per_rank.append((theirs, ours, _ids_shown(theirs, ours)))
        return request, per_rank

    # --- the compatibility hash --------------------------------------------------------------------

    @compares(HASH)
    def compatibility_hash(self, name: str, model: ModelSpec) -> None:
        for variation in hash_variations(model):
            case = self.case(name, variation=variation)
            theirs = _or_fails(lambda v: (self.vllm.compatibility_hash(model, v.prefill)
                                          != self.vllm.compatibility_hash(model, v.decode)), variation)
            ours = self.ours.hash_refuses(name, variation)
            self.record(HASH, case, theirs, ours, tuple(v if isinstance(v, str) else "the hashes differ (refused)" if v
                                                        else "the hashes are equal (accepted)" for v in (theirs, ours)))


def _or_fails(answer: Callable, *args: Any) -> Any:
    """vLLM's ``answer(*args)``, or "fails: " and its message where its own code fails."""
    try:
        return answer(*args)
    except VllmFails as exc:
        return f"fails: {exc.message}"


def _verdict_text(verdict: str | None, prefill, decode) -> str:
    where = f" (P {prefill.shown()}; D {decode.shown()})"
    return ("accepts" if verdict is None else f"refuses: {verdict}") + where


def _misread_text(misreads: list) -> str:
    if not misreads:
        return "every byte right"
    more = f" and {len(misreads) - 1} more" if len(misreads) > 1 else ""
    return f"{len(misreads)} wrong pieces: {misreads[0]}{more}"


def _ids_shown(theirs: dict, ours: dict) -> tuple:
    """Where two ID maps first part: the P rank, the side, the index and a window of both lists."""
    if sorted(theirs) != sorted(ours):
        return ({"P ranks read": sorted(theirs)}, {"P ranks read": sorted(ours)})
    for p_rank in sorted(theirs):
        for side, index in (("local IDs", 0), ("remote IDs", 1)):
            a, b = list(theirs[p_rank][index]), list(ours[p_rank][index])
            if a != b:
                at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
                window = slice(max(0, at - 2), at + 6)
                head = {"P rank": p_rank, "list": side, "first differing index": at}
                return ({**head, "length": len(a), "ids": a[window]}, {**head, "length": len(b), "ids": b[window]})
    return (theirs, ours)


def run(models: list[tuple[str, ModelSpec]], max_tp: int, vllm, ours: Ours, start: Start | None = None,
        done: Done | None = None, draft_config: str = DRAFT_CONFIG) -> Report:
    """Compare every function on every model (its --model name and spec), pairing and flag variant;
    ``draft_config``: the --speculative-config of the models with draft layers."""
    started = time.monotonic()
    comparison = Comparison(vllm, ours, draft_config)
    if start is not None:
        start(sum(len(pairings(valid_tp_sizes(model, max_tp))) for _, model in models))
    for name, model in models:
        comparison.model(name, model, max_tp, done)
    label = drafted(draft_config)       # a drafter apart keeps no draft layers but is named so too
    names = [name + (label if model.draft_layers or model.name.endswith(label) else "") for name, model in models]
    results = [comparison.results[f.name] for f in FUNCTIONS]
    report = Report(vllm.version, ours.release, ours.gpu, names, max_tp,
                    [r for r in results if r.function not in OPTIONAL or r.cases or r.not_called],
                    time.monotonic() - started)
    report.notes.extend(comparison.notes)
    return report

"""mambaxfer's side of the comparison: its answers for one vLLM release on the modelled GPU."""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import replace, dataclass

from mambaxfer_cli.engines.vllm.conformance.cases import (
    D_NUM_BLOCKS, DRAFT_CONFIG, MLA_BACKENDS, P_NUM_BLOCKS, SPARSE_MLA_BACKEND, Flags, Geometry,
    ReplaySSMSetting, Request, Variation, drafted, qsa_shown,
)
from mambaxfer_cli.engines.vllm.drafts import (
    block_scales, drafter_apart, past_heads, planned_at, speculative_config, with_drafts,
)
from mambaxfer_cli.engines.vllm.engine import EngineLayout, engine_layout, gdn_backend
from mambaxfer_cli.engines.vllm.geometry import EngineFlags
from mambaxfer_cli.engines.vllm.gpu import Gpu, gdn_checkpoint_alignment, gpu
from mambaxfer_cli.engines.vllm.handshake import refusals
from mambaxfer_cli.engines.vllm.kv_layout import heads_refusal, layout_error, resolved_layout
from mambaxfer_cli.engines.vllm.release import PULL, PUSH
from mambaxfer_cli.engines.vllm.releases import RELEASES, minor, release
from mambaxfer_cli.engines.vllm import startup
from mambaxfer_cli.planning.startup import parallel_refusal
from mambaxfer_cli.engines.vllm.indexer_caches import caches
from mambaxfer_cli.engines.vllm.kv_groups import KVGrouping, model_grouping
from mambaxfer_cli.planning.layout import RankLayout, rank_layout
from mambaxfer_cli.readers.model_config import spec_from_config
from mambaxfer_cli.errors import Refused, UserError
from mambaxfer_cli.planning.model import ATTENTION, ModelSpec
from mambaxfer_cli.engines.vllm.plan import PlanOptions, build_plan

# The releases mambaxfer has rules for, oldest first.
KNOWN_RELEASES = tuple(r.name for r in RELEASES)

# The GPU vLLM's platform questions are answered for (the probe's H100_PLATFORM is the same one).
MODELLED_GPU = gpu("H100")


def release_for(installed: str) -> str:
    """mambaxfer's rules for an installed vLLM version: its own release's, else the newest known before it
    (a nightly too: finding where they part is the point), and the oldest for an older vLLM."""
    found = minor(installed)
    known = [(version, name) for name in KNOWN_RELEASES if (version := minor(name)) is not None]
    if found is None:
        return KNOWN_RELEASES[-1]
    older = [name for version, name in known if version <= found]
    return older[-1] if older else KNOWN_RELEASES[0]


@dataclass(frozen=True)
class OurEngine:
    """One engine as mambaxfer builds it, with its geometry in the shared form."""

    layout: EngineLayout
    geometry: Geometry


class Ours:
    """mambaxfer's answers under the rules of ``release``, computed once per input."""

    def __init__(self, release_name: str) -> None:
        self.release = release_name
        self.rules = release(release_name)
        self.device: Gpu = MODELLED_GPU
        self.gpu = MODELLED_GPU.describe()
        self._engines: dict = {}
        self._grouping: dict = {}
        self._layouts: dict = {}

    # --- the model ---------------------------------------------------------------------------

    def load(self, name: str) -> ModelSpec:
        """The model as the installed release reads it (an architecture its registry lacks is refused)."""
        from mambaxfer_cli.readers.model_source import load_model

        return load_model(name, startup=startup.startup((self.release,)))

    def with_drafted(self, name: str, spec: ModelSpec, speculative: str | None = None) -> list[tuple[str, ModelSpec]]:
        """The model and, named apart, with the MTP layers mambaxfer models (``DRAFT_CONFIG``); with
        ``speculative``, the model with its draft layers alone (refused where it has none)."""
        if speculative is not None:
            settings = speculative_config(speculative) or {}
            found = with_drafts(spec, settings, self.rules)
            # A drafter of other pages: its groups alone are compared (Comparison.draft_groups).
            if not found.draft_layers and drafter_apart(spec, settings) is None:
                raise Refused(f"--speculative-config: mambaxfer models no draft layers of it on {spec.name} "
                              f"(docs/reference.md §4), so it has no drafted case to compare")
            return [(name, replace(found, name=spec.name + drafted(speculative)))]
        try:
            found = with_drafts(spec, json.loads(DRAFT_CONFIG), self.rules)
        except Refused:         # vLLM does not start MTP on it (GLM-5-Next's config, an n_predict of 0)
            return [(name, spec)]
        return [(name, spec)] + ([(name, replace(found, name=spec.name + drafted(DRAFT_CONFIG)))]
                                 if found.draft_layers else [])

    def start_refusal(self, model: ModelSpec, tp: int) -> str | None:
        """vLLM's words where its parallel-config check refuses TP ``tp``, else None."""
        return startup.vllm_error(model, tp) if parallel_refusal(model, tp) else None

    @staticmethod
    def replayssm_case(model: ModelSpec, setting: ReplaySSMSetting) -> startup.ReplaySSM:
        """What mambaxfer reads of an engine started with ``setting`` (as preflight reads its line)."""
        return startup.replayssm_case(
            replace(model, num_spec=setting.num_spec), backend=setting.backend, buffer_len=setting.buffer_len,
            cache_mode=startup.mamba_cache_mode(setting.prefix_caching, None),
            model_dtype=setting.dtype or model.model_dtype, pipeline=setting.pipeline,
            stochastic_rounding=setting.stochastic_rounding, v2_runner=not setting.v1_runner)

    def grouping(self, model: ModelSpec) -> KVGrouping:
        key = (model.name, model.draft_layers, model.draft_attention)
        if key not in self._grouping:
            self._grouping[key] = model_grouping(model)
        return self._grouping[key]

    @staticmethod
    def qsa_caches(model: ModelSpec, block_size: int) -> dict:
        """Qwen4Exp's QSA caches by mambaxfer's rules: one ring and one compressed-key page a layer, the keys
        in the attention's groups, the rings and PLE state in their own (``model_grouping``)."""
        found = caches(model)
        assert found is not None
        grouping = model_grouping(model)
        groups = [{kind: list(m), "compressed keys": list(m)} if kind == ATTENTION else {kind: list(m)}
                  for kind, m in zip(grouping.groups, grouping.members)]
        return qsa_shown([(found.ring_tokens, found.ring_page_bytes)],
                         [(found.tokens_per_key, found.key_page_bytes(block_size))], groups)

    # --- one engine --------------------------------------------------------------------------

    @staticmethod
    def with_ssm_cache_dtype(model: ModelSpec, dtype: str) -> ModelSpec:
        """The model read again with ``--mamba-ssm-cache-dtype dtype``, its drafts kept."""
        again = spec_from_config(model.hf_config, name=model.name, source=model.source, ssm_dtype=dtype,
                                 given_by={"ssm_dtype": "--mamba-ssm-cache-dtype"}, startup=startup.startup())
        return replace(again, layers=again.layers + model.layers[len(model.layers) - model.draft_layers:],
                       draft_layers=model.draft_layers, num_spec=model.num_spec)

    def engine_flags(self, flags: Flags, num_blocks: int) -> EngineFlags:
        """One engine of this release on the modelled GPU (no --block-size: the release's default)."""
        # GLM-5-Next's sparse backend is the GPU's pick, never a flag (mambaxfer refuses one).
        backend = None if flags.backend == SPARSE_MLA_BACKEND else flags.backend
        return EngineFlags(attention_backend=backend, block_size=flags.block_size,
                           prefix_caching=flags.prefix_caching, num_blocks=num_blocks, release=self.rules,
                           gpu=self.device)

    def engine(self, model: ModelSpec, tp: int, flags: Flags, num_blocks: int = D_NUM_BLOCKS) -> OurEngine:
        key = (model.name, tp, flags, num_blocks)
        if key not in self._engines:
            engine_flags = self.engine_flags(flags, num_blocks)
            if model.mla and flags.backend not in MLA_BACKENDS:   # vLLM's MLA backend for the GPU
                engine_flags = replace(engine_flags, attention_backend=None)
            planned = planned_at(model, tp)    # a drafter's layers as this TP size's ranks group them
            layout = engine_layout(planned, tp, engine_flags, self.grouping(planned))
            g = layout.geometry
            self._engines[key] = OurEngine(layout, Geometry(
                g.block_size, g.kernel_block_size, g.blocks_per_logical, g.page_bytes, g.num_blocks,
                g.prefix_caching, layout.has_attention))
        return self._engines[key]

    def checkpoint_alignment(self, model: ModelSpec, flags: Flags) -> int:
        """The token alignment mambaxfer gives the block for the SSM layers' prefill checkpoints
        (with prefix caching: the GDN prefill kernel's on the GPU; none for Mamba1/Mamba2)."""
        kernel = gdn_backend(model, self.engine_flags(flags, D_NUM_BLOCKS))
        return gdn_checkpoint_alignment(kernel) if kernel and flags.prefix_caching else 1

    # --- a pairing ---------------------------------------------------------------------------

    def layouts(self, model: ModelSpec, tp: int) -> tuple[RankLayout, ...]:
        key = (model.name, tp)
        if key not in self._layouts:
            self._layouts[key] = tuple(rank_layout(model, tp, rank) for rank in range(tp))
        return self._layouts[key]

    @staticmethod
    def verdict(prefill: OurEngine, decode: OurEngine, push: bool = False,
                model: ModelSpec | None = None) -> str | None:
        """vLLM's first refusal of the pairing as mambaxfer predicts it (None: accepted); in push
        mode P handshakes with D. ``model``: its head split's layout check and its drafter's groups."""
        differ = model is not None and past_heads(model, prefill.layout.tp, decode.layout.tp)[0]
        found = [r for r in refusals(prefill.layout, decode.layout, PUSH if push else PULL, draft_groups=differ)
                 if r.code != "compat-hash"]
        if model is not None:
            local, remote = (prefill, decode) if push else (decode, prefill)
            heads = heads_refusal(model, local.layout.tp, remote.layout.tp, resolved_layout(model, None))
            found += [heads] if heads is not None else []
        return found[0].vllm_says if found else None

    @staticmethod
    def kv_cache_layout(model: ModelSpec, requested: str | None) -> str:
        """The layout under ``VLLM_KV_CACHE_LAYOUT=requested`` (or "refused: " and vLLM's words)."""
        said = layout_error(model, requested)
        return f"refused: {said}" if said is not None else resolved_layout(model, requested)

    def request(self, model: ModelSpec, prefill: OurEngine, decode: OurEngine) -> Request:
        """One D logical block's tokens in each KV-cache group (one block, or a drafter's smaller
        blocks that hold them) and the P blocks that hold the same tokens, at distinct, spread block
        IDs on each side."""
        planned = planned_at(model, prefill.layout.tp, decode.layout.tp)
        grouping = self.grouping(planned)
        # a drafter's group of other pages: the target's tokens in blocks 1/scale the target's
        scales = block_scales(planned, grouping, decode.layout.tp)
        b_p, b_d = prefill.geometry.block_size, decode.geometry.block_size
        p_counts = [math.ceil(b_d * s / b_p) if kind == ATTENTION else 1 for kind, s in zip(grouping.groups, scales)]
        return Request(_spread(p_counts, prefill.geometry.logical_blocks),
                       _spread([math.ceil(s) for s in scales], decode.geometry.logical_blocks), b_d)

    def descriptor_ids(self, model: ModelSpec, p_tp: int, d_tp: int, flags: Flags,
                       request: Request) -> dict[tuple[int, int], tuple[list[int], list[int]]] | None:
        """(local IDs, remote IDs) of each (D rank, P rank) read of ``request``, as mambaxfer plans them;
        None where its plan leaves a drafter out (past the KV heads: plan's draft-layers warning)."""
        if planned_at(model, p_tp, d_tp).draft_layers != model.draft_layers:
            return None
        _, prefill_blocks, _, decode_blocks = request.cli()
        options = PlanOptions(
            semantics="vllm", prefill=self.engine_flags(flags, P_NUM_BLOCKS),
            decode=self.engine_flags(flags, D_NUM_BLOCKS), prefill_blocks=prefill_blocks,
            decode_blocks=decode_blocks)
        try:
            plan = build_plan(model, p_tp, d_tp, options)
        except UserError:       # the request's groups are the drafter's, which the plan may leave out
            if build_plan(model, p_tp, d_tp, replace(options, prefill_blocks=None, decode_blocks=None)
                          ).model.draft_layers == model.draft_layers:
                raise
            return None
        if plan.model.draft_layers != model.draft_layers:
            return None
        return {(r.d_rank, r.p_rank): (r.local_ids.tolist(), r.remote_ids.tolist()) for r in plan.descriptors.reads}

    # --- the compatibility hash ----------------------------------------------------------------

    def hash_refuses(self, model_name: str, variation: Variation) -> bool:
        """Whether ``preflight``'s hashed fields tell the two engines of ``variation`` apart."""
        from mambaxfer_cli.engines.vllm.reads import VLLM
        from mambaxfer_cli.engines.vllm.preflight.fields import hashed_fields
        from mambaxfer_cli.engines.vllm.preflight.served import build_engine
        from mambaxfer_cli.preflight.report import DECODE, PREFILL
        from mambaxfer_cli.engines.vllm.serve_args import parse_serve
        from mambaxfer_cli.readers.model_source import load_model

        engines = []
        for side, words in zip((PREFILL, DECODE), variation.serve_words()):
            line = parse_serve(shlex.join(["vllm", "serve", model_name, *words]), f"--{side}")
            engines.append(build_engine(side, line, load_model, EngineFlags(release=self.rules, gpu=self.device)))
        p, d = engines
        plan = build_plan(d.model, p.tp, d.tp, PlanOptions(semantics=VLLM, prefill=p.flags, decode=d.flags,
                                                          prefill_model=p.model))
        return not all(f.agree for f in hashed_fields(p, d, plan))


def _spread(counts: list[int], limit: int) -> tuple[tuple[int, ...], ...]:
    """Distinct block IDs, ``counts[g]`` for group ``g``, spaced apart and wrapped into ``limit``
    (side by side where few logical blocks leave no room to space them)."""
    for step in (2, 1):
        out, next_id = [], 3
        for count in counts:
            out.append(tuple((next_id + step * i) % limit for i in range(count)))
            next_id += step * count + 1
        flat = [b for g in out for b in g]
        if len(set(flat)) == len(flat):
            return tuple(out)
    raise AssertionError("a request holds each block once")

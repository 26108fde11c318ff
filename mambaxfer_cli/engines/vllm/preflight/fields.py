"""What preflight compares between the two engines: the fields vLLM's compatibility hash takes, the
ones its handshake checks, and the ones it checks nowhere."""

from __future__ import annotations

from mambaxfer_cli.errors import UserError
from mambaxfer_cli.planning.layout import rank_layout
from mambaxfer_cli.engines.vllm.plan import Plan
from mambaxfer_cli.engines.vllm.release import EngineFacts, Speculative
from mambaxfer_cli.engines.vllm.preflight.served import ServedEngine, pushes
from mambaxfer_cli.preflight.report import PREFILL, Field


def speculative(e: ServedEngine) -> Speculative | None:
    """The line's ``--speculative-config`` as the hash reads it."""
    if not e.line.speculative:
        return None
    spec = dict(e.line.speculative)
    model = spec.get("model")
    kv = spec.get("kv_cache_dtype")
    return Speculative(e.line.speculative_method, None if model is None else str(model),
                       bool(spec.get("parallel_drafting", False)), None if kv is None else str(kv))


def engine_facts(e: ServedEngine, plan: Plan | None) -> EngineFacts:
    """What ``compute_nixl_compatibility_hash`` reads of one engine."""
    layout = None if plan is None else (plan.prefill if e.side == PREFILL else plan.decode)
    backend = layout.hashed_backend if layout is not None else e.attention_backend
    return EngineFacts(e.line.model, e.model.model_dtype, e.model.num_kv_heads, e.model.head_size,
                       e.model.hashed_layers, backend, e.flags.kv_cache_dtype, speculative=speculative(e),
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
        push = pushes(p, d)
        local, remote = (pg, dg) if push else (dg, pg)
        if push and PUSH_IDENTICAL in [c.__name__ for c in p.release.push_checks]:
            rows.append(Field("kernel block and blocks per logical (identical for push)",
                              f"{pg.kernel_block_size} × {pg.blocks_per_logical}",
                              f"{dg.kernel_block_size} × {dg.blocks_per_logical}", True))
        else:
            rows.append(Field(f"kernel block ({'P' if push else 'D'}'s a multiple of {'D' if push else 'P'}'s)",
                              pg.kernel_block_size, dg.kernel_block_size, True,
                              local.kernel_block_size % remote.kernel_block_size == 0))
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
    if p.model.ple_qsa is not None and p.model.ple_qsa.has_qsa and d.model.ple_qsa is not None:
        rows.append(Field("QSA compressed keys (indexer_kv_dtype)", p.model.ple_qsa.indexer_kv_dtype,
                          d.model.ple_qsa.indexer_kv_dtype, False))
    try:   # what D's offsets assume of P's state, rank for rank: both models laid out at D's TP
        sizes = [rank_layout(e.model, d.tp, 0) for e in (p, d)]
        p_bytes, d_bytes = (f"{r.conv_bytes} + {r.ssm_bytes}" for r in sizes)
        rows.append(Field("SSM state bytes per rank (at D's TP)", p_bytes, d_bytes, False))
    except UserError:
        pass
    return rows

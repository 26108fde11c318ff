"""The smallest set of flag changes that makes a failing pairing work, and the lines with them."""

from __future__ import annotations

import json

from mambaxfer_cli.engines.vllm.kv_layout import CONNECTOR_LAYOUT, contiguous_layout
from mambaxfer_cli.engines.vllm.release import RECOVERSSM_BACKEND
from mambaxfer_cli.engines.vllm.startup import mla_dtype_refusal
from mambaxfer_cli.engines.vllm.serve_args import (
    CONV_LAYOUT_VAR, FLAG, KV_LAYOUT_VAR, NIXL_CONNECTORS, ServeLine, flag_table, reparse, resolve,
)
from mambaxfer_cli.planning.layout import MAX_LISTED_TP, valid_tp_sizes
from mambaxfer_cli.planning.startup import parallel_refusal
from mambaxfer_cli.readers.shell import UNKNOWN
from mambaxfer_cli.engines.vllm.preflight.served import KV_ROLES, KV_ROLE_FOR, ModelLoader, ServedEngine, build_engine
from mambaxfer_cli.preflight.report import (
    DECODE, PREFILL, Change, Fix, applied, merged, nearest_first, respelling, taken_value, tp_moves, tried,
)
from mambaxfer_cli.engines.vllm.preflight.fields import speculative
from mambaxfer_cli.engines.vllm.preflight.refusals import Assessment, assess, replayssm_of, stochastic_rounding_refusal


FLAG_FIELD = {flag: key for key, flag in FLAG.items()} | {"--no-enable-prefix-caching": "prefix_caching"}


def _align(p: ServedEngine, d: ServedEngine) -> list[Change]:
    """Changes that make D agree with P (and both engines start), flag by flag."""
    out: list[Change] = []
    for e in (p, d):
        line, contiguous = e.line, contiguous_layout(e.model)
        connector = line.kv_connector if line.kv_connector in NIXL_CONNECTORS else (
            p.line.kv_connector if p.line.kv_connector in NIXL_CONNECTORS else "NixlConnector")
        config = {**line.kv_transfer, "kv_connector": connector, "kv_role": KV_ROLE_FOR[e.side]}
        replay = e.release.replayssm(replayssm_of(e)) if line.use_replayssm else None
        # QSA's indexer allows BLNHC (its default) and BLHNC; different TP sizes need the
        # block-contiguous one, the same on P and D.
        own = contiguous != CONNECTOR_LAYOUT
        changes = [
            (line.kv_connector is None or line.kv_role not in KV_ROLES[e.side], "--kv-transfer-config", None,
             _json(config), "the engine's NIXL connector and role"),
            (e.conv_layout != "DS", f"{CONV_LAYOUT_VAR}=", line.conv_layout, "DS", "vLLM's NIXL worker requires it"),
            # RecoverSSM, which a connector moves, on its one backend
            (replay == RECOVERSSM_BACKEND, "--mamba-backend", line.mamba_backend, "triton",
             "RecoverSSM runs on triton"),
            (replay and replay != RECOVERSSM_BACKEND, "--use-replayssm", "", None,
             f"vLLM does not start with it here: {replay}"),
            (stochastic_rounding_refusal(e), "--enable-mamba-cache-stochastic-rounding", "", None,
             f"the triton kernels round stochastically only on compute capability 10.x, not "
             f"{e.flags.gpu.name}'s {e.flags.gpu.sm}"),
            (line.disable_hybrid_kv_cache_manager, "--disable-hybrid-kv-cache-manager", "", None,
             "vLLM's NIXL worker requires the hybrid KV-cache manager for Mamba layers"),
            (own and e.transfer_layout != contiguous and (line.kv_cache_layout is not None or p.tp != d.tp),
             f"{KV_LAYOUT_VAR}=", line.kv_cache_layout, contiguous,
             "the block-contiguous layout this model's backends allow, the same on P and D"),
            (not own and line.kv_cache_layout is not None and e.transfer_layout != CONNECTOR_LAYOUT,
             f"{KV_LAYOUT_VAR}=", line.kv_cache_layout, CONNECTOR_LAYOUT,
             "the NIXL connector's block-contiguous layout, the same on P and D")]
        out += [Change(e.side, flag, old, new, why) for wanted, flag, old, new, why in changes if wanted]
    pairs = [("dtype", p.model.model_dtype, d.model.model_dtype, p.line.dtype, "the hash compares it"),
             ("kv_cache_dtype", p.flags.kv_cache_dtype, d.flags.kv_cache_dtype, p.line.kv_cache_dtype,
              "the hash compares it"),
             ("mamba_cache_dtype", p.model.conv_dtype, d.model.conv_dtype, p.model.conv_dtype,
              "vLLM does not compare it: D would read P's conv state as its own"),
             ("mamba_ssm_cache_dtype", p.model.ssm_dtype, d.model.ssm_dtype, p.model.ssm_dtype,
              "vLLM does not compare it: D would read P's SSM state as its own")]
    factors = _spec_factors(p) != _spec_factors(d)
    changes = [(pv != dv, FLAG[key], getattr(d.line, key), value, f"as P's; {why}")
               for key, pv, dv, value, why in pairs]
    changes += [
        (p.flags.attention_backend != d.flags.attention_backend, "--attention-backend", d.line.attention_backend,
         p.flags.attention_backend, "as P's"),
        (p.model.num_spec != d.model.num_spec or factors, "--speculative-config", _json(d.line.speculative),
         _json(p.line.speculative),
         "as P's: the hash compares the speculative method and draft, and conv rows follow the tokens" if factors else
         "as P's: conv rows follow num_speculative_tokens, which vLLM's hash does not compare"),
        (dict(p.line.hf_overrides) != dict(d.line.hf_overrides), "--hf-overrides", _json(d.line.hf_overrides),
         _json(p.line.hf_overrides), "as P's: the model's dimensions follow it"),
        (p.line.transfer_mode != d.line.transfer_mode and p.line.kv_connector and d.line.kv_connector,
         "--kv-transfer-config", None, _json({**d.line.kv_transfer, "kv_connector": p.line.kv_connector}),
         "the same transfer mode as P")]
    out += [Change(DECODE, flag, old, new, why) for wanted, flag, old, new, why in changes if wanted]
    return out


def _json(value) -> str | None:
    """A flag's JSON value as a command line carries it (None for an empty one)."""
    return json.dumps(dict(value), separators=(",", ":")) if value else None


def _spec_factors(e: ServedEngine):
    return e.release.speculative_factors(speculative(e), e.line.model, e.flags.kv_cache_dtype)


def _both(flag: str, old: tuple[str | None, str | None], value: str, why: str) -> list[Change]:
    return [Change(side, flag, o, value, why) for side, o in zip((PREFILL, DECODE), old)]


def _untaken(e: ServedEngine, respell: bool = True) -> list[Change]:
    """Each flag the engine's ``vllm serve`` does not take: spelled as the flag it names where one
    fits (``meant``) and ``respell``, else dropped with its value."""
    table, release = flag_table(e.release.name), e.release.name
    out = []
    for flag in e.line.unknown + tuple(f for f, releases in e.line.release_only if release not in releases):
        occurrences = e.line.occurrences.get(UNKNOWN + flag, ())
        if not occurrences:          # a JSON key only some releases read
            continue
        value = taken_value(e.line.words, occurrences[0])
        rename = respelling(e.side, flag, value, table, "vllm serve") if respell and flag in e.line.unknown else None
        why = ("no vLLM release takes it" if flag in e.line.unknown else
               f"vLLM {release} does not take it ({', '.join(dict(e.line.release_only)[flag])} only)")
        out.append(rename or Change(e.side, flag, value or "", None, why))
    return out


def _tp_moves(a: Assessment) -> list[list[Change]]:
    """Each side whose TP size vLLM does not start (or whose state does not shard) moved to a
    size that does, nearest first (``tp_moves``)."""
    options: list[list[Change]] = []
    for e in (a.prefill, a.decode):
        sizes = valid_tp_sizes(e.model, max(MAX_LISTED_TP, 2 * e.tp))
        what = parallel_refusal(e.model, e.tp) or f"TP {e.tp} does not shard {e.model.name}'s state"
        options.append([] if e.tp in sizes else tp_moves(e.side, FLAG["tp"], e.tp, sizes, what))
    return nearest_first(options)


def find_fix(first: Assessment, load: ModelLoader) -> Fix[ServeLine, Assessment] | None:
    """The smallest set of changes that works (untaken flags respelled or dropped, TP sizes moved, D
    aligned to P, the block geometry, last the same TP), each verified by the verdict."""
    def build(side: str, line: ServeLine) -> ServedEngine:
        return build_engine(side, line, load, (first.prefill if side == PREFILL else first.decode).base)

    # P's MLA layers get a backend in bfloat16 (mla_dtype_refusal); D is then aligned to that P.
    mla = [Change(PREFILL, "--dtype", first.prefill.line.dtype, "bfloat16", "every CUDA MLA backend runs "
                  "only float16 and bfloat16")] if mla_dtype_refusal(first.prefill.model) else []
    def start(respell: bool) -> list[Change]:
        return mla + _untaken(first.prefill, respell=respell) + _untaken(first.decode, respell=respell)

    return tried((first.prefill.line, first.decode.line), lambda line, c: applied(line, c, reparse, FLAG_FIELD),
                 build, assess, start, _tp_moves, _with_flags)


def _with_flags(prior: list[Change], now: Assessment, run) -> Fix[ServeLine, Assessment] | None:
    """``prior`` and the fewest flag changes (D aligned to P, then the block geometry) that work;
    a different TP (the deployment's shape) only as a last resort."""
    base = prior + _align(now.prefill, now.decode)
    pl, dl, after = run(base)
    candidates: list[list[Change]] = [base]
    p_line, d_line = now.prefill.line, now.decode.line
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
    same_tp = [Change(PREFILL, "--tensor-parallel-size", str(p_line.tp), str(now.decode.tp),
                      "vLLM's reads are right only when P and D shard alike")]
    reshaped = [c + same_tp for c in candidates] if now.prefill.tp != now.decode.tp else []
    seen = set()
    for changes in sorted(candidates, key=len) + sorted(reshaped, key=len):
        key = tuple(changes)
        if key in seen or not changes:
            continue
        seen.add(key)
        pl, dl, after = run(changes)
        if after.works:
            kept = [c for c in changes if c.old != c.new or c.new == ""]      # no-ops dropped
            return Fix(tuple(merged(kept, resolve, "vllm serve")), pl, dl, after)
    return None

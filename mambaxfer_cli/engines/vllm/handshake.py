"""What vLLM's NIXL handshake says of a P/D pairing: accepted, or refused with its message, the
release's checks run in vLLM's order by the engine whose code runs them (docs/reference.md §7)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable

from mambaxfer_cli.engines.vllm.engine import EngineLayout
from mambaxfer_cli.engines.vllm.geometry import MAX_BLOCK_SIZE, EngineFlags
from mambaxfer_cli.engines.vllm.release import PULL, PUSH, EngineFacts, Hash, Meeting, Refusal, label

__all__ = ["PULL", "PUSH", "Refusal", "Verdict", "attention_sources", "meeting", "refusals", "handshake_verdict"]

NOT_CHECKED = ("SSM dtypes (conv and temporal)", "the conv-state layout (VLLM_SSM_CONV_STATE_LAYOUT)",
               "conv rows (num_spec)", "SSM state sizes")
GEOMETRY_CODES = ("block-size", "prefix-caching", "head-sharded-block-size", "push-block-sizes", "host-buffer",
                  "mla-block-lens")
# Refusals that change the blocks once fixed: the geometry checks after them are not reached.
BLOCK_CODES = ("block-size", "push-block-sizes")
SEARCH_LIMIT = 8192     # tokens: the largest block size suggested


@dataclass(frozen=True)
class Verdict:
    refusals: tuple[Refusal, ...]
    suggested_block_size: int | None = None
    releases: str = ""                      # how the answer names the release(s): "vLLM 0.34"
    needs_remote_num_tokens: bool = False   # a pull pairing blocks from the last token
    suggested_layout: str | None = None     # VLLM_KV_CACHE_LAYOUT on both engines, where the fix needs it

    @property
    def accepts(self) -> bool:
        return not self.refusals

    def fix_words(self) -> str:
        return fix_words(self.suggested_layout, self.suggested_block_size)

    def to_dict(self) -> dict[str, Any]:
        return {"releases": self.releases, "accepts": self.accepts,
                "refusals": [r.to_dict() for r in self.refusals],
                "suggested_block_size": self.suggested_block_size,
                "needs_remote_num_tokens": self.needs_remote_num_tokens,
                "suggested_kv_cache_layout": self.suggested_layout,
                "not_checked": list(NOT_CHECKED)}


def fix_words(layout: str | None, block_size: int | None) -> str:
    """A verdict's suggested fix as plan and check word it ("" without one): "--block-size 400 on
    both engines", "VLLM_KV_CACHE_LAYOUT=BLHNC and --block-size 400 on both engines"."""
    said = [f"VLLM_KV_CACHE_LAYOUT={layout}"] if layout else []
    said += [f"--block-size {block_size}"] if block_size else []
    return f"{' and '.join(said)} on both engines" if said else ""


def attention_sources(remote: EngineLayout, local: EngineLayout, rank: int) -> list[int]:
    """``compute_tp_mapping``: the remote ranks local rank ``rank`` reads attention from (several: the first
    of each distinct head)."""
    r_tp, l_tp = remote.tp, local.tp
    if remote.kv_heads[0] is None:
        return []
    if l_tp >= r_tp:
        return [rank * r_tp // l_tp]
    a = r_tp // l_tp
    firsts, seen = [], set()
    for q in range(rank * a, rank * a + a):
        head = remote.heads(q).start
        if head not in seen:
            seen.add(head)
            firsts.append(q)
    return firsts


MAX_HYBRID_BLOCK_SPLIT = 128     # base_worker.py _MAX_HYBRID_BLOCK_SPLIT


def split_remote_blocks(remote: EngineLayout, local: EngineLayout, mode: str = PULL) -> EngineLayout:
    """``_split_remote_blocks``: a pulling hybrid MLA+SSM engine views the remote's kernel blocks as
    ``gcd(local, remote)``-token blocks when its own are not a multiple of them; past a split of 128, vLLM
    logs a warning and pairs nothing."""
    if mode != PULL or not local.mla or not local.has_attention or not remote.has_attention or remote.packed:
        return remote       # packed rows (block stride != block length): vLLM warns and splits nothing
    mine, theirs = local.kernel_tokens, remote.kernel_tokens
    if mine % theirs == 0:
        return remote
    unit = math.gcd(mine, theirs)
    split = theirs // unit
    if max(split, mine // unit) > MAX_HYBRID_BLOCK_SPLIT or remote.kernel_block_bytes % split:
        return remote
    g, lists = remote.geometry, remote.lists
    geometry = replace(g, kernel_block_size=unit, blocks_per_logical=g.blocks_per_logical * split,
                       num_blocks=g.num_blocks * split, split_by_remote=split)
    return replace(remote, geometry=geometry, lists=replace(lists, num_blocks=lists.num_blocks * split,
                                                            blocks_per_logical=lists.blocks_per_logical * split))


def meeting(prefill: EngineLayout, decode: EngineLayout, mode: str = PULL,
            facts: tuple[EngineFacts, EngineFacts] | None = None, host_buffer: bool = False,
            enforce_hash: bool = True, draft_groups: bool = False) -> Meeting:
    """The pairing as the local engine's handshake sees it (D local when it pulls, P when it
    pushes); ``facts``: (P's, D's) for the compatibility hash, each hashed by its own release;
    ``draft_groups``: P and D group an EAGLE drafter's layers otherwise (``drafts.past_heads``)."""
    local, remote = (decode, prefill) if mode == PULL else (prefill, decode)
    remote = split_remote_blocks(remote, local, mode)
    # Without facts, only the geometry is known: the same model on both sides, so the backend and
    # KV-cache dtype (and the release) are what can differ.
    p_facts, d_facts = facts or [EngineFacts("", "", None, None, 0, e.hashed_backend, e.geometry.kv_cache_dtype)
                                 for e in (prefill, decode)]
    hashes: dict[str, Hash] = {"P": prefill.release.hashed(p_facts), "D": decode.release.hashed(d_facts)}
    ratio_ok = (local.tp % remote.tp == 0) if local.tp >= remote.tp else (remote.tp % local.tp == 0)
    sources = len(attention_sources(remote, local, 0)) if ratio_ok and remote.has_attention else 0
    lg, rg = local.geometry, remote.geometry
    return Meeting(mode=mode, local_tp=local.tp, remote_tp=remote.tp, has_attention=remote.has_attention,
                   local_kernel=lg.kernel_block_size, remote_kernel=rg.kernel_block_size,
                   local_per_logical=lg.blocks_per_logical, remote_per_logical=rg.blocks_per_logical,
                   local_prefix_caching=lg.prefix_caching, attention_sources=sources,
                   local_hash=hashes["D" if mode == PULL else "P"], remote_hash=hashes["P" if mode == PULL else "D"],
                   remote_name="P" if mode == PULL else "D", host_buffer=host_buffer, enforce_hash=enforce_hash,
                   mla=local.mla, local_block_bytes=local.kernel_block_bytes,
                   remote_block_bytes=remote.kernel_block_bytes, local_dcp=local.flags.dcp_size,
                   remote_dcp=remote.flags.dcp_size, local_block_lens=local.region_block_lens,
                   remote_block_lens=remote.region_block_lens, draft_groups=draft_groups)


def refusals(prefill: EngineLayout, decode: EngineLayout, mode: str = PULL,
             facts: tuple[EngineFacts, EngineFacts] | None = None, host_buffer: bool = False,
             enforce_hash: bool = True, draft_groups: bool = False) -> list[Refusal]:
    """vLLM's refusals of this pairing, in the order the local engine's handshake meets them (vLLM stops at
    the first; the others are what it would say once that one is fixed)."""
    seen = meeting(prefill, decode, mode, facts, host_buffer, enforce_hash, draft_groups)
    local = decode if mode == PULL else prefill
    out: list[Refusal] = []
    for check in local.release.checks(mode):
        found = check(seen)
        if found is None or (found.code in GEOMETRY_CODES and any(r.code in BLOCK_CODES for r in out)):
            continue
        out.append(found)
    return out


def geometry_refused(prefill: EngineLayout, decode: EngineLayout, mode: str = PULL, host_buffer: bool = False) -> bool:
    return any(r.code in GEOMETRY_CODES for r in refusals(prefill, decode, mode, host_buffer=host_buffer))


def handshake_verdict(prefill: EngineLayout, decode: EngineLayout,
                      rebuild: Callable[[int], tuple[EngineLayout, EngineLayout]] | None = None,
                      extra: tuple[Refusal, ...] = (), mode: str = PULL,
                      facts: tuple[EngineFacts, EngineFacts] | None = None, host_buffer: bool = False,
                      enforce_hash: bool = True, draft_groups: bool = False) -> Verdict:
    """vLLM's verdict; where its geometry checks refuse and ``rebuild`` can re-derive both sides at
    another block size, the smallest that fixes it (in the backend's steps, up to SEARCH_LIMIT; none
    where P and D group a drafter otherwise, which no block size changes)."""
    found = tuple(refusals(prefill, decode, mode, facts, host_buffer, enforce_hash, draft_groups)) + tuple(extra)
    suggestion = None
    if rebuild is not None and not draft_groups and any(r.code in GEOMETRY_CODES for r in found):
        step = max(prefill.kernel_backend.step, decode.kernel_backend.step)
        suggestion = next((size for size in range(step, min(SEARCH_LIMIT, MAX_BLOCK_SIZE) + 1, step)
                           if not geometry_refused(*rebuild(size), mode, host_buffer)), None)
    p, d = prefill.geometry, decode.geometry
    remote_tokens = (mode == PULL and prefill.has_attention
                     and decode.release.needs_remote_num_tokens(p.kernel_block_size, p.blocks_per_logical,
                                                                d.kernel_block_size, d.blocks_per_logical))
    return Verdict(found, suggestion, label(prefill.release, decode.release), remote_tokens)


def with_block_size(flags: EngineFlags, size: int) -> EngineFlags:
    return replace(flags, block_size=size)


def not_started_first(verdict: Verdict, found: tuple[Refusal, ...]) -> Verdict:
    """The verdict with ``found``, engines that do not start, listed first; no block size is
    suggested then (another flag is the fix)."""
    if not found:
        return verdict
    return replace(verdict, refusals=found + verdict.refusals, suggested_block_size=None)

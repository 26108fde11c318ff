"""vLLM's lines about a model's engines: each side's geometry, the caches beside the SSM state and
the attention KV."""

from __future__ import annotations


def geometry_line(name: str, side) -> str:
    g = side.geometry
    a1 = "no attention" if g.attention_bytes_per_token is None else f"a1={g.attention_bytes_per_token} B/token"
    own = "" if not g.overridden else " (set by hand)"
    gdn = f" · GDN prefill {g.gdn_prefill_backend}" if g.gdn_prefill_backend else ""
    return (f"{name} {g.attention_backend} · block {g.block_size} tokens, kernel {g.kernel_block_size} × "
            f"{g.blocks_per_logical}{own} · page {g.page_bytes} B (state {g.state_bytes} B, {a1}) · "
            f"N={g.num_blocks}{gdn}")


def side_caches_line(spec, side) -> str:
    """The caches one engine keeps beside the SSM state and attention KV (a family's own state, the
    indexer's ring and compressed keys); empty for a model that keeps none."""
    from mambaxfer_cli.engines.vllm import families, indexer_caches

    own = families.first("side_cache", spec, side)      # a family's own state (PLE)
    parts = [own] if own else []
    found = indexer_caches.caches(spec)
    if found is not None:
        parts.append(f"{found.ring_name} {found.ring_tokens} tokens (CircularBufferSpec, page "
                     f"{found.ring_page_bytes} B), compressed keys 1 per {found.tokens_per_key} tokens "
                     f"({found.key_page_bytes(side.geometry.block_size)} B per block)")
    return f"{spec.family}: " + "; ".join(parts) if parts else ""

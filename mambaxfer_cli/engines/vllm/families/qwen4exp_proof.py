"""Qwen4Exp's PLE pages proved byte by byte: P's filled with the pattern, D's poisoned, the reads
performed as vLLM's connector posts them and every byte of D's PLE state compared (docs/reference.md, 6d)."""

from __future__ import annotations

import numpy as np

from mambaxfer_cli.engines.vllm.families import qwen4exp
from mambaxfer_cli.engines.vllm.plan import Plan
from mambaxfer_cli.planning.dtypes import dtype_bytes
from mambaxfer_cli.planning.model import ModelSpec
from mambaxfer_cli.engines.vllm.reads import VLLM
from mambaxfer_cli.engines.vllm.proof.indexer_caches import PLE_REFUSED, PagesProof, block_pair, holds
from mambaxfer_cli.proof.pattern import POISON, unit_bytes_pattern
from mambaxfer_cli.engines.vllm.proof.simulate import ByteSource, Damage, WrongByte

SPACE = "ple"


def _rows(model: ModelSpec) -> int:
    q = model.ple_qsa
    assert q is not None
    return q.ple_state_len + model.num_spec


def _p_page(model: ModelSpec, page_len: int, layer: int, block: int) -> np.ndarray:
    q = model.ple_qsa
    assert q is not None
    unit = _rows(model) * dtype_bytes(model.conv_dtype)
    state = unit_bytes_pattern(layer, block, "ple", 0, q.ple_channels, unit).reshape(-1)
    out = np.empty(page_len, dtype=np.uint8)
    out[:state.size] = state
    if page_len > state.size:       # the page's padding past the state (execute fills it the same way)
        out[state.size:] = unit_bytes_pattern(layer, block, "pad", 0, 1, page_len - state.size).reshape(-1)
    return out


def prove_ple(plan: Plan, p_model: ModelSpec | None = None) -> PagesProof | None:
    """The PLE pages of one request block, for every PLE layer and D rank; None for a model
    without PLE state, or where vLLM refuses the pages."""
    model = plan.model
    q = model.ple_qsa
    if q is None or not q.ple_layers:
        return None
    if any(r.code in PLE_REFUSED for r in plan.verdict.refusals):
        return None
    p_model = p_model or model
    p_len = qwen4exp.ple_page_bytes(p_model, plan.prefill)
    d_len = qwen4exp.ple_page_bytes(model, plan.decode)
    p_block, d_block = block_pair(plan)
    eb = dtype_bytes(model.conv_dtype)
    p_rows, d_rows = _rows(p_model), _rows(model)
    keep = min(p_rows, d_rows) * eb
    reads = moved = verified = 0
    damage: list[Damage] = []
    for layer in q.ple_layers:
        source = _p_page(p_model, p_len, layer, p_block)    # every P rank's page: replicated bytes
        want = unit_bytes_pattern(layer, p_block, "ple", 0, q.ple_channels, p_rows * eb)[:, :keep]
        for d in range(plan.decode.tp):
            page = np.full(d_len, POISON, dtype=np.uint8)
            writes = np.zeros(d_len, dtype=np.uint16)
            sources = qwen4exp.ple_sources(plan.prefill, plan.decode, d)
            if plan.semantics != VLLM:
                sources = sources[:1]
            for _ in sources:
                n = min(p_len, d_len)
                page[:n] = source[:n]
                writes[:n] += 1
                reads += 1
                moved += n
            got = page[:q.ple_channels * d_rows * eb].reshape(q.ple_channels, d_rows * eb)[:, :keep]
            verified += got.size
            bad = np.argwhere(got != want)
            if bad.size:
                c, k = (int(v) for v in bad[0])
                offset = c * d_rows * eb + k
                first = WrongByte(d, SPACE, layer, d_block, p_block, offset,
                                  f"ple channel {c} row {k // eb} byte {k % eb}", int(want[c, k]),
                                  int(got[c, k]), int(writes[offset]),
                                  ByteSource(sources[-1], SPACE, layer, p_block, offset,
                                             holds(offset, p_rows, eb, q.ple_channels))
                                  if writes[offset] else None)
                damage.append(Damage(d, SPACE, "ple", len(bad), 1, first))
    return PagesProof(reads, moved, verified, tuple(damage))

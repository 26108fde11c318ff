"""Descriptor lists and request IDs at engine scale: a Python loop per descriptor against the
vectorised (N, 3) table and NIXL 1.5's (N, 5) strided rows, same inputs, outputs checked equal; and a
request's descriptor IDs, a per-ID loop against the planner's ``block_ids`` (plain Python, as ``plan`` runs).

    python benchmarks/descriptor_ids.py [--num-blocks 1000000] [--models qwen3-next-80b,...]
                                        [--loop-max 80000000]

Prints times and ratios; no thresholds. Where the expanded list would exceed --max-table
descriptors (an (N, 3) uint64 array of 24 bytes a descriptor), only the strided rows are built
and checked against the per-ID address formula on a sample of IDs.
"""

from __future__ import annotations

import argparse
import time
from array import array
from functools import partial

import numpy as np

from mambaxfer_cli.engines.vllm.descriptors import block_ids
from mambaxfer_cli.engines.vllm.proof.addresses import address_table, addresses, expand, strided
from mambaxfer_cli.engines.vllm.geometry import EngineFlags
from mambaxfer_cli.readers.model_source import load_model
from mambaxfer_cli.engines.vllm.plan import PlanOptions, build_plan


def timed(fn, repeat: int = 1):
    best, out = float("inf"), None
    for _ in range(repeat):
        started = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - started)
    return best, out


def loop_table(dlist, bases, page) -> np.ndarray:
    """The straightforward builder: one Python iteration per descriptor."""
    eng = dlist.engine
    kernel = page // eng.blocks_per_logical
    spt = eng.streams_per_tensor
    out = array("Q")
    for stream in range(eng.attention_streams):
        base = bases[stream // spt] + (stream % spt) * (kernel // spt)
        for block in range(eng.num_blocks):
            for offset, size in dlist.attention:
                out.extend((base + block * kernel + offset, size, 0))
    for tensor in range(eng.ssm_tensors):
        for offset, size in dlist.regions:
            for block in range(eng.logical_blocks):
                out.extend((bases[tensor] + block * page + offset, size, 0))
    return np.frombuffer(out, dtype=np.uint64).reshape(-1, 3)


def loop_ids(dlist, groups, blocks, slots) -> list[int]:
    eng, out = dlist.engine, []
    for index, (kind, logical) in enumerate(zip(groups, blocks)):
        if kind == "attention":
            if slots[index] is None:
                continue
            for f in range(eng.attention_streams):
                for s in slots[index]:
                    out.append(f * eng.num_blocks * dlist.pieces + int(s))
        else:
            for q in range(eng.ssm_tensors * dlist.k):
                for b in logical:
                    out.append(dlist.attention_descs + q * eng.logical_blocks + int(b))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="qwen3-next-80b,mamba-codestral-7b")
    parser.add_argument("--num-blocks", type=int, default=1_000_000)
    parser.add_argument("--request-blocks", type=int, default=256)
    parser.add_argument("--max-table", type=int, default=80_000_000, help="largest expanded list built")
    args = parser.parse_args()
    print(f"{'model':<20} {'layers':>6} {'descriptors':>12} {'rows':>5} {'loop s':>8} {'table s':>8} "
          f"{'strided ms':>10} {'loop/table':>10} {'loop/strided':>12} {'ids loop/plan':>14} {'ids':>9} "
          f"{'ids plan ms':>11}")
    for name in args.models.split(","):
        spec = load_model(name)
        engine = EngineFlags(num_blocks=args.num_blocks)
        plan = build_plan(spec, 1, 1, PlanOptions(prefill=engine, decode=engine, request_blocks=args.request_blocks))
        read = plan.descriptors.reads[0]
        dlist, page = read.local, plan.decode.page_bytes
        bases = [(1 << 44) + i * (1 << 36) for i in range(dlist.engine.tensors)]
        t_strided, rows = timed(partial(strided, dlist, bases, page), repeat=5)
        if dlist.length <= args.max_table:
            t_table, table = timed(partial(address_table, dlist, bases, page))
            assert np.array_equal(expand(rows), table)
            t_loop, looped = timed(partial(loop_table, dlist, bases, page))
            assert np.array_equal(looped, table)
            del looped, table
            loop_s, table_s = f"{t_loop:8.1f}", f"{t_table:8.2f}"
            ratios = f"{t_loop / t_table:9.1f}x {t_loop / t_strided:11.0f}x"
        else:   # too large to expand here: the strided rows against the per-ID formula on a sample
            ids = np.random.default_rng(0).choice(dlist.length, 100_000, replace=False)
            index = np.searchsorted(np.cumsum(rows[:, 4].astype(np.int64)), ids, side="right")
            step = ids - (np.cumsum(rows[:, 4].astype(np.int64)) - rows[:, 4].astype(np.int64))[index]
            tensor, offset, size = addresses(dlist, ids, page)
            want = np.asarray(bases, dtype=np.int64)[tensor] + offset
            assert np.array_equal(rows[index, 0].astype(np.int64) + step * rows[index, 3].astype(np.int64), want)
            assert np.array_equal(rows[index, 1].astype(np.int64), size)
            loop_s = table_s = "    -   "
            ratios = f"{'(not built)':>10} {'':>12}"
        groups = plan.descriptors.groups
        blocks = plan.descriptors.request.decode_blocks
        local_ids = np.asarray(read.local_ids)
        attention_ids = local_ids[local_ids < dlist.attention_descs]
        slots = [None if kind != "attention" else
                 np.sort(attention_ids % (dlist.engine.num_blocks * dlist.pieces))[
                     : len(attention_ids) // max(dlist.engine.attention_streams, 1)].tolist()
                 for kind in groups]
        t_vec, vec = timed(partial(block_ids, dlist, groups, blocks, slots), repeat=5)
        t_ids, looped_ids = timed(partial(loop_ids, dlist, groups, blocks, slots))
        assert vec.tolist() == looped_ids
        print(f"{name:<20} {len(spec.layers):>6} {dlist.length:>12,} {rows.shape[0]:>5} {loop_s} {table_s} "
              f"{t_strided * 1e3:10.3f} {ratios} {t_ids / t_vec:13.1f}x {len(vec):9,} {t_vec * 1e3:11.1f}")


if __name__ == "__main__":
    main()

"""How much the vectorised descriptor lists and IDs save over a Python loop per descriptor.

Prints ratios (loop time / vectorised time) at engine scale; no thresholds, no asserts.
Run: python benchmarks/descriptor_ids.py [--num-blocks 400000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from mambaxfer_cli.descriptors import block_ids
from mambaxfer_cli.model_source import load_model
from mambaxfer_cli.plan import EngineOptions, PlanOptions, build_plan, page_bytes


def best_of(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def loop_table(dlist, ssm_bases, page, attn_bases, slot):
    eng, rows = dlist.engine, []
    for base in attn_bases:
        for kb in range(eng.num_blocks):
            rows.append((base + kb * slot + dlist.attention[0], dlist.attention[1], 0))
    for base in ssm_bases:
        for offset, size in dlist.regions:
            for b in range(eng.logical_blocks):
                rows.append((base + b * page + offset, size, 0))
    return rows


def loop_ids(dlist, groups, blocks):
    eng, out = dlist.engine, []
    for kind, logical in zip(groups, blocks):
        if kind == "attention":
            for f in range(eng.attention_streams):
                for b in logical:
                    for j in range(eng.blocks_per_logical):
                        out.append(f * eng.num_blocks + b * eng.blocks_per_logical + j)
        else:
            for q in range(eng.ssm_tensors * dlist.k):
                for b in logical:
                    out.append(eng.attention_descs + q * eng.logical_blocks + b)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="jamba")
    parser.add_argument("--num-blocks", type=int, default=400_000)
    parser.add_argument("--request-blocks", type=int, default=256)
    args = parser.parse_args()
    engine = EngineOptions(args.num_blocks, 4)
    plan = build_plan(load_model(args.model), 1, 4,
                      PlanOptions(prefill=engine, decode=engine, request_blocks=args.request_blocks))
    read = plan.descriptors.reads[0]
    dlist = read.local
    page = page_bytes(plan.decode.ranks[0])
    bases = [(1 << 40) + i * (1 << 34) for i in range(dlist.engine.ssm_tensors)]
    attn = [(1 << 36) + i * (1 << 30) for i in range(dlist.engine.attention_streams)]
    blocks = plan.descriptors.request.decode_blocks

    vec_table = best_of(lambda: dlist.table(bases, page, attn, 256))
    py_table = best_of(lambda: loop_table(dlist, bases, page, attn, 256), repeat=1)
    assert np.array_equal(dlist.table(bases, page, attn, 256), np.array(loop_table(dlist, bases, page, attn, 256), dtype=np.uint64))
    vec_ids = best_of(lambda: block_ids(dlist, plan.descriptors.groups, blocks, True))
    py_ids = best_of(lambda: loop_ids(dlist, plan.descriptors.groups, blocks), repeat=1)
    assert block_ids(dlist, plan.descriptors.groups, blocks, True).tolist() == loop_ids(dlist, plan.descriptors.groups, blocks)
    print(f"{args.model}: descriptor list of {dlist.length} descriptors, request of "
          f"{read.local_ids.size} IDs")
    print(f"descriptor list: loop/vectorised = {py_table / vec_table:.1f}x "
          f"({py_table * 1e3:.1f} ms vs {vec_table * 1e3:.2f} ms)")
    print(f"request IDs:     loop/vectorised = {py_ids / vec_ids:.1f}x "
          f"({py_ids * 1e3:.2f} ms vs {vec_ids * 1e3:.3f} ms)")


if __name__ == "__main__":
    main()

"""How many descriptors a real transfer posts, how many NIXL keeps after merging adjacent pairs,
and what that does to GB/s: each model with the plan's segments as they are and with --coalesce.

    python benchmarks/execute_merge.py [--device cpu|cuda] [--request-blocks 4] [--iters 5]

Prints ratios, not pass/fail: the numbers depend on the machine (on a 2-core machine concurrent D
ranks share the cores, so GB/s there says more about the CPU than about NIXL).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

# (model, P TP, D TP, extra flags): FLASHINFER's 64-token kernel blocks, 9 per logical block, are
# the case where NIXL merges the attention descriptors of one logical block.
CASES = [("jamba", 1, 1, ()), ("jamba", 1, 4, ()), ("granite-4.0-h-tiny", 2, 1, ()), ("qwen3.5-0.8b", 1, 2, ()),
         ("qwen3.5-0.8b", 1, 1, ("--attention-backend", "FLASHINFER"))]


def run(model: str, p_tp: int, d_tp: int, extra: tuple[str, ...], coalesce: bool, args) -> dict:
    command = [sys.executable, "-m", "mambaxfer_cli", "execute", "--model", model, "--p-tp", str(p_tp),
               "--d-tp", str(d_tp), "--device", args.device, "--request-blocks", str(args.request_blocks),
               "--iters", str(args.iters), "--format", "json", *extra]
    result = subprocess.run(command + (["--coalesce"] if coalesce else []), capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({result.returncode}): {result.stderr.strip()}")
    return json.loads(result.stdout)


def summary(doc: dict) -> tuple[int, int, float]:
    decode = doc["decode"]
    posted = sum(d["descriptors_posted"] for d in decode)
    merged = sum(d["descriptors_merged"] for d in decode)
    return posted, merged, doc["total_bytes"] / max(d["time_s"] for d in decode) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--request-blocks", type=int, default=4)
    parser.add_argument("--iters", type=int, default=5)
    args = parser.parse_args()
    print(f"{'case':<28} {'posted':>7} {'merged':>7} {'kept':>6} {'GB/s':>6} | {'coalesced':>9} {'merged':>7} "
          f"{'GB/s':>6} {'speed-up':>8}")
    for model, p_tp, d_tp, extra in CASES:
        plain = summary(run(model, p_tp, d_tp, extra, False, args))
        fused = summary(run(model, p_tp, d_tp, extra, True, args))
        name = f"{model} {p_tp}P{d_tp}D" + (" FLASHINFER" if extra else "")
        print(f"{name:<28} {plain[0]:>7} {plain[1]:>7} {plain[1] / plain[0]:>6.0%} "
              f"{plain[2]:>6.2f} | {fused[0]:>9} {fused[1]:>7} {fused[2]:>6.2f} {fused[2] / plain[2]:>7.2f}x")


if __name__ == "__main__":
    main()

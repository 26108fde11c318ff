"""vLLM's READ of per-block regions and SGLang's WRITE of per-slot entries, side by side: for each
preset SGLang serves and each pairing, one `mambaxfer bench` run per engine, each measuring its
planned descriptors against one descriptor per P -> D pair (the machine's limit) in the same run.

    python benchmarks/engines_side_by_side.py [--device cpu] [--iters 10] [--pairs 1:1,1:2,2:1,1:4]

Prints the markdown table of BENCHMARKS.md. The two engines move different bytes (vLLM the request's
blocks, attention KV included; SGLang one slot of each Mamba entry): compare each engine's
planned/limit ratio, measured side by side in one run, not the two engines' rates.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

MODELS = ("granite-4.0-h-tiny", "mamba-130m", "mamba-codestral-7b", "nemotron-h-8b", "qwen3-next-80b", "qwen3.5-0.8b")


def bench(*args: str) -> dict | str:
    command = [sys.executable, "-m", "mambaxfer_cli", "bench", *args, "--format", "json"]
    print("$", " ".join(command[2:]), file=sys.stderr)
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        return result.stderr.strip().splitlines()[-1] if result.stderr.strip() else f"exit {result.returncode}"
    return json.loads(result.stdout)


def vllm_row(doc: dict) -> tuple[str, str, str]:
    point = doc["points"][0]["variants"]["READ"]
    planned, limit = point["planned"], point["limit"]
    ratio = planned["gb_per_s"]["median"] / limit["gb_per_s"]["median"]
    return (f"{planned['descriptors_posted']:,}", f"{planned['bytes'] / planned['descriptors_posted'] / 1024:,.0f} KiB",
            f"{ratio:.2f}")


def sglang_row(doc: dict) -> tuple[str, str, str]:
    planned = doc["variants"]["planned"]
    return (f"{planned['descriptors_posted']:,}", f"{planned['bytes_per_descriptor'] / 1024:,.0f} KiB",
            f"{doc['ratio']:.2f}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--iters", default="10")
    parser.add_argument("--pairs", default="1:1,1:2,2:1,1:4")
    args = parser.parse_args()
    print("| model | P:D | vLLM READ descriptors | bytes/desc | planned/limit | SGLang WRITE descriptors | "
          "bytes/desc | planned/limit |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for model in MODELS:
        for pair in args.pairs.split(","):
            p_tp, d_tp = pair.split(":")
            common = ["--model", model, "--p-tp", p_tp, "--d-tp", d_tp, "--device", args.device, "--iters", args.iters]
            vllm = bench(*common, "--request-blocks", "1")
            sglang = bench(*common, "--engine", "sglang")
            cells = []
            for doc, row in ((vllm, vllm_row), (sglang, sglang_row)):
                cells += list(row(doc)) if isinstance(doc, dict) else [f"not run: {doc}", "", ""]
            print(f"| {model} | {pair} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

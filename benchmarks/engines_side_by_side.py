"""vLLM's READ of per-block regions and SGLang's WRITE of per-slot entries, side by side: for each
preset SGLang serves and each pairing, one `mambaxfer bench --engine vllm,sglang` run, which
measures each engine's planned descriptors against one descriptor per P -> D pair (the machine's
limit) in the same run, every byte verified.

    python benchmarks/engines_side_by_side.py [--device cpu] [--iters 20] [--pairs 1:1,1:2,2:1,1:4]
        [--repeat 3] [--raw runs.jsonl]

Prints the markdown table of BENCHMARKS.md. The two engines move different bytes (vLLM the request's
blocks, attention KV included; SGLang one slot of each Mamba entry): compare each engine's
planned/limit ratio, measured side by side in one run, not the two engines' rates. vLLM's WRITE
column is vLLM's layout pushed as SGLang pushes, so that layout and direction can be told apart.
With --repeat N each pairing runs N times: each ratio is the median of the N runs' ratios, with
their range in brackets; --raw keeps every run's rows.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

MODELS = ("granite-4.0-h-tiny", "mamba-130m", "mamba-codestral-7b", "nemotron-h-8b", "qwen3-next-80b", "qwen3.5-0.8b")


def bench(*args: str) -> dict | str:
    command = [sys.executable, "-m", "mambaxfer_cli", "bench", "--engine", "vllm,sglang", *args, "--format", "json"]
    print("$", " ".join(command[2:]), file=sys.stderr)
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        return result.stderr.strip().splitlines()[-1] if result.stderr.strip() else f"exit {result.returncode}"
    return json.loads(result.stdout)


KEYS = (("vllm", "READ"), ("vllm", "WRITE"), ("sglang", "WRITE"))


def cells(docs: list[dict]) -> list[str]:
    """A pairing's cells from its runs: descriptors and bytes per descriptor (the same in every
    run), and each ratio's median over the runs, with the range when there are several."""
    rows = [{(r["engine"], r["direction"]): r for r in doc["rows"]} for doc in docs]

    def ratio(key: tuple[str, str]) -> str:
        values = [r[key]["ratio"] for r in rows]
        spread = f" ({min(values):.2f}–{max(values):.2f})" if len(values) > 1 else ""
        return f"{statistics.median(values):.2f}{spread}"

    read, sglang = rows[0]["vllm", "READ"], rows[0]["sglang", "WRITE"]
    return [f"{read['descriptors']:,}", f"{read['bytes_per_descriptor'] / 1024:,.0f} KiB", ratio(KEYS[0]),
            ratio(KEYS[1]), f"{sglang['descriptors']:,}", f"{sglang['bytes_per_descriptor'] / 1024:,.0f} KiB",
            ratio(KEYS[2]), "yes" if all(doc["verified"] for doc in docs) else "NO"]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--iters", default="20")
    parser.add_argument("--pairs", default="1:1,1:2,2:1,1:4")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--raw", help="Append every run's rows to this JSON-lines file.")
    args = parser.parse_args()
    print("| model | P:D | vLLM desc | bytes/desc | vLLM READ /lim | vLLM WRITE /lim | SGLang desc | bytes/desc | "
          "SGLang WRITE /lim | verified |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for model in args.models.split(","):
        for pair in args.pairs.split(","):
            p_tp, d_tp = pair.split(":")
            docs, failed = [], None
            for _ in range(args.repeat):
                doc = bench("--model", model, "--p-tp", p_tp, "--d-tp", d_tp, "--device", args.device,
                            "--iters", args.iters)
                if not isinstance(doc, dict):
                    failed = doc
                    break
                docs.append(doc)
                if args.raw:
                    with open(args.raw, "a") as raw:
                        raw.write(json.dumps({"model": model, "pair": pair, "rows": doc["rows"]}) + "\n")
            row = cells(docs) if failed is None else [f"not run: {failed}"] + [""] * 7
            print(f"| {model} | {pair} | " + " | ".join(row) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

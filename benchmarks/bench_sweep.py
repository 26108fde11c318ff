"""`mambaxfer bench` over a few models and pairings: the markdown tables of BENCHMARKS.md, one
chart per case, and the goal check (coalesced >= 0.8 x limit where segments are >= 64 KiB).

    python benchmarks/bench_sweep.py [--out docs] [--device cpu] [--iters 20] [--request-blocks 1,4,16,64]
    python benchmarks/bench_sweep.py --from-json docs     # only render the documents already there

Each case is one `mambaxfer bench --format json --chart` run; numbers depend on the machine and its
load (ratios measured side by side in one run are what to compare).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

# (model, P TP, D TP, largest request size): Qwen3-Next-80B at 64 blocks needs more DRAM than bench
# takes on a 23 GiB machine.
CASES = [("jamba", 1, 1, 64), ("jamba", 1, 4, 64), ("mamba-130m", 1, 2, 64), ("qwen3-next-80b", 2, 1, 16)]
GOAL_SEGMENT = 64 * 1024


def run(model: str, p_tp: int, d_tp: int, largest: int, args, out: Path) -> Path:
    stem = out / f"bench-{model}-{p_tp}p{d_tp}d"
    command = [sys.executable, "-m", "mambaxfer_cli", "bench", "--model", model, "--p-tp", str(p_tp),
               "--d-tp", str(d_tp), "--device", args.device,
               "--request-blocks", ",".join(n for n in args.request_blocks.split(",") if int(n) <= largest),
               "--semantics", "vllm", "--iters", str(args.iters), "--format", "json", "--chart", f"{stem}.png"]
    print("$", " ".join(command[1:]), file=sys.stderr)
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"failed ({result.returncode}): {result.stderr.strip()}")
    stem.with_suffix(".json").write_text(result.stdout)
    return stem.with_suffix(".json")


def tables(doc: dict) -> list[str]:
    lines = [f"### {doc['model']} P TP {doc['p_tp']} -> D TP {doc['d_tp']} ({doc['semantics']} semantics, "
             f"{doc['iters']} iterations)", "",
             "| device | blocks | dir | UCX | bytes | descs a/b/c (kept) | seg a / b | GB/s a | b | c "
             "| p99 GB/s a/b/c | a/c | b/c | us/desc a | prep+make ms a | post us a/c |",
             "|---|---:|---|---|---:|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---|"]
    goal = []
    for p in doc["points"]:
        for direction, v in p["variants"].items():
            a, b, c = v["planned"], v["coalesced"], v["limit"]
            r = p["ratios"][direction]
            lines.append(
                f"| {p['device']} | {p['request_blocks']} | {direction} "
                f"| {', '.join(p['transport'][direction]['transports'])} "
                f"| {a['bytes'] / 2**20:.1f} MiB "
                f"| {a['descriptors_posted']}/{b['descriptors_posted']}/{c['descriptors_posted']} "
                f"({a['descriptors_kept']}/{b['descriptors_kept']}/{c['descriptors_kept']}) "
                f"| {a['segment_bytes'] // 1024} / {b['segment_bytes'] // 1024} KiB "
                f"| {a['gb_per_s']['median']:.2f} | {b['gb_per_s']['median']:.2f} | {c['gb_per_s']['median']:.2f} "
                f"| {a['gb_per_s']['p99']:.2f}/{b['gb_per_s']['p99']:.2f}/{c['gb_per_s']['p99']:.2f} "
                f"| {r['planned/limit']:.2f} | {r['coalesced/limit']:.2f} | {a['per_descriptor_us']:.1f} "
                f"| {a['prep_ms'] + a['make_ms']:.2f} | {a['post_us']['median']:.0f}/{c['post_us']['median']:.0f} |")
            if b["segment_bytes"] >= GOAL_SEGMENT:
                goal.append((p["request_blocks"], direction, r["coalesced/limit"]))
    verified = "every byte of every variant verified" if doc["verified"] else "WRONG BYTES"
    met = [g for g in goal if g[2] >= 0.8]
    lines += ["", f"{verified}. Goal b/c >= 0.8 where segments >= 64 KiB: met in {len(met)} of {len(goal)} "
                  f"points" + ("" if len(met) == len(goal) else " (missed: " + ", ".join(
                      f"{n} blocks {d} {x:.2f}" for n, d, x in goal if x < 0.8) + ")"), ""]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs"))
    parser.add_argument("--from-json", type=Path, default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--request-blocks", default="1,4,16,64")
    args = parser.parse_args()
    if args.from_json is not None:
        paths = sorted(args.from_json.glob("bench-*.json"))
    else:
        args.out.mkdir(parents=True, exist_ok=True)
        paths = [run(m, p, d, largest, args, args.out) for m, p, d, largest in CASES]
    for path in paths:
        doc = json.loads(path.read_text())
        print("\n".join(tables(doc)))
        try:
            from mambaxfer_cli.engines.vllm.transfer.bench import draw_chart
            from mambaxfer_cli.render.report import chart_notes

            notes = chart_notes(draw_chart, doc, path.with_suffix(".png"))
            if notes[0].startswith("chart skipped"):
                print(notes[0], file=sys.stderr)
        except ImportError:
            pass


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# Run `mambaxfer execute` on VRAM (ranks spread over the visible GPUs, several per GPU) for a
# Mamba1, a Mamba2 with replicated groups and a GDN model over several pairings, and print one table.
# Every run must verify every byte, except vLLM's semantics on Granite's replicated groups, which
# must exit 1 (the corruption `check` predicts). Exit 0 when every run did what it must.
#
#   scripts/gpu_check.sh                 # VRAM (needs a GPU, a CUDA torch and nixl==1.5.1)
#   DEVICE=cpu scripts/gpu_check.sh      # the same runs on DRAM, to try the script without a GPU
# Then `mambaxfer bench` on the same device: GB/s of the plan against one descriptor, READ and WRITE;
# then SGLang's WRITE of per-slot entries: `execute --engine sglang` and `bench --engine sglang`.
# Knobs: MAMBAXFER (command, default "python -m mambaxfer_cli"), BLOCKS, REQUEST_BLOCKS, ITERS, TIMEOUT,
# BENCH_BLOCKS, BENCH_ITERS, ENGINES (default "vllm sglang": the engines whose runs to make).
set -uo pipefail
cd "$(dirname "$0")/.."

DEVICE=${DEVICE:-cuda}
MAMBAXFER=${MAMBAXFER:-python -m mambaxfer_cli}
PYTHON=${PYTHON:-python}
BLOCKS=${BLOCKS:-64}
REQUEST_BLOCKS=${REQUEST_BLOCKS:-4}
ITERS=${ITERS:-5}
TIMEOUT=${TIMEOUT:-300}
ENGINES=${ENGINES:-vllm sglang}

# model p_tp d_tp semantics expected-exit
RUNS=(
  "jamba 1 1 exact 0"
  "jamba 1 4 exact 0"
  "jamba 4 1 exact 0"
  "jamba 2 4 exact 0"
  "jamba 4 2 exact 0"
  "granite-4.0-h-tiny 1 2 exact 0"
  "granite-4.0-h-tiny 4 2 exact 0"
  "granite-4.0-h-tiny 1 2 vllm 1"
  "qwen3.5-0.8b 1 4 exact 0"
  "qwen3.5-0.8b 4 1 exact 0"
  "qwen3.5-0.8b 2 4 exact 0"
)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
if [[ " $ENGINES " == *" vllm "* ]]; then
i=0
for run in "${RUNS[@]}"; do
  read -r model p_tp d_tp semantics want <<<"$run"
  i=$((i + 1))
  echo "gpu_check: [$i/${#RUNS[@]}] $model P TP $p_tp → D TP $d_tp ($semantics) on $DEVICE" >&2
  # shellcheck disable=SC2086  # MAMBAXFER may be a command with arguments
  $MAMBAXFER execute --model "$model" --p-tp "$p_tp" --d-tp "$d_tp" --semantics "$semantics" \
    --device "$DEVICE" --blocks "$BLOCKS" --request-blocks "$REQUEST_BLOCKS" --iters "$ITERS" \
    --timeout "$TIMEOUT" --format json >"$work/$i.json" 2>"$work/$i.err"
  echo "$? $want $model $p_tp $d_tp $semantics" >"$work/$i.run"
done

"$PYTHON" - "$work" "${#RUNS[@]}" "$DEVICE" <<'EOF' || status=1
import json, sys
from pathlib import Path

work, count, device = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
header = ("model", "pairing", "semantics", "exit", "D ranks", "MiB/rank", "descs", "merged", "GB/s min..max",
          "aggregate GB/s", "result")
rows, good = [], True
for i in range(1, count + 1):
    code, want, model, p_tp, d_tp, semantics = (work / f"{i}.run").read_text().split()
    ok = code == want
    row = [model, f"P TP {p_tp} → D TP {d_tp}", semantics, code]
    try:
        doc = json.loads((work / f"{i}.json").read_text())
        decode = doc["decode"]
        rates = [d["gb_per_s"] for d in decode]
        longest = max(d["time_s"] for d in decode)
        row += [str(len(decode)), f"{decode[0]['bytes'] / 2**20:.1f}",
                str(sum(d["descriptors_posted"] for d in decode)), str(sum(d["descriptors_merged"] for d in decode)),
                f"{min(rates):.1f}..{max(rates):.1f}", f"{doc['total_bytes'] / longest / 1e9:.1f}",
                ("verified" if doc["verified"] else
                 "corrupt: " + ", ".join(f"D{d['d_rank']} {'+'.join(d['verdict']['wrong_by_region'])}"
                                         for d in decode if not d["verdict"]["ok"]))]
    except (OSError, ValueError, KeyError):
        err = (work / f"{i}.err").read_text().strip().splitlines()
        row += [""] * 6 + [(err[-1] if err else "no output")[:70]]
    row[-1] = ("ok  " if ok else "BAD ") + row[-1]
    good &= ok
    rows.append(row)
widths = [max(len(str(r[c])) for r in [header, *rows]) for c in range(len(header))]
print(f"mambaxfer execute on {device} ({'VRAM' if device == 'cuda' else 'DRAM'} over UCX)")
for r in [header, ["-" * w for w in widths], *rows]:
    print("  ".join(str(v).ljust(w) for v, w in zip(r, widths)))
print("all runs as expected" if good else "SOME RUNS FAILED")
sys.exit(0 if good else 1)
EOF

# bench on the same device: planned, coalesced and one descriptor (the limit), READ and WRITE,
# the UCX transport of each; the same figures as BENCHMARKS.md. It must verify every byte.
echo "gpu_check: bench jamba P TP 1 → D TP 2 on $DEVICE" >&2
# shellcheck disable=SC2086
$MAMBAXFER bench --model jamba --p-tp 1 --d-tp 2 --device "$DEVICE" --request-blocks "${BENCH_BLOCKS:-1,4,16,64}" \
  --iters "${BENCH_ITERS:-20}" --timeout "$TIMEOUT" --format json >"$work/bench.json" 2>"$work/bench.err" || status=1
"$PYTHON" - "$work/bench.json" "$work/bench.err" <<'EOF' || status=1
import json, sys

try:
    doc = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    sys.exit("bench: no document: " + open(sys.argv[2]).read().strip()[-300:])
print(f"mambaxfer bench {doc['model']} P TP {doc['p_tp']} → D TP {doc['d_tp']}, {doc['iters']} iters (GB/s, median)")
print(f"{'device':<6} {'blocks':>6} {'dir':<5} {'transport':<14} {'MiB':>7} {'planned':>8} {'coalesced':>9} "
      f"{'limit':>7} {'a/c':>5} {'b/c':>5}")
for p in doc["points"]:
    for d, v in p["variants"].items():
        g = {k: v[k]["gb_per_s"]["median"] for k in v}
        print(f"{p['device']:<6} {p['request_blocks']:>6} {d:<5} {','.join(p['transport'][d]['transports']):<14} "
              f"{v['planned']['bytes'] / 2**20:>7.1f} {g['planned']:>8.2f} {g['coalesced']:>9.2f} {g['limit']:>7.2f} "
              f"{g['planned'] / g['limit']:>5.2f} {g['coalesced'] / g['limit']:>5.2f}")
print("bench: every byte verified" if doc["verified"] else "bench: WRONG BYTES")
sys.exit(0 if doc["verified"] else 1)
EOF
fi

if [[ " $ENGINES " == *" sglang "* ]]; then
# SGLang's way: P ranks WRITE each transfer entry into D's request slot. Every byte verified, except
# SGLang's own blocks on a Mamba2 model at different TP sizes, which must exit 1 with the wrong bytes
# `check --engine sglang` predicts.
# model p_tp d_tp semantics expected-exit
SGLANG_RUNS=(
  "qwen3.5-0.8b 1 2 exact 0"
  "qwen3.5-0.8b 2 1 exact 0"
  "qwen3.5-0.8b 1 4 exact 0"
  "nemotron-h-8b 1 2 exact 0"
  "nemotron-h-8b 1 2 sglang 1"
)
j=0
for run in "${SGLANG_RUNS[@]}"; do
  read -r model p_tp d_tp semantics want <<<"$run"
  j=$((j + 1))
  echo "gpu_check: sglang [$j/${#SGLANG_RUNS[@]}] $model P TP $p_tp → D TP $d_tp ($semantics) on $DEVICE" >&2
  # shellcheck disable=SC2086
  $MAMBAXFER execute --engine sglang --model "$model" --p-tp "$p_tp" --d-tp "$d_tp" --semantics "$semantics" \
    --device "$DEVICE" --timeout "$TIMEOUT" --format json >"$work/s$j.json" 2>"$work/s$j.err"
  echo "$? $want $model $p_tp $d_tp $semantics" >"$work/s$j.run"
done
"$PYTHON" - "$work" "${#SGLANG_RUNS[@]}" "$DEVICE" <<'PY' || status=1
import json, sys
from pathlib import Path

work, count, device = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
header = ("model", "pairing", "semantics", "exit", "memory", "MiB", "descs", "GB/s min..max", "result")
rows, good = [], True
for i in range(1, count + 1):
    code, want, model, p_tp, d_tp, semantics = (work / f"s{i}.run").read_text().split()
    ok = code == want
    row = [model, f"P TP {p_tp} → D TP {d_tp}", semantics, code]
    try:
        doc = json.loads((work / f"s{i}.json").read_text())
        rates = [d["gb_per_s"] for d in doc["decode"]]
        row += [doc["memory"], f"{doc['total_bytes'] / 2**20:.1f}", str(sum(d["descriptors"] for d in doc["decode"])),
                f"{min(rates):.1f}..{max(rates):.1f}",
                "verified" if doc["verified"] else
                f"{doc['bad_bytes']:,} wrong (check predicts {doc['predicted_bad_bytes']:,})"]
        ok &= doc["bad_bytes"] == doc["predicted_bad_bytes"]
    except (OSError, ValueError, KeyError):
        err = (work / f"s{i}.err").read_text().strip().splitlines()
        row += [""] * 4 + [(err[-1] if err else "no output")[:70]]
    row[-1] = ("ok  " if ok else "BAD ") + row[-1]
    good &= ok
    rows.append(row)
widths = [max(len(str(r[c])) for r in [header, *rows]) for c in range(len(header))]
print(f"mambaxfer execute --engine sglang on {device}")
for r in [header, ["-" * w for w in widths], *rows]:
    print("  ".join(str(v).ljust(w) for v, w in zip(r, widths)))
print("all runs as expected" if good else "SOME RUNS FAILED")
sys.exit(0 if good else 1)
PY

for model in qwen3.5-0.8b nemotron-h-8b; do
  echo "gpu_check: bench --engine sglang $model P TP 1 → D TP 2 on $DEVICE" >&2
  # shellcheck disable=SC2086
  $MAMBAXFER bench --engine sglang --model "$model" --p-tp 1 --d-tp 2 --semantics exact --device "$DEVICE" \
    --iters "${BENCH_ITERS:-20}" --timeout "$TIMEOUT" --format json >"$work/sb.json" 2>"$work/sb.err" || status=1
  "$PYTHON" - "$work/sb.json" "$work/sb.err" <<'PY' || status=1
import json, sys

try:
    doc = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    sys.exit("bench --engine sglang: no document: " + open(sys.argv[2]).read().strip()[-300:])
print(f"mambaxfer bench --engine sglang {doc['model']} P TP {doc['p_tp']} → D TP {doc['d_tp']} on {doc['memory']}, "
      f"{doc['iters']} iters (WRITE, GB/s median)")
for name, v in doc["variants"].items():
    print(f"  {name:<8} {v['descriptors_posted']:>6} descs  {v['bytes_per_descriptor']:>10,} B/desc  "
          f"{v['gb_per_s']['median']:>8.2f} GB/s  {'verified' if v['verified'] else 'WRONG BYTES'}")
print(f"  planned/limit {doc['ratio']:.2f}")
sys.exit(0 if doc["verified"] else 1)
PY
done
fi

if [[ " $ENGINES " == *" vllm "* && " $ENGINES " == *" sglang "* ]]; then
# Both engines in one command: vLLM's READ and WRITE of per-block regions and SGLang's WRITE of
# per-slot entries, each against one descriptor per P -> D pair; exit 0 only if every byte verified.
for model in qwen3.5-0.8b nemotron-h-8b; do
  echo "gpu_check: bench --engine vllm,sglang $model P TP 1 → D TP 2 on $DEVICE" >&2
  # shellcheck disable=SC2086
  COLUMNS=100 $MAMBAXFER bench --engine vllm,sglang --model "$model" --p-tp 1 --d-tp 2 --device "$DEVICE" \
    --iters "${BENCH_ITERS:-20}" --timeout "$TIMEOUT" || status=1
done
fi
exit $status

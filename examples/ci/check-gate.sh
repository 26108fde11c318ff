#!/usr/bin/env bash
# Gate a rollout on `mambaxfer check`: refuse a P/D topology unless vLLM accepts every pairing and
# moves the right bytes, proved byte by byte. Exit code 0: it works; 1: vLLM would refuse a pairing
# or corrupt state (one line each in the log, with the fix); 2: a usage error (bad arguments to
# this script, an unknown model, a pairing that does not exist for the model, ...); 70: mambaxfer
# crashed (a bug).
#
#   check-gate.sh MODEL PAIRS [both|exact|vllm]
#   check-gate.sh nemotron-h-8b 1:4,4:1               # vLLM moves the right bytes: passes
#   check-gate.sh granite-4.0-h-tiny 1:2,2:1          # vLLM corrupts the B/C groups: fails
#   check-gate.sh ./my-model/config.json 2:4,4:2 exact   # only mambaxfer's exact plans
#
# Results go to $MAMBAXFER_CHECK_OUT (default ./mambaxfer-check): check.log (the table and the
# explanation of any failure, also printed) and junit.xml. Set MAMBAXFER to run another command
# than `mambaxfer`, e.g. MAMBAXFER="python -m mambaxfer_cli".
set -euo pipefail

usage="usage: $(basename "$0") MODEL PAIRS [both|exact|vllm]"
if [ $# -lt 2 ] || [ $# -gt 3 ] || [ -z "$1" ] || [ -z "$2" ]; then
    echo "$usage" >&2
    exit 2
fi
model=$1
pairs=$2
semantics=${3:-both}
case $semantics in
    both|exact|vllm) ;;
    *) echo "gate: semantics must be both, exact or vllm, not '$semantics'; $usage" >&2; exit 2 ;;
esac
out=${MAMBAXFER_CHECK_OUT:-mambaxfer-check}
read -r -a mambaxfer <<< "${MAMBAXFER:-mambaxfer}"
mkdir -p "$out"
# A previous run's results must never pass for this one's (a usage error writes none).
rm -f "$out/junit.xml" "$out/check.log"

status=0
# stdout and stderr both go to the log (a usage error is on stderr) and to the terminal.
"${mambaxfer[@]}" check --model "$model" --pairs "$pairs" --semantics "$semantics" \
    --junit "$out/junit.xml" 2>&1 | tee "$out/check.log" || status=${PIPESTATUS[0]}

case $status in
    0) echo "gate: $model $pairs ($semantics semantics) verified byte by byte" ;;
    1) echo "gate: $model $pairs ($semantics semantics) would be refused or corrupt state: see above, $out/junit.xml" >&2 ;;
    2) echo "gate: mambaxfer check refused the arguments (exit 2): see above, $out/check.log" >&2 ;;
    *) echo "gate: mambaxfer check could not run (exit $status): see $out/check.log" >&2 ;;
esac
exit "$status"

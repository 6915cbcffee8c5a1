#!/usr/bin/env bash
# Decode A/B on the device, after scripts/gpu-check.sh (which writes the
# memra-synth model): tg tok/s of `memra-bench -p 0 -n N` under each
# experiment's environment, all in one run (alternating twice, so drift
# shows). Usage: exp-token.sh 'label:VAR=1 VAR2=0' ...  Env: B (build
# folder, default /tmp/build-gpu), SYNTH (model), N (tokens, default 128), D (depth).
set -u
cd "$(dirname "$0")/.."
. scripts/gpu-env.sh
B=${B:-${PREBUILT:-/tmp/build-gpu}}
model=${SYNTH:-/tmp/q35-9b-q8_0.gguf}
tg() { env ${1:-X=0} "$B/examples/memra-bench" -m "$model" --device cuda:0 -p 0 -n "${N:-128}" -d "${D:-0}" -r 2 --json 2>/dev/null |
       python3 -c 'import json,sys; b=json.load(sys.stdin); print("%.1f" % b["tg"]["tok_s"])' 2>/dev/null || echo fail; }
declare -A res
for pass in 1 2; do
  for v in "$@"; do
    res[$v]="${res[$v]:-} $(tg "${v#*:}")"
  done
done
for v in "$@"; do printf "exp %-28s %s\n" "${v%%:*}" "${res[$v]}"; done

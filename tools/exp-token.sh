#!/usr/bin/env bash
# Decode A/B on the device, after scripts/gpu-check.sh (which writes the
# memra-synth model): tg tok/s of `memra-bench -p 0 -n N` under each
# experiment's environment, all in one run (alternating twice, so drift
# shows). Usage: exp-token.sh 'label:VAR=1 VAR2=0' ...  Env: B (build
# folder, default /tmp/build-gpu), SYNTH (model), N (tokens, default 128), D (depth),
# DEVICE (default cuda:0), BATCH (a list such as 1,2,4: batched steps instead,
# `memra-bench --batch BATCH -p P` with P-token prompts (default 16), each
# experiment's aggregate tg tok/s at every B, in the list's order).
set -u
cd "$(dirname "$0")/.."
[ "${DEVICE:-cuda:0}" = cpu ] || . scripts/gpu-env.sh
B=${B:-${PREBUILT:-/tmp/build-gpu}}
model=${SYNTH:-/tmp/q35-9b-q8_0.gguf}
if [ -n "${BATCH:-}" ]; then
  shape=(--batch "$BATCH" -p "${P:-16}")
else
  shape=(-p 0 -d "${D:-0}")
fi
# one JSON object per B (or per depth): their tg rates joined by "/"
tg() { env ${1:-X=0} "$B/examples/memra-bench" -m "$model" --device "${DEVICE:-cuda:0}" "${shape[@]}" -n "${N:-128}" -r 2 \
         --json 2>/dev/null |
       python3 -c 'import json,sys; r=["%.1f" % json.loads(l)["tg"]["tok_s"] for l in sys.stdin if l.strip()]; print("/".join(r) if r else "fail")' \
         2>/dev/null || echo fail; }
declare -A res
for pass in 1 2; do
  for v in "$@"; do
    res[$v]="${res[$v]:-} $(tg "${v#*:}")"
  done
done
for v in "$@"; do printf "exp %-28s %s\n" "${v%%:*}" "${res[$v]}"; done

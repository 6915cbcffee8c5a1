#!/usr/bin/env bash
# Pipeline parity and speed on two GPUs (run on the nvidia-h200-x2 device):
# builds with CUDA, re-runs the kernel check, then memra-ppn-gate with 2
# stages on cuda:0,cuda:1 for every fixture model and for a memra-synth
# Qwen3.5-9B Q8_0, and memra-bench unsplit vs split. Summary last.
# Env: SYNTH=path (reuse a model), SKIP_FIXTURES=1, SKIP_KC=1.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-pipeline-out}
mkdir -p "$OUT"
. scripts/gpu-env.sh || exit 2
summary=()
note() { summary+=("$*"); echo "== $*"; }
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader | tee "$OUT/gpus.txt"
nvidia-smi topo -m > "$OUT/topo.txt" 2>&1

t0=$(date +%s)
[ -f build-gpu/build.ninja ] || meson setup build-gpu -Dcuda=enabled -Dtests=false >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 2; }
ninja -C build-gpu >>"$OUT/build.log" 2>&1 || { grep -E "error|FAILED" "$OUT/build.log" | head -30; exit 2; }
note "build ok ($(( $(date +%s) - t0 )) s)"

if [ "${SKIP_KC:-0}" != 1 ]; then
  build-gpu/probes/memra-kernel-check --small >"$OUT/kernel-check.log" 2>&1
  note "kernel-check (cuda:0): rc $?, $(tail -1 "$OUT/kernel-check.log")"
fi

gate() { # model label -> one summary line
  local log="$OUT/ppn-$2.log"
  timeout 300 build-gpu/probes/memra-ppn-gate "$1" stages=2 devices=cuda:0,cuda:1 >"$log" 2>&1
  local rc=$?
  note "ppn-gate 2 stages $2: rc $rc, $(grep -E '^(PASS|FAIL)' "$log" | head -1) $(grep -E '^(serial|pipelined) ' "$log" | awk '{printf "%s %s/%s %s tok/s; ", $1, $7-$8, $7, $9}')"
}
if [ "${SKIP_FIXTURES:-0}" != 1 ]; then
  for f in .fixtures/models/*.gguf; do gate "$f" "$(basename "$f" .gguf)"; done
fi

model=${SYNTH:-/tmp/q35-9b-q8_0.gguf}
if [ ! -f "$model" ]; then
  t0=$(date +%s)
  build-gpu/examples/memra-synth --model qwen3.5-9b --type q8_0 --out "$model" >"$OUT/synth.log" 2>&1 || { cat "$OUT/synth.log"; exit 2; }
  note "synth qwen3.5-9b q8_0 ($(( $(date +%s) - t0 )) s)"
fi
build-gpu/examples/memra-bench -m "$model" --device cuda:0 -p 512 -n 128 -r 3 --json >"$OUT/bench-unsplit.json" 2>"$OUT/bench-unsplit.err"
note "bench unsplit cuda:0: $(cat "$OUT/bench-unsplit.json" "$OUT/bench-unsplit.err" | tail -2)"
MEMRA_PP_STAGES=2 MEMRA_PP_DEVICES=cuda:0,cuda:1 build-gpu/examples/memra-bench -m "$model" --device cuda:0 -p 512 -n 128 -r 3 --json \
  >"$OUT/bench-split.json" 2>"$OUT/bench-split.err"
note "bench split cuda:0,cuda:1: $(cat "$OUT/bench-split.json" "$OUT/bench-split.err" | tail -2)"
gate "$model" qwen3.5-9b-q8_0

echo
echo "==== summary ===="
for s in "${summary[@]}"; do echo "$s"; done

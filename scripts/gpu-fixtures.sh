#!/usr/bin/env bash
# The GPU fixtures on the device from scripts/prebuilt-fixtures.sh's
# .gpufix/ (carried): test_models on cuda:0 in fast mode (prefill held to
# FAST_PREFILL_TOL, default 5e-3, as scripts/gpu-check.sh does) and in exact
# mode; logs in $OUT (default /tmp), a summary line per mode last.
# Exit status: 0 when both modes pass.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp}
mkdir -p "$OUT"
W=/tmp/gpufix
[ -f .gpufix/test_models.xz ] || { echo "gpu-fixtures: no .gpufix/ (scripts/prebuilt-fixtures.sh, carry .gpufix)" >&2; exit 2; }
GPU_DEPS=.gpufix/deps . scripts/gpu-env.sh || exit 2 # its runtime packages, nvcc's PATH
rm -rf "$W" && mkdir -p "$W"
tar -xJf .gpufix/models.tar.xz -C "$W" && xz -dc .gpufix/test_models.xz >"$W/test_models" && chmod +x "$W/test_models" || exit 2
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
rc=0 lines=()
for mode in 1 0; do
  tol=()
  [ $mode = 1 ] && tol=(MEMRA_TEST_PREFILL_TOL="${FAST_PREFILL_TOL:-5e-3}")
  env MEMRA_TEST_DEVICE=cuda:0 MEMRA_FIXTURES="$W" MEMRA_FAST=$mode "${tol[@]}" \
    timeout "${T:-300}" "$W/test_models" >"$OUT/models-fast$mode.log" 2>&1
  r=$?
  [ $r = 0 ] || rc=1
  lines+=("test_models MEMRA_FAST=$mode ($(cat .gpufix/REV)): rc $r, $(grep -cE '^\[       OK \]' "$OUT/models-fast$mode.log") ok, $(grep -cE '^\[  FAILED  \]' "$OUT/models-fast$mode.log") failed, $(grep -cE '^\[  SKIPPED \]' "$OUT/models-fast$mode.log") skipped")
done
printf '%s\n' "${lines[@]}"
exit $rc

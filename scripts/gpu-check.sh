#!/usr/bin/env bash
# The one script run on the GPU device machine (docs/CUDA.md): builds memra
# with the CUDA backend, runs the kernel check (CUDA ops vs the CPU
# reference), then the model fixture test on the GPU engine in fast
# (default) and exact (MEMRA_FAST=0) mode, and prints a short summary last.
#
# The device image lacks cmocka/utf8proc/pcre2 dev packages and cannot
# download: they travel as .debs in .deps/ (fetched here with
#   cd .deps && apt-get download libcmocka-dev libcmocka0 libutf8proc-dev
#   libutf8proc2 libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0
#   libpcre2-posix3 pkgconf pkgconf-bin libpkgconf3)
# and are unpacked into /tmp/deps, never into /. Fixtures travel in
# .fixtures/models (a copy of ../shared/fixtures/models). Logs go to $OUT.
#
# Env: KC_ARGS (extra memra-kernel-check arguments, e.g. "--bench"),
# FAST_PREFILL_TOL (prefill bound of the fast-mode model run, default 5e-3),
# SKIP_MODELS=1, SKIP_KC=1.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-check-out}
mkdir -p "$OUT"
summary=()
note() { summary+=("$*"); echo "== $*"; }

# ---- dependencies --------------------------------------------------------
. scripts/gpu-env.sh || exit 2
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/gpu.txt"

# ---- build ------------------------------------------------------------------
t0=$(date +%s)
if [ ! -f build-gpu/build.ninja ]; then
  meson setup build-gpu -Dcuda=enabled >"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 2; }
fi
if ! ninja -C build-gpu >>"$OUT/build.log" 2>&1; then
  grep -E "error|FAILED" "$OUT/build.log" | head -40
  exit 2
fi
note "build: ok ($(( $(date +%s) - t0 )) s)"

# ---- kernel check -------------------------------------------------------------
kc_rc=0
if [ "${SKIP_KC:-0}" != 1 ]; then
  t0=$(date +%s)
  build-gpu/probes/memra-kernel-check ${KC_ARGS:-} >"$OUT/kernel-check.log" 2>&1
  kc_rc=$?
  grep -vE " ok( |$)" "$OUT/kernel-check.log" | tail -30
  note "kernel-check: rc $kc_rc, $(tail -1 "$OUT/kernel-check.log") ($(( $(date +%s) - t0 )) s)"
  if [ -n "${KC_AB:-}" ]; then # A/B of the decode matvec build: MEMRA_MMV_MINB=1
    MEMRA_MMV_MINB=1 build-gpu/probes/memra-kernel-check --bench --test="$KC_AB" >"$OUT/kernel-check-minb1.log" 2>&1
    grep -E "GB/s" "$OUT/kernel-check-minb1.log" | sed 's/^/minb1 /' | cut -c1-36,115-200
  fi
fi

# ---- model fixtures on the GPU engine ----------------------------------------------
if [ "${SKIP_MODELS:-0}" != 1 ]; then
  for mode in fast exact; do
    t0=$(date +%s)
    if [ $mode = fast ]; then
      env MEMRA_TEST_DEVICE=cuda:0 MEMRA_FIXTURES="$PWD/.fixtures" MEMRA_FAST=1 \
        MEMRA_TEST_PREFILL_TOL="${FAST_PREFILL_TOL:-5e-3}" build-gpu/test/test_models >"$OUT/models-$mode.log" 2>&1
    else
      env MEMRA_TEST_DEVICE=cuda:0 MEMRA_FIXTURES="$PWD/.fixtures" MEMRA_FAST=0 \
        build-gpu/test/test_models >"$OUT/models-$mode.log" 2>&1
    fi
    rc=$?
    grep -E "^ACCURACY|FAILED|PASSED|SKIPPED|\[  (FAILED|ERROR) \]|fail|differs" "$OUT/models-$mode.log" | head -40
    note "models $mode: rc $rc, $(grep -cE '^\[       OK \]' "$OUT/models-$mode.log") ok, $(grep -cE '^\[  FAILED  \]' "$OUT/models-$mode.log") failed lines ($(( $(date +%s) - t0 )) s)"
  done
fi

echo
echo "==== summary ===="
for s in "${summary[@]}"; do echo "$s"; done
for mode in fast exact; do
  [ -f "$OUT/models-$mode.log" ] && grep -h "^ACCURACY" "$OUT/models-$mode.log" | sed "s/^ACCURACY/$mode/"
done
exit $kc_rc

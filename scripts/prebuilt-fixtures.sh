#!/usr/bin/env bash
# Lays out what a device call needs to run the GPU fixtures (test_models in
# fast and exact mode) without building on the device, in .gpufix/
# (git-ignored), from a local CUDA build folder (default build-cuda,
# configured with -Dcuda=enabled):
#   scripts/prebuilt-fixtures.sh && run: scripts/gpu-fixtures.sh, carry .gpufix
# test_models links the library statically (67 MB at b45b12b), so it
# travels alone, without its debug info and xz-compressed (~37 MB), with the
# fixture models as one .tar.xz (~24 MB from 38 MB) and the three Debian
# runtime packages it loads (cmocka, utf8proc, pcre2-8; from .deps/, as
# scripts/deps.sh downloads them). A device call carries 64 MiB with the
# tracked tree (~6 MB): every fixture no longer fits beside the test, so
# FIXTURES (shell globs in the fixture folder, e.g. "g4-* q35-dense.q8_0*")
# picks the models (default: all, with a warning when it is too big;
# test_models skips the absent ones).
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:-build-cuda}
fx=${MEMRA_FIXTURES:-../shared/fixtures}
ninja -C "$src" test/test_models >/dev/null
[ -d "$fx/models" ] || { echo "prebuilt-fixtures: no $fx/models (set MEMRA_FIXTURES)" >&2; exit 2; }
rm -rf .gpufix && mkdir -p .gpufix/deps
for p in libcmocka0 libutf8proc2 libpcre2-8-0; do
  f=$(ls .deps/${p}_*.deb 2>/dev/null | head -1)
  [ -n "$f" ] || { echo "prebuilt-fixtures: no .deps/${p}_*.deb (scripts/deps.sh)" >&2; exit 2; }
  cp "$f" .gpufix/deps/
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$src/test/test_models" "$tmp/test_models"
strip --strip-debug "$tmp/test_models"
xz -T0 -9e -c "$tmp/test_models" >.gpufix/test_models.xz
mkdir -p "$tmp/sub/models"
(cd "$fx/models" && for g in ${FIXTURES:-*}; do for f in $g; do [ -f "$f" ] && cp "$f" "$tmp/sub/models/"; done; done)
tar -cf - -C "$tmp/sub" models | xz -T0 -9e >.gpufix/models.tar.xz
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!docs' || echo +dirty)" >.gpufix/REV
du -sh .gpufix
total=$(( $(du -sb .gpufix | cut -f1) + $(git ls-files -z | du -cb --files0-from=- | tail -1 | cut -f1) ))
[ "$total" -le $((64 * 1024 * 1024)) ] ||
  echo "prebuilt-fixtures: .gpufix with the tracked tree is $((total / 1048576)) MiB, over the 64 MiB a call carries: set FIXTURES" >&2

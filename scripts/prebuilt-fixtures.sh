#!/usr/bin/env bash
# Lays out what a device call needs to run the GPU fixtures (test_models in
# fast and exact mode) without building on the device, in .gpufix/
# (git-ignored), from a local CUDA build folder (default build-cuda,
# configured with -Dcuda=enabled):
#   scripts/prebuilt-fixtures.sh && run: scripts/gpu-fixtures.sh, carry .gpufix
# test_models links the library statically (60 MB), so it travels alone,
# xz-compressed (~36 MB), with the fixture models as one .tar.xz (~24 MB
# from 38 MB) and the three Debian runtime packages it loads (cmocka,
# utf8proc, pcre2-8; from .deps/, as scripts/deps.sh downloads them): ~61
# MB, under the 64 MiB a device call carries with the tracked tree, where
# .gpubin/ and .fixtures/ together do not fit.
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
xz -T0 -6 -c "$src/test/test_models" >.gpufix/test_models.xz
tar -cf - -C "$fx" models | xz -T0 -6 >.gpufix/models.tar.xz
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!docs' || echo +dirty)" >.gpufix/REV
du -sh .gpufix

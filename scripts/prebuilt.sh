#!/usr/bin/env bash
# Lays out the binaries the device scripts run, from a local CUDA build
# folder (default build-cuda, configured with -Dcuda=enabled), in .gpubin/
# (git-ignored), so that a device call can skip its ~60 s build:
#   scripts/prebuilt.sh && run: PREBUILT=.gpubin scripts/gpu-check.sh, carry .gpubin
# (WITH_TESTS=1 adds test_models, 28 MB. Debian 12 binaries run on the device's Ubuntu 24.04; nvcc is 13.0 on both.)
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:-build-cuda}
ninja -C "$src" >/dev/null
rm -rf .gpubin && mkdir -p .gpubin/examples .gpubin/probes .gpubin/test
cp -L "$src/libmemra.so.0" .gpubin/libmemra.so.0
cp "$src/examples/memra-bench" "$src/examples/memra-synth" .gpubin/examples/
cp "$src/probes/memra-kernel-check" .gpubin/probes/
[ "${WITH_TESTS:-0}" = 1 ] && cp "$src/test/test_models" .gpubin/test/
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!docs' || echo +dirty)" > .gpubin/REV
du -sh .gpubin

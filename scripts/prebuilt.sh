#!/usr/bin/env bash
# Lays out the binaries the device scripts run, from a local CUDA build
# folder (default build-cuda, configured with -Dcuda=enabled), in .gpubin/
# (git-ignored), so that a device call can skip its ~60 s build:
#   scripts/prebuilt.sh && run: PREBUILT=.gpubin scripts/gpu-check.sh, carry .gpubin
# memra-logits comes along for gpu-check.sh's bit-for-bit checks. The
# library (67 MB with the CUDA kernels at 189475a, over the 64 MiB a device
# call carries) travels xz-compressed (25 MB); scripts/gpu-env.sh
# unpacks it on the device. The tests link the library statically (66 MB
# each): WITH_TESTS=1 adds test_models only, compressed too (it then takes
# the carry with the library: no fixtures beside them).
# (Debian 12 binaries run on the device's Ubuntu 24.04; nvcc is 13.0 on both.)
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:-build-cuda}
ninja -C "$src" >/dev/null
rm -rf .gpubin && mkdir -p .gpubin/examples .gpubin/probes .gpubin/test
cp -L "$src/libmemra.so.0" .gpubin/libmemra.so.0
cp "$src/examples/memra-bench" "$src/examples/memra-synth" "$src/examples/memra-logits" .gpubin/examples/
cp "$src/probes/memra-kernel-check" .gpubin/probes/
[ "${WITH_TESTS:-0}" = 1 ] && cp "$src/test/test_models" .gpubin/test/ && xz -T0 -6 .gpubin/test/test_models
xz -T0 -6 .gpubin/libmemra.so.0
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!docs' || echo +dirty)" > .gpubin/REV
du -sh .gpubin

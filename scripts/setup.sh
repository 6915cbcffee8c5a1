#!/usr/bin/env bash
# One command on a fresh machine: install dependencies, build, and run the
# main job (memra-run on the bundled default model).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"
[ -f build/build.ninja ] || meson setup build --buildtype=release
ninja -C build
exec build/examples/memra-run -p "The quick brown fox" -n 24 "$@"

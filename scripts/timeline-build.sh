#!/usr/bin/env bash
# Builds the fast-path timeline diagnostic (cuda/mmv.cuh, MEMRA_MMV_TIMELINE)
# as a copy of the library: cuda/mmv_q8.cu recompiled with the flag and
# linked with the other objects of a configured CUDA build folder (default
# build-cuda), into OUT (default build-cuda/libmemra-timeline.so). Use it
# in place of libmemra.so.0 next to the examples, run with
# MEMRA_MMV_TIMELINE=dump, then scripts/mmv-timeline.py dump.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build-cuda}
out=$(realpath -m "${2:-$B/libmemra-timeline.so}")
ninja -C "$B" >/dev/null
obj=libmemra.so.0.1.0.p/cuda_mmv_q8.cu.o
args=$(awk -v o="build $obj:" 'index($0, o) == 1 { f = 1 } f && /^ ARGS = / { sub(/^ ARGS = /, ""); print; exit }' "$B/build.ninja")
link=$(ninja -C "$B" -t commands libmemra.so.0.1.0 | tail -1)
cd "$B"
nvcc $args -DMEMRA_MMV_TIMELINE -o timeline_mmv_q8.o -c ../cuda/mmv_q8.cu
eval "$(echo "$link" | sed -e "s|$obj|timeline_mmv_q8.o|" -e "s| -o libmemra.so.0.1.0 | -o $out |")"
rm -f timeline_mmv_q8.o
ls -l "$out"

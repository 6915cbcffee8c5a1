#!/usr/bin/env bash
# Builds a timeline diagnostic as a copy of the library: the matvec fast
# path's (cuda/mmv.cuh, MEMRA_MMV_TIMELINE: cuda/mmv_q8.cu recompiled with
# the flag) or, with WHAT=fa, the attention kernel's (cuda/ops_attn.cu,
# MEMRA_FA_TIMELINE), linked with the other objects of a configured CUDA
# build folder (default build-cuda), into OUT (default
# build-cuda/libmemra-timeline.so). Use it in place of libmemra.so.0 next to
# the examples, run with MEMRA_MMV_TIMELINE=dump (MEMRA_FA_TIMELINE=dump),
# then tools/mmv-timeline.py dump (tools/fa-timeline.py dump).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build-cuda}
out=$(realpath -m "${2:-$B/libmemra-timeline.so}")
ninja -C "$B" >/dev/null
if [ "${WHAT:-mmv}" = fa ]; then src=ops_attn flag=MEMRA_FA_TIMELINE; else src=mmv_q8 flag=MEMRA_MMV_TIMELINE; fi
obj=libmemra.so.0.1.0.p/cuda_$src.cu.o
args=$(awk -v o="build $obj:" 'index($0, o) == 1 { f = 1 } f && /^ ARGS = / { sub(/^ ARGS = /, ""); print; exit }' "$B/build.ninja")
link=$(ninja -C "$B" -t commands libmemra.so.0.1.0 | tail -1)
cd "$B"
nvcc $args -D$flag -o timeline_$src.o -c ../cuda/$src.cu
eval "$(echo "$link" | sed -e "s|$obj|timeline_$src.o|" -e "s| -o libmemra.so.0.1.0 | -o $out |")"
rm -f timeline_$src.o
ls -l "$out"

#!/usr/bin/env bash
# Matvec experiment sweep on the device (after scripts/gpu-check.sh built
# /tmp/build-gpu, or $B): kernel-check timings of one case under the mmv knobs
# (MEMRA_MMV_RING, MEMRA_MMV_SMEM_TARGET, MEMRA_MMV_PROBE = weights streamed
# but no dots: the memory side alone). Usage: exp-mmv.sh [CASE]. The knobs
# act on the generic kernel, so the Q8_0 decode fast path is off here
# (MEMRA_MMV_Q8D=0; tools/mmv-lab.cu times the fast path).
set -u
cd "$(dirname "$0")/.."
. scripts/gpu-env.sh
KC=${B:-/tmp/build-gpu}/probes/memra-kernel-check
case=${1:-matmul.q8_0.4096_ff}
t() { env MEMRA_MMV_Q8D=0 "$@" timeout 60 $KC --bench --test="$case" 2>&1 | grep -E "^matmul" |
      grep -oE "[0-9.]+ us +[0-9.]+ GB/s" | sed "s|^|$* : |"; }
t X=base
t MEMRA_MMV_TMA=0
t MEMRA_MMV_PROBE=1
t MEMRA_MMV_PROBE=1 MEMRA_MMV_TMA=0
for r in 2 3 4 6; do t MEMRA_MMV_RING=$r; done
for tg in 40000 110000; do t MEMRA_MMV_SMEM_TARGET=$tg; done

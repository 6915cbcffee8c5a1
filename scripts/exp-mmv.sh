set -u
. scripts/gpu-env.sh
[ -f build-gpu/build.ninja ] || meson setup build-gpu -Dcuda=enabled >/dev/null 2>&1
ninja -C build-gpu > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 2; }
KC=build-gpu/probes/memra-kernel-check
t() { env "$@" $KC --bench --test=matmul.q8_0.4096_ff 2>&1 | grep -E "^matmul" | awk -v e="$*" '{printf "%-60s %s %s %s %s\n", e, $(NF-3), $(NF-2), $(NF-1), $NF}'; }
t X=base
t MEMRA_MMV_PROBE=1
for r in 2 3 5 8; do t MEMRA_MMV_RING=$r; t MEMRA_MMV_RING=$r MEMRA_MMV_PROBE=1; done
for tg in 60000 200000; do t MEMRA_MMV_SMEM_TARGET=$tg; t MEMRA_MMV_SMEM_TARGET=$tg MEMRA_MMV_PROBE=1; done
MEMRA_MMV_DEBUG=1 $KC --test=matmul.q8_0.4096_ff 2>&1 | grep ^mmv | head -3
ncu --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats -k regex:mmv_q_kernel -c 1 $KC --test=matmul.q8_0.4096_ff > $OUT/ncu-q8.txt 2>&1
ncu --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats -k regex:mmv_f_kernel -c 1 $KC --test=matmul.f16.4096_ff > $OUT/ncu-f16.txt 2>&1
grep -E "Throughput|Duration|Occupancy|Issue|Stall|Warp Cycles|Active Warps|Eligible|ERR|Registers|Block Limit|Shared" $OUT/ncu-q8.txt | head -50

#!/usr/bin/env bash
# Nsight Compute on a few consecutive kernels of decode (device only): the
# full section set of the COUNT launches matching REGEX after SKIP of
# them, in `memra-bench -p 0 -n 3`, with the clocks left alone. Writes the
# details page and the per-instruction (SASS) source page as CSV to $OUT,
# and prints each kernel's duration, throughput and stall summary, then
# the instructions where warps were sampled most.
# Usage: tools/ncu-kernel.sh MODEL REGEX SKIP COUNT   (B: build folder;
# BENCH_ARGS: memra-bench's arguments, default "-p 0 -n 3 -r 1"; a batched
# step's kernels, e.g. the batched Q8_0 matvec:
#   BENCH_ARGS="-p 1 -n 3 -r 1 --batch 8" tools/ncu-kernel.sh MODEL mmv_q8b 40 4)
set -uo pipefail
cd "$(dirname "$0")/.."
B=${B:-${PREBUILT:-/tmp/build-gpu}}
BENCH_ARGS=${BENCH_ARGS:-"-p 0 -n 3 -r 1"}
OUT=${OUT:-/tmp}
model=$1 re=$2 skip=$3 count=$4
ncu --clock-control none --kernel-name "regex:$re" --launch-skip "$skip" --launch-count "$count" --set full \
  --import-source no -f -o "$OUT/ncu-k" "$B/examples/memra-bench" -m "$model" --device cuda:0 $BENCH_ARGS \
  >"$OUT/ncu-run.log" 2>&1 || { tail -5 "$OUT/ncu-run.log"; exit 1; }
ncu --import "$OUT/ncu-k.ncu-rep" --page details --print-units base >"$OUT/ncu-details.txt" 2>&1
ncu --import "$OUT/ncu-k.ncu-rep" --page source --csv --print-source sass >"$OUT/ncu-source.csv" 2>&1
grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|Achieved Occupancy|Warp Cycles Per Issued|Registers Per|spends|stalled" \
  "$OUT/ncu-details.txt" | cut -c1-220 | head -60
python3 - "$OUT/ncu-source.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1], errors="replace")))
hi = next((i for i, r in enumerate(rows) if any("Source" == c for c in r)), None)
if hi is None:
    print("no source table"); sys.exit()
hdr = rows[hi]; body = [r for r in rows[hi + 1:] if len(r) == len(hdr)]
col = next((i for i, c in enumerate(hdr) if c.startswith("Warp Stall Sampling (All")), None)
src = hdr.index("Source")
print("source columns:", [c for c in hdr][:12])
if col is None: sys.exit()
tot = sum(float(r[col] or 0) for r in body)
top = sorted(body, key=lambda r: -float(r[col] or 0))[:30]
for r in top:
    print("%6.2f%%  %s" % (100 * float(r[col] or 0) / max(tot, 1), r[src][:110]))
PY

#!/usr/bin/env bash
# Nsight Compute on a few consecutive kernels of decode (device only): the
# full section set of the COUNT launches matching REGEX after SKIP of
# them, in `memra-bench -p 0 -n 3`, with the clocks left alone. Writes the
# details page and the per-instruction (SASS) source page as CSV to $OUT,
# and prints each kernel's duration, throughput and stall summary, then
# per source table the opcode mix, the stall reasons and the instructions
# where warps were sampled most.
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
# the source page holds several tables, each after a "Kernel Name" line
# with its own header (launches of one function may repeat one table:
# match the instruction totals with the details page; a table of the same
# kernel and instruction total as an earlier one is named, not listed). Per table: the
# opcodes' shares of the instructions and of the stall samples, the stall
# reasons, the most sampled instructions; and its per-instruction counts
# (address, executions, samples, SASS) in $OUT/sass<i>.txt
python3 - "$OUT/ncu-source.csv" "$OUT" <<'PY'
import collections, csv, sys
blocks, cur = [], None
for r in csv.reader(open(sys.argv[1], errors="replace")):
    if r and r[0] == "Kernel Name":
        cur = []
        blocks.append((r[1] if len(r) > 1 else "?", cur))
    elif cur is not None:
        cur.append(r)
if not blocks:
    print("no source table"); sys.exit()
num = lambda v: float(v) if v not in ("", None) else 0.0
seen = {}
for bi, (name, b) in enumerate(blocks):
    if not b or "Source" not in b[0]:
        continue
    hdr = b[0]
    body = [r for r in b[1:] if len(r) == len(hdr)]
    src, ie = hdr.index("Source"), hdr.index("Instructions Executed")
    st = next((i for i, c in enumerate(hdr) if c.startswith("Warp Stall Sampling (All")), None)
    stall = lambda r: num(r[st]) if st is not None else 0.0
    tot, tst = sum(num(r[ie]) for r in body), sum(stall(r) for r in body) or 1.0
    if (name, tot) in seen:  # a repeated table: one listing and one sass file each
        print("== table %d: as table %d" % (bi, seen[(name, tot)]))
        continue
    seen[(name, tot)] = bi
    print("== table %d: %s, %.0f warp instructions" % (bi, name[:80], tot))
    op, ops = collections.Counter(), collections.Counter()
    for r in body:
        t = r[src].split()
        if t:
            o = (t[1] if t[0].startswith("@") and len(t) > 1 else t[0]).split(".")[0]
            op[o] += num(r[ie])
            ops[o] += stall(r)
    print("  " + ", ".join("%s %.1f%% (stalls %.1f%%)" % (o, 100 * c / max(tot, 1), 100 * ops[o] / tst)
                           for o, c in op.most_common(12)))
    reasons = {c: sum(num(r[i]) for r in body) for i, c in enumerate(hdr)
               if c.startswith("stall_") and "Not Issued" not in c}
    rt = sum(reasons.values()) or 1.0
    print("  stalls: " + ", ".join("%s %.1f%%" % (k[6:], 100 * v / rt)
                                   for k, v in sorted(reasons.items(), key=lambda kv: -kv[1])[:8]))
    for r in sorted(body, key=lambda r: -stall(r))[:12]:
        print("  %6.2f%%  %s" % (100 * stall(r) / tst, r[src][:110]))
    with open("%s/sass%d.txt" % (sys.argv[2], bi), "w") as f:
        for r in body:
            f.write("%s %9d %6d  %s\n" % (r[0][-5:], int(num(r[ie])), int(stall(r)), r[src]))
PY

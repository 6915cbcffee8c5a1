#!/usr/bin/env bash
# Per-kernel device time of decode tokens on the GPU machine, without the
# profiler's events or programmatic overlap: Nsight Compute times every
# kernel of `memra-bench -p 0 -n N` alone (serialized), and this prints the
# kernels of the last token grouped by name and grid, with their sum.
# Usage: tools/ncu-token.sh MODEL [N_TOKENS]   (B: build folder, default /tmp/build-gpu)
set -euo pipefail
model=$1
n=${2:-3}
csv=${OUT:-/tmp}/ncu-token.csv
ncu --csv --metrics gpu__time_duration.sum,dram__bytes_read.sum --print-units base \
  "${B:-/tmp/build-gpu}"/examples/memra-bench -m "$model" --device cuda:0 -p 0 -n "$n" -r 1 >"$csv" 2>/dev/null || true
python3 - "$csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
hdr, rows = rows[0], rows[1:]
ix = {k: i for i, k in enumerate(hdr)}
launches = collections.OrderedDict()
for r in rows:
    key = (r[ix["ID"]], r[ix["Kernel Name"]].split("(")[0][:60], r[ix["Grid Size"]], r[ix["Block Size"]])
    launches.setdefault(key, {})[r[ix["Metric Name"]]] = float(r[ix["Metric Value"]].replace(",", ""))
seq = list(launches.items())
# the last token: from the last embedding lookup (get_rows) on
last = max(i for i, (k, _) in enumerate(seq) if "get_rows" in k[1])
tok = seq[last:]
agg = collections.OrderedDict()
for (i, name, grid, block), m in tok:
    a = agg.setdefault((name, grid, block), [0, 0.0, 0.0])
    a[0] += 1; a[1] += m.get("gpu__time_duration.sum", 0) / 1e3; a[2] += m.get("dram__bytes_read.sum", 0) / 1e6
tot = sum(a[1] for a in agg.values())
print("kernels of one token: %d launches, %.1f us of kernel time" % (len(tok), tot))
print("%6s %9s %8s %9s  %s" % ("calls", "total_us", "avg_us", "MB_read", "kernel grid block"))
for (name, grid, block), (c, us, mb) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
    print("%6d %9.1f %8.2f %9.1f  %s %s %s" % (c, us, us / c, mb, name, grid, block))
PY

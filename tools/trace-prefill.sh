#!/usr/bin/env bash
# Where a prefill chunk's GPU time goes (device only): CUPTI's activity API
# (tools/cupti-trace.c, as tools/trace-token.sh) traces `memra-bench -p P -n 0
# -d D -r R` and sums each kernel name's durations over the timed runs (the
# warm-up and, at depth, the context fill are the first 1 + R..; only the last
# R prefills of P tokens are counted: the kernels after the last R-th gap).
# Prints kernels by total time, with calls and share.
# Usage: tools/trace-prefill.sh MODEL   (B: build folder, P: prompt tokens,
# default 512, D: depth, default 0, R: repetitions, default 2, TOP: rows)
set -uo pipefail
cd "$(dirname "$0")/.."
B=${B:-${PREBUILT:-/tmp/build-gpu}}
OUT=${OUT:-/tmp}
model=$1
so=${TRACER:-$B/cupti-trace.so}
[ -f "$so" ] || gcc -O2 -shared -fPIC -I/usr/local/cuda/include tools/cupti-trace.c -L/usr/local/cuda/lib64 -lcupti \
  -o "$so" || exit 1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
R=${R:-2}
CUDA_INJECTION64_PATH=$(realpath "$so") MEMRA_TRACE_OUT="$OUT/trace-pp.txt" "$B/examples/memra-bench" -m "$model" \
  --device cuda:0 -p "${P:-512}" -n 0 -d "${D:-0}" -r "$R" >"$OUT/trace-pp-run.log" 2>&1 ||
  { tail -5 "$OUT/trace-pp-run.log"; exit 1; }
grep -E "^pp|pp[0-9]" "$OUT/trace-pp-run.log" | head -3
python3 - "$OUT/trace-pp.txt" "$R" "${TOP:-25}" <<'PY'
import sys, collections
R, top = int(sys.argv[2]), int(sys.argv[3])
ks = []
for line in open(sys.argv[1]):
    f = line.split(None, 6)
    if f[6].startswith("API:") or f[6].strip() == "MEMCPY":
        continue
    ks.append((int(f[0]), int(f[1]), f[6].strip()[:60]))
ks.sort()
# the runs are separated by the host's gaps: the R longest gaps of idle GPU
# time split off the last R prefills
gaps = sorted(((ks[i + 1][0] - ks[i][1], i + 1) for i in range(len(ks) - 1)), reverse=True)[:R]
cuts = sorted(i for _, i in gaps) + [len(ks)]
run = ks[cuts[0]:]
span = sum(ks[b - 1][1] - ks[a][0] for a, b in zip(cuts, cuts[1:])) / 1e3 / R
busy = collections.defaultdict(lambda: [0, 0.0])
for s, e, n in run:
    busy[n][0] += 1; busy[n][1] += (e - s) / 1e3
tot = sum(v[1] for v in busy.values())
print("last %d prefills: %.1f us a prefill from first start to last end, kernels %.1f us (%.0f %% busy)" %
      (R, span, tot / R, 100 * tot / R / span))
for n, (c, t) in sorted(busy.items(), key=lambda kv: -kv[1][1])[:top]:
    print("%6d calls %10.1f us a prefill %5.1f %%  %s" % (c // R, t / R, 100 * t / tot, n))
PY

#!/usr/bin/env bash
# Where a prefill chunk's GPU time goes (device only): CUPTI's activity API
# (tools/cupti-trace.c, as tools/trace-token.sh) traces `memra-bench -p P -n 0
# -d D -r R` and sums each kernel name's marginal times over its prefills of
# P tokens (at depth 0 the warm-up's too; at a depth the last R, after
# their context fills).
# Prints kernels by total time, with calls and share.
# Usage: tools/trace-prefill.sh MODEL   (B: build folder, P: prompt tokens,
# default 512, D: depth, default 0, R: repetitions, default 2, TOP: rows,
# GAP: at a depth, the idle us that separate runs, default 300); kernels are named with
# their grid (gx x gy), so one name's launches of different shapes stay apart
set -uo pipefail
cd "$(dirname "$0")/.."
model=$1
. tools/cupti-env.sh
R=${R:-2}
CUDA_INJECTION64_PATH=$(realpath "$so") MEMRA_TRACE_OUT="$OUT/trace-pp.txt" "$B/examples/memra-bench" -m "$model" \
  --device cuda:0 -p "${P:-512}" -n 0 -d "${D:-0}" -r "$R" >"$OUT/trace-pp-run.log" 2>&1 ||
  { tail -5 "$OUT/trace-pp-run.log"; exit 1; }
grep -E "^pp|pp[0-9]" "$OUT/trace-pp-run.log" | head -3
python3 - "$OUT/trace-pp.txt" "$R" "${TOP:-25}" "${GAP:-300}" "${D:-0}" <<'PY'
import sys, collections
R, top = int(sys.argv[2]), int(sys.argv[3])
ks = []
for line in open(sys.argv[1]):
    f = line.split(None, 6)
    if f[6].startswith("API:") or f[6].strip() == "MEMCPY":
        continue
    ks.append((int(f[0]), int(f[1]), "%s g%sx%s" % (f[6].strip()[:56], f[2], f[3])))
ks.sort()
# at depth 0 every traced kernel belongs to one of the 1 + R prefills of P
# tokens (the warm-up and the timed runs, all alike); at a depth the runs
# are told apart by the host's work between them: the trace is split at
# idle gaps of more than GAP us and the last R pieces count (the kernel
# counts printed say whether the split found the runs)
if int(sys.argv[5]) == 0:
    run, R = ks, R + 1
    span = (ks[-1][1] - ks[0][0]) / 1e3 / R
else:
    G = float(sys.argv[4]) * 1e3
    cuts = [0] + [i + 1 for i in range(len(ks) - 1) if ks[i + 1][0] - ks[i][1] > G] + [len(ks)]
    pieces = list(zip(cuts, cuts[1:]))
    print("%d pieces split at gaps over %s us, kernels each: %s" % (len(pieces), sys.argv[4],
          " ".join(str(b - a) for a, b in pieces[-8:])))
    pieces = pieces[-R:]
    run = [k for a, b in pieces for k in ks[a:b]]
    span = sum(ks[b - 1][1] - ks[a][0] for a, b in pieces) / 1e3 / R
# each kernel is charged its marginal time, its end minus the latest end
# before it (tools/trace-token.sh): a launch that starts early under
# programmatic dependent launch waits inside its own duration
busy = collections.defaultdict(lambda: [0, 0.0])
last = None
for s, e, n in run:
    m = (e - s) if last is None else max(0, e - max(last, s))
    last = e if last is None else max(last, e)
    busy[n][0] += 1; busy[n][1] += m / 1e3
tot = sum(v[1] for v in busy.values())
print("%d prefills: %.1f us a prefill from first start to last end, marginals %.1f us" % (R, span, tot / R))
for n, (c, t) in sorted(busy.items(), key=lambda kv: -kv[1][1])[:top]:
    print("%6d calls %10.1f us a prefill %5.1f %%  %s" % (c // R, t / R, 100 * t / tot, n))
PY

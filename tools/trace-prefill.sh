#!/usr/bin/env bash
# Where a prefill chunk's GPU time goes (device only): CUPTI's activity API
# (tools/cupti-trace.c, as tools/trace-token.sh) traces `memra-bench -p P -n 0
# -d D -r R` and sums each kernel name's marginal times over its prefills of
# P tokens (at depth 0 the warm-up's too; at a depth each run's chunk of P
# tokens after its context fill: a chunk runs from its embedding lookup,
# whose grid is its token count (so P must differ from the library's fill
# chunks of 2048), to the next chunk's; the next run's cache reset, a few
# us of small launches, counts with it).
# Prints kernels by total time, with calls and share.
# Usage: tools/trace-prefill.sh MODEL   (B: build folder, P: prompt tokens,
# default 512, D: depth, default 0, R: repetitions, default 2, TOP: rows,
# TOP: rows); kernels are named with
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
python3 - "$OUT/trace-pp.txt" "$R" "${TOP:-25}" "${D:-0}" "${P:-512}" <<'PY'
import sys, collections
R, top, D, P = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
ks, emb = [], []
for line in open(sys.argv[1]):
    f = line.split(None, 6)
    if f[6].startswith("API:") or f[6].strip() == "MEMCPY":
        continue
    ks.append((int(f[0]), int(f[1]), "%s g%sx%s" % (f[6].strip()[:56], f[2], f[3])))
    emb.append(int(f[2]) if "get_rows_kernel" in f[6] else 0)
order = sorted(range(len(ks)), key=lambda i: ks[i])
ks, emb = [ks[i] for i in order], [emb[i] for i in order]
# at depth 0 every traced kernel belongs to one of the 1 + R prefills of P
# tokens (the warm-up and the timed runs, all alike); at a depth a run is
# its context fill's chunks and then its chunk of P tokens, each from its
# embedding lookup (grid: its tokens) to the next chunk's. The first run's
# chunk includes one-time costs (cuBLAS's first calls of its shapes: idle
# gaps of milliseconds, which marginal times leave out)
if D == 0:
    run, R = ks, R + 1
    span = (ks[-1][1] - ks[0][0]) / 1e3 / R
else:
    pieces = []
    for a in (i for i, g in enumerate(emb) if g == P):
        b = a + 1
        while b < len(ks) and not emb[b]:
            b += 1
        pieces.append((a, b))
    print("%d chunks of %d tokens, kernels each: %s" % (len(pieces), P, " ".join(str(b - a) for a, b in pieces)))
    if len(pieces) != R:
        sys.exit("expected %d: is P one of the fill's chunk sizes?" % R)
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

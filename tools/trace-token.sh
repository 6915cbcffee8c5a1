#!/usr/bin/env bash
# Where a decode token's time goes with every overlap left in (device only):
# CUPTI's activity API (tools/cupti-trace.c) traces `memra-bench -p 0 -n N`
# (no serialization, unlike MEMRA_CUDA_PROFILE and ncu), and each kernel of a token is charged its
# marginal time: its end minus the latest end before it, so that the
# marginals of a token add up to its wall time on the GPU. Prints the
# copies in the gap between tokens (after the head: start, end), the median
# per position in the token and the sums per kernel kind.
# Usage: tools/trace-token.sh MODEL   (B: build folder, N: tokens, D: depth,
# BATCH: a batched step of that many sequences instead (memra-bench --batch,
# P-token prompts, default 16; no depth), BENCH_ARGS: more memra-bench
# arguments; MEMRA_TRACE_API=1 lists the host's CUDA calls in the gap too)
set -uo pipefail
cd "$(dirname "$0")/.."
model=$1
. tools/cupti-env.sh
if [ -n "${BATCH:-}" ]; then
  shape=(--batch "$BATCH" -p "${P:-16}")
else
  shape=(-p 0 -d "${D:-0}")
fi
CUDA_INJECTION64_PATH=$(realpath "$so") MEMRA_TRACE_OUT="$OUT/trace.txt" "$B/examples/memra-bench" -m "$model" \
  --device cuda:0 "${shape[@]}" -n "${N:-48}" -r 1 ${BENCH_ARGS:-} >"$OUT/trace-run.log" 2>&1 || { tail -5 "$OUT/trace-run.log"; exit 1; }
grep -E "^tg|^B .*tg|decode at" "$OUT/trace-run.log"
python3 - "$OUT/trace.txt" <<'PY'
import sys, statistics as st, collections
ks, cps, apis = [], [], []
for line in open(sys.argv[1]):
    f = line.split(None, 6)
    if f[6].startswith("API:"):  # start end -2 cbid 0 0 API:name (MEMRA_TRACE_API=1)
        apis.append((int(f[0]), int(f[1]), f[6].strip()[4:]))
        continue
    if f[6].strip() == "MEMCPY":  # start end -1 kind bytes 0 MEMCPY
        cps.append((int(f[0]), int(f[1]), int(f[3]), int(f[4])))
    else:
        ks.append((int(f[0]), int(f[1]), f[6].strip()[:34], int(f[2]), int(f[3])))
ks.sort(); cps.sort()
# a token ends with the head matvec: the run's last kernel (a prefill at
# depth comes first, so the longest kernel need not be the head)
head = ks[-1]
hkey = (head[2], head[3], head[4])
ends = [i for i, k in enumerate(ks) if (k[2], k[3], k[4]) == hkey and k[1] - k[0] > 0.5 * (head[1] - head[0])]
toks = [ks[a + 1:b + 1] for a, b in zip(ends, ends[1:])]
P = collections.Counter(len(t) for t in toks).most_common(1)[0][0]
toks = [t for t in toks if len(t) == P][2:]
print("trace: %d tokens of %d kernels each" % (len(toks), P))
marg = [[] for _ in range(P)]; dur = [[] for _ in range(P)]; lat = [[] for _ in range(P)]
walls = []
for t in toks:
    last = t[0][0]
    prev_end = None
    for j, (s, e, n, gx, gy) in enumerate(t):
        marg[j].append(max(0, e - last) / 1e3 if j else (e - s) / 1e3)
        dur[j].append((e - s) / 1e3)
        lat[j].append(((s - prev_end) / 1e3) if prev_end is not None else 0.0)
        prev_end = e
        last = max(last, e)
    walls.append((last - t[0][0]) / 1e3)
gap = [(b[0][0] - a[-1][1]) / 1e3 for a, b in zip(toks, toks[1:])]
print("token on GPU (first start to last end): median %.1f us; host gap between tokens: median %.1f us" %
      (st.median(walls), st.median(gap) if gap else 0))
# the copies inside each gap, relative to the head's end (kind 1 = H2D, 2 = D2H)
import bisect
rows = collections.defaultdict(list)
for a, b in zip(toks, toks[1:]):
    t0, t1 = a[-1][1], b[0][0]
    i = bisect.bisect_left(cps, (t0,))
    n = collections.Counter()
    while i < len(cps) and cps[i][0] < t1:
        s, e, kd, by = cps[i]; i += 1
        n[kd] += 1
        rows[(kd, by, n[kd])].append(((s - t0) / 1e3, (e - t0) / 1e3))
    rows[("next kernel", 0, 1)].append(((t1 - t0) / 1e3, (b[0][1] - t0) / 1e3))
for k, v in sorted(rows.items(), key=lambda kv: st.median(x[0] for x in kv[1])):
    if len(v) * 2 >= len(gap):
        print("gap: %-12s %8d bytes: start %+6.1f end %+6.1f us after the head (median of %d)" %
              (("copy kind %d" % k[0]) if k[0] != "next kernel" else k[0], k[1], st.median(x[0] for x in v),
               st.median(x[1] for x in v), len(v)))
# host API calls that overlap each gap, in order (host clock = CUPTI's)
apis.sort()
arows = collections.defaultdict(list)
for a, b in zip(toks, toks[1:]):
    t0, t1 = a[-1][1], b[0][0]
    i = bisect.bisect_left(apis, (t0 - 3000000,))
    n = collections.Counter()
    while i < len(apis) and apis[i][0] < t1:
        s, e, nm = apis[i]; i += 1
        if e <= t0:
            continue
        n[nm] += 1
        arows[(nm, n[nm])].append(((s - t0) / 1e3, (e - t0) / 1e3))
for k, v in sorted(arows.items(), key=lambda kv: st.median(x[0] for x in kv[1])):
    if len(v) * 2 >= len(gap):
        print("gap api: %-34s #%d: start %+8.1f end %+8.1f us after the head (median of %d)" %
              (k[0][:34], k[1], st.median(x[0] for x in v), st.median(x[1] for x in v), len(v)))
kind = collections.OrderedDict()
for j in range(P):
    s, e, n, gx, gy = toks[0][j]
    k = "%s g%d" % (n, gx)
    m = st.median(marg[j]); d = st.median(dur[j]); l = st.median(lat[j])
    a = kind.setdefault(k, [0, 0.0, 0.0, 0.0]); a[0] += 1; a[1] += m; a[2] += d; a[3] += l
    if j < 40 or j >= P - 6:
        print("%3d %-42s marg %6.1f dur %6.1f start-prevend %6.1f" % (j, k, m, d, l))
print("per kind: calls, sum of marginal us, mean marginal, mean duration, mean start-prevend")
tot = sum(a[1] for a in kind.values())
for k, a in sorted(kind.items(), key=lambda kv: -kv[1][1]):
    print("%-42s %3d %8.1f (%4.1f%%) %6.1f %6.1f %6.1f" % (k, a[0], a[1], 100 * a[1] / tot, a[1] / a[0], a[2] / a[0], a[3] / a[0]))
print("sum of marginals %.1f us" % tot)
PY

#!/usr/bin/env python3
"""Reads a MEMRA_FA_TIMELINE dump (cuda/ops_attn.cu: a diagnostic build's
per-block %globaltimer stamps of the decode attention kernel: start, wait
return, q loaded, scores and softmax, P.V, output or partial written, split
counted, end of the merge; inside the staged merge also after the maxima,
the weights and the elements) and prints, per split count, the medians over
the recorded launches in us after the launch's first wait return, and the
staged merge's phases after the merging block's count.
Usage: fa-timeline.py DUMP   (tools/timeline-build.sh with WHAT=fa)"""
import sys, statistics as st, collections

L = collections.defaultdict(list)
meta = {}
for line in open(sys.argv[1]):
    f = list(map(int, line.split()))
    k, heads, splits, b = f[:4]
    meta[k] = (heads, splits)
    t = f[4:16]
    if t[0] and t[1]:
        L[k].append(t)
rows = collections.defaultdict(lambda: collections.defaultdict(list))
phases = collections.defaultdict(list)
for k, bl in L.items():
    T0, T1 = min(x[0] for x in bl), min(x[1] for x in bl)
    r = rows[meta[k][1]]
    r["first start -> first release"].append((T1 - T0) / 1e3)
    for i, nm in [(2, "q loaded"), (3, "scores + softmax"), (4, "P.V done"), (5, "out / partial written")]:
        r["median " + nm].append(st.median(x[i] - T1 for x in bl) / 1e3)
        r["last " + nm].append(max(x[i] - T1 for x in bl) / 1e3)
    counted = [x[6] - T1 for x in bl if x[6] > T1]  # stale slots (an earlier launch) are older than T1
    if counted:
        r["median split counted"].append(st.median(counted) / 1e3)
        r["last split counted"].append(max(counted) / 1e3)
    merged = [x for x in bl if x[7] > x[6] > T1]
    if merged:
        r["last merge done"].append(max(x[7] - T1 for x in merged) / 1e3)
        for x in merged:
            for i, nm in [(8, "maxima"), (9, "weights + sum"), (10, "elements"), (7, "stored")]:
                if x[i] > x[6]:
                    phases[nm].append((x[i] - x[6]) / 1e3)
for sp in sorted(rows):
    r = rows[sp]
    print("%d split(s): %d launches (us after the first wait return)" % (sp, len(r["median q loaded"])))
    for nm, v in r.items():
        print("  %-34s %7.2f" % (nm, st.median(v)))
for nm, v in phases.items():
    print("staged merge: %-16s %6.2f us after the count (median of %d)" % (nm, st.median(v), len(v)))

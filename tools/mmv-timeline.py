#!/usr/bin/env python3
"""Reads a MEMRA_MMV_TIMELINE dump (cuda/mmv.cuh: a diagnostic build's
per-block %globaltimer stamps of the Q8_0 fast path: start, after the wait,
after staging x, end) and prints, per launch shape, the medians over the
recorded launches (us): how long blocks sat before their wait returned,
the release gap (first wait return minus the previous launch's last block
end, when the two launches are adjacent), the staging time, the time from
the first release to the last block end, and the tail (last block end
minus the median block end).
Usage: mmv-timeline.py DUMP [BW_bytes_per_s]"""
import sys, statistics as st, collections

bw = float(sys.argv[2]) if len(sys.argv) > 2 else 4.18e12
L = collections.defaultdict(list)
meta = {}
for line in open(sys.argv[1]):
    f = list(map(int, line.split()))
    k, grid, ne0, nv, b, t0, t1, t2, t3 = f[:9]
    t4, t5 = (f[9], f[10]) if len(f) > 10 else (0, 0)
    meta[k] = (grid, ne0, nv)
    if t3 > t0 > 0:
        L[k].append((t0, t1, t2, t3, t4, t5))
seqs = sorted(L)[-600:]
rows = collections.defaultdict(lambda: collections.defaultdict(list))
prev_end = {}
for k in seqs:
    b = L[k]
    t1min = min(x[1] for x in b); t3max = max(x[3] for x in b)
    prev_end[k] = t3max
    grid, ne0, nv = meta[k]
    r = rows[(ne0, nv, grid)]
    r["wait"].append((st.median(x[1] - x[0] for x in b)) / 1e3)
    if k - 1 in prev_end:
        r["release"].append((t1min - prev_end[k - 1]) / 1e3)
    r["stage"].append(st.median(x[2] - x[1] for x in b) / 1e3)
    r["stage_max"].append(max(x[2] - x[1] for x in b) / 1e3)
    r["run"].append((t3max - t1min) / 1e3)
    r["tail"].append((t3max - st.median(x[3] for x in b)) / 1e3)
    r["first_end"].append((min(x[3] for x in b) - t1min) / 1e3)
    if all(x[4] > x[1] and x[5] >= x[4] and x[2] >= x[5] for x in b):  # the normalized staging's inner stamps
        r["loads"].append(st.median(x[4] - x[1] for x in b) / 1e3)
        r["reduce"].append(st.median(x[5] - x[4] for x in b) / 1e3)
        r["pass2"].append(st.median(x[2] - x[5] for x in b) / 1e3)
print("shape (ne0 x rows, grid): launches | blocks' wait | release gap after an adjacent matvec | staging median/max |"
      " release->last end | first end | tail | ideal at %.2f TB/s" % (bw / 1e12))
for (ne0, nv, grid), r in sorted(rows.items()):
    ideal = ne0 * nv * 34 / 32 / bw * 1e6
    m = lambda key: st.median(r[key]) if r[key] else float("nan")
    print("%6d x %6d g%d: %4d | %6.1f | %5.2f (%d) | %5.2f / %5.2f | %6.1f | %6.1f | %5.1f | %6.1f" %
          (ne0, nv, grid, len(r["run"]), m("wait"), m("release"), len(r["release"]), m("stage"), m("stage_max"),
           m("run"), m("first_end"), m("tail"), ideal))
    if r["loads"]:
        print("    normalized staging: x loads + sum of squares %.2f, reduction + scale %.2f, scaling pass + barrier %.2f"
              % (m("loads"), m("reduce"), m("pass2")))

#!/usr/bin/env python3
"""Compares two logits dumps (row-major float32 [n_tokens][n_vocab], as
memra-logits writes them): max |d|, the rms of d over the rms of the
reference, and how many rows agree on the top token. Exits 1 when the
relative rms exceeds --rel (default 1e-2) or fewer than --agree (default
0.9) of the rows agree. With --baseline B.f32 (another run against the
same reference) the bound is max(--rel, 1.5 x B's relative rms): GOT may
add at most half again B's error.

    scripts/logits-compare.py REF.f32 GOT.f32 --vocab N [--rel 1e-2] [--agree 0.9] [--baseline B.f32]
"""
import argparse
import array
import math
import sys

ap = argparse.ArgumentParser()
ap.add_argument("ref")
ap.add_argument("got")
ap.add_argument("--vocab", type=int, required=True)
ap.add_argument("--rel", type=float, default=1e-2)
ap.add_argument("--agree", type=float, default=0.9)
ap.add_argument("--baseline")
a = ap.parse_args()


def load(path):
    v = array.array("f")
    v.frombytes(open(path, "rb").read())
    return v


def compare(ref, got):
    if len(ref) != len(got) or len(ref) % a.vocab:
        sys.exit("logits-compare: sizes differ or are not whole rows")
    n = len(ref) // a.vocab
    maxd = ss_d = ss_r = 0.0
    agree = 0
    for r in range(n):
        row_r = ref[r * a.vocab:(r + 1) * a.vocab]
        row_g = got[r * a.vocab:(r + 1) * a.vocab]
        for x, y in zip(row_r, row_g):
            d = abs(x - y)
            if not d <= maxd:  # NaN counts as the largest
                maxd = d if d == d else float("inf")
            ss_d += d * d if d == d else float("inf")
            ss_r += x * x
        agree += max(range(a.vocab), key=row_r.__getitem__) == max(range(a.vocab), key=row_g.__getitem__)
    return n, maxd, (math.sqrt(ss_d / ss_r) if ss_r > 0 else float("inf")), agree


ref = load(a.ref)
n, maxd, rel, agree = compare(ref, load(a.got))
bound, base = a.rel, ""
if a.baseline:
    _, _, rel_b, agree_b = compare(ref, load(a.baseline))
    bound = max(a.rel, 1.5 * rel_b)
    base = "  (baseline rel rms %.3e, agree %d/%d)" % (rel_b, agree_b, n)
ok = rel <= bound and agree >= a.agree * n
print("rows %d  max|d| %.3e  rel rms %.3e (<= %.1e)  top-1 agree %d/%d%s  %s" %
      (n, maxd, rel, bound, agree, n, base, "ok" if ok else "FAIL"))
sys.exit(0 if ok else 1)

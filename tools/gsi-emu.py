#!/usr/bin/env python3
# Offline check of cuda/gemm_si.cu's index math (no GPU): emulates
# gsi_prep_kernel's layout, the lanes' A and B fragments of mma m16n8k32
# s8 (the PTX ISA's layout), the scales' staging, the split-K partials'
# layout and the stores, on small cases (several weights straddling a
# 16-row group, GLU, 1-4 tiles of 8 x rows, two slices), against a float64
# reference; then the x error of the 8-bit parts against f16's. An index
# slip shows as an O(1) error or a missing/duplicate output. Keep it in
# step with the kernel when its layout changes.
#   python3 tools/gsi-emu.py     (numpy: Debian's python3-numpy)
import numpy as np, struct, itertools
rng = np.random.default_rng(1)

def f16(b): return np.frombuffer(b, dtype=np.float16)[0].astype(np.float32)

def make_weight(R, K):
    nb = K // 32
    rows = bytearray()
    ref = np.zeros((R, K), np.float64)
    for r in range(R):
        for b in range(nb):
            d = np.float16(rng.uniform(0.002, 0.008))
            q = rng.integers(-127, 128, 32).astype(np.int8)
            rows += d.tobytes() + q.tobytes()
            ref[r, b*32:(b+1)*32] = float(d) * q
    return bytes(rows), ref

def prep(x):  # gsi_prep_kernel
    n, K = x.shape; nb = K // 32
    xq = np.zeros((n, nb, 64), np.uint8); xs = np.zeros((n, nb), np.float32)
    for r in range(n):
        for b in range(nb):
            v = x[r, b*32:(b+1)*32].astype(np.float32)
            m = np.float32(np.max(np.abs(v)))
            d = np.float32(m / np.float32(127))
            for lane in range(32):
                q = np.float32(v[lane] / d) if d > 0 else np.float32(0)
                hi = np.float32(np.rint(q)); lo = np.float32(np.rint(np.float32(np.float32(q - hi) * np.float32(254))))
                t = (lane & 15) >> 2; half = lane >> 4; i = lane & 3
                o = 16*t + 4*half + i
                xq[r, b, o] = np.uint8(np.int8(hi)); xq[r, b, o+8] = np.uint8(np.int8(lo))
            xs[r, b] = np.float32(d / np.float32(254))
    return xq, xs

def word(buf, off): return struct.unpack_from('<I', buf, off)[0]
def byte_perm(x, y, s):
    bs = x.to_bytes(4,'little') + y.to_bytes(4,'little')
    return int.from_bytes(bytes(bs[(s >> (4*i)) & 7] for i in range(4)), 'little')
def s8x4(w): return np.frombuffer(w.to_bytes(4,'little'), np.int8).astype(np.int64)

def mma(Afr, Bfr):  # Afr[lane]=4 words, Bfr[lane]=2 words -> D[lane]=4 ints (m16n8k32 s8 layout)
    A = np.zeros((16, 32), np.int64); B = np.zeros((32, 8), np.int64)
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        A[g, 4*t:4*t+4] = s8x4(Afr[lane][0]); A[g+8, 4*t:4*t+4] = s8x4(Afr[lane][1])
        A[g, 16+4*t:16+4*t+4] = s8x4(Afr[lane][2]); A[g+8, 16+4*t:16+4*t+4] = s8x4(Afr[lane][3])
        B[4*t:4*t+4, g] = s8x4(Bfr[lane][0]); B[16+4*t:16+4*t+4, g] = s8x4(Bfr[lane][1])
    D = A @ B
    return [[D[l>>2, 2*(l&3)], D[l>>2, 2*(l&3)+1], D[(l>>2)+8, 2*(l&3)], D[(l>>2)+8, 2*(l&3)+1]] for l in range(32)]

RB = 272
def run(Ws, n, K, glu, kt_per, NT):
    nb = K // 32; nkt = K // 256
    split = (nkt + kt_per - 1) // kt_per
    rows_w = [len(w[0]) // (nb*34) for w in Ws]
    if glu: nv = rows_w[0]; vrow0 = [0, nv]
    else:
        vrow0 = [0]
        for r in rows_w: vrow0.append(vrow0[-1] + r)
        nv = vrow0[-1]
    np_ = 2 if glu else 1; NX = 8*NT
    ngroups = (nv + 15) // 16
    x = rng.standard_normal((n, K)).astype(np.float32) * np.where(rng.random((n, K)) < 1/64, 30, 1).astype(np.float32)
    xq, xs = prep(x)
    def row_of(v, p):
        if glu: return (p, v if v < vrow0[1] else -1)
        wi = 0
        while wi + 1 < len(Ws) and v >= vrow0[wi+1]: wi += 1
        return (wi, v - vrow0[wi] if v < vrow0[-1] else -1)
    part = {}
    out = {}
    for slice_ in range(split):
        kt0 = slice_ * kt_per; nt = min(kt_per, nkt - kt0); nbs = kt_per * 8
        # staged x and scales
        sx_st = np.zeros((nbs, NX), np.float32)
        for c in range(NX * nt * 8):
            r, k = c % NX, c // NX
            sx_st[k, r] = xs[r, kt0*8 + k] if r < n else 0
        for grp in range(ngroups):
            nvalid = min(16, nv - grp*16)
            # ring items: item it -> 16 rows x 272 bytes
            def item(it):
                p = 0 if it < nt else 1; j = it if it < nt else it - nt
                buf = bytearray(16 * RB)
                for lane in range(nvalid):
                    wi, lrow = row_of(grp*16 + lane, p)
                    wb = Ws[wi][0]
                    off = lrow * nb*34 + (kt0 + j) * RB
                    buf[lane*RB:(lane+1)*RB] = wb[off:off+RB]
                return bytes(buf)
            acc = np.zeros((2, 32, 4*NT), np.float32)
            for it in range(np_ * nt):
                p = 0 if it < nt else 1; jt = it if it < nt else it - nt
                w = item(it)
                c = acc[p].copy()
                for b in range(8):
                    Afr = []; d0s = []; d1s = []
                    for lane in range(32):
                        g, t = lane >> 2, lane & 3
                        w0 = g*RB; w1 = (g+8)*RB
                        if (34*b + 2) & 3:
                            q0 = byte_perm(word(w, w0+34*b+4*t), word(w, w0+34*b+4*t+4), 0x5432)
                            q2 = byte_perm(word(w, w0+34*b+4*t+16), word(w, w0+34*b+4*t+20), 0x5432)
                            q1 = byte_perm(word(w, w1+34*b+4*t), word(w, w1+34*b+4*t+4), 0x5432)
                            q3 = byte_perm(word(w, w1+34*b+4*t+16), word(w, w1+34*b+4*t+20), 0x5432)
                        else:
                            q0 = word(w, w0+34*b+2+4*t); q2 = word(w, w0+34*b+2+4*t+16)
                            q1 = word(w, w1+34*b+2+4*t); q3 = word(w, w1+34*b+2+4*t+16)
                        Afr.append([q0, q1, q2, q3])
                        d0s.append(f16(w[w0+34*b:w0+34*b+2])); d1s.append(f16(w[w1+34*b:w1+34*b+2]))
                    blk = jt*8 + b
                    for j in range(NT):
                        Bh = []; Bl = []
                        for lane in range(32):
                            g, t = lane >> 2, lane & 3
                            xr = 8*j + g if 8*j + g < n else 0
                            v = xq[xr, kt0*8 + blk, 16*t:16*t+16]
                            ws = [int.from_bytes(bytes(v[4*k:4*k+4]), 'little') for k in range(4)]
                            Bh.append([ws[0], ws[1]]); Bl.append([ws[2], ws[3]])
                        dh = mma(Afr, Bh); dl = mma(Afr, Bl)
                        for lane in range(32):
                            t = lane & 3
                            sx = (sx_st[blk, 8*j + 2*t], sx_st[blk, 8*j + 2*t + 1])
                            s = [np.float32(d0s[lane]*sx[0]), np.float32(d0s[lane]*sx[1]), np.float32(d1s[lane]*sx[0]), np.float32(d1s[lane]*sx[1])]
                            for i in range(4):
                                c[lane, 4*j+i] = np.float32(np.float32(dh[lane][i]*254 + dl[lane][i]) * s[i] + c[lane, 4*j+i])
                acc[p] = c
            # split-K partials
            per = np_ * NX * 16
            for p in range(np_):
                for lane in range(32):
                    g, t = lane >> 2, lane & 3
                    for i in range(4*NT):
                        off = p*NX*16 + (8*(i >> 2) + 2*t + (i & 1))*16 + g + 8*((i >> 1) & 1)
                        part[(slice_, grp, off)] = acc[p, lane, i]
    # final: sum slices in order, store
    Y = {}
    for grp in range(ngroups):
        for lane in range(32):
            g, t = lane >> 2, lane & 3
            for i in range(4*NT):
                vals = []
                for p in range(np_):
                    off = p*NX*16 + (8*(i >> 2) + 2*t + (i & 1))*16 + g + 8*((i >> 1) & 1)
                    s = np.float32(0)
                    for sl in range(split): s = np.float32(s + part[(sl, grp, off)])
                    vals.append(s)
                r = 8*(i >> 2) + 2*t + (i & 1)
                wi, lrow = row_of(grp*16 + g + 8*((i >> 1) & 1), 0)
                if r < n and lrow >= 0:
                    assert (wi, lrow, r) not in Y
                    Y[(wi, lrow, r)] = vals
    # reference
    err = 0; cnt = 0; mx = 0
    for (wi, lrow, r), vals in Y.items():
        if glu:
            gref = Ws[0][1][lrow] @ x[r].astype(np.float64); uref = Ws[1][1][lrow] @ x[r].astype(np.float64)
            e = max(abs(vals[0]-gref), abs(vals[1]-uref)); mx = max(mx, abs(gref), abs(uref))
        else:
            ref = Ws[wi][1][lrow] @ x[r].astype(np.float64); e = abs(vals[0] - ref); mx = max(mx, abs(ref))
        err = max(err, e); cnt += 1
    expect = n * (rows_w[0] if glu else nv)
    print(f"n={n} K={K} glu={glu} kt_per={kt_per} NT={NT} rows={rows_w}: outputs {cnt}/{expect}, max err {err:.3e} (rel {err/mx:.2e})")
    assert cnt == expect and err / mx < 1e-3

K = 512
run([make_weight(40, K)], 5, K, False, 1, 1)
run([make_weight(24, K), make_weight(24, K)], 3, K, True, 2, 1)
run([make_weight(20, K), make_weight(13, K)], 8, K, False, 1, 1)
run([make_weight(18, K), make_weight(18, K)], 13, K, True, 1, 2)
run([make_weight(17, K)], 21, K, False, 2, 4)
print("all ok")
# the f16 form's error on the same kind of x (gsw_kernel: x to f16, exact quants, float sums)
W, ref = make_weight(64, 4096)
x = rng.standard_normal((4, 4096)).astype(np.float32) * np.where(rng.random((4, 4096)) < 1/64, 30, 1).astype(np.float32)
xh = x.astype(np.float16).astype(np.float64)
xq, xs = prep(x)
xi = np.zeros_like(x, dtype=np.float64)
for r in range(4):
    for b in range(128):
        for lane in range(32):
            t = (lane & 15) >> 2; half = lane >> 4; i = lane & 3; o = 16*t + 4*half + i
            xi[r, b*32+lane] = (254*int(np.int8(xq[r,b,o])) + int(np.int8(xq[r,b,o+8]))) * float(xs[r,b])
y = ref @ x.T.astype(np.float64)
print("x error max rel (f16, int parts):", np.max(np.abs(xh-x)/np.abs(x)), np.max(np.abs(xi-x))/np.max(np.abs(x)))
print("dot error rel to max output: f16 %.2e, int parts %.2e" % (np.max(np.abs(ref@xh.T - y))/np.max(np.abs(y)), np.max(np.abs(ref@xi.T - y))/np.max(np.abs(y))))

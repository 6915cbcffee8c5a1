/* Fast-mode GEMM on tensor cores over quantized weights, dequantized tile
 * by tile into shared memory (never a whole f16 copy of the weight), dense
 * or grouped by expert (MoE prefill).
 *
 * Y[p][r] = Σ_k W_e[r][k] · X[p / xdiv][k] for the x rows p of a tile,
 * W rows dequantized to f16 (mq_deq32, then one rounding to f16), X in
 * f16, products and sums on the tensor cores (mma.sync m16n8k16, float32
 * accumulation). A block owns GQ_BM weight rows and up to GQ_BN x rows;
 * its K loop walks GQ_BK columns at a time: every thread dequantizes one
 * 32-element sub-block of one weight row, and 16-byte loads fill the x
 * tile, in two shared-memory stages (the next tile's loads are issued
 * before the tensor cores start on this one). With a GLU pair (W2) the block's rows are 64 gate and the 64 up
 * rows at the same indices, laid out so that the thread holding a gate
 * output also holds its up output: the epilogue writes act(g)·u (f16 for
 * the next GEMM, or float).
 *
 * Grouped mode: the tiles (expert, first entry of the slot list, count)
 * come from the device (memra__cuda_gq_bucket), so nothing waits for the
 * host; blocks past the device's tile count return at once.
 *
 * Exactness: this is the fast tier only (f16 operands; the order of the
 * float32 sums is the tensor core's). Exact mode never takes it. */
#ifndef MEMRA_CUDA_GEMM_Q_CUH
#define MEMRA_CUDA_GEMM_Q_CUH

#include <cuda_fp16.h>

#include <type_traits>

#include "cuda_common.cuh"
#include "quant.cuh"

#define GQ_BM 128
#define GQ_BN 64
#define GQ_BK 64
#define GQ_THREADS 256
/* x-tile rows and weight-tile rows are GQ_BK + 8 halves (144 bytes) apart:
 * eight rows of one ldmatrix land in distinct bank groups */
#define GQ_LD (GQ_BK + 8)

typedef struct gq_tile {
    int expert;  /* matrix of W (0 when dense) */
    int first;   /* first entry of the slot list (dense: first x row) */
    int count;   /* x rows in the tile, 1 .. GQ_BN */
} gq_tile;

typedef struct gq_args {
    const uint8_t *W;      /* rows nb1 apart, matrices (experts) nb2 apart */
    const uint8_t *W2;     /* GLU: the up rows (same strides), else NULL */
    size_t nb1, nb2;
    int64_t K;             /* dot length (ne0), a multiple of 32 */
    int64_t M;             /* output rows (GLU: per half) */
    const __half *X;       /* x rows ldx apart (ldx a multiple of 8) */
    int64_t ldx;
    int64_t xdiv;          /* entry p reads x row p / xdiv */
    const int32_t *slots;  /* grouped: slot list; NULL: entry = x row */
    const gq_tile *tiles;  /* grouped: tile list on the device */
    const int *n_tiles;    /* grouped: its length (device) */
    int64_t n_rows;        /* dense: x rows */
    float *Y;              /* float output rows ldy apart, or NULL */
    __half *Yh;            /* f16 output rows ldy apart (GLU), or NULL */
    int64_t ldy;
    int gelu;              /* GLU activation: 0 SiLU, 1 GELU (tanh) */
} gq_args;

static __device__ __forceinline__ void gq_ldmatrix_x4(uint32_t *r, const __half *p)
{
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

static __device__ __forceinline__ void gq_mma(float *c, const uint32_t *a, const uint32_t *b)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

static __device__ __forceinline__ uint32_t gq_pack(float lo, float hi)
{
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&h);
}

/* The GLU activations of the MoE reference (float64, as moe_act_kernel). */
static __device__ __forceinline__ double gq_act(int gelu, double x)
{
    if (gelu)
        return 0.5 * x * (1.0 + tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x)));
    return x / (1.0 + exp(-x));
}

/* A thread's weight sub-block between its load and its decode: Q8_0's 17
 * words in registers, loaded a whole k tile ahead of the tensor cores that
 * wait for them; other types keep a pointer and decode straight from
 * memory. */
template <int T> struct gq_raw {
    const uint8_t *b;
    int sub;
    __device__ __forceinline__ void load(const uint8_t *row, int64_t k)
    {
        b = row + (k / mq_traits<T>::qk) * mq_traits<T>::bytes;
        sub = (int)((k % mq_traits<T>::qk) / 32);
    }
    __device__ __forceinline__ void decode(float *v) const { mq_deq32<T>(b, sub, v); }
};

/* Q8_0: the 34-byte block in nine 4-byte loads rather than seventeen
 * 2-byte ones (the loads of a warp touch 16 rows each: the load count,
 * not the bytes, paces the k loop). A block starts on 4 bytes or 2 past
 * them (its row and the tensor start on 2 at least); the 2-past case
 * loads from 2 bytes before it, inside the row's previous block or the
 * previous row, and the on-4 case takes its last two bytes as a 2-byte
 * load, so no load leaves the tensor. decode sees the same 17 halfwords. */
template <> struct gq_raw<MEMRA_TYPE_Q8_0> {
    uint32_t u[9];
    bool odd; /* the block starts 2 bytes past a 4-byte boundary */
    __device__ __forceinline__ void load(const uint8_t *row, int64_t k)
    {
        const uint8_t *p = row + (k / 32) * 34;
        odd = ((uintptr_t)p & 2) != 0;
        const uint32_t *a = reinterpret_cast<const uint32_t *>(p - (odd ? 2 : 0));
#pragma unroll
        for (int j = 0; j < 8; j++)
            u[j] = a[j];
        u[8] = odd ? a[8] : (uint32_t) * reinterpret_cast<const uint16_t *>(p + 32);
    }
    /* halfword J (0..16) of the block; J a constant once unrolled, so u
     * stays in registers (only the select depends on ODD) */
    __device__ __forceinline__ uint32_t half(int j) const
    {
        if (j & 1)
            return odd ? u[(j + 1) >> 1] & 0xFFFFu : u[j >> 1] >> 16;
        return odd ? u[j >> 1] >> 16 : u[j >> 1] & 0xFFFFu;
    }
    __device__ __forceinline__ void decode(float *v) const
    {
        uint32_t w[17];
#pragma unroll
        for (int j = 0; j < 17; j++)
            w[j] = half(j);
        const float d = __half2float(__ushort_as_half(w[0]));
#pragma unroll
        for (int j = 0; j < 16; j++) {
            v[2 * j] = (float)(int8_t)(w[1 + j] & 0xFF) * d;
            v[2 * j + 1] = (float)(int8_t)(w[1 + j] >> 8) * d;
        }
    }
};

/* N 4-byte words of the 4N bytes at P (2-byte aligned) in registers, read
 * without touching a byte outside them: aligned word loads, or, when P is 2
 * past a word, its first and last halfwords as 2-byte loads and the words
 * between, shifted into place. byte(i) is a constant extraction once the
 * caller's loop over I is unrolled. */
template <int N> struct gq_words {
    uint32_t u[N];
    __device__ __forceinline__ void load(const uint8_t *p)
    {
        if (((uintptr_t)p & 2) == 0) {
            const uint32_t *a = reinterpret_cast<const uint32_t *>(p);
#pragma unroll
            for (int i = 0; i < N; i++)
                u[i] = a[i];
        } else {
            const uint32_t *a = reinterpret_cast<const uint32_t *>(p + 2);
            uint32_t lo = *reinterpret_cast<const uint16_t *>(p);
#pragma unroll
            for (int i = 0; i < N - 1; i++) {
                const uint32_t w = a[i];
                u[i] = lo | (w << 16);
                lo = w >> 16;
            }
            u[N - 1] = lo | ((uint32_t) * reinterpret_cast<const uint16_t *>(p + 4 * N - 2) << 16);
        }
    }
    __device__ __forceinline__ uint32_t byte(int i) const { return (u[i >> 2] >> (8 * (i & 3))) & 0xFFu; }
};

/* The K-quants' sub-blocks as Q8_0's (gq_raw_kq<T>): every byte a
 * sub-block's decode reads loaded a k tile ahead (word loads for its 32
 * quant bytes, where gq_raw's mq_deq32 reads them one byte at a time from
 * memory in the stash: the 35B-A3B Q4_K's MoE prefill at 512 tokens, ~16
 * entries an expert, ran at 0.82x llama.cpp that way; H200, 2026-12-04).
 * decode makes mq_deq32's arithmetic, so the same values and the same
 * outputs bit for bit (the device's kernel check compares it with gq_raw:
 * scripts/gpu-check.sh). The default (the 35B-A3B Q4_K's pp512 7091
 * against 4378 tok/s, H200, 2026-12-05); MEMRA_GQ_KQ_WORDS=0 keeps gq_raw. */
template <int T> struct gq_raw_kq : gq_raw<T> {};
template <int T> struct gq_kq_words {
    static constexpr bool value =
        T == MEMRA_TYPE_Q4_K || T == MEMRA_TYPE_Q5_K || T == MEMRA_TYPE_Q6_K || T == MEMRA_TYPE_Q4_0;
};

/* Q4_0's block the same way: d and its 16 quant bytes a k tile ahead,
 * mq_deq32's arithmetic (the kernel check's lines the same as the byte
 * loads'; the 35B-A3B Q4_0's pp512 10083 against 9926 tok/s, H100,
 * 2026-12-05). MEMRA_GQ_KQ_WORDS=0 keeps the byte loads for it too. */
template <> struct gq_raw_kq<MEMRA_TYPE_Q4_0> {
    uint32_t d;    /* f16 bits */
    gq_words<4> q; /* qs[16] (2 bytes past the block start) */
    __device__ __forceinline__ void load(const uint8_t *row, int64_t k)
    {
        const uint8_t *b = row + (k / 32) * 18;
        d = *reinterpret_cast<const uint16_t *>(b);
        q.load(b + 2);
    }
    __device__ __forceinline__ void decode(float *v) const
    {
        const float df = __half2float(__ushort_as_half((unsigned short)d));
#pragma unroll
        for (int j = 0; j < 16; j++) {
            v[j] = __fmul_rn((float)((int)(q.byte(j) & 0xF) - 8), df);
            v[j + 16] = __fmul_rn((float)((int)(q.byte(j) >> 4) - 8), df);
        }
    }
};

/* Q4_K's and Q5_K's common head: d, dmin and the three scale bytes of
 * sub-block s, and their scale d1 and min m1 as mq_deq32 forms them
 * (mq_scale_min_k4 from scales[s & 3], scales[(s & 3) + 4] and
 * scales[(s & 3) + 8]). */
struct gq_k4_head {
    uint32_t d, dm, e0, e1, e2; /* d, dmin (f16 bits), three scale bytes */
    int s;
    __device__ __forceinline__ void load(const uint8_t *b, int64_t k)
    {
        s = (int)((k % 256) / 32);
        const uint16_t *h = reinterpret_cast<const uint16_t *>(b);
        d = h[0];
        dm = h[1];
        e0 = b[4 + (s & 3)];
        e1 = b[8 + (s & 3)];
        e2 = b[12 + (s & 3)];
    }
    __device__ __forceinline__ void scale_min(float *d1, float *m1) const
    {
        int sc, m;
        if (s < 4) {
            sc = (int)(e0 & 63);
            m = (int)(e1 & 63);
        } else {
            sc = (int)((e2 & 0xF) | ((e0 >> 6) << 4));
            m = (int)((e2 >> 4) | ((e1 >> 6) << 4));
        }
        *d1 = __fmul_rn(__half2float(__ushort_as_half((unsigned short)d)), (float)sc);
        *m1 = __fmul_rn(__half2float(__ushort_as_half((unsigned short)dm)), (float)m);
    }
};

template <> struct gq_raw_kq<MEMRA_TYPE_Q4_K> {
    gq_k4_head hd;
    gq_words<8> q; /* the 32 bytes of the sub-block's pair (its nibble: sh) */
    __device__ __forceinline__ void load(const uint8_t *row, int64_t k)
    {
        const uint8_t *b = row + (k / 256) * 144;
        hd.load(b, k);
        q.load(b + 16 + 32 * (hd.s >> 1));
    }
    __device__ __forceinline__ void decode(float *v) const
    {
        float d1, m1;
        hd.scale_min(&d1, &m1);
        const int sh = (hd.s & 1) * 4;
#pragma unroll
        for (int l = 0; l < 32; l++)
            v[l] = __fsub_rn(__fmul_rn(d1, (float)((q.byte(l) >> sh) & 0xF)), m1);
    }
};

template <> struct gq_raw_kq<MEMRA_TYPE_Q5_K> {
    gq_k4_head hd;
    gq_words<8> q, qh; /* the pair's 32 low-nibble bytes; the block's 32 high-bit bytes */
    __device__ __forceinline__ void load(const uint8_t *row, int64_t k)
    {
        const uint8_t *b = row + (k / 256) * 176;
        hd.load(b, k);
        qh.load(b + 16);
        q.load(b + 48 + 32 * (hd.s >> 1));
    }
    __device__ __forceinline__ void decode(float *v) const
    {
        float d1, m1;
        hd.scale_min(&d1, &m1);
        const int sh = (hd.s & 1) * 4;
        const uint32_t u = 1u << hd.s;
#pragma unroll
        for (int l = 0; l < 32; l++)
            v[l] = __fsub_rn(__fmul_rn(d1, (float)(((q.byte(l) >> sh) & 0xF) + ((qh.byte(l) & u) ? 16 : 0))), m1);
    }
};

template <> struct gq_raw_kq<MEMRA_TYPE_Q6_K> {
    gq_words<8> ql, qh; /* the sub-block's 32 low-nibble bytes and 32 high-bit-pair bytes */
    uint32_t d, c0, c1; /* d (f16 bits), the two 16-element scales (int8 bits) */
    int s;
    __device__ __forceinline__ void load(const uint8_t *row, int64_t k)
    {
        const uint8_t *b = row + (k / 256) * 210;
        s = (int)((k % 256) / 32);
        const int h = s >> 2, j = s & 3;
        d = *reinterpret_cast<const uint16_t *>(b + 208);
        c0 = b[192 + 8 * h + 2 * j];
        c1 = b[193 + 8 * h + 2 * j];
        ql.load(b + 64 * h + 32 * (j & 1));
        qh.load(b + 128 + 32 * h);
    }
    __device__ __forceinline__ void decode(float *v) const
    {
        const int j = s & 3, nsh = j >= 2 ? 4 : 0, hsh = 2 * j;
        const float df = __half2float(__ushort_as_half((unsigned short)d));
        const float d0 = __fmul_rn(df, (float)(int8_t)c0), d1 = __fmul_rn(df, (float)(int8_t)c1);
#pragma unroll
        for (int l = 0; l < 32; l++) {
            const int q = (int)(((ql.byte(l) >> nsh) & 0xF) | (((qh.byte(l) >> hsh) & 3) << 4)) - 32;
            v[l] = __fmul_rn(l < 16 ? d0 : d1, (float)q);
        }
    }
};

/* Shared memory: two stages of the weight and x tiles (double buffering:
 * the next k tile's loads are in flight while the tensor cores work on
 * this one), then the tile's x and y rows. */
#define GQ_SMEM_A (GQ_BM * GQ_LD)
#define GQ_SMEM_B (GQ_BN * GQ_LD)
#define GQ_SMEM_BYTES ((size_t)2 * (GQ_SMEM_A + GQ_SMEM_B) * sizeof(__half) + 2 * GQ_BN * sizeof(int))

/* Weight row of smem tile row S in block row R0 (NULL past M): with a GLU
 * pair, warp-row S/32's 32 rows are 16 gate rows, then the same 16 up
 * rows, so the thread holding a gate output also holds its up output. */
static __device__ __forceinline__ const uint8_t *gq_weight_row(const gq_args &a, int expert, int64_t r0, int s)
{
    int64_t r;
    const uint8_t *base = a.W;
    if (a.W2) {
        r = r0 + (s >> 5) * 16 + (s & 15);
        if (s & 16)
            base = a.W2;
    } else {
        r = r0 + s;
    }
    return r < a.M ? base + (size_t)expert * a.nb2 + (size_t)r * a.nb1 : NULL;
}

static __device__ __forceinline__ void gq_zero_acc(float (&acc)[2][4][4])
{
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int n = 0; n < 4; n++)
#pragma unroll
            for (int c = 0; c < 4; c++)
                acc[m][n][c] = 0.0f;
}

/* 32 decoded weights of a row's sub-block into the f16 tile (16-byte stores) */
static __device__ __forceinline__ void gq_stash_f16(__half *p, const float *v)
{
    uint4 *dst = reinterpret_cast<uint4 *>(p);
#pragma unroll
    for (int j = 0; j < 4; j++)
        dst[j] = make_uint4(gq_pack(v[8 * j], v[8 * j + 1]), gq_pack(v[8 * j + 2], v[8 * j + 3]),
                            gq_pack(v[8 * j + 4], v[8 * j + 5]), gq_pack(v[8 * j + 6], v[8 * j + 7]));
}

/* The tensor-core work of one k tile: warp (wm, wn) multiplies its 32
 * weight rows by its 32 x rows. An 8-row group of x past the tile's COUNT
 * entries is skipped (its outputs are never written; every other output's
 * sums are the same). */
static __device__ __forceinline__ void gq_tile_mma(float (&acc)[2][4][4], const __half *As, const __half *Bs, int wm,
                                                   int wn, int lane, int count)
{
    const int nv = count - wn * 32; /* valid x rows of this warp's 32 */
    if (nv <= 0)
        return;
#pragma unroll
    for (int ks = 0; ks < GQ_BK; ks += 16) {
        uint32_t af[2][4], bf[4][2];
#pragma unroll
        for (int m = 0; m < 2; m++)
            gq_ldmatrix_x4(af[m], As + (wm * 32 + m * 16 + (lane & 15)) * GQ_LD + ks + (lane >> 4) * 8);
#pragma unroll
        for (int np = 0; np < 2; np++) {
            if (np * 16 >= nv)
                break;
            uint32_t r[4];
            gq_ldmatrix_x4(r, Bs + (wn * 32 + np * 16 + (lane >> 4) * 8 + (lane & 7)) * GQ_LD + ks +
                                  ((lane >> 3) & 1) * 8);
            bf[2 * np][0] = r[0];
            bf[2 * np][1] = r[1];
            bf[2 * np + 1][0] = r[2];
            bf[2 * np + 1][1] = r[3];
        }
#pragma unroll
        for (int m = 0; m < 2; m++)
#pragma unroll
            for (int n = 0; n < 4; n++)
                if (n * 8 < nv)
                    gq_mma(acc[m][n], af[m], bf[n]);
    }
}

/* c0/c1 at (row lane/4, x rows 2·(lane%4) + 0/1), c2/c3 eight rows down;
 * S_Y: the output row of each x row of the tile (-1: none). */
static __device__ __forceinline__ void gq_epilogue(const gq_args &a, const float (&acc)[2][4][4], const int *s_y,
                                                   int64_t r0, int wm, int wn, int lane)
{
#pragma unroll
    for (int n = 0; n < 4; n++)
#pragma unroll
        for (int c = 0; c < 4; c++) {
            const int col = wn * 32 + n * 8 + (lane & 3) * 2 + (c & 1);
            const int p = s_y[col];
            if (p < 0)
                continue;
            const int lr = (lane >> 2) + (c >> 1) * 8;
            if (a.W2) {
                const int64_t r = r0 + wm * 16 + lr;
                if (r >= a.M)
                    continue;
                const float h = (float)(gq_act(a.gelu, (double)acc[0][n][c]) * (double)acc[1][n][c]);
                if (a.Yh)
                    a.Yh[(size_t)p * a.ldy + r] = __float2half_rn(h);
                if (a.Y)
                    a.Y[(size_t)p * a.ldy + r] = h;
            } else {
#pragma unroll
                for (int m = 0; m < 2; m++) {
                    const int64_t r = r0 + wm * 32 + m * 16 + lr;
                    if (r < a.M)
                        a.Y[(size_t)p * a.ldy + r] = acc[m][n][c];
                }
            }
        }
}

/* The block's tile (grouped: from the device list; false: past its end)
 * and its x rows (S_X) and output rows (S_Y), -1 past COUNT. */
static __device__ __forceinline__ bool gq_block_tile(const gq_args &a, int *expert, int *first, int *count, int *s_x,
                                                     int *s_y)
{
    *expert = 0;
    if (a.tiles) {
        if ((int)blockIdx.x >= *a.n_tiles)
            return false;
        const gq_tile t = a.tiles[blockIdx.x];
        *expert = t.expert;
        *first = t.first;
        *count = t.count;
    } else {
        *first = (int)blockIdx.x * GQ_BN;
        *count = (int)(a.n_rows - *first < GQ_BN ? a.n_rows - *first : GQ_BN);
    }
    const int tid = threadIdx.x;
    if (tid < GQ_BN) {
        int64_t p = -1;
        if (tid < *count)
            p = a.slots ? (int64_t)a.slots[*first + tid] : (int64_t)*first + tid;
        s_y[tid] = (int)p;
        s_x[tid] = p < 0 ? -1 : (int)(p / a.xdiv);
    }
    return true;
}

template <int T, class RAW = gq_raw<T>>
__global__ void __launch_bounds__(GQ_THREADS, 2) gq_kernel(const gq_args a)
{
    extern __shared__ __align__(16) uint8_t gq_smem[];
    __half *const As0 = reinterpret_cast<__half *>(gq_smem);
    __half *const Bs0 = As0 + 2 * GQ_SMEM_A;
    int *const s_x = reinterpret_cast<int *>(Bs0 + 2 * GQ_SMEM_B), *const s_y = s_x + GQ_BN;
    MEMRA_PDL_ENTER(); /* cuda_common.cuh */

    int expert, first, count;
    if (!gq_block_tile(a, &expert, &first, &count, s_x, s_y))
        return;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

    /* loader: smem row s, half `sub` of the k tile */
    const int64_t r0 = (int64_t)blockIdx.y * (a.W2 ? GQ_BM / 2 : GQ_BM);
    const int s = tid >> 1, sub = tid & 1;
    const uint8_t *const wrow = gq_weight_row(a, expert, r0, s);
    __syncthreads();

    const int wm = warp & 3, wn = warp >> 2; /* warp tile: 32 rows x 32 x rows */
    float acc[2][4][4];
    gq_zero_acc(acc);

    /* stage = this thread's share of one k tile: its weight sub-block
     * (raw) and two 16-byte chunks of x */
    RAW raw;
    uint4 xv[(GQ_BN * GQ_BK / 8) / GQ_THREADS];
    bool wok = false;
    auto fetch = [&](int64_t k0) {
        const int64_t k = k0 + sub * 32;
        wok = wrow && k < a.K;
        if (wok)
            raw.load(wrow, k);
#pragma unroll
        for (int i = 0; i < (GQ_BN * GQ_BK / 8) / GQ_THREADS; i++) {
            const int c = tid + i * GQ_THREADS, n = c >> 3, kc = (c & 7) * 8;
            const int xr = s_x[n];
            xv[i] = xr >= 0 && k0 + kc < a.K ? *reinterpret_cast<const uint4 *>(a.X + (size_t)xr * a.ldx + k0 + kc)
                                             : make_uint4(0, 0, 0, 0);
        }
    };
    auto stash = [&](int buf) {
        float v[32];
        if (wok) {
            raw.decode(v);
        } else {
#pragma unroll
            for (int i = 0; i < 32; i++)
                v[i] = 0.0f;
        }
        gq_stash_f16(As0 + buf * GQ_SMEM_A + s * GQ_LD + sub * 32, v);
#pragma unroll
        for (int i = 0; i < (GQ_BN * GQ_BK / 8) / GQ_THREADS; i++) {
            const int c = tid + i * GQ_THREADS, n = c >> 3, kc = (c & 7) * 8;
            *reinterpret_cast<uint4 *>(Bs0 + buf * GQ_SMEM_B + n * GQ_LD + kc) = xv[i];
        }
    };

    fetch(0);
    stash(0);
    __syncthreads();
    const int64_t nk = (a.K + GQ_BK - 1) / GQ_BK;
    for (int64_t kt = 0; kt < nk; kt++) {
        const int buf = (int)(kt & 1);
        if (kt + 1 < nk)
            fetch((kt + 1) * GQ_BK); /* in flight during the tensor-core work below */
        gq_tile_mma(acc, As0 + buf * GQ_SMEM_A, Bs0 + buf * GQ_SMEM_B, wm, wn, lane, count);
        /* the other buffer was last read before the previous barrier */
        if (kt + 1 < nk)
            stash(buf ^ 1);
        __syncthreads();
    }

    gq_epilogue(a, acc, s_y, r0, wm, wn, lane);
}

/* ---- gq2: the same tiles, raw weights staged by asynchronous copies ----
 *
 * gq_kernel's loads give each thread one 32-element sub-block: a warp's
 * load instruction touches 16 rows (16 cache lines for a few bytes each),
 * and the load count, not the bytes, paces its k loop (the 35B-A3B's
 * experts at 512 tokens moved ~0.6 TB/s). Here consecutive threads copy
 * consecutive 4-byte words of a row's raw k tile (cp.async, no registers),
 * GQ2_STAGES tiles ahead; each k tile is then decoded from shared memory
 * into the f16 tile the tensor cores read, as gq_kernel's. The products
 * and their order are gq_kernel's, so are the outputs, bit for bit.
 * Formats of 32-element blocks whose k tile of a row is whole 4-byte words
 * at 4-byte aligned addresses (gq2_ok), K a multiple of GQ_BK. */
#define GQ2_STAGES 3

/* the formats with a gq2_kernel instance (cuda/gemm_q2.cu) */
#define GQ2_TYPES(X)                                                                                                   \
    X(MEMRA_TYPE_F16) X(MEMRA_TYPE_BF16) X(MEMRA_TYPE_Q8_0) X(MEMRA_TYPE_Q4_0) X(MEMRA_TYPE_Q4_1) X(MEMRA_TYPE_Q5_0)   \
        X(MEMRA_TYPE_Q5_1) X(MEMRA_TYPE_IQ4_NL)

template <int T> struct gq2_shape {
    static constexpr int RB = GQ_BK / 32 * mq_traits<T>::bytes; /* raw bytes of a row's k tile */
    static_assert(RB % 4 == 0, "gq2: a row's k tile must be whole 4-byte words");
    static constexpr int RW = RB / 4;                            /* in words */
    static constexpr int RP = RW % 2 ? RW : RW + 1;              /* smem row stride in words (odd) */
    static constexpr size_t stage = (size_t)GQ_BM * RP * 4 + (size_t)GQ_SMEM_B * sizeof(__half);
    static constexpr size_t smem = GQ2_STAGES * stage + (size_t)GQ_SMEM_A * sizeof(__half) + 2 * GQ_BN * sizeof(int) +
                                   GQ_BM * sizeof(void *);
};

static __device__ __forceinline__ void gq2_copy4(void *smem, const void *gmem, bool ok)
{
    const unsigned d = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(gmem), "r"(ok ? 4 : 0) : "memory");
}

static __device__ __forceinline__ void gq2_copy16(void *smem, const void *gmem, bool ok)
{
    const unsigned d = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(gmem), "r"(ok ? 16 : 0) : "memory");
}

/* Q8_0 from shared memory: the scale and 16 halfwords of quants (a
 * sub-block starts 2-byte aligned); the values of mq_deq32. */
template <int T> static __device__ __forceinline__ void gq2_decode(const uint8_t *b, float *v)
{
    mq_deq32<T>(b, 0, v);
}

template <> __device__ __forceinline__ void gq2_decode<MEMRA_TYPE_Q8_0>(const uint8_t *b, float *v)
{
    const unsigned short *h = reinterpret_cast<const unsigned short *>(b);
    const float d = __half2float(__ushort_as_half(h[0]));
#pragma unroll
    for (int j = 0; j < 16; j++) {
        const float2 p = mq_q8_pair(h[1 + j], d);
        v[2 * j] = p.x;
        v[2 * j + 1] = p.y;
    }
}

template <int T> __global__ void __launch_bounds__(GQ_THREADS, 2) gq2_kernel(const gq_args a)
{
    typedef gq2_shape<T> sh;
    extern __shared__ __align__(16) uint8_t gq_smem[];
    __half *const As = reinterpret_cast<__half *>(gq_smem);
    uint8_t *const st0 = gq_smem + (size_t)GQ_SMEM_A * sizeof(__half);
    int *const s_x = reinterpret_cast<int *>(st0 + GQ2_STAGES * sh::stage), *const s_y = s_x + GQ_BN;
    const uint8_t **const s_w = reinterpret_cast<const uint8_t **>(s_y + GQ_BN); /* weight row of each tile row */
    MEMRA_PDL_ENTER(); /* cuda_common.cuh */

    int expert, first, count;
    if (!gq_block_tile(a, &expert, &first, &count, s_x, s_y))
        return;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int64_t r0 = (int64_t)blockIdx.y * (a.W2 ? GQ_BM / 2 : GQ_BM);
    if (tid < GQ_BM)
        s_w[tid] = gq_weight_row(a, expert, r0, tid);
    __syncthreads();

    /* stage kt: raw rows (RP words apart), then the x tile (f16) */
    auto issue = [&](int64_t kt) {
        uint8_t *const st = st0 + (size_t)(kt % GQ2_STAGES) * sh::stage;
        uint32_t *const raw = reinterpret_cast<uint32_t *>(st);
        const size_t koff = (size_t)kt * sh::RB;
#pragma unroll
        for (int i = 0; i < (GQ_BM * sh::RW + GQ_THREADS - 1) / GQ_THREADS; i++) {
            const int w = tid + i * GQ_THREADS;
            if (w < GQ_BM * sh::RW) {
                const int row = w / sh::RW, col = w % sh::RW;
                const uint8_t *wr = s_w[row];
                gq2_copy4(raw + row * sh::RP + col, wr ? wr + koff + 4 * col : a.W, wr != NULL);
            }
        }
        __half *const xs = reinterpret_cast<__half *>(st + (size_t)GQ_BM * sh::RP * 4);
#pragma unroll
        for (int i = 0; i < (GQ_BN * GQ_BK / 8) / GQ_THREADS; i++) {
            const int c = tid + i * GQ_THREADS, n = c >> 3, kc = (c & 7) * 8;
            const int xr = s_x[n];
            gq2_copy16(xs + n * GQ_LD + kc, xr >= 0 ? a.X + (size_t)xr * a.ldx + kt * GQ_BK + kc : a.X, xr >= 0);
        }
    };

    const int wm = warp & 3, wn = warp >> 2; /* warp tile: 32 rows x 32 x rows */
    float acc[2][4][4];
    gq_zero_acc(acc);

    const int64_t nk = a.K / GQ_BK;
#pragma unroll
    for (int j = 0; j < GQ2_STAGES - 1; j++) {
        if (j < nk)
            issue(j);
        cp_async_commit();
    }
    const int s = tid >> 1, sub = tid & 1; /* decoder: smem row s, half `sub` of the k tile */
    for (int64_t kt = 0; kt < nk; kt++) {
        cp_async_wait<GQ2_STAGES - 2>();
        /* tile kt landed for every thread; every warp is past tile kt - 1's
         * tensor-core work, so its stage and the f16 tile are free */
        __syncthreads();
        if (kt + GQ2_STAGES - 1 < nk)
            issue(kt + GQ2_STAGES - 1);
        cp_async_commit();
        const uint8_t *const st = st0 + (size_t)(kt % GQ2_STAGES) * sh::stage;
        float v[32];
        gq2_decode<T>(st + (size_t)s * sh::RP * 4 + sub * mq_traits<T>::bytes, v);
        gq_stash_f16(As + s * GQ_LD + sub * 32, v);
        __syncthreads();
        gq_tile_mma(acc, As, reinterpret_cast<const __half *>(st + (size_t)GQ_BM * sh::RP * 4), wm, wn, lane, count);
    }
    cp_async_wait<0>();

    gq_epilogue(a, acc, s_y, r0, wm, wn, lane);
}

/* Launches gq2_kernel<T> as gq_launch does gq_kernel. */
template <int T> bool gq2_launch(const gq_args &a, unsigned n_tiles_max, cudaStream_t s);
#define GQ2_EXTERN(T) template <> bool gq2_launch<T>(const gq_args &a, unsigned n_tiles_max, cudaStream_t s);

#define GQ2_INSTANTIATE(T)                                                                                             \
    template <> bool gq2_launch<T>(const gq_args &a, unsigned n_tiles_max, cudaStream_t s)                             \
    {                                                                                                                  \
        const int bytes = (int)gq2_shape<T>::smem;                                                                     \
        if (cudaFuncSetAttribute(gq2_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) != cudaSuccess)    \
            return false;                                                                                              \
        const int64_t per = a.W2 ? GQ_BM / 2 : GQ_BM;                                                                  \
        const dim3 grid(n_tiles_max, (unsigned)((a.M + per - 1) / per));                                              \
        return memra__launch(gq2_kernel<T>, grid, GQ_THREADS, (size_t)bytes, s, a) == cudaSuccess;                     \
    }

/* Launches gq_kernel<T> over N_TILES_MAX tile slots (grouped: the device
 * list decides; dense: ceil(n_rows / GQ_BN)). false: no instance. */
template <int T> bool gq_launch(const gq_args &a, unsigned n_tiles_max, cudaStream_t s);

/* One raw loader's launch (gq_launch). */
template <int T, class RAW> static bool gq_launch_raw(const gq_args &a, unsigned n_tiles_max, cudaStream_t s)
{
    /* per launch: the attribute belongs to the current device */
    if (cudaFuncSetAttribute(gq_kernel<T, RAW>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)GQ_SMEM_BYTES) !=
        cudaSuccess)
        return false;
    const int64_t per = a.W2 ? GQ_BM / 2 : GQ_BM;
    const dim3 grid(n_tiles_max, (unsigned)((a.M + per - 1) / per));
    return memra__launch(gq_kernel<T, RAW>, grid, GQ_THREADS, GQ_SMEM_BYTES, s, a) == cudaSuccess;
}

#define GQ_INSTANTIATE(T, _)                                                                                           \
    template <> bool gq_launch<T>(const gq_args &a, unsigned n_tiles_max, cudaStream_t s)                              \
    {                                                                                                                  \
        static long words = -1;                                                                                        \
        if (words < 0)                                                                                                 \
            words = memra__cuda_env_long("MEMRA_GQ_KQ_WORDS", 1);                                                      \
        if (gq_kq_words<T>::value && words)                                                                            \
            return gq_launch_raw<T, typename std::conditional<gq_kq_words<T>::value, gq_raw_kq<T>, gq_raw<T>>::type>( \
                a, n_tiles_max, s);                                                                                    \
        return gq_launch_raw<T, gq_raw<T>>(a, n_tiles_max, s);                                                         \
    }

#define GQ_EXTERN(T, _) template <> bool gq_launch<T>(const gq_args &a, unsigned n_tiles_max, cudaStream_t s);

#endif

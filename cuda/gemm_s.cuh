/* The fast tier's skinny GEMM: a batched decode step's matmuls (2 to 32 x
 * rows of independent sequences) on the tensor cores, reading each weight
 * byte once per step.
 *
 * Y[r][v] = Σ_k W[v][k] · X[r][k] for the step's x rows r, X in f16 (the
 * prep kernel writes it, RMS-normalized first when the matmul_ex asks),
 * each weight sub-block dequantized (mq_deq32) and rounded once to f16,
 * products and sums on the tensor cores (mma.sync m16n8k16, float32
 * accumulation).
 *
 * A block owns GS_BM = 64 virtual rows (several weights sharing x form one
 * row space, as in the matvec; a GLU tile is 32 gate rows and the same 32
 * up rows) and one slice of K. Its 4 warps own 16 rows each. K is walked
 * in tiles of 256 elements: cp.async copies a tile's raw weight bytes
 * (whole blocks of every type: 256 is a multiple of every block size) and
 * its x rows into a ring of GS_ST stages, so that the HBM stream never
 * waits for the tensor cores; each warp decodes its 16 rows two
 * sub-blocks at a time into a small f16 buffer of its own (a lane per
 * row and sub-block) and runs the mma steps over it.
 *
 * Split-K: slices write float32 partial tiles; the block that finishes a
 * row tile last (a counter per tile) adds the partials in slice order and
 * applies the epilogue, so the result does not depend on which block ran
 * when. The slicing depends on the weight's shape and the device only,
 * never on the x row count, and the tensor core's sum for one output
 * column reads that column alone: a row's result is the same whatever
 * other rows share the step (batch composition, B >= 2).
 *
 * Exactness: fast tier only (f16 operands; the order of the float32 sums
 * is the tensor core's). Exact mode and one-row decode never take it. */
#ifndef MEMRA_CUDA_GEMM_S_CUH
#define MEMRA_CUDA_GEMM_S_CUH

#include <cuda_fp16.h>

#include "cuda_common.cuh"
#include "gemm_q.cuh"
#include "math.cuh"
#include "quant.cuh"

#define GS_BM 64
#define GS_KT 256
#define GS_WARPS 4
#define GS_THREADS (GS_WARPS * 32)
#define GS_LDX (GS_KT + 8) /* halves per staged x row: 8 rows of one ldmatrix in distinct banks */
#define GS_Q8_XLD (GS_KT + 16) /* the same for Q8_0's 8-byte x loads (lanes g = 0..3 in distinct banks) */
#define GS_LDA (64 + 8)    /* halves per row of a warp's decode buffer (two sub-blocks) */
#define GS_MAXN 32         /* x rows per launch */
#define GS_MAXW 4

typedef struct gs_args {
    const uint8_t *W[GS_MAXW];
    size_t nb1[GS_MAXW];
    int64_t vrow0[GS_MAXW + 1]; /* weight i owns virtual rows [vrow0[i], vrow0[i+1]) (GLU: both all) */
    int nw;
    int64_t K;                  /* a multiple of GS_KT (gsw_kernel's ODD form: of 64) */
    const __half *X;            /* n rows of K halves, ldx apart (a multiple of 8) */
    int64_t ldx;
    const float *Xf;            /* gsw_kernel: float x rows instead (ldxf apart, 16-byte aligned), each
                                 * element rounded to f16 as it is staged (gs_prep_kernel's rounding) */
    int64_t ldxf;
    int n;                      /* x rows, 1 .. GS_MAXN */
    float *y[GS_MAXW];
    int64_t ldy[GS_MAXW];
    int epi;                    /* MEMRA_MM_STORE / ADD / GLU (lib/backend.h) */
    int gelu;
    int post[GS_MAXW];          /* STORE: memra_ew_op_t per weight */
    const float *post_b[GS_MAXW], *post_aux[GS_MAXW];
    int kt_per;                 /* k tiles per slice */
    int split;                  /* slices (gridDim.y) */
    float *part;                /* split > 1: [split][row tiles * GS_BM][GS_MAXN] */
    int *count;                 /* split > 1: per row tile, zero between launches */
    int rb;                     /* staged bytes per weight row and tile (a multiple of 16) */
    int st;                     /* ring stages */
    int fin;                    /* gsw_kernel, 17-32 rows: the split-K sums a slice at a time (MEMRA_GSW_FIN) */
    int odd;                    /* gsw_kernel: rows 4-12 bytes off 16 or K not a multiple of GS_KT (its ODD form) */
} gs_args;

static __device__ __forceinline__ void gs_ldmatrix_x2(uint32_t *r, const __half *p)
{
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
}

/* Virtual row V of fused weights (no GLU): its weight, the row in that
 * weight (-1: past the end). */
static __device__ __forceinline__ int gs_weight(const gs_args &a, int64_t v, int64_t *lrow)
{
    int wi = 0;
    while (wi + 1 < a.nw && v >= a.vrow0[wi + 1])
        wi++;
    *lrow = v < a.vrow0[a.nw] ? v - a.vrow0[wi] : -1;
    return wi;
}

/* Tile row I of row tile T: its weight, the row in that weight (-1: none). */
static __device__ __forceinline__ int gs_row(const gs_args &a, int64_t t, int i, int64_t *lrow)
{
    if (a.epi == MEMRA_MM_GLU) {
        const int64_t v = t * (GS_BM / 2) + (i & (GS_BM / 2 - 1));
        *lrow = v < a.vrow0[1] ? v : -1;
        return i / (GS_BM / 2);
    }
    return gs_weight(a, t * GS_BM + i, lrow);
}

/* Q8_0's k tile as the tensor cores take it: each warp moves its 16 rows'
 * quants out of the 34-byte blocks into 16-byte aligned rows (GS_Q8_LD
 * bytes apart) and their scales into floats, so that one ldmatrix gives a
 * lane 4 quants of a row (the m16n8k32 int8 layout), which two byte
 * permutes and a subtraction turn into exact f16 integers: no integer
 * conversion instructions, no bank conflicts. The k order inside each 16
 * is permuted (a lane holds k = 4t..4t+3 where the f16 layout wants
 * 2t, 2t+1, 2t+8, 2t+9), and x is read in the same order, so each k16
 * step still sums the same 16 products. The scale multiplies each block's
 * float32 partial sum (q·x is exact on the tensor cores: q is a small
 * integer), not the f16 weights. */
#define GS_Q8_LD 272 /* repacked row: 256 quants + 16 (ldmatrix rows in distinct banks) */
#define GS_Q8_WARP (16 * GS_Q8_LD + 16 * 8 * 4)

static __device__ __forceinline__ void gs_ldmatrix_x4_b(uint32_t *r, const uint8_t *p)
{
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

/* Four int8 as two f16 pairs, exact: (b ^ 0x80) under the exponent of 1024
 * is 1024 + b + 128. */
static __device__ __forceinline__ void gs_q8_h2(uint32_t q, uint32_t *lo, uint32_t *hi)
{
    const uint32_t u = q ^ 0x80808080u;
    const __half2 off = __halves2half2(__ushort_as_half(0x6480), __ushort_as_half(0x6480)); /* 1152 */
    uint32_t l = __byte_perm(u, 0x64646464u, 0x5140), h = __byte_perm(u, 0x64646464u, 0x5342);
    const __half2 lh = __hsub2(*reinterpret_cast<const __half2 *>(&l), off);
    const __half2 hh = __hsub2(*reinterpret_cast<const __half2 *>(&h), off);
    *lo = *reinterpret_cast<const uint32_t *>(&lh);
    *hi = *reinterpret_cast<const uint32_t *>(&hh);
}

/* The warp's 16 rows of one staged Q8_0 tile (rb = 272: 8 whole blocks,
 * 16-byte aligned) into QS (quants) and DS (scales, float). Lane: row
 * lane % 16, half lane / 16 of every block's 32 quants. */
static __device__ __forceinline__ void gs_q8_repack(const uint8_t *raw, uint8_t *qs, float *ds, int lane)
{
    const int r = lane & 15, h = lane >> 4;
    const uint8_t *row = raw + r * 272;
#pragma unroll
    for (int b = 0; b < 8; b++) {
        const int o = 34 * b + 2 + 16 * h; /* the 16 quants' first byte in the row */
        const int sh = (34 * b + 2) & 15;  /* the same for both halves */
        const uint4 *w = reinterpret_cast<const uint4 *>(row + (o & ~15));
        const uint4 v0 = w[0];
        uint4 out;
        if (sh == 0) {
            out = v0;
        } else {
            const uint4 v1 = w[1];
            const uint32_t x[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
            const int wq = sh >> 2; /* whole words, then 0 or 2 bytes */
            uint32_t y[4];
#pragma unroll
            for (int i = 0; i < 4; i++)
                y[i] = (sh & 3) ? __byte_perm(x[wq + i], x[wq + i + 1], 0x5432) : x[wq + i];
            out = make_uint4(y[0], y[1], y[2], y[3]);
        }
        *reinterpret_cast<uint4 *>(qs + r * GS_Q8_LD + 32 * b + 16 * h) = out;
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int b = h * 4 + i;
        ds[r * 8 + b] = __half2float(*reinterpret_cast<const __half *>(row + 34 * b));
    }
}

/* The epilogue of output LROW of weight WI for x row R: G the row's sum
 * (GLU: the gate's, U the up row's). */
static __device__ __forceinline__ void gs_store(const gs_args &a, int wi, int64_t lrow, int r, float g, float u)
{
    float *y = a.y[wi] + (size_t)r * a.ldy[wi] + lrow;
    if (a.epi == MEMRA_MM_GLU)
        *y = d_glu(a.gelu, g, u);
    else if (a.epi == MEMRA_MM_ADD)
        *y = *y + g;
    else if (a.post[wi] == MEMRA_EW_SIGMOID)
        *y = (float)d_sigmoid(g);
    else if (a.post[wi] == MEMRA_EW_SOFTPLUS_MUL)
        *y = (float)(d_softplus((double)g + (double)a.post_b[wi][lrow]) * (double)a.post_aux[wi][lrow]);
    else
        *y = g;
}

/* Copies of one thread: the weight rows it streams, fixed for the launch. */
#define GS_CPT 9 /* copies per thread and tile, at most: 64 rows x 18 chunks / 128 */

template <int T, int NT> __global__ void __launch_bounds__(GS_THREADS, 2) gs_kernel(const gs_args a)
{
    constexpr bool Q8 = T == MEMRA_TYPE_Q8_0;
    constexpr int QK = mq_traits<T>::qk, BB = mq_traits<T>::bytes;
    constexpr int TB = GS_KT / QK * BB; /* weight bytes of one row's tile */
    constexpr int NX = 8 * NT;
    constexpr int LDX = Q8 ? GS_Q8_XLD : GS_LDX;
    constexpr int WARPB = Q8 ? GS_Q8_WARP : 16 * GS_LDA * 2;
    extern __shared__ __align__(16) uint8_t gs_smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int64_t tile = blockIdx.x;
    const int slice = blockIdx.y;
    const int wbytes = GS_BM * a.rb;
    const int stage = wbytes + NX * LDX * (int)sizeof(__half);
    uint8_t *const wbuf = gs_smem + (size_t)a.st * stage + warp * WARPB;

    const int64_t nkt = a.K / GS_KT;
    const int64_t kt0 = (int64_t)slice * a.kt_per;
    const int64_t kt1 = min(nkt, kt0 + a.kt_per);
    const int ntile = (int)(kt1 - kt0);

    /* this thread's copies (row, 16-byte chunk), resolved once */
    const int nch = a.rb / 16;
    const uint8_t *src[GS_CPT];
    int dst[GS_CPT], kof[GS_CPT];
#pragma unroll
    for (int q = 0; q < GS_CPT; q++) {
        const int c = tid + q * GS_THREADS, i = c / nch, k = c % nch;
        src[q] = NULL;
        dst[q] = i * a.rb + k * 16;
        kof[q] = k * 16;
        if (i < GS_BM) {
            int64_t lrow;
            const int wi = gs_row(a, tile, i, &lrow);
            if (lrow >= 0)
                src[q] = a.W[wi] + (size_t)lrow * a.nb1[wi] + k * 16;
        }
    }
    auto issue_w = [&](int j) { /* tile kt0 + j into stage j % st */
        if (j >= ntile)
            return;
        uint8_t *d = gs_smem + (size_t)(j % a.st) * stage;
        const int64_t s0 = (kt0 + j) * TB;
        const int64_t a0 = s0 & ~(int64_t)15;
        const int lim = (int)((s0 - a0 + TB + 15) >> 4) * 16; /* bytes of the row's copy */
#pragma unroll
        for (int q = 0; q < GS_CPT; q++)
            if (src[q] && kof[q] < lim)
                cp_async16(d + dst[q], src[q] + a0);
    };
    auto issue_x = [&](int j) {
        if (j >= ntile)
            return;
        __half *d = reinterpret_cast<__half *>(gs_smem + (size_t)(j % a.st) * stage + wbytes);
        const int64_t k0 = (kt0 + j) * GS_KT;
        for (int c = tid; c < a.n * (GS_KT / 8); c += GS_THREADS) {
            const int r = c / (GS_KT / 8), k = (c % (GS_KT / 8)) * 8;
            cp_async16(d + r * LDX + k, a.X + (size_t)r * a.ldx + k0 + k);
        }
    };

    /* weights are never written by a kernel: stream them before the wait
     * for the previous grid (the x rows are its output) */
    memra_pdl_launch();
    for (int j = 0; j < a.st - 1; j++)
        issue_w(j);
    cp_async_commit();
    memra_pdl_wait();
    for (int j = 0; j < a.st - 1; j++) {
        issue_x(j);
        cp_async_commit();
    }

    float acc[NT][4];
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int c = 0; c < 4; c++)
            acc[j][c] = 0.0f;

    for (int j = 0; j < ntile; j++) {
        cp_async_wait_n(a.st - 2);
        __syncthreads(); /* tile j landed for every thread; stage (j-1) % st is free */
        issue_w(j + a.st - 1);
        issue_x(j + a.st - 1);
        cp_async_commit();
        const uint8_t *ws = gs_smem + (size_t)(j % a.st) * stage;
        const __half *xs = reinterpret_cast<const __half *>(ws + wbytes);
        if constexpr (Q8) {
            float *ds = reinterpret_cast<float *>(wbuf + 16 * GS_Q8_LD);
            gs_q8_repack(ws + warp * 16 * a.rb, wbuf, ds, lane);
            __syncwarp();
            const int g = lane >> 2, t = lane & 3;
#pragma unroll
            for (int b = 0; b < 8; b++) {
                uint32_t q[4], af[2][4];
                gs_ldmatrix_x4_b(q, wbuf + ((lane & 7) + ((lane >> 3) & 1) * 8) * GS_Q8_LD + 32 * b + (lane >> 4) * 16);
                /* k16 step s: rows g / g+8 from q[2s] / q[2s+1] */
#pragma unroll
                for (int st2 = 0; st2 < 2; st2++) {
                    gs_q8_h2(q[2 * st2], &af[st2][0], &af[st2][2]);
                    gs_q8_h2(q[2 * st2 + 1], &af[st2][1], &af[st2][3]);
                }
                const float d0 = ds[g * 8 + b], d1 = ds[(g + 8) * 8 + b];
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    float tq[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
                    for (int st2 = 0; st2 < 2; st2++) {
                        const uint2 xv = *reinterpret_cast<const uint2 *>(xs + (nt * 8 + g) * LDX + 32 * b + 16 * st2 + 4 * t);
                        const uint32_t bf[2] = {xv.x, xv.y};
                        gq_mma(tq, af[st2], bf);
                    }
                    acc[nt][0] = __fmaf_rn(tq[0], d0, acc[nt][0]);
                    acc[nt][1] = __fmaf_rn(tq[1], d0, acc[nt][1]);
                    acc[nt][2] = __fmaf_rn(tq[2], d1, acc[nt][2]);
                    acc[nt][3] = __fmaf_rn(tq[3], d1, acc[nt][3]);
                }
            }
            __syncwarp(); /* the repacked tile is rewritten by the next one */
        } else {
            __half *abuf = reinterpret_cast<__half *>(wbuf);
            const int off = (int)(((kt0 + j) * TB) & 15);
            for (int c = 0; c < GS_KT / 64; c++) {
                /* lane: row lane % 16 of the warp's 16, sub-block 2c + lane / 16 of the tile */
                const int r = lane & 15, sb = 2 * c + (lane >> 4);
                const int e = sb * 32;
                float v[32];
                mq_deq32<T>(ws + (warp * 16 + r) * a.rb + off + (e / QK) * BB, (e % QK) / 32, v);
                uint4 *dq = reinterpret_cast<uint4 *>(abuf + r * GS_LDA + (lane >> 4) * 32);
#pragma unroll
                for (int q = 0; q < 4; q++)
                    dq[q] = make_uint4(gq_pack(v[8 * q], v[8 * q + 1]), gq_pack(v[8 * q + 2], v[8 * q + 3]),
                                       gq_pack(v[8 * q + 4], v[8 * q + 5]), gq_pack(v[8 * q + 6], v[8 * q + 7]));
                __syncwarp();
#pragma unroll
                for (int kk = 0; kk < 4; kk++) {
                    uint32_t af[4];
                    gq_ldmatrix_x4(af, abuf + (lane & 15) * GS_LDA + kk * 16 + (lane >> 4) * 8);
#pragma unroll
                    for (int nt = 0; nt < NT; nt++) {
                        uint32_t bf[2];
                        gs_ldmatrix_x2(bf, xs + (nt * 8 + (lane & 7)) * LDX + c * 64 + kk * 16 + ((lane >> 3) & 1) * 8);
                        gq_mma(acc[nt], af, bf);
                    }
                }
                __syncwarp(); /* the buffer is rewritten by the next pair of sub-blocks */
            }
        }
    }
    cp_async_wait<0>();
    __syncthreads(); /* the ring is free: it holds the tile's sums now */

    /* c0/c1 at (row lane/4, x rows 2·(lane%4) + 0/1), c2/c3 eight rows down */
    float *sum = reinterpret_cast<float *>(gs_smem); /* [GS_BM][NX] */
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int c = 0; c < 4; c++)
            sum[(warp * 16 + (lane >> 2) + (c >> 1) * 8) * NX + nt * 8 + (lane & 3) * 2 + (c & 1)] = acc[nt][c];
    __syncthreads();

    if (a.split > 1) {
        const int gt = (int)gridDim.x;
        float *mine = a.part + ((size_t)slice * gt + tile) * GS_BM * GS_MAXN;
        for (int c = tid; c < GS_BM * a.n; c += GS_THREADS)
            mine[(c % GS_BM) * GS_MAXN + c / GS_BM] = sum[(c % GS_BM) * NX + c / GS_BM];
        __threadfence();
        __syncthreads();
        __shared__ int s_last;
        if (tid == 0)
            s_last = atomicAdd(&a.count[tile], 1) == a.split - 1;
        __syncthreads();
        if (!s_last)
            return;
        __threadfence();
        /* the last block adds the slices' partials in slice order */
        for (int c = tid; c < GS_BM * a.n; c += GS_THREADS) {
            const int i = c % GS_BM, r = c / GS_BM;
            float s = 0.0f;
            for (int q = 0; q < a.split; q++)
                s += __ldcg(a.part + ((size_t)q * gt + tile) * GS_BM * GS_MAXN + i * GS_MAXN + r);
            sum[i * NX + r] = s;
        }
        if (tid == 0)
            a.count[tile] = 0;
        __syncthreads();
    }

    /* epilogue: consecutive threads take consecutive rows of one x row */
    const int rows = a.epi == MEMRA_MM_GLU ? GS_BM / 2 : GS_BM;
    for (int c = tid; c < rows * a.n; c += GS_THREADS) {
        const int i = c % rows, r = c / rows;
        int64_t lrow;
        const int wi = gs_row(a, tile, i, &lrow);
        if (lrow < 0)
            continue;
        gs_store(a, wi, lrow, r, sum[i * NX + r], a.epi == MEMRA_MM_GLU ? sum[(i + GS_BM / 2) * NX + r] : 0.0f);
    }
}

/* The weight types with instances: the 32-element formats (gemm_s.cu) and
 * the 256-element super-blocks (gemm_s_k.cu). */
#define GS_TYPES_32(X)                                                                                                 \
    X(MEMRA_TYPE_Q8_0)                                                                                                 \
    X(MEMRA_TYPE_Q4_0)                                                                                                 \
    X(MEMRA_TYPE_Q4_1)                                                                                                 \
    X(MEMRA_TYPE_Q5_0)                                                                                                 \
    X(MEMRA_TYPE_Q5_1)                                                                                                 \
    X(MEMRA_TYPE_IQ4_NL)
#define GS_TYPES_256(X)                                                                                                \
    X(MEMRA_TYPE_Q4_K)                                                                                                 \
    X(MEMRA_TYPE_Q5_K)                                                                                                 \
    X(MEMRA_TYPE_Q6_K)                                                                                                 \
    X(MEMRA_TYPE_IQ4_XS)


/* The Q8_0 warp-streaming kernel of steps of up to GSW_MAXN rows
 * (cuda/gemm_sw.cu): grid_x blocks of GSW_WARPS row groups, a.split
 * slices, SMEM bytes; a.count holds a counter per row group. false: the
 * launch failed. */
#define GSW_MAXN 32
#define GSW_WARPS 8
#define GSW_ROWS 8                        /* weight rows of a warp's group: the mma's n */
#define GSW_RB 272                        /* bytes of one row's 256-element Q8_0 k tile */
#define GSW_SLOT (GSW_ROWS * GSW_RB)      /* one ring item: a k tile of the group's rows */
#define GSW_RB_ODD 288                    /* the ODD form's: a tile from the 16 bytes at or below it */
#define GSW_SLOT_ODD (GSW_ROWS * GSW_RB_ODD)
#define GSW_KT_MAX 4                      /* k tiles per slice, at most (the staged x: 65 KiB at 32 rows) */
#define GSW_RING_MAX 4
#define GSW_SMEM_2 (110u * 1024u)         /* dynamic shared memory of a block when two share an SM */
bool gsw_launch(const gs_args &a, unsigned grid_x, size_t smem, cudaStream_t s);
/* gsw_kernel's K-quant form (cuda/gemm_swk.cu): the bytes of a ring
 * item's row for TYPE (0: no such form) and whether its shared memory
 * holds, after the staged x, the x rows' sub-block sums (*XSUM unless
 * NULL: Q4_K / Q5_K), their bytes for N rows (f16 high and low parts);
 * its launch as gsw_launch's with a ring of up to GSWK_RING_MAX items
 * (A.odd: Q6_K rows not 16-byte aligned, on the row-offset ring). */
#define GSWK_RING_MAX 6
int gswk_row_bytes(int type, bool *xsum);
size_t gswk_sums_bytes(int n, int kt_per);
bool gswk_launch(int type, const gs_args &a, unsigned grid_x, size_t smem, cudaStream_t s);

/* Launches gs_kernel<T> (NT from a.n) over GRID_X row tiles and a.split
 * slices with SMEM bytes of dynamic shared memory. false: no instance. */
template <int T> bool gs_launch(const gs_args &a, unsigned grid_x, size_t smem, cudaStream_t s);

#define GS_INSTANTIATE(T, _)                                                                                           \
    template <int NT> static bool gs_launch_nt_##T(const gs_args &a, unsigned grid_x, size_t smem, cudaStream_t s)     \
    {                                                                                                                  \
        if (cudaFuncSetAttribute(gs_kernel<T, NT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) !=         \
            cudaSuccess)                                                                                               \
            return false;                                                                                              \
        return memra__launch(gs_kernel<T, NT>, dim3(grid_x, (unsigned)a.split), GS_THREADS, smem, s, a) ==            \
               cudaSuccess;                                                                                            \
    }                                                                                                                  \
    template <> bool gs_launch<T>(const gs_args &a, unsigned grid_x, size_t smem, cudaStream_t s)                      \
    {                                                                                                                  \
        return a.n <= 8    ? gs_launch_nt_##T<1>(a, grid_x, smem, s)                                                   \
               : a.n <= 16 ? gs_launch_nt_##T<2>(a, grid_x, smem, s)                                                   \
                           : gs_launch_nt_##T<4>(a, grid_x, smem, s);                                                  \
    }

#endif

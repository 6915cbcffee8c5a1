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

/* Shared memory: two stages of the weight and x tiles (double buffering:
 * the next k tile's loads are in flight while the tensor cores work on
 * this one), then the tile's x and y rows. */
#define GQ_SMEM_A (GQ_BM * GQ_LD)
#define GQ_SMEM_B (GQ_BN * GQ_LD)
#define GQ_SMEM_BYTES ((size_t)2 * (GQ_SMEM_A + GQ_SMEM_B) * sizeof(__half) + 2 * GQ_BN * sizeof(int))

template <int T> __global__ void __launch_bounds__(GQ_THREADS, 2) gq_kernel(const gq_args a)
{
    extern __shared__ __align__(16) uint8_t gq_smem[];
    __half *const As0 = reinterpret_cast<__half *>(gq_smem);
    __half *const Bs0 = As0 + 2 * GQ_SMEM_A;
    int *const s_x = reinterpret_cast<int *>(Bs0 + 2 * GQ_SMEM_B), *const s_y = s_x + GQ_BN;
    MEMRA_PDL_ENTER(); /* cuda_common.cuh */

    int expert = 0, first, count;
    if (a.tiles) {
        if ((int)blockIdx.x >= *a.n_tiles)
            return;
        const gq_tile t = a.tiles[blockIdx.x];
        expert = t.expert;
        first = t.first;
        count = t.count;
    } else {
        first = (int)blockIdx.x * GQ_BN;
        count = (int)(a.n_rows - first < GQ_BN ? a.n_rows - first : GQ_BN);
    }
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    if (tid < GQ_BN) {
        int64_t p = -1;
        if (tid < count)
            p = a.slots ? (int64_t)a.slots[first + tid] : (int64_t)first + tid;
        s_y[tid] = (int)p;
        s_x[tid] = p < 0 ? -1 : (int)(p / a.xdiv);
    }

    /* loader: smem row s, half `sub` of the k tile */
    const bool glu = a.W2 != NULL;
    const int64_t r0 = (int64_t)blockIdx.y * (glu ? GQ_BM / 2 : GQ_BM);
    const int s = tid >> 1, sub = tid & 1;
    const uint8_t *wrow = NULL;
    {
        int64_t r;
        const uint8_t *base = a.W;
        if (glu) { /* warp-row wm's 32 rows: 16 gate rows, then the same 16 up rows */
            r = r0 + (s >> 5) * 16 + (s & 15);
            if (s & 16)
                base = a.W2;
        } else {
            r = r0 + s;
        }
        if (r < a.M)
            wrow = base + (size_t)expert * a.nb2 + (size_t)r * a.nb1;
    }
    __syncthreads();

    const int wm = warp & 3, wn = warp >> 2; /* warp tile: 32 rows x 32 x rows */
    float acc[2][4][4];
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int n = 0; n < 4; n++)
#pragma unroll
            for (int c = 0; c < 4; c++)
                acc[m][n][c] = 0.0f;

    /* stage = this thread's share of one k tile: its weight sub-block
     * (raw) and two 16-byte chunks of x */
    gq_raw<T> raw;
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
        uint4 *dst = reinterpret_cast<uint4 *>(As0 + buf * GQ_SMEM_A + s * GQ_LD + sub * 32);
#pragma unroll
        for (int j = 0; j < 4; j++)
            dst[j] = make_uint4(gq_pack(v[8 * j], v[8 * j + 1]), gq_pack(v[8 * j + 2], v[8 * j + 3]),
                                gq_pack(v[8 * j + 4], v[8 * j + 5]), gq_pack(v[8 * j + 6], v[8 * j + 7]));
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
        const __half *As = As0 + buf * GQ_SMEM_A, *Bs = Bs0 + buf * GQ_SMEM_B;
#pragma unroll
        for (int ks = 0; ks < GQ_BK; ks += 16) {
            uint32_t af[2][4], bf[4][2];
#pragma unroll
            for (int m = 0; m < 2; m++)
                gq_ldmatrix_x4(af[m], As + (wm * 32 + m * 16 + (lane & 15)) * GQ_LD + ks + (lane >> 4) * 8);
#pragma unroll
            for (int np = 0; np < 2; np++) {
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
                    gq_mma(acc[m][n], af[m], bf[n]);
        }
        /* the other buffer was last read before the previous barrier */
        if (kt + 1 < nk)
            stash(buf ^ 1);
        __syncthreads();
    }

    /* epilogue: c0/c1 at (row lane/4, x rows 2·(lane%4) + 0/1), c2/c3 eight rows down */
#pragma unroll
    for (int n = 0; n < 4; n++)
#pragma unroll
        for (int c = 0; c < 4; c++) {
            const int col = wn * 32 + n * 8 + (lane & 3) * 2 + (c & 1);
            const int p = s_y[col];
            if (p < 0)
                continue;
            const int lr = (lane >> 2) + (c >> 1) * 8;
            if (glu) {
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

/* Launches gq_kernel<T> over N_TILES_MAX tile slots (grouped: the device
 * list decides; dense: ceil(n_rows / GQ_BN)). false: no instance. */
template <int T> bool gq_launch(const gq_args &a, unsigned n_tiles_max, cudaStream_t s);

#define GQ_INSTANTIATE(T, _)                                                                                           \
    template <> bool gq_launch<T>(const gq_args &a, unsigned n_tiles_max, cudaStream_t s)                              \
    {                                                                                                                  \
        /* per launch: the attribute belongs to the current device */                                                 \
        if (cudaFuncSetAttribute(gq_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)GQ_SMEM_BYTES) !=     \
            cudaSuccess)                                                                                               \
            return false;                                                                                              \
        const int64_t per = a.W2 ? GQ_BM / 2 : GQ_BM;                                                                  \
        const dim3 grid(n_tiles_max, (unsigned)((a.M + per - 1) / per));                                              \
        return memra__launch(gq_kernel<T>, grid, GQ_THREADS, GQ_SMEM_BYTES, s, a) == cudaSuccess;                      \
    }

#define GQ_EXTERN(T, _) template <> bool gq_launch<T>(const gq_args &a, unsigned n_tiles_max, cudaStream_t s);

#endif

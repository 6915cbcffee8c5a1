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
#define GS_LDA (64 + 8)    /* halves per row of a warp's decode buffer (two sub-blocks) */
#define GS_MAXN 32         /* x rows per launch */
#define GS_MAXW 4

typedef struct gs_args {
    const uint8_t *W[GS_MAXW];
    size_t nb1[GS_MAXW];
    int64_t vrow0[GS_MAXW + 1]; /* weight i owns virtual rows [vrow0[i], vrow0[i+1]) (GLU: both all) */
    int nw;
    int64_t K;                  /* a multiple of GS_KT */
    const __half *X;            /* n rows of K halves, ldx apart (a multiple of 8) */
    int64_t ldx;
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
} gs_args;

static __device__ __forceinline__ void gs_ldmatrix_x2(uint32_t *r, const __half *p)
{
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
}

static __device__ __forceinline__ void gs_cp16(void *smem, const void *gmem)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}

static __device__ __forceinline__ void gs_commit(void)
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int N> static __device__ __forceinline__ void gs_wait(void)
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

static __device__ __forceinline__ void gs_wait_n(int n)
{
    if (n <= 0)
        gs_wait<0>();
    else if (n == 1)
        gs_wait<1>();
    else if (n == 2)
        gs_wait<2>();
    else
        gs_wait<3>();
}

/* Tile row I of row tile T: its weight, the row in that weight (-1: none). */
static __device__ __forceinline__ int gs_row(const gs_args &a, int64_t t, int i, int64_t *lrow)
{
    if (a.epi == MEMRA_MM_GLU) {
        const int64_t v = t * (GS_BM / 2) + (i & (GS_BM / 2 - 1));
        *lrow = v < a.vrow0[1] ? v : -1;
        return i / (GS_BM / 2);
    }
    const int64_t v = t * GS_BM + i;
    int wi = 0;
    while (wi + 1 < a.nw && v >= a.vrow0[wi + 1])
        wi++;
    *lrow = v < a.vrow0[a.nw] ? v - a.vrow0[wi] : -1;
    return wi;
}

template <int T, int NT> __global__ void __launch_bounds__(GS_THREADS, 2) gs_kernel(const gs_args a)
{
    constexpr int QK = mq_traits<T>::qk, BB = mq_traits<T>::bytes;
    constexpr int TB = GS_KT / QK * BB; /* weight bytes of one row's tile */
    constexpr int NX = 8 * NT;
    extern __shared__ __align__(16) uint8_t gs_smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int64_t tile = blockIdx.x;
    const int slice = blockIdx.y;
    const int wbytes = GS_BM * a.rb;
    const int stage = wbytes + NX * GS_LDX * (int)sizeof(__half);
    __half *const abuf = reinterpret_cast<__half *>(gs_smem + (size_t)a.st * stage) + warp * 16 * GS_LDA;

    const int64_t nkt = a.K / GS_KT;
    const int64_t kt0 = (int64_t)slice * a.kt_per;
    const int64_t kt1 = min(nkt, kt0 + a.kt_per);
    const int ntile = (int)(kt1 - kt0);

    /* this thread's copies: weight rows (row, chunk) pairs strided by the block */
    const int nch = a.rb / 16;
    auto issue_w = [&](int j) { /* tile kt0 + j into stage j % st */
        if (j >= ntile)
            return;
        uint8_t *dst = gs_smem + (size_t)(j % a.st) * stage;
        const int64_t s0 = (kt0 + j) * TB;
        const int64_t a0 = s0 & ~(int64_t)15;
        const int nc = (int)((s0 - a0 + TB + 15) >> 4);
        for (int c = tid; c < GS_BM * nch; c += GS_THREADS) {
            const int i = c / nch, k = c % nch;
            int64_t lrow;
            const int wi = gs_row(a, tile, i, &lrow);
            if (lrow >= 0 && k < nc)
                gs_cp16(dst + i * a.rb + k * 16, a.W[wi] + (size_t)lrow * a.nb1[wi] + a0 + k * 16);
        }
    };
    auto issue_x = [&](int j) {
        if (j >= ntile)
            return;
        __half *dst = reinterpret_cast<__half *>(gs_smem + (size_t)(j % a.st) * stage + wbytes);
        const int64_t k0 = (kt0 + j) * GS_KT;
        for (int c = tid; c < a.n * (GS_KT / 8); c += GS_THREADS) {
            const int r = c / (GS_KT / 8), k = (c % (GS_KT / 8)) * 8;
            gs_cp16(dst + r * GS_LDX + k, a.X + (size_t)r * a.ldx + k0 + k);
        }
    };

    /* weights are never written by a kernel: stream them before the wait
     * for the previous grid (the x rows are its output) */
    memra_pdl_launch();
    for (int j = 0; j < a.st - 1; j++)
        issue_w(j);
    gs_commit();
    memra_pdl_wait();
    for (int j = 0; j < a.st - 1; j++) {
        issue_x(j);
        gs_commit();
    }

    float acc[NT][4];
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int c = 0; c < 4; c++)
            acc[j][c] = 0.0f;

    for (int j = 0; j < ntile; j++) {
        gs_wait_n(a.st - 2);
        __syncthreads(); /* tile j landed for every thread; stage (j-1) % st is free */
        issue_w(j + a.st - 1);
        issue_x(j + a.st - 1);
        gs_commit();
        const uint8_t *ws = gs_smem + (size_t)(j % a.st) * stage;
        const __half *xs = reinterpret_cast<const __half *>(ws + wbytes);
        const int64_t s0 = (kt0 + j) * TB;
        const int off = (int)(s0 & 15);
        for (int c = 0; c < GS_KT / 64; c++) {
            /* lane: row lane % 16 of the warp's 16, sub-block 2c + lane / 16 of the tile */
            const int r = lane & 15, sb = 2 * c + (lane >> 4);
            const int e = sb * 32;
            float v[32];
            mq_deq32<T>(ws + (warp * 16 + r) * a.rb + off + (e / QK) * BB, (e % QK) / 32, v);
            uint4 *dst = reinterpret_cast<uint4 *>(abuf + r * GS_LDA + (lane >> 4) * 32);
#pragma unroll
            for (int q = 0; q < 4; q++)
                dst[q] = make_uint4(gq_pack(v[8 * q], v[8 * q + 1]), gq_pack(v[8 * q + 2], v[8 * q + 3]),
                                    gq_pack(v[8 * q + 4], v[8 * q + 5]), gq_pack(v[8 * q + 6], v[8 * q + 7]));
            __syncwarp();
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
                uint32_t af[4];
                gq_ldmatrix_x4(af, abuf + (lane & 15) * GS_LDA + kk * 16 + (lane >> 4) * 8);
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    uint32_t bf[2];
                    gs_ldmatrix_x2(bf, xs + (nt * 8 + (lane & 7)) * GS_LDX + c * 64 + kk * 16 + ((lane >> 3) & 1) * 8);
                    gq_mma(acc[nt], af, bf);
                }
            }
            __syncwarp(); /* the buffer is rewritten by the next pair of sub-blocks */
        }
    }
    gs_wait<0>();
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
        const float g = sum[i * NX + r];
        float *y = a.y[wi] + (size_t)r * a.ldy[wi] + lrow;
        if (a.epi == MEMRA_MM_GLU)
            *y = d_glu(a.gelu, g, sum[(i + GS_BM / 2) * NX + r]);
        else if (a.epi == MEMRA_MM_ADD)
            *y = *y + g;
        else if (a.post[wi] == MEMRA_EW_SIGMOID)
            *y = (float)d_sigmoid(g);
        else if (a.post[wi] == MEMRA_EW_SOFTPLUS_MUL)
            *y = (float)(d_softplus((double)g + (double)a.post_b[wi][lrow]) * (double)a.post_aux[wi][lrow]);
        else
            *y = g;
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

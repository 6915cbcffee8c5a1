/* The fast tier's Q8_0 kernel of batched decode steps on the integer
 * tensor cores (MEMRA_GSI=1, off by default until the H200 has timed it
 * against gsw_kernel; cuda/gemm_s.cu picks it).
 *
 * Why: gsw_kernel (cuda/gemm_sw.cu) makes every quant an f16 (two byte
 * permutes and a half subtraction a pair) and scales 8 rows x up to 8 x
 * rows a block with half its accumulators idle: ~318 PTX instructions an
 * item of 8 rows x 256 quants, about twice the one-row matvec's count a
 * quant, and it streams at about half that matvec's rate. Here x is
 * quantized once a step (gsi_prep_kernel) and the quants go to the mma
 * as they lie in the ring:
 *
 *   x   a row's 32-block: d = amax / 127, q = x / d, hi = rint(q), lo =
 *       rint((q - hi) 254): x ~ (d / 254) (254 hi + lo), ~15 bits against
 *       the block's largest element (f16 keeps 11 against each element;
 *       the dot's error is below the f16 form's where a block's elements
 *       are within ~16x of each other, and bounded by the block's largest
 *       either way);
 *   dot mma.sync m16n8k32 s8: the weights the A operand (16 rows a warp:
 *       lane (g, t) holds quants 4t..4t+3 and 16+4t.. of rows g and g + 8,
 *       the words gsw_kernel reads), x rows the B operand (n = 8 a tile,
 *       NT tiles sharing each A fragment), hi and lo two mmas into int32,
 *       254 hi + lo exact in int32, then one float32 multiply-add a block
 *       with the weight's scale times x's.
 *
 * The walk, ring, bulk copies and split-K are gsw_kernel's with 16-row
 * groups (items of 16 x 272 bytes): slices write float32 partials, the
 * warp that completes a group adds them in slice order. The slicing is a
 * function of the weight's shape and the device (never of the row count,
 * nor of NT or the warps a block), and an output (weight row, x row)
 * reads its own x row only, so a row's result does not depend on the
 * other rows of its step. Exactness: fast tier only. */
#include "gemm_sw.cuh"

/* x rows into 8-bit parts (see above): a block a row, normalized first
 * when W is given or NORM is set (gs_prep_kernel's arithmetic), a warp a
 * 32-block at a time. XQ [n][K/32][64]: lane t's 16 bytes of a block
 * together (hi 4t.., hi 16+4t.., lo 4t.., lo 16+4t..: the B fragment of
 * both parts); XS [n][K/32] the blocks' d / 254. */
__global__ void __launch_bounds__(MEMRA_NORM_BLOCK) gsi_prep_kernel(const float *x, int64_t ldx, int norm,
                                                                    const float *w, float eps, int64_t K,
                                                                    uint8_t *xq, float *xs)
{
    MEMRA_PDL_ENTER(); /* cuda_common.cuh */
    __shared__ float red[MEMRA_NORM_BLOCK / 32];
    const float *xr = x + (size_t)blockIdx.x * ldx;
    const float s = norm ? (float)row_scale(true, xr, K, eps, red) : 1.0f;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t nb = K / 32;
    const int t = (lane & 15) >> 2, half = lane >> 4, i = lane & 3;
    uint8_t *orow = xq + (size_t)blockIdx.x * nb * GSI_XB;
    for (int64_t b = warp; b < nb; b += MEMRA_NORM_BLOCK / 32) {
        const int64_t e = b * 32 + lane;
        const float v = norm ? row_scaled(xr[e], s, w, e) : xr[e];
        float m = fabsf(v);
#pragma unroll
        for (int o = 16; o; o >>= 1)
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        const float d = __fdiv_rn(m, 127.0f);
        const float q = d > 0.0f ? __fdiv_rn(v, d) : 0.0f; /* d underflows only for blocks of near-zeros */
        const float hi = rintf(q), lo = rintf(__fmul_rn(__fsub_rn(q, hi), 254.0f));
        uint8_t *o = orow + b * GSI_XB + 16 * t + 4 * half + i;
        o[0] = (uint8_t)(int8_t)hi;
        o[8] = (uint8_t)(int8_t)lo;
        if (lane == 0)
            xs[(size_t)blockIdx.x * nb + b] = __fdiv_rn(d, 254.0f);
    }
}

static __device__ __forceinline__ uint4 gsi_lds128(uint32_t a)
{
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
    return v;
}

static __device__ __forceinline__ float2 gsi_lds64f(uint32_t a)
{
    float2 v;
    asm volatile("ld.shared.v2.f32 {%0,%1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(a));
    return v;
}

/* D = A B (int32, C = 0): A the weights' fragment Q, B x's (B0, B1) */
static __device__ __forceinline__ void gsi_mma(int (&d)[4], const uint32_t (&q)[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%10,%10,%10,%10};"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(q[0]), "r"(q[1]), "r"(q[2]), "r"(q[3]), "r"(b0), "r"(b1), "r"(0));
}

/* NT tiles of 8 x rows (a.n <= 8 NT), W warps a block, a warp one 16-row
 * group of one slice (blockIdx.y). Accumulator i of tile j: weight row g
 * + 8 (i >> 1), x row 8j + 2t + (i & 1). */
template <int NT, int W> __global__ void __launch_bounds__(W * 32) gsi_kernel(const gs_args a)
{
    constexpr int NX = 8 * NT;
    extern __shared__ __align__(128) uint8_t gsi_dyn[];
    __shared__ __align__(8) uint64_t bars[W][GSW_RING_MAX];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int D = a.st;
    const bool glu = a.epi == MEMRA_MM_GLU;
    const int np = glu ? 2 : 1;
    const int64_t nv = glu ? a.vrow0[1] : a.vrow0[a.nw];
    const int64_t ngroups = (nv + GSI_ROWS - 1) / GSI_ROWS;
    const int slice = blockIdx.y;
    const int64_t kt0 = (int64_t)slice * a.kt_per;
    const int nt = (int)min((int64_t)a.kt_per, a.K / GS_KT - kt0);
    const int nti = np * nt;
    const int nbs = a.kt_per * 8;            /* 32-blocks of a slice */
    const int xrs = nbs * GSI_XB + 64;       /* staged x row stride: 64 mod 128 bytes, conflict-free */
    uint8_t *ring = gsi_dyn + (size_t)warp * D * GSI_SLOT;
    uint8_t *xq = gsi_dyn + (size_t)W * D * GSI_SLOT;
    float *xsc = reinterpret_cast<float *>(xq + (size_t)NX * xrs); /* [nbs][NX] */
    const int64_t grp = (int64_t)blockIdx.x * W + warp;
    const bool live = grp < ngroups;
    gsw_ring<GSI_ROWS> rg;
    rg.init(a, bars[warp], ring, grp, nv, kt0, nt, lane);
    const uint32_t bar0 = rg.bar0;
    rg.start();
    {
        const int64_t nb = a.K / 32, b0 = kt0 * 8;
        const int cpr = nt * 8 * GSI_XB / 16; /* 16-byte chunks of an x row's slice */
        for (int c = threadIdx.x; c < a.n * cpr; c += W * 32) {
            const int r = c / cpr, k = c % cpr;
            cp_async16(xq + (size_t)r * xrs + 16 * k, a.XQ + ((size_t)r * nb + b0) * GSI_XB + 16 * k);
        }
        for (int c = threadIdx.x; c < NX * nt * 8; c += W * 32) {
            const int r = c % NX, k = c / NX;
            xsc[k * NX + r] = r < a.n ? a.XS[(size_t)r * nb + b0 + k] : 0.0f;
        }
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();
    }
    if (!live)
        return;
    const int g = lane >> 2, t = lane & 3;
    /* x row 8j + g's staged slice (rows past n: row 0, products never stored) */
    uint32_t xa[NT];
#pragma unroll
    for (int j = 0; j < NT; j++)
        xa[j] = mmv_saddr(xq + (size_t)(8 * j + g < a.n ? 8 * j + g : 0) * xrs + 16 * t);
    const uint32_t sa = mmv_saddr(xsc + 2 * t);
    float acc[2][4 * NT];
#pragma unroll
    for (int i = 0; i < 4 * NT; i++)
        acc[0][i] = acc[1][i] = 0.0f;
    uint32_t phase = 0;
    for (int it = 0; it < nti; it++) {
        const int slot = it % D;
        mmv_ring_wait(bar0, slot, phase);
        rg.issue_next();
        const int p = it < nt ? 0 : 1, jt = it < nt ? it : it - nt;
        const uint8_t *w = ring + slot * GSI_SLOT;
        const uint8_t *w0 = w + g * GSW_RB, *w1 = w + (g + 8) * GSW_RB;
        float c[4 * NT];
#pragma unroll
        for (int i = 0; i < 4 * NT; i++)
            c[i] = p ? acc[1][i] : acc[0][i];
#pragma unroll
        for (int b = 0; b < 8; b++) {
            /* a0..a3: rows g, g+8 x quants 4t..4t+3, 16+4t..: 2 mod 4
             * bytes off a word in even blocks, on one in odd blocks */
            uint32_t q[4];
            if ((34 * b + 2) & 3) {
                const uint32_t *p0 = reinterpret_cast<const uint32_t *>(w0 + 34 * b + 4 * t);
                const uint32_t *p1 = reinterpret_cast<const uint32_t *>(w1 + 34 * b + 4 * t);
                q[0] = __byte_perm(p0[0], p0[1], 0x5432);
                q[2] = __byte_perm(p0[4], p0[5], 0x5432);
                q[1] = __byte_perm(p1[0], p1[1], 0x5432);
                q[3] = __byte_perm(p1[4], p1[5], 0x5432);
            } else {
                const uint32_t *p0 = reinterpret_cast<const uint32_t *>(w0 + 34 * b + 2 + 4 * t);
                const uint32_t *p1 = reinterpret_cast<const uint32_t *>(w1 + 34 * b + 2 + 4 * t);
                q[0] = p0[0];
                q[2] = p0[4];
                q[1] = p1[0];
                q[3] = p1[4];
            }
            const float d0 = __half2float(*reinterpret_cast<const __half *>(w0 + 34 * b));
            const float d1 = __half2float(*reinterpret_cast<const __half *>(w1 + 34 * b));
            const int blk = jt * 8 + b;
#pragma unroll
            for (int j = 0; j < NT; j++) {
                const uint4 xv = gsi_lds128(xa[j] + (uint32_t)(blk * GSI_XB));
                int dh[4], dl[4];
                gsi_mma(dh, q, xv.x, xv.y);
                gsi_mma(dl, q, xv.z, xv.w);
                const float2 sx = gsi_lds64f(sa + (uint32_t)((blk * NX + 8 * j) * 4));
                const float s[4] = {__fmul_rn(d0, sx.x), __fmul_rn(d0, sx.y), __fmul_rn(d1, sx.x),
                                    __fmul_rn(d1, sx.y)};
#pragma unroll
                for (int i = 0; i < 4; i++)
                    c[4 * j + i] = __fmaf_rn((float)(dh[i] * 254 + dl[i]), s[i], c[4 * j + i]);
            }
        }
#pragma unroll
        for (int i = 0; i < 4 * NT; i++) {
            if (p)
                acc[1][i] = c[i];
            else
                acc[0][i] = c[i];
        }
        __syncwarp(); /* the slot is refilled by a later issue */
    }

    /* split-K: [slice][group][part][NX x rows][16 rows]; the warp that
     * completes the group adds them in slice order */
    if (a.split > 1) {
        const size_t per = (size_t)np * NX * GSI_ROWS;
        float *mine = a.part + ((size_t)slice * ngroups + grp) * per;
#pragma unroll
        for (int p = 0; p < 2; p++) {
            if (p == np)
                break;
#pragma unroll
            for (int i = 0; i < 4 * NT; i++)
                mine[(size_t)p * NX * GSI_ROWS + (8 * (i >> 2) + 2 * t + (i & 1)) * GSI_ROWS + g + 8 * ((i >> 1) & 1)] =
                    acc[p][i];
        }
        if (!gsw_last(a, grp, lane))
            return;
#pragma unroll
        for (int p = 0; p < 2; p++) {
            if (p == np)
                break;
#pragma unroll
            for (int i = 0; i < 4 * NT; i++) {
                const size_t off = (size_t)p * NX * GSI_ROWS + (8 * (i >> 2) + 2 * t + (i & 1)) * GSI_ROWS + g +
                                   8 * ((i >> 1) & 1);
                float v = 0.0f;
                for (int sl = 0; sl < a.split; sl++)
                    v += __ldcg(a.part + ((size_t)sl * ngroups + grp) * per + off);
                acc[p][i] = v;
            }
        }
        if (lane == 0)
            a.count[grp] = 0;
    }
#pragma unroll
    for (int i = 0; i < 4 * NT; i++) {
        const int r = 8 * (i >> 2) + 2 * t + (i & 1);
        int64_t lrow;
        const int wi = gsw_row(a, grp * GSI_ROWS + g + 8 * ((i >> 1) & 1), 0, &lrow);
        if (r < a.n && lrow >= 0)
            gs_store(a, wi, lrow, r, acc[0][i], acc[1][i]);
    }
}

template <int NT, int W> static bool gsi_launch_nt(const gs_args &a, size_t smem, cudaStream_t s)
{
    if (cudaFuncSetAttribute(gsi_kernel<NT, W>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) !=
        cudaSuccess)
        return false;
    const int64_t nv = a.epi == MEMRA_MM_GLU ? a.vrow0[1] : a.vrow0[a.nw];
    const int64_t groups = (nv + GSI_ROWS - 1) / GSI_ROWS;
    const unsigned grid_x = (unsigned)((groups + W - 1) / W);
    return memra__launch(gsi_kernel<NT, W>, dim3(grid_x, (unsigned)a.split), W * 32, smem, s, a) == cudaSuccess;
}

/* Warps a block for a step of N rows: 4 (three blocks an SM) up to 8 rows,
 * 8 up to 16, 4 again up to 32 (the staged x of 32 rows leaves room for
 * two blocks of 4 with rings of two). */
static int gsi_warps(int n) { return n <= 8 ? 4 : n <= 16 ? 8 : 4; }

size_t gsi_smem(const gs_args &a, int *st)
{
    const int nx = a.n <= 8 ? 8 : a.n <= 16 ? 16 : 32, w = gsi_warps(a.n);
    const int nbs = a.kt_per * 8;
    const size_t xs = (size_t)nx * (nbs * GSI_XB + 64) + (size_t)nbs * nx * sizeof(float);
    const size_t cap = a.n <= 8 ? GSI_SMEM_3 : GSW_SMEM_2;
    int d = *st;
    while (d > 2 && (size_t)w * d * GSI_SLOT + xs > cap)
        d--;
    *st = d;
    return (size_t)w * d * GSI_SLOT + xs;
}

bool gsi_launch(const gs_args &a, size_t smem, cudaStream_t s)
{
    if (a.st < 2 || a.st > GSW_RING_MAX || a.n < 1 || a.n > GSW_MAXN || a.kt_per > GSW_KT_MAX)
        return false;
    return a.n <= 8    ? gsi_launch_nt<1, 4>(a, smem, s)
           : a.n <= 16 ? gsi_launch_nt<2, 8>(a, smem, s)
                       : gsi_launch_nt<4, 4>(a, smem, s);
}

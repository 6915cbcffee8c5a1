/* gsw_kernel's parts that its K-quant form (cuda/gemm_swk.cu) shares:
 * the warp's ring of bulk copies, the split-K finish, the x staging. The
 * design is in cuda/gemm_sw.cu. */
#ifndef MEMRA_CUDA_GEMM_SW_CUH
#define MEMRA_CUDA_GEMM_SW_CUH

#include "gemm_s.cuh"
#include "mmv.cuh"

/* Virtual row V of part P: the weight it reads
 * (GLU: P), its row there (-1: past the end). */
static __device__ __forceinline__ int gsw_row(const gs_args &a, int64_t v, int p, int64_t *lrow)
{
    if (a.epi == MEMRA_MM_GLU) {
        *lrow = v < a.vrow0[1] ? v : -1;
        return p;
    }
    return gs_weight(a, v, lrow);
}

/* A warp's task in gsw_kernel and its K-quant form: group GRP (GSW_ROWS
 * virtual rows; GLU: NP = 2 parts, a gate and an up row each) of the slice
 * blockIdx.y, NT k tiles from KT0 (ROUND_K: a last tile shorter than
 * GS_KT counts, gsw_kernel's ODD form), NTI ring items; LDX halves a
 * staged x row (rows 8 banks apart); GRP is blockIdx.x * GSW_WARPS + the
 * warp (the kernels compute it). */
template <bool ROUND_K> struct gsw_task {
    int np, slice, nt, nti, ldx;
    int64_t nv, ngroups, kt0;
    __device__ __forceinline__ explicit gsw_task(const gs_args &a)
    {
        const bool glu = a.epi == MEMRA_MM_GLU;
        np = glu ? 2 : 1;
        nv = glu ? a.vrow0[1] : a.vrow0[a.nw];
        ngroups = (nv + GSW_ROWS - 1) / GSW_ROWS;
        slice = blockIdx.y;
        kt0 = (int64_t)slice * a.kt_per;
        nt = (int)min((int64_t)a.kt_per, (ROUND_K ? (a.K + GS_KT - 1) : a.K) / GS_KT - kt0);
        nti = np * nt;
        ldx = a.kt_per * GS_KT + 16;
    }
};

/* An item's sums C from, and back into, part P's accumulators ACC */
template <int N> static __device__ __forceinline__ void gsw_take(float (&c)[N], const float (&acc)[2][N], int p)
{
#pragma unroll
    for (int i = 0; i < N; i++)
        c[i] = p ? acc[1][i] : acc[0][i];
}

template <int N> static __device__ __forceinline__ void gsw_keep(float (&acc)[2][N], const float (&c)[N], int p)
{
#pragma unroll
    for (int i = 0; i < N; i++) {
        if (p)
            acc[1][i] = c[i];
        else
            acc[0][i] = c[i];
    }
}

/* Ring R's first D - 1 items, issued before the wait for the previous
 * grid: weights are never written by a kernel (x, read after, is its
 * output). */
template <class R> static __device__ __forceinline__ void gsw_ring_start(R &r)
{
    memra_pdl_launch();
    for (int k = 0; k < r.D - 1; k++)
        r.issue_next();
    memra_pdl_wait();
}

/* The bytes a group's copies bring when lane i < 8 copies N: lanes 0-7's
 * sum (at lane 0, which arms the slot's barrier), for rings whose rows'
 * copies differ in length. */
static __device__ __forceinline__ uint32_t gsw_group_bytes(uint32_t n)
{
    uint32_t total = n + __shfl_xor_sync(0xffffffffu, n, 1);
    total += __shfl_xor_sync(0xffffffffu, total, 2);
    return total + __shfl_xor_sync(0xffffffffu, total, 4);
}

/* A warp's ring of weight items: an item is one
 * k tile (TB bytes: Q8_0's GSW_RB, a K-quant's super-block) of each of the
 * group's ROWS rows, one bulk copy a row by the lanes below the group's
 * valid rows, on the warp's own mbarriers (slot s at bar0 + 8 s, SLOT
 * bytes at ring0 + s SLOT); items 0..nt-1 are part 0's rows, nt..2nt-1
 * (GLU) part 1's. ODD: Q8_0 only. */
template <int ROWS, bool ODD, int TB = GSW_RB> struct gsw_ring {
    static constexpr int RB = ODD ? GSW_RB_ODD : TB, SLOT = ROWS * RB;
    uint32_t bar0, ring0;
    uint64_t policy;
    const uint8_t *src0, *src1;
    int nvalid, nt, nti, issued, D, lane;
    /* ODD: the lane's row's bytes below its first tile in each part (lanes
     * below nvalid); the slice's tile where the rows end early (-1: none)
     * and that tile's bytes */
    uint32_t off0, off1;
    int j_last, tb_last;

    /* group GRP (ROWS virtual rows from grp ROWS; none when it is past NV)
     * of the slice from k tile KT0, NT tiles long */
    __device__ __forceinline__ void init(const gs_args &a, uint64_t *bars, uint8_t *ring, int64_t grp, int64_t nv,
                                         int64_t kt0, int nt_, int lane_)
    {
        const bool glu = a.epi == MEMRA_MM_GLU;
        D = a.st;
        lane = lane_;
        nt = nt_;
        nti = (glu ? 2 : 1) * nt;
        issued = 0;
        mmv_bars_init(bars, D, lane);
        bar0 = mmv_saddr(bars);
        ring0 = mmv_saddr(ring);
        policy = mmv_evict_first();
        nvalid = grp * ROWS < nv ? (int)min((int64_t)ROWS, nv - grp * ROWS) : 0;
        src0 = src1 = NULL;
        off0 = off1 = 0;
        if (lane < nvalid) {
            int64_t lrow;
            int wi = gsw_row(a, grp * ROWS + lane, 0, &lrow);
            src0 = a.W[wi] + (size_t)lrow * a.nb1[wi] + (size_t)kt0 * TB;
            if (glu) {
                wi = gsw_row(a, grp * ROWS + lane, 1, &lrow);
                src1 = a.W[wi] + (size_t)lrow * a.nb1[wi] + (size_t)kt0 * TB;
            }
            if (ODD) {
                off0 = (uint32_t)((uintptr_t)src0 & 15);
                src0 -= off0;
                if (src1) {
                    off1 = (uint32_t)((uintptr_t)src1 & 15);
                    src1 -= off1;
                }
            }
        }
        if (ODD) {
            const int64_t nkt = (a.K + GS_KT - 1) / GS_KT, rem = a.K % GS_KT;
            j_last = rem && kt0 + nt == nkt ? nt - 1 : -1;
            tb_last = (int)(rem / 32 * 34);
        }
    }
    /* item ISSUED into slot issued % D (nothing past the task or for a
     * group past the rows) */
    __device__ __forceinline__ void issue_next()
    {
        if (issued >= nti || !nvalid)
            return;
        const int slot = issued % D;
        const uint32_t bar = bar0 + 8 * slot;
        if constexpr (!ODD) {
            if (lane == 0) {
                asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;" ::"r"(bar),
                             "r"(nvalid * TB)
                             : "memory");
            }
            __syncwarp(); /* the bytes are expected before any copy completes */
            if (lane < nvalid) {
                const uint8_t *s = (issued < nt ? src0 : src1) + (size_t)(issued < nt ? issued : issued - nt) * TB;
                asm volatile("fence.proxy.async.shared::cta;\n\t"
                             "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], "
                             "[%1], %2, [%3], %4;" ::"r"(ring0 + slot * SLOT + lane * TB),
                             "l"(s), "r"(TB), "r"(bar), "l"(policy)
                             : "memory");
            }
        } else { /* from the 16 bytes at or below the tile, in whole 16 bytes */
            const int j = issued < nt ? issued : issued - nt;
            const uint32_t n =
                lane < nvalid ? ((issued < nt ? off0 : off1) + (j == j_last ? tb_last : GSW_RB) + 15) & ~15u : 0u;
            const uint32_t total = gsw_group_bytes(n);
            if (lane == 0) {
                asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;" ::"r"(bar),
                             "r"(total)
                             : "memory");
            }
            __syncwarp();
            if (lane < nvalid) {
                const uint8_t *s = (issued < nt ? src0 : src1) + (size_t)j * GSW_RB;
                asm volatile("fence.proxy.async.shared::cta;\n\t"
                             "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], "
                             "[%1], %2, [%3], %4;" ::"r"(ring0 + slot * SLOT + lane * RB),
                             "l"(s), "r"(n), "r"(bar), "l"(policy)
                             : "memory");
            }
        }
        issued++;
    }
    __device__ __forceinline__ void start() { gsw_ring_start(*this); }
};

/* Split-K, once a warp has stored its slice's
 * partials of group GRP: whether it is the warp that completes the group
 * (the last of a.split); that warp then reads every slice's partials
 * (after the fence here) and resets the group's counter. */
static __device__ __forceinline__ bool gsw_last(const gs_args &a, int64_t grp, int lane)
{
    __threadfence();
    __syncwarp();
    int last = 0;
    if (lane == 0)
        last = atomicAdd(&a.count[grp], 1) == a.split - 1;
    if (!__shfl_sync(0xffffffffu, last, 0))
        return false;
    __threadfence();
    return true;
}

static __device__ __forceinline__ uint2 gsw_lds64(uint32_t a)
{
    uint2 v;
    asm volatile("ld.shared.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(a));
    return v;
}

/* The mma's A fragments of m tile M for the 32 elements from byte OFF of
 * the staged slice: x rows g (h = 0) and g + 8 (h = 1) from XA, elements
 * 4t..4t+3 (AF0) and 16+4t..16+4t+3 (AF1) of the 32; rows past the NX sets
 * zero. */
template <int NX>
static __device__ __forceinline__ void gsw_xfrag(const uint32_t (&xa)[NX], int m, uint32_t off, uint32_t (&af0)[4],
                                                 uint32_t (&af1)[4])
{
#pragma unroll
    for (int i = 0; i < 4; i++)
        af0[i] = af1[i] = 0u;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        if (2 * m + h < NX) {
            const uint32_t base = xa[2 * m + h] + off;
            const uint2 v0 = gsw_lds64(base), v1 = gsw_lds64(base + 32);
            af0[h] = v0.x;
            af0[h + 2] = v0.y;
            af1[h] = v1.x;
            af1[h + 2] = v1.y;
        }
    }
}

/* x row I (0 .. NX*8-1 in steps of 8 from g) of lane (g, t) in its
 * accumulators: m tile I / 16, its c0/c1 (rows g) or c2/c3 (g + 8) */
#define GSW_ACC(i) (4 * ((i) >> 1) + 2 * ((i) & 1))

/* The end of the warp's task: lane (g, t)'s sums V of group GRP (x rows g
 * + 8i, i < NX; the group's rows 2t, 2t+1) into the slice's partials; the
 * warp that completes the group adds them in slice order (into V) and
 * stores. */
template <int NX>
static __device__ __forceinline__ void gsw_finish(const gs_args &a, float (&v)[2][4 * ((NX + 1) / 2)], int64_t grp,
                                                  int64_t ngroups, int slice, int np, int g, int t)
{
    if (a.split > 1) {
        /* [slice][group][part][x row < n][8 rows] */
        const size_t per = (size_t)np * a.n * GSW_ROWS;
        float *mine = a.part + ((size_t)slice * ngroups + grp) * per;
#pragma unroll
        for (int p = 0; p < 2; p++) {
            if (p == np)
                break;
            float *q = mine + (size_t)p * a.n * GSW_ROWS + 2 * t;
#pragma unroll
            for (int i = 0; i < NX; i++) {
                if (g + 8 * i < a.n) {
                    q[(g + 8 * i) * GSW_ROWS] = v[p][GSW_ACC(i)];
                    q[(g + 8 * i) * GSW_ROWS + 1] = v[p][GSW_ACC(i) + 1];
                }
            }
        }
        if (!gsw_last(a, grp, threadIdx.x & 31))
            return;
        if (NX == 4 && a.fin) {
            /* slice by slice, each slice's partials of every (part, x
             * row) loaded together: the same sums in slice order as the
             * loop below, whose loads wait one by one (2 NX x split of
             * them at the end of the warp's task). Steps of 17-32 rows:
             * the 9B's and the 31B's 32 rows +1.3 %; at 8 and 16 rows
             * level or -1 % (H100, 2026-12-06), so the smaller instances
             * keep the loop */
            float sum[2][NX][2];
#pragma unroll
            for (int p = 0; p < 2; p++)
#pragma unroll
                for (int i = 0; i < NX; i++)
                    sum[p][i][0] = sum[p][i][1] = 0.0f;
            const float *q0 = a.part + (size_t)grp * per + 2 * t;
            for (int sl = 0; sl < a.split; sl++) {
                const float *qs = q0 + (size_t)sl * ngroups * per;
                float2 pv[2][NX];
#pragma unroll
                for (int p = 0; p < 2; p++)
#pragma unroll
                    for (int i = 0; i < NX; i++)
                        if (p < np && g + 8 * i < a.n)
                            pv[p][i] = __ldcg(reinterpret_cast<const float2 *>(qs + (size_t)p * a.n * GSW_ROWS +
                                                                               (size_t)(g + 8 * i) * GSW_ROWS));
#pragma unroll
                for (int p = 0; p < 2; p++)
#pragma unroll
                    for (int i = 0; i < NX; i++)
                        if (p < np && g + 8 * i < a.n) {
                            sum[p][i][0] += pv[p][i].x;
                            sum[p][i][1] += pv[p][i].y;
                        }
            }
#pragma unroll
            for (int p = 0; p < 2; p++)
#pragma unroll
                for (int i = 0; i < NX; i++)
                    if (p < np && g + 8 * i < a.n) {
                        v[p][GSW_ACC(i)] = sum[p][i][0];
                        v[p][GSW_ACC(i) + 1] = sum[p][i][1];
                    }
        } else {
#pragma unroll
            for (int p = 0; p < 2; p++) {
                if (p == np)
                    break;
#pragma unroll
                for (int i = 0; i < NX; i++) {
                    if (g + 8 * i >= a.n)
                        continue;
                    float s0 = 0.0f, s1 = 0.0f;
                    for (int sl = 0; sl < a.split; sl++) {
                        const float *q = a.part + ((size_t)sl * ngroups + grp) * per + (size_t)p * a.n * GSW_ROWS +
                                         (size_t)(g + 8 * i) * GSW_ROWS + 2 * t;
                        s0 += __ldcg(q);
                        s1 += __ldcg(q + 1);
                    }
                    v[p][GSW_ACC(i)] = s0;
                    v[p][GSW_ACC(i) + 1] = s1;
                }
            }
        }
        if ((threadIdx.x & 31) == 0)
            a.count[grp] = 0;
    }
#pragma unroll
    for (int c = 0; c < 2; c++) {
        int64_t lrow;
        const int wi = gsw_row(a, grp * GSW_ROWS + 2 * t + c, 0, &lrow);
        if (lrow < 0)
            continue;
#pragma unroll
        for (int i = 0; i < NX; i++)
            if (g + 8 * i < a.n)
                gs_store(a, wi, lrow, g + 8 * i, v[0][GSW_ACC(i) + c], v[1][GSW_ACC(i) + c]);
    }
}

/* The block's x rows for its slice (NT k tiles from KT0) into XS, LDX
 * halves a row: float rows rounded to f16 as gs_prep_kernel rounds them,
 * or the prep's f16 rows copied; then the block's barrier. */
template <bool ODD>
static __device__ __forceinline__ void gsw_stage_x(const gs_args &a, __half *xs, int64_t kt0, int nt, int ldx)
{
    /* 16-byte chunks of an x row's slice */
    const int cpr = (ODD ? (int)min((int64_t)nt * GS_KT, a.K - kt0 * GS_KT) : nt * GS_KT) / 8;
    if (a.Xf) { /* float rows: eight elements to f16 a chunk, as gs_prep_kernel rounds them */
        for (int c = threadIdx.x; c < a.n * cpr; c += GSW_WARPS * 32) {
            const int r = c / cpr, k = (c % cpr) * 8;
            const float4 *src = reinterpret_cast<const float4 *>(a.Xf + (size_t)r * a.ldxf + kt0 * GS_KT + k);
            const float4 v0 = src[0], v1 = src[1];
            const uint4 h = make_uint4(gq_pack(v0.x, v0.y), gq_pack(v0.z, v0.w), gq_pack(v1.x, v1.y),
                                       gq_pack(v1.z, v1.w));
            *reinterpret_cast<uint4 *>(xs + (size_t)r * ldx + k) = h;
        }
    } else {
        for (int c = threadIdx.x; c < a.n * cpr; c += GSW_WARPS * 32) {
            const int r = c / cpr, k = (c % cpr) * 8;
            cp_async16(xs + (size_t)r * ldx + k, a.X + (size_t)r * a.ldx + kt0 * GS_KT + k);
        }
        cp_async_commit();
        cp_async_wait<0>();
    }
    __syncthreads();
}

/* Kernel K over grid_x x a.split blocks of GSW_WARPS warps with SMEM bytes
 * of dynamic shared memory. false: the launch failed. */
static inline bool gsw_launch_k(void (*k)(const gs_args), const gs_args &a, unsigned grid_x, size_t smem,
                                cudaStream_t s)
{
    if (cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess)
        return false;
    return memra__launch(k, dim3(grid_x, (unsigned)a.split), GSW_WARPS * 32, smem, s, a) == cudaSuccess;
}

#endif

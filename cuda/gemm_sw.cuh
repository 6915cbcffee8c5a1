/* gsw_kernel's (cuda/gemm_sw.cu) virtual rows, warp ring of weight items
 * and split-K's last warp. */
#ifndef MEMRA_CUDA_GEMM_SW_CUH
#define MEMRA_CUDA_GEMM_SW_CUH

#include "gemm_s.cuh"
#include "mmv.cuh"

/* Virtual row V of part P (gsw_kernel): the weight it reads
 * (GLU: P), its row there (-1: past the end). */
static __device__ __forceinline__ int gsw_row(const gs_args &a, int64_t v, int p, int64_t *lrow)
{
    if (a.epi == MEMRA_MM_GLU) {
        *lrow = v < a.vrow0[1] ? v : -1;
        return p;
    }
    return gs_weight(a, v, lrow);
}

/* A warp's ring of weight items (gsw_kernel): an item is one
 * k tile (GSW_RB bytes) of each of the group's ROWS rows, one bulk copy a
 * row by the lanes below the group's valid rows, on the warp's own
 * mbarriers (slot s at bar0 + 8 s, SLOT bytes at ring0 + s SLOT); items
 * 0..nt-1 are part 0's rows, nt..2nt-1 (GLU) part 1's. */
template <int ROWS> struct gsw_ring {
    static constexpr int SLOT = ROWS * GSW_RB;
    uint32_t bar0, ring0;
    uint64_t policy;
    const uint8_t *src0, *src1;
    int nvalid, nt, nti, issued, D, lane;

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
        if (lane < nvalid) {
            int64_t lrow;
            int wi = gsw_row(a, grp * ROWS + lane, 0, &lrow);
            src0 = a.W[wi] + (size_t)lrow * a.nb1[wi] + (size_t)kt0 * GSW_RB;
            if (glu) {
                wi = gsw_row(a, grp * ROWS + lane, 1, &lrow);
                src1 = a.W[wi] + (size_t)lrow * a.nb1[wi] + (size_t)kt0 * GSW_RB;
            }
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
        if (lane == 0) {
            asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;" ::"r"(bar),
                         "r"(nvalid * GSW_RB)
                         : "memory");
        }
        __syncwarp(); /* the bytes are expected before any copy completes */
        if (lane < nvalid) {
            const uint8_t *s = (issued < nt ? src0 : src1) + (size_t)(issued < nt ? issued : issued - nt) * GSW_RB;
            asm volatile("fence.proxy.async.shared::cta;\n\t"
                         "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], "
                         "[%1], %2, [%3], %4;" ::"r"(ring0 + slot * SLOT + lane * GSW_RB),
                         "l"(s), "r"(GSW_RB), "r"(bar), "l"(policy)
                         : "memory");
        }
        issued++;
    }
    /* the first D - 1 items, issued before the wait for the previous grid:
     * weights are never written by a kernel (x, read after, is its output) */
    __device__ __forceinline__ void start()
    {
        memra_pdl_launch();
        for (int k = 0; k < D - 1; k++)
            issue_next();
        memra_pdl_wait();
    }
};

/* Split-K (gsw_kernel), once a warp has stored its slice's
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

#endif

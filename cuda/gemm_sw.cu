/* The fast tier's Q8_0 GEMM of small batched decode steps (up to GSW_MAXN
 * x rows a pass; cuda/gemm_s.cu picks it): each weight byte read once per
 * pass, streamed the way the one-row matvec streams it.
 *
 * Why not gs_kernel: its blocks of 4 warps share a ring through a block
 * barrier per k tile and repack the 34-byte blocks before ldmatrix; at two
 * warps per scheduler that chain is latency-bound and a block moves ~7.5
 * GB/s whatever its row count (docs/CUDA.md, Open). Here every warp owns
 * a ring of its own, filled by bulk copies (TMA) on its own mbarriers as
 * in mmv_q8d_kernel, and reads the quants in place: no block barrier after
 * x is staged, no repack, eight warps a block.
 *
 * Layout. A warp owns a group of GSW_ROWS = 8 virtual rows (GLU: 8 gate
 * and the same 8 up rows, two parts) and one slice of K (blockIdx.y), and
 * walks its k tiles of 256 elements (one ring item: the 8 rows' 272 bytes
 * each, one bulk copy per row). The weights are the mma's B operand (n =
 * 8 rows), x its A operand (m = 16, rows g < n used): lane (g, t) reads
 * quants 4t..4t+3 and 16+4t..16+4t+3 of its row g in every block (a word
 * or two, bank-conflict free at the 272-byte row stride) and x row g's
 * same four elements, so that the k order inside each 16 is permuted the
 * same way on both sides (as gs_kernel's Q8_0 path does). Two byte
 * permutes and a half subtraction make exact f16 integers of the quants;
 * each block's two mma steps sum q·x on the tensor cores and the block's
 * scale multiplies that float32 sum (gs_kernel's arithmetic class, not its
 * bits).
 *
 * Split-K as gs_kernel: slices write float32 partials, the warp that
 * finishes a group last adds them in slice order. The slicing is a
 * function of the weight's shape and the device, and an mma output reads
 * its own x row only, so a row's result does not depend on the other rows
 * of its step. Exactness: fast tier only. */
#include "gemm_s.cuh"
#include "mmv.cuh"

/* Virtual row V of part P: the weight it reads (GLU: P), its row there
 * (-1: past the end). */
static __device__ __forceinline__ int gsw_row(const gs_args &a, int64_t v, int p, int64_t *lrow)
{
    if (a.epi == MEMRA_MM_GLU) {
        *lrow = v < a.vrow0[1] ? v : -1;
        return p;
    }
    int wi = 0;
    while (wi + 1 < a.nw && v >= a.vrow0[wi + 1])
        wi++;
    *lrow = v < a.vrow0[a.nw] ? v - a.vrow0[wi] : -1;
    return wi;
}

static __device__ __forceinline__ uint2 gsw_lds64(uint32_t a)
{
    uint2 v;
    asm volatile("ld.shared.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(a));
    return v;
}

__global__ void __launch_bounds__(GSW_WARPS * 32) gsw_kernel(const gs_args a)
{
    extern __shared__ __align__(128) uint8_t gsw_smem[];
    __shared__ __align__(8) uint64_t bars[GSW_WARPS][GSW_RING_MAX];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int D = a.st;
    const bool glu = a.epi == MEMRA_MM_GLU;
    const int np = glu ? 2 : 1;
    const int64_t nv = glu ? a.vrow0[1] : a.vrow0[a.nw];
    const int64_t ngroups = (nv + GSW_ROWS - 1) / GSW_ROWS;
    const int64_t grp = (int64_t)blockIdx.x * GSW_WARPS + warp;
    const bool active = grp < ngroups;
    const int slice = blockIdx.y;
    const int64_t kt0 = (int64_t)slice * a.kt_per;
    const int nt = (int)min((int64_t)a.kt_per, a.K / GS_KT - kt0);
    const int ldx = a.kt_per * GS_KT + 16; /* halves per staged x row: rows 8 banks apart */
    uint8_t *ring = gsw_smem + (size_t)warp * D * GSW_SLOT;
    __half *xs = reinterpret_cast<__half *>(gsw_smem + (size_t)GSW_WARPS * D * GSW_SLOT);
    mmv_bars_init(bars[warp], D, lane);
    const uint32_t bar0 = mmv_saddr(bars[warp]), ring0 = mmv_saddr(ring);
    const uint64_t policy = mmv_evict_first();

    /* lanes 0..7 copy row LANE of the group: its first byte of the slice per part */
    const int nvalid = active ? (int)min((int64_t)GSW_ROWS, nv - grp * GSW_ROWS) : 0;
    const uint8_t *src0 = NULL, *src1 = NULL;
    if (lane < nvalid) {
        int64_t lrow;
        int wi = gsw_row(a, grp * GSW_ROWS + lane, 0, &lrow);
        src0 = a.W[wi] + (size_t)lrow * a.nb1[wi] + (size_t)kt0 * GSW_RB;
        if (glu) {
            wi = gsw_row(a, grp * GSW_ROWS + lane, 1, &lrow);
            src1 = a.W[wi] + (size_t)lrow * a.nb1[wi] + (size_t)kt0 * GSW_RB;
        }
    }
    const int n_items = active ? np * nt : 0;
    auto issue = [&](int k) { /* item k (part k / nt, tile k % nt) into slot k % D */
        if (k >= n_items)
            return;
        const int slot = k % D;
        const uint32_t bar = bar0 + 8 * slot;
        if (lane == 0)
            asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;" ::"r"(bar),
                         "r"(nvalid * GSW_RB)
                         : "memory");
        __syncwarp(); /* the bytes are expected before any copy completes */
        if (lane < nvalid) {
            const uint8_t *s = (k < nt ? src0 : src1) + (size_t)(k % nt) * GSW_RB;
            asm volatile("fence.proxy.async.shared::cta;\n\t"
                         "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], "
                         "[%1], %2, [%3], %4;" ::"r"(ring0 + slot * GSW_SLOT + lane * GSW_RB),
                         "l"(s), "r"(GSW_RB), "r"(bar), "l"(policy)
                         : "memory");
        }
    };

    /* weights are never written by a kernel: stream them before the wait
     * for the previous grid (x is its output) */
    memra_pdl_launch();
    for (int k = 0; k < D - 1; k++)
        issue(k);
    memra_pdl_wait();
    {
        const int cpr = nt * (GS_KT / 8); /* 16-byte chunks of an x row's slice */
        for (int c = threadIdx.x; c < a.n * cpr; c += GSW_WARPS * 32) {
            const int r = c / cpr, k = (c % cpr) * 8;
            cp_async16(xs + (size_t)r * ldx + k, a.X + (size_t)r * a.ldx + kt0 * GS_KT + k);
        }
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();
    }
    if (!active)
        return;

    const int g = lane >> 2, t = lane & 3;
    const bool xrow = g < a.n;
    const uint32_t xa = mmv_saddr(xs + (size_t)(xrow ? g : 0) * ldx + 4 * t);
    float acc[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
    uint32_t phase = 0;
    for (int k = 0; k < n_items; k++) {
        const int slot = k % D;
        while (!mmv_bar_try_wait(bar0 + 8 * slot, (phase >> slot) & 1u)) {
        }
        phase ^= 1u << slot;
        issue(k + D - 1);
        const int p = k < nt ? 0 : 1, j = k < nt ? k : k - nt;
        const uint8_t *w = ring + slot * GSW_SLOT;
        const uint8_t *wq = w + g * GSW_RB;
        const uint8_t *ds = w + 2 * t * GSW_RB;
        const uint32_t xj = xa + 2u * (uint32_t)(j * GS_KT);
        float c0 = p ? acc[1][0] : acc[0][0], c1 = p ? acc[1][1] : acc[0][1];
#pragma unroll
        for (int b = 0; b < 8; b++) {
            /* quants 4t..4t+3 of both halves: 2 mod 4 bytes off a word
             * in even blocks, on one in odd blocks */
            uint32_t q0, q1;
            if ((34 * b + 2) & 3) {
                const uint32_t *wp = reinterpret_cast<const uint32_t *>(wq + 34 * b + 4 * t);
                q0 = __byte_perm(wp[0], wp[1], 0x5432);
                q1 = __byte_perm(wp[4], wp[5], 0x5432);
            } else {
                const uint32_t *wp = reinterpret_cast<const uint32_t *>(wq + 34 * b + 2 + 4 * t);
                q0 = wp[0];
                q1 = wp[4];
            }
            uint32_t bf0[2], bf1[2];
            gs_q8_h2(q0, &bf0[0], &bf0[1]);
            gs_q8_h2(q1, &bf1[0], &bf1[1]);
            uint32_t af0[4] = {0u, 0u, 0u, 0u}, af1[4] = {0u, 0u, 0u, 0u};
            if (xrow) {
                const uint2 v0 = gsw_lds64(xj + 64 * b), v1 = gsw_lds64(xj + 64 * b + 32);
                af0[0] = v0.x;
                af0[2] = v0.y;
                af1[0] = v1.x;
                af1[2] = v1.y;
            }
            float tq[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            gq_mma(tq, af0, bf0);
            gq_mma(tq, af1, bf1);
            const float d0 = __half2float(*reinterpret_cast<const __half *>(ds + 34 * b));
            const float d1 = __half2float(*reinterpret_cast<const __half *>(ds + GSW_RB + 34 * b));
            c0 = __fmaf_rn(tq[0], d0, c0);
            c1 = __fmaf_rn(tq[1], d1, c1);
        }
        if (p) {
            acc[1][0] = c0;
            acc[1][1] = c1;
        } else {
            acc[0][0] = c0;
            acc[0][1] = c1;
        }
        __syncwarp(); /* the slot is refilled by a later issue */
    }

    /* lane (g, t) holds x row g's sums of the group's rows 2t and 2t+1 */
    const int o = g * GSW_ROWS + 2 * t;
    if (a.split > 1) {
        float *mine = a.part + ((size_t)slice * ngroups + grp) * np * 64;
#pragma unroll
        for (int p = 0; p < 2; p++) {
            if (p == np)
                break;
            mine[p * 64 + o] = acc[p][0];
            mine[p * 64 + o + 1] = acc[p][1];
        }
        __threadfence();
        __syncwarp();
        int last = 0;
        if (lane == 0)
            last = atomicAdd(&a.count[grp], 1) == a.split - 1;
        if (!__shfl_sync(0xffffffffu, last, 0))
            return;
        __threadfence();
        /* the last warp adds the slices' partials in slice order */
#pragma unroll
        for (int p = 0; p < 2; p++) {
            if (p == np)
                break;
            float s0 = 0.0f, s1 = 0.0f;
            for (int q = 0; q < a.split; q++) {
                const float *pq = a.part + ((size_t)q * ngroups + grp) * np * 64 + p * 64 + o;
                s0 += __ldcg(pq);
                s1 += __ldcg(pq + 1);
            }
            acc[p][0] = s0;
            acc[p][1] = s1;
        }
        if (lane == 0)
            a.count[grp] = 0;
    }
    if (!xrow)
        return;
#pragma unroll
    for (int c = 0; c < 2; c++) {
        int64_t lrow;
        const int wi = gsw_row(a, grp * GSW_ROWS + 2 * t + c, 0, &lrow);
        if (lrow >= 0)
            gs_store(a, wi, lrow, g, acc[0][c], acc[1][c]);
    }
}

bool gsw_launch(const gs_args &a, unsigned grid_x, size_t smem, cudaStream_t s)
{
    if (a.st < 2 || a.st > GSW_RING_MAX || a.n < 1 || a.n > GSW_MAXN || a.kt_per > GSW_KT_MAX)
        return false;
    if (cudaFuncSetAttribute(gsw_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess)
        return false;
    return memra__launch(gsw_kernel, dim3(grid_x, (unsigned)a.split), GSW_WARPS * 32, smem, s, a) == cudaSuccess;
}

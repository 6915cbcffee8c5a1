/* The Q8_0 decode fast path for rows whose last 64-block segment is short
 * (a "tail" of 8, 16, 24 or 32 blocks): the tails of several rows share
 * one pass of the warp.
 *
 * Why: mmv_q8d_kernel spends one pass of the warp's dot (mmv_q8_pair) on
 * every item, and a tail of 16 blocks keeps 8 of the 32 lanes busy for a
 * whole pass. Gemma 4 E4B's 2560-wide rows (64 + 16 blocks) then stream
 * 2720 bytes in two passes where a 4096-wide row streams 4352: its GeGLU
 * ran at 2.1 TB/s and its 262144-row head at 2.8 (CUPTI, H200, c39bf58),
 * against ~3.5 and 4.2 for 4096-wide rows. Here the tails of P = 32 / LT
 * row parts (LT lanes each, LT the smallest of 4, 8, 16 that holds the
 * tail's block pairs) fill one slot side by side and take one pass: the
 * E4B's rows take 1.25 passes instead of 2, the 27B's 5120-wide ones 2.5
 * instead of 3, the 26B-A4B's 2816-wide ones 1.5 instead of 2.
 *
 * Rows: warp w takes rows w, w + nwt, ... (mmv_q8d_kernel's default map)
 * in groups of K = P / np consecutive rows of its own (np: 2 with a GLU,
 * else 1): each row part's whole segments in mmv_q8d_kernel's order, then
 * one pass over the group's K * np tails.
 *
 * Bits: every pair dot is mmv_q8_pair's on the same bytes and x; lane l of
 * a row part adds its segments' partial sums in segment order (the tail
 * last), the tail's partial taken from the lane that computed the row
 * part's pair l (+0 where the pair is past the tail, as mmv_q8d_kernel's
 * idle lanes add), then the same warp_sum: each row's result is
 * mmv_q8d_kernel's bit for bit (gpu-check compares the kernel check's
 * matmul lines and whole forwards' decode logits with MEMRA_MMV_Q8D_PACK
 * on and off). */
#ifndef MEMRA_CUDA_MMV_Q8T_CUH
#define MEMRA_CUDA_MMV_Q8T_CUH

#include "mmv.cuh"

#define Q8T_MAXP 8 /* tails a pass, at most (LT = 4) */

/* Lanes a tail of NBR blocks a row takes in a packed pass (4, 8 or 16),
 * or 0 when its rows do not pack: no short last segment, a tail of more
 * than 32 blocks, or one whose bytes are not whole 16-byte chunks (the
 * bulk copies into a slot start and end on 16 bytes). */
static __host__ __device__ __forceinline__ int q8t_tail_lanes(int64_t nbr, int np)
{
    const int64_t nt = nbr % 64;
    if (nt == 0 || nt % 8 || nt > 32)
        return 0;
    const int pairs = (int)(nt / 2);
    const int lt = pairs <= 4 ? 4 : pairs <= 8 ? 8 : 16;
    return (32 / lt) % np == 0 ? lt : 0;
}

/* A warp's place in its item sequence: group G (rows G*K .. G*K + KG - 1
 * of the warp's own), and in it row K_, part P_, segment S_, or the tail
 * pass (TAIL). Advanced by counting. */
struct q8t_pos {
    int64_t g;
    int kg, k, p, s;
    bool tail;
};

template <int T, int NW>
__global__ void __launch_bounds__(NW * 32, NW == MMV_WARPS ? 3 : 1) mmv_q8t_kernel(const mmv_args a)
{
    static_assert(T == MEMRA_TYPE_Q8_0, "the fast path is Q8_0's");
    constexpr int SEG = MMV_Q8D_SEG;
    const int D = a.ring;
    extern __shared__ __align__(128) uint8_t mmv_q8t_dyn[];
    __shared__ __align__(8) uint64_t bars[NW][MMV_Q8D_RING_MAX];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t nbr = a.ne0 / 32;
    const int nf = (int)(nbr / 64), nt = (int)(nbr % 64); /* whole segments, the tail's blocks */
    const int np = a.glu ? 2 : 1, lt = q8t_tail_lanes(nbr, np), K = 32 / lt / np;
    const int64_t nv = a.glu ? a.vrow0[1] : a.vrow0[a.nw];
    const int64_t nwt = (int64_t)gridDim.x * NW, gw = (int64_t)blockIdx.x * NW + warp;
    const int64_t nrow = gw < nv ? (nv - 1 - gw) / nwt + 1 : 0;
    const int64_t ngroup = (nrow + K - 1) / K;
    const int64_t n_items = nrow * np * nf + ngroup;
    const uint32_t tail_bytes = (uint32_t)nt * 34u, tail_stride = 68u * (uint32_t)lt;
    mmv_bars_init(bars[warp], D, lane);
    const uint32_t bar0 = mmv_saddr(bars[warp]), ring0 = mmv_saddr(mmv_q8t_dyn + (size_t)warp * D * SEG);
    const uint64_t policy = mmv_evict_first();

    auto row_of = [&](const q8t_pos &q) { return gw + (q.g * K + q.k) * nwt; };
    auto row_src = [&](int64_t v, int p) {
        const mmv_pos q = {v, p, 0};
        int64_t lrow;
        const int wi = mmv_weight(a, q, &lrow);
        return a.W[wi] + (size_t)lrow * a.nb1[wi];
    };
    auto group_start = [&](q8t_pos &q) {
        q.kg = (int)min((int64_t)K, nrow - q.g * K);
        q.k = q.p = q.s = 0;
        q.tail = nf == 0;
    };
    auto next = [&](q8t_pos &q) {
        if (q.tail) {
            q.g++;
            group_start(q);
        } else if (++q.s == nf) {
            q.s = 0;
            if (++q.p == np) {
                q.p = 0;
                if (++q.k == q.kg) {
                    q.k = 0;
                    q.tail = true;
                }
            }
        }
    };

    q8t_pos iq = {0, 0, 0, 0, 0, false};
    if (n_items)
        group_start(iq);
    int64_t issued = 0;
    auto issue = [&](int slot) {
        if (issued == n_items)
            return;
        if (lane == 0) {
            const uint32_t dst = ring0 + (uint32_t)slot * SEG, bar = bar0 + 8u * (uint32_t)slot;
            if (!iq.tail) {
                mmv_bulk_load(dst, row_src(row_of(iq), iq.p) + (size_t)iq.s * SEG, SEG, bar, policy);
            } else {
                mmv_bar_expect(bar, (uint32_t)(iq.kg * np) * tail_bytes);
                for (int k = 0; k < iq.kg; k++) {
                    const int64_t v = gw + (iq.g * K + k) * nwt;
                    for (int p = 0; p < np; p++)
                        mmv_bulk_copy(dst + (uint32_t)(k * np + p) * tail_stride,
                                      row_src(v, p) + (size_t)nf * SEG, tail_bytes, bar, policy);
                }
            }
        }
        issued++;
        next(iq);
    };
    const int pre = a.lean ? 1 : D - 1;
    for (int d = 0; d < pre; d++)
        issue(d);
    /* the norm weight into the ring's free slots before the wait, as
     * mmv_q8d_kernel parks it (the last slot of every warp's ring) */
    const bool wpark = NW == MMV_WARPS && a.norm && a.norm_w && (a.ne0 & 3) == 0 &&
                       ((uintptr_t)a.norm_w & 15) == 0 && a.ne0 <= 4 * MMV_WPARK_CHUNKS * MMV_WARPS &&
                       D == MMV_Q8D_RING;
    if (wpark) {
        for (int64_t c = threadIdx.x; 4 * c < a.ne0; c += MMV_THREADS)
            cp_async16(mmv_wpark_at(mmv_q8t_dyn, c), (const float4 *)a.norm_w + c);
        cp_async_commit();
    }
    MEMRA_PDL_ENTER(); /* x is the previous kernel's output */
    cp_async_wait<0>();
    int64_t xl;
    float *xs = (float *)(mmv_q8t_dyn + (size_t)NW * D * SEG);
    const float *x;
    if constexpr (NW == MMV_WARPS)
        x = mmv_stage_x<true>(a, a.x, 1, xs, &xl, wpark ? mmv_q8t_dyn : NULL);
    else
        x = mmv_stage_x_plain<true, NW * 32>(a, a.x, xs, &xl);
    for (int d = pre; d < D - 1; d++)
        issue(d);
    const uint32_t xa = mmv_saddr(x), sa = mmv_saddr(x + xl);
    /* the tail pass: lane j * LT + l takes pair l of the group's tail j */
    const int tj = lane / lt, tl = lane % lt;

    q8t_pos cq = {0, 0, 0, 0, 0, false};
    if (n_items)
        group_start(cq);
    float acc[Q8T_MAXP];
#pragma unroll
    for (int q = 0; q < Q8T_MAXP; q++)
        acc[q] = 0.0f;
    uint32_t phase = 0;
    int slot = 0;
    for (int64_t it = 0; it < n_items; it++) {
        mmv_ring_wait(bar0, slot, phase);
        issue(slot == 0 ? D - 1 : slot - 1);
        const uint32_t at = ring0 + (uint32_t)slot * SEG;
        float part = 0.0f;
        if (!cq.tail) {
            mmv_q8_pair<1>(at, 64, lane, xa, xl, sa, nbr, (int64_t)cq.s * 64, 1, &part);
            const int j = cq.k * np + cq.p;
#pragma unroll
            for (int q = 0; q < Q8T_MAXP; q++)
                if (q == j)
                    acc[q] += part;
        } else {
            const int ntl = cq.kg * np;
            if (tj < ntl)
                mmv_q8_pair<1>(at + (uint32_t)tj * tail_stride, nt, tl, xa, xl, sa, nbr, (int64_t)nf * 64, 1, &part);
#pragma unroll
            for (int q = 0; q < Q8T_MAXP; q++) {
                const float v = __shfl_sync(0xffffffffu, part, (q * lt + tl) & 31);
                if (q < ntl)
                    acc[q] += lane < lt ? v : 0.0f;
            }
            auto store = [&](int k, float g, float u) {
                if (lane == 0) {
                    const mmv_pos q = {gw + (cq.g * K + k) * nwt, np - 1, 0};
                    int64_t lrow;
                    const int wi = mmv_weight(a, q, &lrow);
                    mmv_store<false>(a, wi, lrow, 0, 0, g, u);
                }
            };
            if (a.glu) {
#pragma unroll
                for (int k = 0; k < Q8T_MAXP / 2; k++)
                    if (k < cq.kg)
                        store(k, warp_sum(acc[2 * k]), warp_sum(acc[2 * k + 1]));
            } else {
#pragma unroll
                for (int k = 0; k < Q8T_MAXP; k++)
                    if (k < cq.kg)
                        store(k, warp_sum(acc[k]), 0.0f);
            }
#pragma unroll
            for (int q = 0; q < Q8T_MAXP; q++)
                acc[q] = 0.0f;
        }
        __syncwarp(); /* the slot is refilled by the next iteration's issue */
        next(cq);
        slot = slot == D - 1 ? 0 : slot + 1;
    }
}

#endif

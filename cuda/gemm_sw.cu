/* The fast tier's Q8_0 GEMM of batched decode steps (GSW_MAXN = 32 x rows
 * a pass; cuda/gemm_s.cu picks it): each weight byte read once per pass,
 * streamed the way the one-row matvec streams it.
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
 * 8 rows), x its A operand (m = 16: x rows g and g + 8; with more than 16
 * rows a second m tile, rows 16 + g and 24 + g, on the same converted
 * weights): lane (g, t) reads quants 4t..4t+3 and 16+4t..16+4t+3 of its
 * row g in every block (a word or two, bank-conflict free at the 272-byte
 * row stride) and x row g's same four elements, so that the k order
 * inside each 16 is permuted the same way on both sides (as gs_kernel's
 * Q8_0 path does). Two byte permutes and a half subtraction make exact
 * f16 integers of the quants; each block's two mma steps sum q·x on the
 * tensor cores and the block's scale multiplies that float32 sum
 * (gs_kernel's arithmetic class, not its bits).
 *
 * Tried and dropped (9B batched decode, one H200): warps walking several
 * groups on the grid the SMs hold (2-3 % slower), that walk by a ticket
 * counter per slice with slices of one to three k tiles (998 against 1175
 * tok/s at 8 rows: a fence and an atomic at the end of each short task),
 * the ring filled by 16-byte cp.async copies (equal at up to 16 rows, 5 %
 * slower at 32). The instance without those paths (57 registers against
 * 76 at up to 8 rows) ran 2-3 % faster at 4-32 rows (2026-12-03).
 *
 * Split-K as gs_kernel: slices write float32 partials, the warp that
 * finishes a group last adds them in slice order. The slicing is a
 * function of the weight's shape and the device, and an mma output row
 * reads its own x row only, so a row's result does not depend on the
 * other rows of its step (nor on its place among them: every m tile and
 * row of it is the same arithmetic). Exactness: fast tier only.
 *
 * ODD form (gemma-4-26b-a4b's dense ffn_down: K = 2112, rows of 2244
 * bytes, 0, 4, 8 or 12 bytes off 16): each row's tile is copied from the
 * 16 bytes at or below it (a slot row of GSW_RB_ODD bytes; the offset is
 * the same for every tile of a row, 272 being 17 x 16), lanes read their
 * rows from their offsets (words still: the offsets are multiples of 4),
 * and the last tile of a K that is not a multiple of 256 holds its blocks
 * only (the copy's bytes and the loop stop there). Before it those
 * weights ran as one-row matvecs, one x row a block column each (the
 * 26B-A4B's ffn_down at 4 rows 16.1 us a call of CUPTI marginal time for
 * 6.3 MB, H100, bb22ff9). The slicing gives that shape 9 slices of one
 * tile each, a warp one item: still far from the copy rate. Rows in a
 * slot land 0-3 words off the 272-byte stride's bank pattern, so the
 * quant loads can meet 2-way bank conflicts. */
#include "gemm_sw.cuh"

/* NX: x row sets of 8 (1: up to 8 rows, 2: 16, 4: 32 as two m tiles of
 * the mma sharing each converted weight fragment). A warp owns one group
 * of one slice (a block for every 8 groups). */
template <int NX, bool ODD> __global__ void __launch_bounds__(GSW_WARPS * 32) gsw_kernel(const gs_args a)
{
    constexpr int MT = (NX + 1) / 2; /* m tiles of 16 x rows */
    using ring_t = gsw_ring<GSW_ROWS, ODD>;
    extern __shared__ __align__(128) uint8_t gsw_smem[];
    __shared__ __align__(8) uint64_t bars[GSW_WARPS][GSW_RING_MAX];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int D = a.st;
    const gsw_task<ODD> tk(a);
    const int np = tk.np, slice = tk.slice, nt = tk.nt, nti = tk.nti, ldx = tk.ldx;
    const int64_t nv = tk.nv, ngroups = tk.ngroups, kt0 = tk.kt0;
    uint8_t *ring = gsw_smem + (size_t)warp * D * ring_t::SLOT;
    __half *xs = reinterpret_cast<__half *>(gsw_smem + (size_t)GSW_WARPS * D * ring_t::SLOT);
    const int64_t grp = (int64_t)blockIdx.x * GSW_WARPS + warp;
    const bool live = grp < ngroups;
    ring_t rg;
    rg.init(a, bars[warp], ring, grp, nv, kt0, nt, lane);
    const uint32_t bar0 = rg.bar0;
    rg.start();
    gsw_stage_x<ODD>(a, xs, kt0, nt, ldx);
    if (!live)
        return;
    const int g = lane >> 2, t = lane & 3;
    /* ODD: the offsets of rows g (quants), 2t and 2t + 1 (scales) in each
     * part's slot rows */
    uint32_t og[2] = {0u, 0u}, od[2][2] = {{0u, 0u}, {0u, 0u}};
    if (ODD) {
#pragma unroll
        for (int p = 0; p < 2; p++) {
            const uint32_t o = p ? rg.off1 : rg.off0;
            og[p] = __shfl_sync(0xffffffffu, o, g);
            od[p][0] = __shfl_sync(0xffffffffu, o, 2 * t);
            od[p][1] = __shfl_sync(0xffffffffu, o, 2 * t + 1);
        }
    }
    /* x row g + 8i's staged slice (row 0 past n: its products land in
     * accumulators that are never stored) */
    uint32_t xa[NX];
#pragma unroll
    for (int i = 0; i < NX; i++)
        xa[i] = mmv_saddr(xs + (size_t)(g + 8 * i < a.n ? g + 8 * i : 0) * ldx + 4 * t);
    /* acc[p][4m + c]: m tile m, x row g + 16m (c = 0, 1) or g + 16m + 8
     * (c = 2, 3), group rows 2t + (c & 1) */
    float acc[2][4 * MT];
#pragma unroll
    for (int i = 0; i < 4 * MT; i++)
        acc[0][i] = acc[1][i] = 0.0f;
    uint32_t phase = 0;
    for (int it = 0; it < nti; it++) {
        const int slot = it % D;
        mmv_ring_wait(bar0, slot, phase);
        rg.issue_next();
        const int p = it < nt ? 0 : 1, j = it < nt ? it : it - nt;
        const uint8_t *w = ring + slot * ring_t::SLOT;
        const uint8_t *wq = w + g * ring_t::RB + (ODD ? (p ? og[1] : og[0]) : 0u);
        const uint8_t *ds0 = w + 2 * t * ring_t::RB + (ODD ? (p ? od[1][0] : od[0][0]) : 0u);
        const uint8_t *ds1 = ODD ? w + (2 * t + 1) * ring_t::RB + (p ? od[1][1] : od[0][1]) : ds0;
        const uint32_t xoff = 2u * (uint32_t)(j * GS_KT);
        const int nbk = ODD && j == rg.j_last ? rg.tb_last / 34 : 8; /* the tile's blocks */
        float c[4 * MT];
        gsw_take(c, acc, p);
#pragma unroll
        for (int b = 0; b < 8; b++) {
            if (ODD && b >= nbk)
                break;
            /* quants 4t..4t+3 of both halves: 2 mod 4 bytes off a word
             * in even blocks, on one in odd blocks (ODD: the row offsets
             * are multiples of 4) */
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
            const float d0 = __half2float(*reinterpret_cast<const __half *>(ds0 + 34 * b));
            const float d1 = __half2float(*reinterpret_cast<const __half *>(ds1 + (ODD ? 0 : GSW_RB) + 34 * b));
#pragma unroll
            for (int m = 0; m < MT; m++) {
                uint32_t af0[4], af1[4];
                gsw_xfrag<NX>(xa, m, xoff + 64 * b, af0, af1);
                float tq[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                gq_mma(tq, af0, bf0);
                gq_mma(tq, af1, bf1);
                c[4 * m] = __fmaf_rn(tq[0], d0, c[4 * m]);
                c[4 * m + 1] = __fmaf_rn(tq[1], d1, c[4 * m + 1]);
                if (NX > 1) {
                    c[4 * m + 2] = __fmaf_rn(tq[2], d0, c[4 * m + 2]);
                    c[4 * m + 3] = __fmaf_rn(tq[3], d1, c[4 * m + 3]);
                }
            }
        }
        gsw_keep(acc, c, p);
        __syncwarp(); /* the slot is refilled by a later issue */
    }
    gsw_finish<NX>(a, acc, grp, ngroups, slice, np, g, t);
}

template <int NX, bool ODD>
static bool gsw_launch_nx(const gs_args &a, unsigned grid_x, size_t smem, cudaStream_t s)
{
    return gsw_launch_k(gsw_kernel<NX, ODD>, a, grid_x, smem, s);
}

template <bool ODD> static bool gsw_launch_odd(const gs_args &a, unsigned grid_x, size_t smem, cudaStream_t s)
{
    return a.n <= 8    ? gsw_launch_nx<1, ODD>(a, grid_x, smem, s)
           : a.n <= 16 ? gsw_launch_nx<2, ODD>(a, grid_x, smem, s)
                       : gsw_launch_nx<4, ODD>(a, grid_x, smem, s);
}

bool gsw_launch(const gs_args &a, unsigned grid_x, size_t smem, cudaStream_t s)
{
    if (a.st < 2 || a.st > GSW_RING_MAX || a.n < 1 || a.n > GSW_MAXN || a.kt_per > GSW_KT_MAX)
        return false;
    return a.odd ? gsw_launch_odd<true>(a, grid_x, smem, s) : gsw_launch_odd<false>(a, grid_x, smem, s);
}

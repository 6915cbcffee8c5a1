/* The MoE decode in two launches (memra__cuda_moe_fused, cuda/ops_moe_fused.cu):
 *
 *   GLU   h[t][s] = act(gate_e · x_t) * (up_e · x_t), e = ids[t][s], and
 *         the shared expert's h[t][k] likewise: one launch for every
 *         (token, slot) problem, a warp taking an ff row's gate and up
 *         dots in turn;
 *   DOWN  out[t][i] = sum_s w[t][s] scale[e] (down_e · h[t][s])[i] in
 *         float64 in slot order, rounded once, plus the shared expert's
 *         (float)(sigmoid(logit_t) · (down_sh · h[t][k])[i]): one launch,
 *         a warp taking an output row's k (+1) dots in turn.
 *
 * They give the bits of the unfused sequence (cuda/ops_moe.cu: grouped
 * gate and up matvecs, moe_act_kernel, grouped down matvec, moe_sum_kernel;
 * the shared expert's route, sigmoid, one-expert moe and add): every dot
 * is the generic matvec's (mmv_q_kernel<T, 1>, cuda/mmv.cuh) for one x
 * row with x staged in shared memory: the same items (segments of a
 * weight row), the same per-item dot, the same per-lane sums and shuffle
 * tree, whatever other rows share the warp. Q4_K/Q5_K/Q6_K weights that
 * the sequence puts on the K-quant matvec take cuda/mmv_moe_kq.cuh's
 * kernel instead (its dots, these problems, tables and epilogues: the
 * helpers below). The act is d_moe_glu (as
 * moe_act_kernel), the slot sum moe_sum_kernel's expression, the shared
 * weight the elementwise SIGMOID's and its add the elementwise ADD's.
 *
 * Problems are blocks along y. GLU: problem q < n_tok k is (token q / k,
 * slot q % k), q >= n_tok k the shared expert of token q - n_tok k; h rows
 * are (k + shared) per token, slot order, the shared row last. DOWN:
 * problem t is token t, and its k (+1) h rows are the block's staged x
 * rows. An expert id out of range poisons the problem's outputs with NaN
 * (as the matvec's rows and moe_sum_kernel do: the same bits). */
#ifndef MEMRA_CUDA_MMV_MOE_CUH
#define MEMRA_CUDA_MMV_MOE_CUH

#include "mmv.cuh"

#define MMV_MOE_PARTS 16 /* DOWN: routed slots + the shared expert, at most */

struct mmv_moe_args {
    mmv_args m;              /* staging only: ne0, ldx (x row stride), xsm = 1, ring */
    const uint8_t *W[2];     /* routed experts (nb2 apart): GLU gate and up rows, DOWN down ([1] unused) */
    size_t nb1[2], nb2;
    const uint8_t *shW[2];   /* the shared expert, likewise (NULL: none) */
    size_t sh_nb1[2];
    const int32_t *ids;      /* [n_tok][k] */
    int64_t n_expert, n_tok, rows; /* rows: outputs per problem (GLU n_ff, DOWN n_embd) */
    int k, gelu;
    const float *x;          /* GLU: the tokens' rows; DOWN: the h rows */
    float *y;                /* GLU: h rows; DOWN: out rows */
    int64_t ldy;
    const float *w, *scale, *sh_logit; /* DOWN: routing weights [n_tok][k], scale [n_expert] or NULL, [n_tok] */
    int flat;                /* DOWN: stage the h rows as one run (mmv_moe_stage_rows; MEMRA_MOE_FLAT=0: row by row) */
    int acc;                 /* DOWN: add the sum to y's element (memra_moe_args_t.accumulate) */
    int pack;                /* lanes an item (a power of two below 32), several items a pass: Q8_0 rows of at most
                              * 32 blocks (mmv_moe_pack), K-quant rows of at most 4 super-blocks (mmv_moe_kq_pack);
                              * 0: one item a pass */
    int rows_g;              /* DOWN's slot form (mmv_moe_slot_kernel): a pass's items are rows_g adjacent rows of
                              * one part, one bulk copy; 0: the parts of one row */
    int units;               /* GLU, one item a pass: a block's rows' gate and up dots dealt to its warps one by one
                              * (mmv_moe_kernel); 0: a warp takes whole rows */
};

/* GLU's unit mode: a block takes a run of at most this many rows */
#define MMV_MOE_UNIT_ROWS 64

/* A ring of up to this many items a warp: packed passes keep two passes'
 * items in flight */
#define MMV_MOE_RING_MAX 16

/* Shared memory of a DOWN block's staged rows (the ring aside). */
template <int T> static inline bool mmv_moe_fits(int64_t ne0, int nr)
{
    return nr >= 1 && nr <= MMV_MOE_PARTS && mmv_x_fits<T>(ne0, nr);
}

/* The block's problem (blockIdx.y) into the parts' tables, by threads
 * below the part count: S_W[p] part p's weight row 0 (DOWN: slot p's
 * expert, the shared expert's last; GLU: gate and up), S_NB1 its row
 * stride, S_WS (DOWN) its weight w * scale as moe_sum_kernel's product;
 * *S_BAD set for an expert id out of range. *T: the token, *YROW: the
 * output row. The caller syncs the block before reading the tables. */
template <bool DOWN>
static __device__ __forceinline__ void mmv_moe_problem(const mmv_moe_args &a, const uint8_t **s_w, size_t *s_nb1,
                                                       double *s_ws, int *s_bad, int64_t *t_out, int64_t *yrow_out)
{
    const int sh = a.shW[0] != NULL;
    const int np = DOWN ? a.k + sh : 2;
    const int64_t q = blockIdx.y;
    int64_t t, yrow;
    if (DOWN) {
        t = q;
        yrow = q;
        if (threadIdx.x < np) {
            const int p = threadIdx.x;
            if (p < a.k) {
                const int32_t e = a.ids[t * a.k + p];
                if (e < 0 || e >= a.n_expert) {
                    *s_bad = 1;
                } else {
                    s_w[p] = a.W[0] + (size_t)e * a.nb2;
                    s_nb1[p] = a.nb1[0];
                    s_ws[p] = __dmul_rn((double)a.w[t * a.k + p], a.scale ? (double)a.scale[e] : 1.0);
                }
            } else {
                s_w[p] = a.shW[0];
                s_nb1[p] = a.sh_nb1[0];
                /* the sequence's weight: the elementwise SIGMOID of the logit, then moe_sum_kernel's w * 1.0 */
                s_ws[p] = __dmul_rn((double)(float)d_sigmoid((double)a.sh_logit[t]), 1.0);
            }
        }
    } else {
        const int64_t nrt = a.n_tok * a.k;
        const bool shp = q >= nrt;
        t = shp ? q - nrt : q / a.k;
        yrow = t * (a.k + sh) + (shp ? a.k : q % a.k);
        if (threadIdx.x < 2) {
            const int p = threadIdx.x;
            if (shp) {
                s_w[p] = a.shW[p];
                s_nb1[p] = a.sh_nb1[p];
            } else {
                const int32_t e = a.ids[q];
                if (e < 0 || e >= a.n_expert) {
                    *s_bad = 1;
                } else {
                    s_w[p] = a.W[p] + (size_t)e * a.nb2;
                    s_nb1[p] = a.nb1[p];
                }
            }
        }
    }
    *t_out = t;
    *yrow_out = yrow;
}

/* A problem with an expert id out of range: its output row NaN. */
static __device__ __forceinline__ void mmv_moe_poison(const mmv_moe_args &a, int64_t yrow)
{
    float *y = a.y + yrow * a.ldy;
    for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < a.rows; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = __int_as_float(0x7fc00000);
}

/* A block's parts (mmv_moe_problem's tables, in shared memory): their
 * weights' row 0 and row strides, DOWN's weights, and whether an expert
 * id is out of range. */
struct mmv_moe_tab {
    const uint8_t *w[MMV_MOE_PARTS]; /* part p's weight row 0 */
    size_t nb1[MMV_MOE_PARTS];
    double ws[MMV_MOE_PARTS];        /* DOWN: part p's w * scale (moe_sum_kernel's product) */
    int bad;
};

/* Both fused kernels' (and their K-quant versions') start: the problem's
 * tables (TAB: the generic dots' decode tables too, whose fill ends in a
 * barrier), and false after poisoning the output of a problem with an
 * expert id out of range.
 *
 * GLU waits for its predecessor (the route, or what follows it) first and
 * only then lets DOWN be scheduled, so that when DOWN runs, every kernel
 * before GLU has completed: DOWN reads its ids and routing weights (the
 * route's) and issues its first weight copies before its own wait, which
 * covers only GLU's h rows (mmv_moe_x_ready, before the staging). Its
 * weights then stream while GLU finishes instead of after it. Every path
 * of DOWN waits before it exits, so each wait still covers the chain. */
template <bool DOWN>
static __device__ __forceinline__ bool mmv_moe_enter(const mmv_moe_args &a, mmv_moe_tab &tb, float *tab, int64_t *t,
                                                     int64_t *yrow)
{
    if (!DOWN)
        memra_pdl_wait(); /* cuda_common.cuh: the ids (route) and x */
    memra_pdl_launch();
    if (threadIdx.x == 0)
        tb.bad = 0;
    if (tab)
        mmv_tables(tab); /* ends in a barrier */
    else
        __syncthreads();
    mmv_moe_problem<DOWN>(a, tb.w, tb.nb1, tb.ws, &tb.bad, t, yrow);
    __syncthreads();
    if (tb.bad) {
        if (DOWN)
            memra_pdl_wait();
        mmv_moe_poison(a, *yrow);
        return false;
    }
    return true;
}

/* Before staging x: DOWN's wait for GLU's h rows (mmv_moe_enter). */
template <bool DOWN> static __device__ __forceinline__ void mmv_moe_x_ready(void)
{
    if (DOWN)
        memra_pdl_wait();
}

/* DOWN's NR (> 1) h rows staged as mmv_stage_x stages them (the same
 * chunks, each through mmv_stage_put: the same values and block sums),
 * with every row's loads in flight together: the rows taken as one run of
 * NR x NE0/4 chunks, thread t's chunks t, t + 256, ... (a row's block of 8
 * chunks stays in 8 adjacent lanes: NE0 is a multiple of 32). Row after
 * row, the 35B-A3B's 9 rows of 512 were 9 round trips to L2 between the
 * block's wait and its first dot. Rows that are not 16-byte aligned, or too
 * many chunks for MMV_MOE_FLAT_U a thread, go to mmv_stage_x. */
#define MMV_MOE_FLAT_U 8

template <bool SCALE>
static __device__ __forceinline__ const float *mmv_moe_stage_rows(const mmv_args &m, bool flat, const float *x,
                                                                  int nr, float *xs, int64_t *xl)
{
    const int64_t ne0 = m.ne0, nc = ne0 >> 2, total = (int64_t)nr * nc;
    if (!flat || nr < 2 || m.norm || !m.xsm || ne0 % 32 != 0 || ((uintptr_t)x & 15) != 0 || (m.ldx & 3) != 0 ||
        total > (int64_t)MMV_MOE_FLAT_U * MMV_THREADS)
        return mmv_stage_x<SCALE>(m, x, nr, xs, xl);
    const int64_t ld = mmv_xld<SCALE>(ne0), nbr = ne0 / 32;
    const int lane = threadIdx.x & 31;
    float4 v[MMV_MOE_FLAT_U];
#pragma unroll
    for (int j = 0; j < MMV_MOE_FLAT_U; j++) {
        const int32_t i = (int32_t)threadIdx.x + j * MMV_THREADS;
        v[j] = i < total ? __ldg((const float4 *)(x + (i / (int32_t)nc) * m.ldx) + i % (int32_t)nc)
                         : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int j = 0; j < MMV_MOE_FLAT_U; j++) {
        const int32_t i = (int32_t)threadIdx.x + j * MMV_THREADS;
        if (i - lane >= total)
            break; /* the warp's chunks are all past the rows (warp-uniform) */
        const bool on = i < total;
        const int32_t r = on ? i / (int32_t)nc : 0;
        const int64_t c = on ? i % (int32_t)nc : nc; /* past the row: no store, a zero sum */
        float t[4] = {v[j].x, v[j].y, v[j].z, v[j].w};
        mmv_stage_put<SCALE>(t, c, nc, ne0, true, xs + r * ld, xs + (int64_t)nr * ld + r * nbr);
    }
    __syncthreads();
    *xl = ld;
    return xs;
}

/* The launch grid of GY problems of NGRP warp-sized row groups each: the
 * groups' blocks, at most what OCC blocks per SM hold at once. */
static inline dim3 mmv_moe_grid(int64_t ngrp, int occ, int sm_count, unsigned gy)
{
    const int64_t need = (ngrp + MMV_WARPS - 1) / MMV_WARPS;
    int64_t cap = (int64_t)occ * mmv_sms(sm_count) / gy;
    if (cap < 1)
        cap = 1;
    return dim3((unsigned)(need < cap ? need : cap), gy);
}

/* DOWN: part P's dot YV of an output row into the row's sums; the row's
 * output once P is the last part. Routed slots: moe_sum_kernel's
 * acc += (w * scale) * y in slot order (DACC), rounded once (ROUTED); the
 * shared expert: its one-slot sum, then the elementwise ADD. */
static __device__ __forceinline__ float mmv_moe_down_term(int p, int k, const double *s_ws, float yv, double &dacc,
                                                          float &routed)
{
    if (p < k) {
        dacc = __dadd_rn(dacc, __dmul_rn(s_ws[p], (double)yv));
        routed = (float)dacc;
        return routed;
    }
    return routed + (float)__dadd_rn(0.0, __dmul_rn(s_ws[p], (double)yv));
}

/* DOWN: output row YROW's element V: the sum OUT, or (ACC) the sequence's
 * elementwise ADD of it to the element. */
static __device__ __forceinline__ void mmv_moe_down_store(const mmv_moe_args &a, int64_t yrow, int64_t v, float out)
{
    float *y = a.y + yrow * a.ldy + v;
    *y = a.acc ? __fadd_rn(*y, out) : out;
}

/* DOWN: part P's dot YV of output row V into the row's sums, and the
 * row's output (lane 0) once P is its last part NP - 1. */
static __device__ __forceinline__ void mmv_moe_down_part(const mmv_moe_args &a, int p, int np, int64_t v, int64_t yrow,
                                                         const double *s_ws, float yv, double &dacc, float &routed,
                                                         int lane)
{
    const float out = mmv_moe_down_term(p, a.k, s_ws, yv, dacc, routed);
    if (p == np - 1) {
        if (lane == 0)
            mmv_moe_down_store(a, yrow, v, out);
        dacc = 0.0;
    }
}

template <int T, bool TMA, bool DOWN>
__global__ void __launch_bounds__(MMV_THREADS, mmv_min_blocks<T, 1>()) mmv_moe_kernel(const mmv_moe_args a)
{
    namespace ptx = cuda::ptx;
    using S = mmv_seg<T>;
    extern __shared__ __align__(16) uint4 mmv_dyn[];
    __shared__ float tab[32];
    __shared__ __align__(8) uint64_t bars[TMA ? MMV_WARPS : 1][TMA ? MMV_MOE_RING_MAX : 1];
    __shared__ mmv_moe_tab tb;
    int64_t t, yrow;
    if (!mmv_moe_enter<DOWN>(a, tb, tab, &t, &yrow))
        return;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int np = DOWN ? a.k + (a.shW[0] != NULL) : 2; /* parts of a row: slots (+ shared), or gate and up */
    const int D = a.m.ring, NCH = a.m.slot_nch; /* slots of short rows' items are short */
    uint4 *ring = mmv_dyn + (size_t)warp * D * NCH;
    const int64_t ne0 = a.m.ne0, nblk = ne0 / S::qk, nseg = (nblk + S::segb - 1) / S::segb;
    const int64_t nv = a.rows;
    /* Units (GLU, a.units): the block's run of rows [r_lo, r_lo + nu / 2),
     * unit u its row r_lo + u / 2's gate (u even) or up dot, warp w units
     * w, w + MMV_WARPS, ...; the sums meet in shared memory and the act
     * follows one barrier. A warp taking whole rows took two rows (four
     * dots) where the mean was 1.45 on the 35B-A3B's 512 rows over 352
     * warps; dealt by dot, three. Each dot is still one warp's, its
     * segments in order, so the sums are the same. (The warp whose sum
     * lands second applying the act, a shared-memory count a row instead
     * of the barrier, measured 1-2 % slower at 2 and 4 rows, H100.) */
    const bool units = !DOWN && a.units && !a.pack;
    __shared__ float us[DOWN ? 1 : 2 * MMV_MOE_UNIT_ROWS];
    const int64_t r_lo = units ? nv * blockIdx.x / gridDim.x : 0;
    const int64_t nu = units ? 2 * (nv * (blockIdx.x + 1) / gridDim.x - r_lo) : 0;
    const int npi = units ? 1 : np; /* a position's parts: a unit is one */
    const int64_t rstride = units ? MMV_WARPS : (int64_t)gridDim.x * MMV_WARPS;
    const int64_t v0 = units ? warp : (int64_t)blockIdx.x * MMV_WARPS + warp;
    const int64_t nlim = units ? nu : nv;
    const int64_t n_items = v0 < nlim ? (nlim - v0 + rstride - 1) / rstride * npi * nseg : 0;
    /* a position's weight row: unit v's, or part p of row v */
    auto wrow_of = [&](const mmv_pos &q) {
        return units ? tb.w[q.v & 1] + (size_t)(r_lo + (q.v >> 1)) * tb.nb1[q.v & 1]
                     : tb.w[q.p] + (size_t)q.v * tb.nb1[q.p];
    };

    uint64_t *bar = bars[TMA ? warp : 0];
    uint32_t phase = 0; /* TMA: the parity each slot's barrier completes next, a bit per slot */
    const uint64_t policy = TMA ? mmv_evict_first() : 0;
    if (TMA)
        mmv_bars_init(bar, D, lane);

    /* the issue side runs D-1 items ahead of the compute side (mmv_q_kernel's ring) */
    mmv_pos iq = {v0, 0, 0}, cq = {v0, 0, 0};
    int64_t issued = 0;
    auto issue = [&](int slot) {
        if (issued < n_items) {
            const mmv_item<T> it = mmv_locate<T>(wrow_of(iq), iq.s, nblk);
            if (TMA) {
                if (lane == 0)
                    mmv_bulk_load(mmv_saddr(ring + slot * NCH), it.a0, (uint32_t)it.nchunk * 16u,
                                  mmv_saddr(&bar[slot]), policy);
            } else {
                mmv_issue_async<T>(it, lane, ring + slot * NCH);
            }
            mmv_next(iq, npi, nseg, rstride);
            issued++;
        }
        if (!TMA)
            cp_async_commit(); /* an empty group keeps the wait counts uniform */
    };
    for (int d = 0; d < D - 1; d++)
        issue(d);
    /* DOWN stages the token's k (+1) h rows, GLU its one x row */
    const int nr = DOWN ? np : 1;
    int64_t xl;
    mmv_moe_x_ready<DOWN>();
    const float *x = mmv_moe_stage_rows<mmv_q8x<T>::on>(a.m, a.flat, a.x + (DOWN ? t * np : t) * a.m.ldx, nr,
                                                        (float *)(mmv_dyn + (size_t)MMV_WARPS * D * NCH), &xl);
    const int64_t nbr = ne0 / 32;
    const float *xsum = x + (int64_t)nr * xl; /* Q8_0: the staged rows' block sums */
    float acc0 = 0.0f, acc1 = 0.0f, routed = 0.0f;
    double dacc = 0.0;
    int slot = 0;
    if constexpr (mmv_q8x<T>::on && TMA) {
        if (a.pack) {
            /* Packed passes: rows of one short segment (the experts' down
             * rows of 512 or 704 are 16 or 22 blocks, 8 or 11 of the 32 lane
             * pairs) leave most lanes idle, and the kernel is bound by the
             * instructions it issues. A pass takes G items at once, item g
             * on lanes [g L, g L + L) with lane pairs as the one-item pass
             * has them; a lane's pair is the one-item pass's (the same dot),
             * and its group's butterfly is the full one's over the lanes that
             * hold a pair (the others hold +0, which the 0.0f + part below
             * reproduces): the same sums, applied in item order. */
            const int L = a.pack, G = min(32 / L, D - 1), gi = lane / L, gl = lane % L;
            float gate = 0.0f; /* GLU: the row's gate sum, until its up */
            for (int64_t k = 0; k < n_items; k += G) {
                const int ng = (int)min((int64_t)G, n_items - k);
                for (int g = 0; g < ng; g++) {
                    const int sl = slot + g < D ? slot + g : slot + g - D;
                    while (!ptx::mbarrier_try_wait_parity(&bar[sl], (phase >> sl) & 1u)) {
                    }
                    phase ^= 1u << sl;
                }
                float part = 0.0f;
                if (gi < ng) {
                    mmv_pos q = cq;
                    for (int g = 0; g < gi; g++)
                        mmv_next(q, np, nseg, rstride);
                    const int sl = slot + gi < D ? slot + gi : slot + gi - D;
                    const mmv_item<T> cur = mmv_locate<T>(tb.w[q.p] + (size_t)q.v * tb.nb1[q.p], 0, nblk);
                    const int xp = DOWN ? q.p : 0;
                    mmv_q8_pair<1>(mmv_saddr(ring + sl * NCH) + cur.off, cur.nb, gl, mmv_saddr(x + xp * xl), xl,
                                   mmv_saddr(xsum + xp * nbr), nbr, 0, 1, &part);
                }
                float v = 0.0f + part;
                for (int o = L >> 1; o > 0; o >>= 1)
                    v += __shfl_xor_sync(0xffffffffu, v, o);
                __syncwarp(); /* the pass's slots are refilled below */
                for (int g = 0; g < ng; g++)
                    issue(slot + g == 0 ? D - 1 : slot + g - 1 < D ? slot + g - 1 : slot + g - 1 - D);
                for (int g = 0; g < ng; g++) {
                    const float sum = __shfl_sync(0xffffffffu, v, g * L);
                    if (!DOWN) {
                        if (cq.p == 0) {
                            gate = sum;
                        } else if (lane == 0) {
                            a.y[yrow * a.ldy + cq.v] = d_moe_glu(a.gelu, gate, sum);
                        }
                    } else {
                        mmv_moe_down_part(a, cq.p, np, cq.v, yrow, tb.ws, sum, dacc, routed, lane);
                    }
                    mmv_next(cq, np, nseg, rstride);
                }
                slot = slot + ng < D ? slot + ng : slot + ng - D;
            }
            return;
        }
    }
    for (int64_t k = 0; k < n_items; k++) {
        if (TMA) {
            while (!ptx::mbarrier_try_wait_parity(&bar[slot], (phase >> slot) & 1u)) {
            }
            phase ^= 1u << slot;
        } else {
            cp_async_wait_n(D - 2); /* item k has landed (this lane's part) */
            __syncwarp();           /* ... and every lane's */
        }
        issue(slot == 0 ? D - 1 : slot - 1);
        const uint8_t *wrow = wrow_of(cq);
        const uint8_t *sm = (const uint8_t *)(ring + slot * NCH);
        const mmv_item<T> cur = mmv_locate<T>(wrow, cq.s, nblk);
        /* the part's x row: DOWN's staged row p, GLU's one row */
        const float *xr = DOWN ? x + cq.p * xl : x;
        const float *xs = DOWN ? xsum + cq.p * nbr : xsum;
        float part = 0.0f;
        if (mmv_q8x<T>::on && (cur.off & 3) == 0) {
            mmv_q8_pair<1>(mmv_saddr(sm) + cur.off, cur.nb, lane, mmv_saddr(xr), xl, mmv_saddr(xs), nbr,
                           (int64_t)cq.s * S::segb, 1, &part);
        } else {
#pragma unroll
            for (int u = 0; u < S::u; u++) {
                const int sb = lane + 32 * u;
                if (sb < cur.nb * S::subs) {
                    const int blk = sb / S::subs, sub = sb % S::subs;
                    const uint8_t *p = sm + cur.off + blk * S::bb;
                    const int e0 = (cq.s * S::segb + blk) * S::qk + sub * 32; /* rows are < 2^31 elements */
                    if (mmv_q8x<T>::on)
                        part += mq_dot32_q8x(p, xr + mmv_xp<true>(e0), xs[e0 / 32]);
                    else
                        part += mq_dot32<T>(p, sub, xr + mmv_xp<false>(e0), tab);
                }
            }
        }
        if (!DOWN && cq.p == 1)
            acc1 += part;
        else
            acc0 += part;
        __syncwarp(); /* the slot is refilled by the next iteration's issue */
        if (cq.s == nseg - 1) {
            if (units) {
                const float sum = warp_sum(acc0);
                if (lane == 0)
                    us[cq.v] = sum;
                acc0 = 0.0f;
            } else if (!DOWN) {
                if (cq.p == 1) {
                    const float g = warp_sum(acc0), u = warp_sum(acc1);
                    if (lane == 0)
                        a.y[yrow * a.ldy + cq.v] = d_moe_glu(a.gelu, g, u);
                    acc0 = acc1 = 0.0f;
                }
            } else {
                const float yv = warp_sum(acc0);
                acc0 = 0.0f;
                mmv_moe_down_part(a, cq.p, np, cq.v, yrow, tb.ws, yv, dacc, routed, lane);
            }
        }
        mmv_next(cq, npi, nseg, rstride);
        slot = slot == D - 1 ? 0 : slot + 1;
    }
    if (!TMA)
        cp_async_wait<0>();
    if (units) {
        __syncthreads();
        for (int64_t i = threadIdx.x; 2 * i < nu; i += blockDim.x)
            a.y[yrow * a.ldy + r_lo + i] = d_moe_glu(a.gelu, us[2 * i], us[2 * i + 1]);
    }
}

/* Launches A's GLU (DOWN false) or DOWN launch over GY problems on a
 * resident grid; false when it cannot be configured (the host checks
 * mmv_moe_fits first, so only an occupancy of zero gets here). */
template <int T> bool mmv_moe_launch(mmv_moe_args a, bool down, unsigned gy, int sm_count, cudaStream_t s);

#define MMV_MOE_EXTERN(T, _) extern template bool mmv_moe_launch<T>(mmv_moe_args, bool, unsigned, int, cudaStream_t);

#endif

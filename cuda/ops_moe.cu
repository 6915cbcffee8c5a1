/* MoE routing and the routed expert FFN, on the device end to end: the
 * expert ids that route writes are read by the grouped matvec kernels
 * directly, so nothing waits for the host.
 *
 * route computes in float64 like the reference (lib/cpu/ops_moe.c) and
 * rounds the probabilities once, so the selection (ties: lower id) agrees.
 * moe is the composition of the plain ops: per (token, slot) matvecs of the
 * selected expert's gate/up rows, act(g)*u in float64, the down matvec,
 * then the weighted sum over slots in slot order in float64. */
#include <math.h>

#include "cuda_common.cuh"
#include "math.cuh"
#include "route.cuh"

#define MOE_WS_CAP ((size_t)256 << 20)

/* ---- route ------------------------------------------------------------------ */

/* One block a token (route_block_token, cuda/route.cuh): the maximum and
 * the sum of exp over the block, then every thread ranks its experts
 * (RANK; else warp 0 picks in k rounds: a block-wide round a pick costs
 * two barriers, and the route sits on a decode layer's critical path
 * between the router and the experts). */
template <bool FAST, bool RANK>
__global__ void __launch_bounds__(ROUTE_THREADS) route_kernel(const memra_route_args_t a)
{
    MEMRA_PDL_ENTER(); /* cuda_common.cuh */
    extern __shared__ float r_p[];
    __shared__ double r_red[ROUTE_THREADS / 32];
    for (int64_t t = blockIdx.x; t < a.n_tokens; t += gridDim.x)
        route_block_token<FAST, RANK>(a, t, a.logits + t * a.n_expert, r_p, r_red);
}

/* One warp per token (ROUTE_WARPS tokens a block), for up to
 * ROUTE_WARP_MAX experts (with the picks): route_kernel's arithmetic in
 * its order, without its block barriers (two a reduction). Lane L plays route_kernel's thread 32w + L for each of its warps w in
 * turn: that thread's strided sum of exp, the warp's xor tree, lane 0's
 * total; the warps' totals added in order from 0. The maximum and every
 * pick (the best expert strictly after the previous one in the order prob
 * descending, id ascending) do not depend on the order. So the ids and
 * weights are route_kernel's bits. */
#define ROUTE_WARPS 4
#define ROUTE_WARP_MAX 3072 /* 4 tokens' probabilities in 48 KiB */

__global__ void __launch_bounds__(ROUTE_WARPS * 32) route_warp_kernel(const memra_route_args_t a)
{
    MEMRA_PDL_ENTER();
    extern __shared__ float rw_p[];
    const int64_t ne = a.n_expert;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float *p = rw_p + (size_t)warp * (ne + a.k); /* the probabilities, the picks */
    for (int64_t t = (int64_t)blockIdx.x * ROUTE_WARPS + warp; t < a.n_tokens; t += (int64_t)gridDim.x * ROUTE_WARPS) {
        const float *l = a.logits + t * ne;
        double mx = -INFINITY;
        for (int64_t e = lane; e < ne; e += 32)
            mx = fmax(mx, (double)l[e]);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
            mx = fmax(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        double sum = 0.0;
        for (int w = 0; w < ROUTE_THREADS / 32; w++) {
            double v = 0.0;
            for (int64_t e = 32 * w + lane; e < ne; e += ROUTE_THREADS)
                v += exp((double)l[e] - mx);
#pragma unroll
            for (int o = 16; o > 0; o >>= 1)
                v += __shfl_xor_sync(0xffffffffu, v, o);
            sum += __shfl_sync(0xffffffffu, v, 0);
        }
        for (int64_t e = lane; e < ne; e += 32)
            p[e] = (float)(exp((double)l[e] - mx) / sum);
        __syncwarp();
        route_pick_warp(a, t, p, p + ne, lane);
        __syncwarp(); /* p is rewritten by the warp's next token */
    }
}

memra_status_t memra__cuda_route(memra__backend_t *be, const memra_route_args_t *a)
{
    bool none;
    memra_status_t st = memra__check_route(be, a, &none);
    if (st || none)
        return st;
    /* MEMRA_ROUTE_WARP=1: one warp per token (A/B). Off by default: a
     * decode token's one warp walks every expert alone, and the block
     * kernel's decode was faster (Qwen3.6-35B-A3B Q8_0 on an H200, tg128
     * 244.7 against 232.0 tok/s, 85eda5b, 2026-12-02) */
    static long warp_on = -1;
    if (warp_on < 0)
        warp_on = memra__cuda_env_long("MEMRA_ROUTE_WARP", 0);
    if (warp_on && a->n_expert + a->k <= ROUTE_WARP_MAX) {
        memra__cuda_ctx_t *c = memra__cuda_ctx(be);
        memra__launch(route_warp_kernel, memra__cuda_blocks((a->n_tokens + ROUTE_WARPS - 1) / ROUTE_WARPS, 1, 65535),
                      ROUTE_WARPS * 32, (size_t)ROUTE_WARPS * (a->n_expert + a->k) * sizeof(float), c->stream, *a);
        MEMRA_CUDA_LAUNCHED(be);
        return MEMRA_OK;
    }
    /* route_block_token's FAST form (cuda/route.cuh; the same ids and
     * weights; the 35B-A3B's tg128 316.4 against 310.4 tok/s, H200,
     * 2026-12-05); MEMRA_ROUTE_REDUX=0 keeps the plain one */
    static long redux = -1, rank = -1;
    if (redux < 0) {
        redux = memra__cuda_env_long("MEMRA_ROUTE_REDUX", 1);
        /* the picks by rank (route_pick_rank: the same ids and weights;
         * the 35B-A3B's --batch 1,2,4,8 309.8 / 503.6 / 745.6 / 1055.6
         * against 298.3 / 483.7 / 724.4 / 1029.7 tok/s with warp 0's
         * rounds, the 26B-A4B's 297.0 / 456.5 / 628.5 / 1048.8 against
         * 290.5 / 447.4 / 621.7 / 1037.1; H100, 2026-12-06); 0: the rounds.
         * MEMRA_ROUTE_REDUX=0 keeps the plain kernel whole, rounds included */
        rank = memra__cuda_env_long("MEMRA_ROUTE_RANK", 1);
    }
    const size_t smem = (size_t)(a->n_expert + a->k) * sizeof(float); /* the probabilities, the picks */
    if (smem > 200 * 1024)
        return memra__fail(be->err, MEMRA_E_UNSUPPORTED, "route: %lld experts", (long long)a->n_expert);
    void (*const kernel)(const memra_route_args_t) = !redux ? route_kernel<false, false>
                                                     : rank ? route_kernel<true, true>
                                                            : route_kernel<true, false>;
    if (smem > 48 * 1024)
        MEMRA_CUDA_TRY(be, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    memra__launch(kernel, memra__cuda_blocks(a->n_tokens, 1, 65535), ROUTE_THREADS, smem, c->stream, *a);
    MEMRA_CUDA_LAUNCHED(be);
    return MEMRA_OK;
}

/* ---- moe -------------------------------------------------------------------- */

/* h[p][f] = act(g[p][f]) * u[p][f], g and u rows of their own strides
 * (d_moe_glu: the fused gate/up launch, cuda/mmv_moe.cuh, calls it too) */
__global__ void moe_act_kernel(const float *g, int64_t lg, const float *u, int64_t lu, float *h, int64_t n_p,
                               int64_t n_ff, int act)
{
    MEMRA_PDL_ENTER(); /* cuda_common.cuh */
    for (int64_t p = blockIdx.y; p < n_p; p += gridDim.y)
        for (int64_t f = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; f < n_ff; f += (int64_t)gridDim.x * blockDim.x)
            h[p * n_ff + f] = d_moe_glu(act == MEMRA_ACT_GELU, g[p * lg + f], u[p * lu + f]);
}

/* out[t][i] = sum_j w[t][j] * scale[e] * y[t*k+j][i], slot order, float64 */
__global__ void moe_sum_kernel(const float *y, const int32_t *ids, const float *w, const float *scale, int64_t n_expert,
                               float *out, int64_t n_tokens, int64_t k, int64_t n_embd)
{
    MEMRA_PDL_ENTER(); /* cuda_common.cuh */
    for (int64_t t = blockIdx.y; t < n_tokens; t += gridDim.y)
        for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_embd;
             i += (int64_t)gridDim.x * blockDim.x) {
            double acc = 0.0;
            for (int64_t s = 0; s < k; s++) {
                const int32_t e = ids[t * k + s];
                if (e < 0 || e >= n_expert) { /* the matvec poisons such rows; the grouped GEMM skips them */
                    acc = __longlong_as_double(0x7ff8000000000000ll);
                    break;
                }
                const double sc = scale ? (double)scale[e] : 1.0;
                acc = __dadd_rn(acc, __dmul_rn(__dmul_rn((double)w[t * k + s], sc), (double)y[(t * k + s) * n_embd + i]));
            }
            out[t * n_embd + i] = (float)acc;
        }
}

memra_status_t memra__cuda_moe_sum(memra__backend_t *be, const float *y, const int32_t *ids, const float *w,
                                   const float *scale, int64_t n_expert, float *out, int64_t n_tokens, int64_t k,
                                   int64_t n_embd)
{
    memra__launch(moe_sum_kernel, dim3(memra__cuda_blocks(n_embd, 256, 64), memra__cuda_blocks(n_tokens, 1, 65535)),
                  256, 0, memra__cuda_ctx(be)->stream, y, ids, w, scale, n_expert, out, n_tokens, k, n_embd);
    MEMRA_CUDA_LAUNCHED(be);
    return MEMRA_OK;
}

memra_status_t memra__cuda_moe(memra__backend_t *be, const memra_moe_args_t *a)
{
    bool none;
    memra_status_t st = memra__check_moe(be, a, &none);
    if (st || none)
        return st;
    /* expert ids live on the device: the grouped matvec poisons a bad one's rows */
    const int64_t ne = a->down->ne[2] > 0 ? a->down->ne[2] : 1;
    /* fast prefill: grouped tensor-core GEMMs (cuda/gemm_q.cu); MEMRA_MOE_GEMM=0
     * keeps the grouped matvecs */
    static long moe_gemm = -1;
    if (moe_gemm < 0)
        moe_gemm = memra__cuda_env_long("MEMRA_MOE_GEMM", 1);
    if (moe_gemm && memra__cuda_moe_gemm_rows(be, a)) {
        bool done;
        st = memra__cuda_moe_fast(be, a, ne, &done);
        if (st || done)
            return st;
    }
    const int64_t gate_rows = a->gate_up ? 2 * a->n_ff : a->n_ff;
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    const int64_t k = a->k, n_ff = a->n_ff, n_embd = a->n_embd;
    const size_t per_tok = (size_t)k * (size_t)(gate_rows + (a->gate_up ? 0 : n_ff) + n_ff + n_embd) * sizeof(float);
    int64_t pass = (int64_t)(MOE_WS_CAP / per_tok);
    if (pass < 1)
        pass = 1;
    if (pass > a->n_tokens)
        pass = a->n_tokens;
    if (pass * k > 65535) /* one grouped launch per pass */
        pass = 65535 / k > 0 ? 65535 / k : 1;
    float *g = (float *)memra__cuda_ws(be, per_tok * (size_t)pass + 1024);
    if (!g)
        return MEMRA_E_NOMEM;
    float *u = g + pass * k * gate_rows;
    float *h = u + (a->gate_up ? 0 : pass * k * n_ff);
    float *y = h + pass * k * n_ff;
    for (int64_t t0 = 0; t0 < a->n_tokens; t0 += pass) {
        const int64_t nt = a->n_tokens - t0 < pass ? a->n_tokens - t0 : pass, np = nt * k;
        const int32_t *ids = a->ids + t0 * k;
        st = memra__cuda_matvec_grouped(be, a->gate_up ? a->gate_up : a->gate, ids, ne, np, a->x + t0 * n_embd, n_embd, k, g,
                                                       gate_rows);
        if (!st && !a->gate_up)
            st = memra__cuda_matvec_grouped(be, a->up, ids, ne, np, a->x + t0 * n_embd, n_embd, k, u, n_ff);
        if (st)
            return st;
        const float *uu = a->gate_up ? g + n_ff : u;
        const int64_t lu = a->gate_up ? gate_rows : n_ff;
        memra__launch(moe_act_kernel, dim3(memra__cuda_blocks(n_ff, 256, 64), memra__cuda_blocks(np, 1, 65535)), 256, 0, c->stream, g, gate_rows, uu, lu, h, np, n_ff, (int)a->act);
        MEMRA_CUDA_LAUNCHED(be);
        st = memra__cuda_matvec_grouped(be, a->down, ids, ne, np, h, n_ff, 1, y, n_embd);
        if (st)
            return st;
        st = memra__cuda_moe_sum(be, y, ids, a->weights + t0 * k, a->expert_scale, ne, a->out + t0 * n_embd, nt, k, n_embd);
        if (st)
            return st;
    }
    return MEMRA_OK;
}

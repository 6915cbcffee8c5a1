/* norm_ex chains (memra__norm_chain, lib/backend.h) with every row in
 * shared memory: each step's inputs fetched at once, a step's output
 * handed to the later steps that read it without a trip through L2, and
 * a step whose x is an earlier step's x (the same rows, not rewritten in
 * between) reusing that step's scale.
 *
 * Why: norm_chain_kernel (cuda/ops_norm.cu) takes a chain's steps one
 * after the other, each reading its x, then (after the block's reduction)
 * its weight and add, from global memory: a chain of dependent L2 round
 * trips a step. A decode row is one block, so that chain is the launch's
 * time: gemma-4-26b-a4b's 3-step chains ~8.9 us a call, the E4B's 1-step
 * norm_ex ~4.3 (CUPTI marginal times at cc951a6, docs/PERFORMANCE.md);
 * 60 and 126 calls a token. Here the weights are copied before the PDL
 * wait (no kernel writes them), every other input row as soon as the wait
 * returns, all by cp.async into shared memory; a step's output a later
 * step reads (26B's r = x + rms(a): the router's and the experts' norms
 * read it; the post-FFN f) stays there, and the router's and the experts'
 * norms of r share one reduction.
 *
 * Bits: a thread holds the 4-element chunks t, t + 256, ... of every row
 * (norm_row_regs's), adds its chunks' squares in the same order, reduces
 * with row_scale_reduce, and computes each element with the same rounded
 * steps (x·s, ·w, add +, ·scale), so every output is the sequence's
 * (kernel-check norm_ex.* and norm_chain.* compare the fused op with the
 * sequence bit for bit). A shared scale is the same sum of the same
 * values. Steps whose output a later step overwrites skip their store
 * (after the chain only the last write of a buffer is visible; the chain
 * contract makes every shared buffer the same rows). Each thread reads
 * only the chunks it copied itself: its own cp.async wait orders them, and
 * the only barriers are the reductions'.
 *
 * Taken for chains of equal-width steps, rows of whole aligned 16-byte
 * chunks up to 8192 floats, at most NCS_MAX_ROWS rows (decode and batched
 * decode: a block a row; prefill chunks keep norm_chain_kernel, which
 * needs no shared memory) and NCS_MAX_SLOTS rows of shared memory, of at
 * least two steps: with every launch on it (MEMRA_NORM_SMEM=2) the
 * 26B-A4B, whose MoE layers run two 3-step chains, decoded 1.8 % faster,
 * the E4B and the 31B, whose norms are single steps, 0.7-0.9 % slower
 * (H100, 2026-12-05, docs/PERFORMANCE.md): one step has no round trip
 * between steps to save. MEMRA_NORM_SMEM=0: norm_chain_kernel takes every
 * chain. */
#include <atomic>
#include <string.h>

#include "cuda_common.cuh"
#include "math.cuh"
#include "norm_chain_plan.h"

#define NCS_THREADS MEMRA_NORM_BLOCK

static_assert(MEMRA_NORM_CHAIN_MAX <= 4, "the kernel keeps the scales of steps 0-2");
static_assert(4 * 8 * NCS_THREADS >= 4 * NCS_CHUNKS, "the widest instance covers the plan's rows");

template <int U>
__global__ void __launch_bounds__(NCS_THREADS) norm_chain_smem_kernel(const ncs_plan p)
{
    extern __shared__ __align__(16) float4 ncs_sm[];
    __shared__ float red[NCS_THREADS / 32 + 1];
    const int64_t nc = p.dim >> 2;
    const int t = threadIdx.x;
    /* this thread's chunks of slot S: ncs_sm[S * ld + t + j * NCS_THREADS] */
    for (int s = 0; s < p.n_w; s++)
#pragma unroll
        for (int j = 0; j < U; j++) {
            const int64_t c = t + j * NCS_THREADS;
            if (c < nc)
                cp_async16(ncs_sm + s * p.ld + c, p.src[s].p + 4 * c);
        }
    cp_async_commit();
    MEMRA_PDL_ENTER(); /* cuda_common.cuh: the other rows are earlier kernels' outputs */
    for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
        for (int s = p.n_w; s < p.n_load; s++)
#pragma unroll
            for (int j = 0; j < U; j++) {
                const int64_t c = t + j * NCS_THREADS;
                if (c < nc)
                    cp_async16(ncs_sm + s * p.ld + c, p.src[s].p + r * p.src[s].stride + 4 * c);
            }
        cp_async_commit();
        cp_async_wait<0>(); /* this thread's chunks of every slot */
        float sc0 = 0.0f, sc1 = 0.0f, sc2 = 0.0f; /* the scales of steps 0-2 (a later step may share one) */
#pragma unroll
        for (int i = 0; i < MEMRA_NORM_CHAIN_MAX; i++) {
            if (i >= p.n)
                continue;
            const ncs_step &st = p.s[i];
            const float4 *xs = ncs_sm + st.x * p.ld;
            float s = 0.0f;
            if (st.share >= 0) { /* st.share < i: selects, not a load from local memory */
                s = st.share == 0 ? sc0 : st.share == 1 ? sc1 : sc2;
            } else {
                float sum = 0.0f;
#pragma unroll
                for (int j = 0; j < U; j++) {
                    const int64_t c = t + j * NCS_THREADS;
                    if (c < nc) {
                        const float4 v = xs[c];
                        sum = row_sq_add(v.x, sum);
                        sum = row_sq_add(v.y, sum);
                        sum = row_sq_add(v.z, sum);
                        sum = row_sq_add(v.w, sum);
                    }
                }
                s = (float)row_scale_reduce(true, sum, p.dim, st.eps, red);
            }
            sc0 = i == 0 ? s : sc0;
            sc1 = i == 1 ? s : sc1;
            sc2 = i == 2 ? s : sc2;
            const bool scaled = st.scale != 1.0f;
            float4 *yr = st.store ? (float4 *)(st.y + r * st.ys) : NULL;
#pragma unroll
            for (int j = 0; j < U; j++) {
                const int64_t c = t + j * NCS_THREADS;
                if (c >= nc)
                    continue;
                const float4 v = xs[c];
                const float4 wv = st.w >= 0 ? ncs_sm[st.w * p.ld + c] : make_float4(1.0f, 1.0f, 1.0f, 1.0f);
                const float4 av = st.add >= 0 ? ncs_sm[st.add * p.ld + c] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                float q[4] = {v.x, v.y, v.z, v.w};
                const float wq[4] = {wv.x, wv.y, wv.z, wv.w}, aq[4] = {av.x, av.y, av.z, av.w};
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    q[e] = __fmul_rn(q[e], s);
                    if (st.w >= 0)
                        q[e] = __fmul_rn(q[e], wq[e]); /* row_scaled */
                    if (st.add >= 0)
                        q[e] = __fadd_rn(aq[e], q[e]);
                    if (scaled)
                        q[e] = __fmul_rn(q[e], st.scale);
                }
                const float4 o = make_float4(q[0], q[1], q[2], q[3]);
                if (st.y_slot >= 0)
                    ncs_sm[st.y_slot * p.ld + c] = o;
                if (yr)
                    yr[c] = o;
            }
        }
        /* the next row's copies rewrite only this thread's own chunks, and
         * row_scale_reduce ends in a barrier (red) */
    }
}

template <int U> static cudaError_t ncs_launch(const ncs_plan &pl, size_t smem, int device, cudaStream_t s)
{
    /* the shared-memory limit is an attribute per device; set once each */
    static std::atomic<uint64_t> set{0};
    const uint64_t bit = (uint64_t)1 << (device & 63);
    if (!(set.load(std::memory_order_relaxed) & bit)) {
        const cudaError_t e =
            cudaFuncSetAttribute(norm_chain_smem_kernel<U>, cudaFuncAttributeMaxDynamicSharedMemorySize, NCS_SMEM_MAX);
        if (e != cudaSuccess)
            return e;
        set.fetch_or(bit, std::memory_order_relaxed);
    }
    return memra__launch(norm_chain_smem_kernel<U>, memra__cuda_blocks(pl.rows, 1, 65535), NCS_THREADS, smem, s, pl);
}

memra_status_t memra__cuda_norm_chain_smem(memra__backend_t *be, const memra_norm_args_t *a, int n, bool *done)
{
    *done = false;
    static long on = -1;
    if (on < 0)
        on = memra__cuda_env_long("MEMRA_NORM_SMEM", 1);
    ncs_plan pl;
    if (!on || (n < 2 && on < 2) || !ncs_make_plan(a, n, &pl))
        return MEMRA_OK;
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    const size_t smem = (size_t)pl.n_slots * (size_t)pl.ld * 16;
    const int64_t per = (pl.dim / 4 + NCS_THREADS - 1) / NCS_THREADS; /* chunks a thread */
    cudaError_t e;
    switch (per) {
    case 1: e = ncs_launch<1>(pl, smem, c->device, c->stream); break;
    case 2: e = ncs_launch<2>(pl, smem, c->device, c->stream); break;
    case 3: e = ncs_launch<3>(pl, smem, c->device, c->stream); break;
    case 4: e = ncs_launch<4>(pl, smem, c->device, c->stream); break;
    case 5:
    case 6: e = ncs_launch<6>(pl, smem, c->device, c->stream); break;
    default: e = ncs_launch<8>(pl, smem, c->device, c->stream); break;
    }
    MEMRA_CUDA_TRY(be, e);
    *done = true;
    return MEMRA_OK;
}

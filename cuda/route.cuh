/* The route's device code (memra_route_args_t, lib/backend.h), shared by
 * route_kernel (cuda/ops_moe.cu) and the float matvec's route epilogue
 * (cuda/mmv.cuh: the router's last block routes its logits). route
 * computes in float64 like the reference (lib/cpu/ops_moe.c) and rounds
 * the probabilities once, so the selection (ties: lower id) agrees. */
#ifndef MEMRA_CUDA_ROUTE_CUH
#define MEMRA_CUDA_ROUTE_CUH

#include <math.h>

#include "cuda_common.cuh"
#include "math.cuh"

#define ROUTE_THREADS 256
#define ROUTE_SUM_MIN 6.103515625e-5

/* The best expert strictly after (PP, PE) in the order (prob descending,
 * id ascending) among P[E0], P[E0 + STEP], ... below NE, then the best of
 * the warp's 32 (every lane gets it): *BP, *BE (-1: none). */
template <bool FAST = false>
static __device__ __forceinline__ void route_best_after(const float *p, int64_t ne, int64_t e0, int64_t step, float pp,
                                                        int pe, float *bp_out, int *be_out)
{
    float bp = 0.0f;
    int32_t be = -1;
    for (int64_t e = e0; e < ne; e += step) {
        const float q = p[e];
        const bool after = q < pp || (q == pp && (int)e > pe);
        if (after && d_better(q, (int)e, bp, be)) {
            bp = q;
            be = (int)e;
        }
    }
    if (FAST)
        d_warp_best_redux(bp, be); /* the candidates are numbers: NaN is never after anything */
    else
        d_warp_best(bp, be);
    *bp_out = bp;
    *be_out = be;
}

/* A pick's weight: its probability P, over the picks' sum WSUM (float64,
 * in pick order) when A normalises. */
static __device__ __forceinline__ float route_weight(const memra_route_args_t &a, float p, double wsum)
{
    return a.norm ? (float)((double)p / fmax(wsum, ROUTE_SUM_MIN)) : p;
}

/* Token T's top k of the probabilities P (all of them in shared memory)
 * by one warp: k rounds of the best expert strictly after the previous
 * pick in the order (prob descending, id ascending), which no partition of
 * the experts changes, so the picks are those of rounds over the whole
 * block; no block barrier a round, and the picks kept in shared memory
 * (PK, k floats) so that the weights' normalisation (the picks' sum in
 * pick order, in float64) reads no global memory back. */
template <bool FAST = false>
static __device__ __forceinline__ void route_pick_warp(const memra_route_args_t &a, int64_t t, const float *p,
                                                       float *pk, int lane)
{
    const int64_t ne = a.n_expert;
    int32_t *ids = a.ids + t * a.k;
    float *w = a.weights + t * a.k;
    float pp = INFINITY;
    int pe = -1;
    double wsum = 0.0;
    for (int64_t s = 0; s < a.k; s++) {
        float bp;
        int be;
        route_best_after<FAST>(p, ne, lane, 32, pp, pe, &bp, &be);
        if (be < 0) { /* only NaN left */
            be = 0;
            bp = p[0];
        }
        if (lane == 0) {
            ids[s] = be;
            pk[s] = bp;
        }
        wsum += (double)bp;
        pp = bp;
        pe = be;
    }
    __syncwarp();
    for (int64_t s = lane; s < a.k; s += 32)
        w[s] = route_weight(a, pk[s], wsum);
}

/* route_pick_warp's picks by rank, for at most ROUTE_RANK_MAX experts:
 * expert e's rank is the number of experts before it in the order (prob
 * descending, id ascending), and those of rank below k are the picks in
 * rank order, which are the rounds' picks (each the best expert after the
 * previous one in that order). Every thread ranks its own experts at once
 * (each warp stops once none of its lanes can be a pick), where warp 0's
 * k rounds are a serial chain: the 35B-A3B's decode route_kernel took
 * 12.0 us alone, its other warps waiting at the barrier after the picks
 * (Nsight Compute, H100, 2026-12-06). The weights' sum is the picks' in
 * pick order, as the rounds add them. Probabilities with a NaN (then all
 * of them: the softmax's sum is NaN) keep the rounds, whose fallback
 * picks are no order. Ends in a barrier. */
#define ROUTE_RANK_MAX 1024

template <bool FAST>
static __device__ __forceinline__ void route_pick_rank(const memra_route_args_t &a, int64_t t, const float *p,
                                                       float *pk)
{
    const int ne = (int)a.n_expert, k = (int)a.k;
    bool nan = false;
    for (int e = threadIdx.x; e < ne; e += ROUTE_THREADS)
        nan = nan || isnan(p[e]);
    if (__syncthreads_or(nan)) {
        if (threadIdx.x < 32)
            route_pick_warp<FAST>(a, t, p, pk, (int)threadIdx.x);
        __syncthreads();
        return;
    }
    int32_t *ids = a.ids + t * a.k;
    for (int e0 = 0; e0 < ne; e0 += ROUTE_THREADS) {
        const int e = e0 + (int)threadIdx.x;
        const float v = e < ne ? p[e] : 0.0f;
        int before = e < ne ? 0 : k;
        for (int j0 = 0; j0 < ne; j0 += 32) {
            if (__all_sync(0xffffffffu, before >= k))
                break;
            if (j0 + 32 <= ne) {
#pragma unroll
                for (int j = 0; j < 32; j++) {
                    const float q = p[j0 + j];
                    before += q > v || (q == v && j0 + j < e);
                }
            } else {
                for (int j = j0; j < ne; j++) {
                    const float q = p[j];
                    before += q > v || (q == v && j < e);
                }
            }
        }
        if (before < k) {
            ids[before] = e;
            pk[before] = v;
        }
    }
    __syncthreads();
    float *w = a.weights + t * a.k;
    for (int s = threadIdx.x; s < k; s += ROUTE_THREADS) {
        double wsum = 0.0;
        for (int i = 0; i < k; i++)
            wsum += (double)pk[i];
        w[s] = route_weight(a, pk[s], wsum);
    }
    __syncthreads();
}

/* Token T of A in a block of ROUTE_THREADS threads: the maximum and the
 * sum of exp over the block (thread i's experts i, i + ROUTE_THREADS, ...,
 * the warps' xor trees, the warps' partials in order), the probabilities
 * into P (shared memory: n_expert floats, then k for the picks), then warp
 * 0 picks (route_pick_warp). L: the token's logits. RED: ROUTE_THREADS / 32
 * doubles of shared memory. Ends in a barrier (P and RED may be reused).
 * FAST (route_kernel's default; MEMRA_ROUTE_REDUX=0 takes the plain form): a
 * thread's first ROUTE_EXP_KEEP exps kept from the sum for the
 * probabilities instead of computed again, and the picks' warp reductions
 * by redux (d_warp_best_redux): the same values, sums and picks. */
#define ROUTE_EXP_KEEP 4

template <bool FAST = false, bool RANK = false>
static __device__ __forceinline__ void route_block_token(const memra_route_args_t &a, int64_t t, const float *l,
                                                         float *p, double *red)
{
    const int64_t ne = a.n_expert;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    double mx = -INFINITY;
    for (int64_t e = threadIdx.x; e < ne; e += ROUTE_THREADS)
        mx = fmax(mx, (double)l[e]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        mx = fmax(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if (lane == 0)
        red[warp] = mx;
    __syncthreads();
    mx = red[0];
    for (int i = 1; i < ROUTE_THREADS / 32; i++)
        mx = fmax(mx, red[i]);
    __syncthreads();
    constexpr int KEEP = FAST ? ROUTE_EXP_KEEP : 0; /* a thread's first exps, kept in registers */
    double sum = 0.0, ex[KEEP > 0 ? KEEP : 1];
#pragma unroll
    for (int j = 0; j < KEEP; j++) {
        const int64_t e = threadIdx.x + (int64_t)j * ROUTE_THREADS;
        if (e < ne) {
            ex[j] = exp((double)l[e] - mx);
            sum += ex[j];
        }
    }
    for (int64_t e = threadIdx.x + (int64_t)KEEP * ROUTE_THREADS; e < ne; e += ROUTE_THREADS)
        sum += exp((double)l[e] - mx);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0)
        red[warp] = sum;
    __syncthreads();
    sum = 0.0;
    for (int i = 0; i < ROUTE_THREADS / 32; i++)
        sum += red[i];
#pragma unroll
    for (int j = 0; j < KEEP; j++) {
        const int64_t e = threadIdx.x + (int64_t)j * ROUTE_THREADS;
        if (e < ne)
            p[e] = (float)(ex[j] / sum);
    }
    for (int64_t e = threadIdx.x + (int64_t)KEEP * ROUTE_THREADS; e < ne; e += ROUTE_THREADS)
        p[e] = (float)(exp((double)l[e] - mx) / sum);
    __syncthreads();
    if (RANK && ne <= ROUTE_RANK_MAX) {
        route_pick_rank<FAST>(a, t, p, p + ne);
        return;
    }
    if (warp == 0)
        route_pick_warp<FAST>(a, t, p, p + ne, lane);
    __syncthreads();
}

#endif

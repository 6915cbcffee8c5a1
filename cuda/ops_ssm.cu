/* qwen35's Gated DeltaNet recurrences: causal depthwise conv with SiLU and
 * the gated delta rule. Like the CPU reference (lib/cpu/ops_ssm.c) nothing
 * is carried in higher precision across a token: the conv state is a copy
 * of inputs, the delta state is rounded to float after every token, so n
 * one-token calls leave exactly what one n-token call leaves. Inside a
 * token the conv is float32 FMAs with lib/fmath.h's SiLU and the delta
 * rule's dots add float32 runs of four in float64, as in the reference. */
#include <math.h>
#include <string.h>

#include <cooperative_groups.h>

#include "cuda_common.cuh"
#include "dev_cache.cuh"
#include "fmath.h"
#include "math.cuh"

/* ---- conv ------------------------------------------------------------------- */

/* Thread per (channel, run of TB tokens): no output depends on another, so
 * a prefill chunk's tokens run in parallel with each output's arithmetic
 * unchanged (a thread per channel walking 512 tokens took 378 us on a
 * 9B-shaped prefill). Only the first run reads the old state (TB >= K-1),
 * and it writes the new one after its outputs: [state | x] past the last
 * token. */
__global__ void conv_kernel(const memra_conv_args_t a, int64_t tb)
{
    MEMRA_PDL_ENTER(); /* cuda_common.cuh */
    const int64_t K = a.kernel, k1 = K - 1;
    for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < a.channels;
         c += (int64_t)gridDim.x * blockDim.x) {
        const float *w = a.w + c * K;
        float *st = a.state + c * k1;
        /* element idx of [state (K-1) | x_0 .. x_{n-1}] */
#define SEQ(idx) ((idx) < k1 ? st[(idx)] : a.x[((idx) - k1) * a.x_stride + c])
        for (int64_t t0 = (int64_t)blockIdx.y * tb; t0 < a.n_tokens; t0 += (int64_t)gridDim.y * tb) {
            const int64_t t1 = t0 + tb < a.n_tokens ? t0 + tb : a.n_tokens;
            for (int64_t t = t0; t < t1; t++) {
                float sum = 0.0f; /* float32 FMAs and lib/fmath.h's SiLU: the CPU's bits */
                for (int64_t k = 0; k < K; k++)
                    sum = __fmaf_rn(SEQ(t + k), w[k], sum);
                a.out[t * a.channels + c] = memra_siluf(sum);
            }
        }
        /* ascending j reads index n+j >= j: the shift never reads a new value */
        if (blockIdx.y == 0)
            for (int64_t j = 0; j < k1; j++)
                st[j] = SEQ(a.n_tokens + j);
#undef SEQ
    }
}

memra_status_t memra__cuda_conv(memra__backend_t *be, const memra_conv_args_t *a)
{
    bool none;
    memra_status_t st = memra__check_conv(be, a, &none);
    if (st || none)
        return st;
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    const int64_t tb = a->kernel - 1 > 16 ? a->kernel - 1 : 16;
    const dim3 grid(memra__cuda_blocks(a->channels, 128, 65535), memra__cuda_blocks(a->n_tokens, tb, 65535));
    memra__launch(conv_kernel, grid, 128, 0, c->stream, *a, tb);
    MEMRA_CUDA_LAUNCHED(be);
    return MEMRA_OK;
}

/* ---- gated delta rule ---------------------------------------------------------- */

/* Rows m of a head's state (column m of S) never mix: u_m, δ_m and o_m
 * read row m alone. So a block takes RB rows of value head blockIdx.x;
 * thread (m, part) holds elements i = e*P + part of row m in registers for
 * the whole call; the P threads of a row sit in adjacent lanes and reduce
 * with shuffles. q and k of the token are staged in shared memory. A row's
 * arithmetic (delta_row) is the same in the fused step (gdn_kernel). */
#define DELTA_EPT 32
#define DELTA_THREADS 256
#define DELTA_ROWS 16 /* rows of the state per block (<= DELTA_THREADS / P) */

/* Lanes per state row: the fewest (a power of two) that hold D elements. */
static int delta_lanes(int d)
{
    int P = 1;
    while (P * DELTA_EPT < d)
        P <<= 1;
    return P;
}

/* Element e of lane PART's share of a row: runs of four, so that a lane
 * moves its share with 16-byte accesses (a warp then touches 64-byte runs
 * of 8 rows instead of 16-byte ones). */
static __device__ __forceinline__ int delta_idx(int e, int part, int P)
{
    return ((e >> 2) * P + part) * 4 + (e & 3);
}

template <int EPT>
static __device__ __forceinline__ void delta_load(float (&s)[EPT], const float *S, int m, int part, int P, int d, bool on)
{
    const float *row = S + (int64_t)m * d;
#pragma unroll
    for (int e = 0; e < EPT; e += 4) {
        const int i = delta_idx(e, part, P);
        if (d % 4 == 0) { /* rows and runs 16-byte aligned */
            const float4 v = on && i < d ? *(const float4 *)(row + i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            s[e] = v.x;
            s[e + 1] = v.y;
            s[e + 2] = v.z;
            s[e + 3] = v.w;
        } else {
#pragma unroll
            for (int c = 0; c < 4; c++)
                s[e + c] = on && i + c < d ? row[i + c] : 0.0f;
        }
    }
}

template <int EPT>
static __device__ __forceinline__ void delta_store(const float (&s)[EPT], float *S, int m, int part, int P, int d, bool on)
{
    if (!on)
        return;
    float *row = S + (int64_t)m * d;
#pragma unroll
    for (int e = 0; e < EPT; e += 4) {
        const int i = delta_idx(e, part, P);
        if (d % 4 == 0) {
            if (i < d)
                *(float4 *)(row + i) = make_float4(s[e], s[e + 1], s[e + 2], s[e + 3]);
        } else {
#pragma unroll
            for (int c = 0; c < 4; c++)
                if (i + c < d)
                    row[i + c] = s[e + c];
        }
    }
}

/* The float64 sum of a row's runs as SPLIT P lanes would add them (SPLIT =
 * 1 or 2): lane PART's partial H holds its runs of slot e >> 2 = H mod
 * SPLIT, which are lane H P + PART's of the wider split (run (e >> 2) P +
 * part either way). The butterfly over the P lanes, then the partials
 * added as its last level over SPLIT P lanes would (double addition
 * commutes): the same bits as the wider split's. */
template <int SPLIT>
static __device__ __forceinline__ double delta_sum(double (&v)[SPLIT], int P)
{
    static_assert(SPLIT == 1 || SPLIT == 2, "delta_sum: SPLIT 1 or 2");
#pragma unroll
    for (int h = 0; h < SPLIT; h++)
        for (int o = 1; o < P; o <<= 1)
            v[h] += __shfl_xor_sync(0xffffffffu, v[h], o);
    return SPLIT == 2 ? v[0] + v[SPLIT - 1] : v[0];
}

/* One token on the row held in S: decays and updates it, returns the row's
 * o (scaled, rounded) on every lane of the row. q and k sit in shared
 * memory (every row's lanes read them). Float-to-double conversions run
 * at a quarter of the FP64 rate on sm_90: the step's float64 work was its
 * limit (docs/PERFORMANCE.md), hence float32 within a run of four. SPLIT:
 * the dots' sums as SPLIT P lanes of EPT / SPLIT elements add them
 * (delta_sum), so that a row on P lanes gives a wider split's bits. */
template <int EPT, int SPLIT = 1>
static __device__ __forceinline__ float delta_row(float (&s)[EPT], const float *q_s, const float *k_s, int part, int P,
                                                  int d, double decay, double beta, double vm, float scale,
                                                  float q_scl = 1.0f, float k_scl = 1.0f)
{
    /* Q_SCL, K_SCL: the L2 norms' scales, applied to each element as it is
     * read (row_scaled's one rounding, so the same bits as q and k normed in
     * shared memory first; 1 = already normed) */
    /* u = Sᵀk and o = Sᵀq over runs of four elements (the unit a lane
     * holds): each run a float32 FMA chain, the runs added in float64 (the
     * CPU's delta_dot): one float64 conversion and add per four elements */
    double uh[SPLIT] = {};
#pragma unroll
    for (int e = 0; e < EPT; e += 4) {
        const int i = delta_idx(e, part, P);
        float r = 0.0f;
#pragma unroll
        for (int c = 0; c < 4; c++)
            if (i + c < d)
                r = __fmaf_rn(s[e + c], __fmul_rn(k_s[i + c], k_scl), r);
        uh[(e >> 2) % SPLIT] += (double)r;
    }
    const double u = delta_sum(uh, P);
    const double delta = beta * (vm - decay * u);
    /* the update in float32 (HF's precision), the CPU's expression */
    const float decay_f = (float)decay, delta_f = (float)delta;
    double oh[SPLIT] = {};
#pragma unroll
    for (int e = 0; e < EPT; e += 4) {
        const int i = delta_idx(e, part, P);
        float r = 0.0f;
#pragma unroll
        for (int c = 0; c < 4; c++) {
            if (i + c < d) {
                s[e + c] = __fmaf_rn(__fmul_rn(k_s[i + c], k_scl), delta_f, __fmul_rn(decay_f, s[e + c]));
                r = __fmaf_rn(s[e + c], __fmul_rn(q_s[i + c], q_scl), r);
            }
        }
        oh[(e >> 2) % SPLIT] += (double)r;
    }
    return (float)((double)scale * delta_sum(oh, P));
}

/* Tokens staged per round: q and k of DELTA_STAGE_FLOATS / (2 d) tokens,
 * their decays and betas and the block's v entries go to shared memory in
 * one parallel load, then the rows walk those tokens with no barrier in
 * between (one round trip to memory per round instead of per token: the
 * per-token load and its two barriers were the prefill loop's latency).
 * The arithmetic of a token is unchanged, so the bits are. */
#define DELTA_STAGE_FLOATS 8192
#define DELTA_STAGE_MAX 64

static int delta_stage_tokens(int d)
{
    const int tb = DELTA_STAGE_FLOATS / (2 * d);
    return tb < 1 ? 1 : tb > DELTA_STAGE_MAX ? DELTA_STAGE_MAX : tb;
}

template <int EPT> __global__ void __launch_bounds__(DELTA_THREADS) delta_kernel(const memra_delta_args_t a, int P, int rb, int tb)
{
    MEMRA_PDL_ENTER(); /* cuda_common.cuh */
    extern __shared__ double dsm_d[];
    const int d = (int)a.d;
    double *dec_s = dsm_d, *beta_s = dec_s + tb; /* per staged token */
    float *q_s = (float *)(beta_s + tb), *k_s = q_s + tb * d, *v_s = k_s + tb * d; /* v: [token][rb] */
    const int64_t j = blockIdx.x, kh = j % a.n_k;
    const int tid = threadIdx.x, m0 = blockIdx.y * rb, m = m0 + tid / P, part = tid % P;
    const bool on = m < d && tid / P < rb;
    float *S = a.state + j * (int64_t)d * d;
    float s[EPT];
    delta_load(s, S, m, part, P, d, on);
    for (int64_t t0 = 0; t0 < a.n_tokens; t0 += tb) {
        const int nt = (int)min((int64_t)tb, a.n_tokens - t0);
        __syncthreads(); /* the previous round's tokens are read */
        for (int i = tid; i < nt * d; i += blockDim.x) {
            const int64_t t = t0 + i / d;
            const int c = i % d;
            q_s[i] = a.q[t * a.qk_stride + kh * d + c];
            k_s[i] = a.k[t * a.qk_stride + kh * d + c];
        }
        for (int i = tid; i < nt * rb; i += blockDim.x) {
            const int64_t t = t0 + i / rb;
            const int r = m0 + i % rb;
            v_s[i] = r < d ? a.v[t * a.v_stride + j * d + r] : 0.0f;
        }
        for (int i = tid; i < nt; i += blockDim.x) {
            dec_s[i] = exp((double)a.g[(t0 + i) * a.gb_stride + j]);
            beta_s[i] = (double)a.beta[(t0 + i) * a.gb_stride + j];
        }
        __syncthreads();
        for (int tt = 0; tt < nt; tt++) {
            const double vm = on ? (double)v_s[tt * rb + tid / P] : 0.0;
            const float o = delta_row(s, q_s + tt * d, k_s + tt * d, part, P, d, dec_s[tt], beta_s[tt], vm, a.scale);
            if (on && part == 0)
                a.out[(t0 + tt) * a.n_v * d + j * d + m] = o;
        }
    }
    delta_store(s, S, m, part, P, d, on);
}

/* Fast-mode prefill (a chunk of more than MEMRA_MMV_MAX_ROWS tokens, fast
 * engine): the same recurrence in float32 (HF's own precision) with a warp
 * per state row, so that a layer keeps 32x more warps in flight than the
 * exact kernel's few lanes per row (its float64 partial sums fix the lane
 * split, and the token loop was latency-bound: 1.36 ms of a 9B layer's
 * 512-token chunk). Lane l holds elements 4(32e + l) .. +3 of the row;
 * the dots are float32 FMA chains and a butterfly. Rows of d = 128 or 256
 * only; tokens staged in shared memory in rounds as in delta_kernel. */
#define DELTA_FAST_WARPS 8

template <int E4> __global__ void __launch_bounds__(DELTA_FAST_WARPS * 32) delta_fast_kernel(const memra_delta_args_t a, int tb)
{
    MEMRA_PDL_ENTER(); /* cuda_common.cuh */
    extern __shared__ float fsm[];
    constexpr int D = 128 * E4, R = DELTA_FAST_WARPS;
    float *q_s = fsm, *k_s = q_s + tb * D, *v_s = k_s + tb * D, *dec_s = v_s + tb * R, *beta_s = dec_s + tb;
    const int64_t j = blockIdx.x, kh = j % a.n_k;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, m0 = blockIdx.y * R, m = m0 + warp;
    float4 *row = (float4 *)(a.state + (j * D + m) * (int64_t)D);
    float4 s[E4];
#pragma unroll
    for (int e = 0; e < E4; e++)
        s[e] = row[e * 32 + lane];
    for (int64_t t0 = 0; t0 < a.n_tokens; t0 += tb) {
        const int nt = (int)min((int64_t)tb, a.n_tokens - t0);
        __syncthreads();
        for (int i = threadIdx.x; i < nt * D / 4; i += blockDim.x) {
            const int64_t t = t0 + i / (D / 4);
            const int c = i % (D / 4);
            ((float4 *)q_s)[i] = ((const float4 *)(a.q + t * a.qk_stride + kh * D))[c];
            ((float4 *)k_s)[i] = ((const float4 *)(a.k + t * a.qk_stride + kh * D))[c];
        }
        for (int i = threadIdx.x; i < nt * R; i += blockDim.x)
            v_s[i] = a.v[(t0 + i / R) * a.v_stride + j * D + m0 + i % R];
        for (int i = threadIdx.x; i < nt; i += blockDim.x) {
            dec_s[i] = expf(a.g[(t0 + i) * a.gb_stride + j]);
            beta_s[i] = a.beta[(t0 + i) * a.gb_stride + j];
        }
        __syncthreads();
        for (int tt = 0; tt < nt; tt++) {
            const float4 *k4 = (const float4 *)(k_s + tt * D), *q4 = (const float4 *)(q_s + tt * D);
            float u = 0.0f;
#pragma unroll
            for (int e = 0; e < E4; e++) {
                const float4 k = k4[e * 32 + lane];
                u = fmaf(s[e].x, k.x, u);
                u = fmaf(s[e].y, k.y, u);
                u = fmaf(s[e].z, k.z, u);
                u = fmaf(s[e].w, k.w, u);
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1)
                u += __shfl_xor_sync(0xffffffffu, u, o);
            const float dec = dec_s[tt], delta = beta_s[tt] * (v_s[tt * R + warp] - dec * u);
            float o = 0.0f;
#pragma unroll
            for (int e = 0; e < E4; e++) {
                const float4 k = k4[e * 32 + lane], q = q4[e * 32 + lane];
                s[e].x = fmaf(k.x, delta, dec * s[e].x);
                s[e].y = fmaf(k.y, delta, dec * s[e].y);
                s[e].z = fmaf(k.z, delta, dec * s[e].z);
                s[e].w = fmaf(k.w, delta, dec * s[e].w);
                o = fmaf(s[e].x, q.x, o);
                o = fmaf(s[e].y, q.y, o);
                o = fmaf(s[e].z, q.z, o);
                o = fmaf(s[e].w, q.w, o);
            }
#pragma unroll
            for (int x = 16; x > 0; x >>= 1)
                o += __shfl_xor_sync(0xffffffffu, o, x);
            if (lane == 0)
                a.out[(t0 + tt) * a.n_v * D + j * D + m] = a.scale * o;
        }
    }
#pragma unroll
    for (int e = 0; e < E4; e++)
        row[e * 32 + lane] = s[e];
}

static bool delta_fast(memra__backend_t *be, const memra_delta_args_t *a)
{
    static long on = -1; /* MEMRA_DELTA_FAST=0: the exact kernel in fast mode too (A/B runs) */
    if (on < 0)
        on = memra__cuda_env_long("MEMRA_DELTA_FAST", 1);
    return on && be->fast && a->n_tokens > memra__cuda_mmv_max_rows() && (a->d == 128 || a->d == 256) &&
           a->qk_stride % 4 == 0 && (uintptr_t)a->q % 16 == 0 && (uintptr_t)a->k % 16 == 0 &&
           (uintptr_t)a->state % 16 == 0;
}

memra_status_t memra__cuda_delta(memra__backend_t *be, const memra_delta_args_t *a)
{
    bool none;
    memra_status_t st = memra__check_delta(be, a, &none);
    if (st || none)
        return st;
    if (a->d > 256)
        return memra__fail(be->err, MEMRA_E_UNSUPPORTED, "delta: head dim %lld above 256", (long long)a->d);
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    const int d = (int)a->d, P = delta_lanes(d);
    if (delta_fast(be, a)) {
        const int tb = a->n_tokens < 32 ? (int)a->n_tokens : 32;
        const size_t fsmem = ((size_t)tb * (2 * d + DELTA_FAST_WARPS + 2)) * sizeof(float);
        void (*k)(memra_delta_args_t, int) = d == 128 ? delta_fast_kernel<1> : delta_fast_kernel<2>;
        if (fsmem > 48 * 1024)
            MEMRA_CUDA_TRY(be, cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)fsmem));
        memra__launch(k, dim3((unsigned)a->n_v, (unsigned)(d / DELTA_FAST_WARPS)), DELTA_FAST_WARPS * 32, fsmem,
                      c->stream, *a, tb);
        MEMRA_CUDA_LAUNCHED(be);
        return MEMRA_OK;
    }
    /* rows per block: a head's rows over several blocks, so that a one-token
     * step (a latency-bound 2 MB state pass per layer at 9B) has blocks on
     * most SMs */
    const int rb = d < DELTA_ROWS ? d : DELTA_ROWS;
    const int threads = (rb * P + 31) / 32 * 32;
    static long stage = -1; /* MEMRA_DELTA_STAGE=N: at most N tokens a round (A/B runs; 1 is the per-token loop) */
    if (stage < 0)
        stage = memra__cuda_env_long("MEMRA_DELTA_STAGE", DELTA_STAGE_MAX);
    int tb = delta_stage_tokens(d) < stage ? delta_stage_tokens(d) : stage < 1 ? 1 : (int)stage;
    if (a->n_tokens < tb)
        tb = (int)a->n_tokens;
    const size_t smem = 2 * (size_t)tb * sizeof(double) + ((size_t)tb * (2 * d + rb)) * sizeof(float);
    if (smem > 48 * 1024)
        MEMRA_CUDA_TRY(be, cudaFuncSetAttribute(delta_kernel<DELTA_EPT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const dim3 grid((unsigned)a->n_v, (unsigned)((d + rb - 1) / rb));
    memra__launch(delta_kernel<DELTA_EPT>, grid, threads, smem, c->stream, *a, P, rb, tb);
    MEMRA_CUDA_LAUNCHED(be);
    return MEMRA_OK;
}

/* ---- the fused step (memra_gdn_args_t) ------------------------------------------ */

/* Block per value head j (with the conv: per half of its state rows, the
 * two halves in one cluster), P lanes per state row: the head's q/k L2
 * norms are block reductions and its o's RMS norm one over o gathered in
 * every block of the head, so the step needs no other launch. */
#define GDN_THREADS 512
#define GDN_MAX_CLUSTER 8 /* portable cluster size */

static __device__ __forceinline__ void gdn_cluster_arrive(void)
{
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}

static __device__ __forceinline__ void gdn_cluster_wait(void)
{
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
}

/* The block's (C = 1) or the cluster's barrier, its shared-memory writes
 * (distributed ones included) visible after it. */
static __device__ __forceinline__ void gdn_cluster_sync(int C)
{
    if (C > 1)
        asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
    else
        __syncthreads();
}

/* The one-token conv (conv_kernel's arithmetic) of the channels the step of
 * value head J reads, with CONV: the R value heads of key head KH, each in
 * B blocks of d/B state rows, form a cluster of C = R B (rank r B + b is
 * rows [b d/B, (b+1) d/B) of head KH + r n_k); each block computes the v
 * channels of its rows and 1/C of the key head's q|k channels, which it
 * writes into every member's q_s / k_s (distributed shared memory), and
 * shifts only the states of the channels it computed, so no state is read
 * by one block and written by another. Thread t takes slot t (the host
 * checks that the slots fit the block): its channel and taps are known
 * before the kernel's wait (the taps are weights), its input and state
 * only after it. */
#define GDN_CONV_K 4 /* taps at most (qwen35: 4) */

struct gdn_conv_slot {
    int64_t ch; /* -1: no slot */
    int i;      /* q|k element of the key head (qk), else v row */
    bool qk;
    float w[GDN_CONV_K];
};

static __device__ __forceinline__ gdn_conv_slot gdn_conv_prep(const memra_gdn_args_t &g, int64_t j, int64_t kh, int C,
                                                             int m0, int rows)
{
    const int d = (int)g.delta.d;
    const int64_t KD = g.delta.n_k * d;
    const int share = (2 * d + C - 1) / C, i0 = (int)(blockIdx.x % C) * share;
    const int nqk = max(0, min(2 * d, i0 + share) - i0), sl = threadIdx.x;
    gdn_conv_slot c = {-1, 0, false, {0.0f, 0.0f, 0.0f, 0.0f}};
    if (sl >= nqk + rows)
        return c;
    c.qk = sl < nqk;
    c.i = c.qk ? i0 + sl : m0 + sl - nqk;
    c.ch = !c.qk ? 2 * KD + j * d + c.i : c.i < d ? kh * d + c.i : KD + kh * d + (c.i - d);
#pragma unroll
    for (int k = 0; k < GDN_CONV_K; k++)
        if (k < g.conv.kernel)
            c.w[k] = g.conv.w[c.ch * g.conv.kernel + k];
    if (g.conv.kernel > 1) /* its state's line into L2 (a prefetch: safe before the wait) */
        asm volatile("prefetch.global.L2 [%0];" ::"l"(g.conv.state + c.ch * (g.conv.kernel - 1)) : "memory");
    return c;
}

/* After the wait: the slot's output into q_s / k_s of every cluster member
 * or into v_s; returns with the block (C = 1) or the cluster synchronized.
 * The kernel arrived at the cluster barrier when it started: peers write
 * into a block's shared memory only once it runs. */
static __device__ __forceinline__ void gdn_conv_run(const memra_gdn_args_t &g, const gdn_conv_slot &c, int C,
                                                    float *q_s, float *k_s, float *v_s)
{
    const int d = (int)g.delta.d;
    const int K = (int)g.conv.kernel, k1 = K - 1;
    float y = 0.0f;
    if (c.ch >= 0) {
        const float x = g.conv.x[c.ch];
        float *st = g.conv.state + c.ch * k1;
        float sv[GDN_CONV_K];
#pragma unroll
        for (int k = 0; k < GDN_CONV_K; k++)
            sv[k] = k < k1 ? st[k] : k == k1 ? x : 0.0f;
        float sum = 0.0f;
#pragma unroll
        for (int k = 0; k < GDN_CONV_K; k++)
            if (k < K)
                sum = __fmaf_rn(sv[k], c.w[k], sum);
#pragma unroll
        for (int k = 0; k + 1 < GDN_CONV_K; k++)
            if (k < k1)
                st[k] = sv[k + 1];
        y = memra_siluf(sum);
    }
    if (C > 1)
        gdn_cluster_wait();
    if (c.ch >= 0) {
        if (!c.qk) {
            v_s[c.i] = y;
        } else {
            float *dst = c.i < d ? q_s + c.i : k_s + (c.i - d);
            if (C == 1)
                *dst = y;
            else
                for (int r = 0; r < C; r++)
                    *cooperative_groups::this_cluster().map_shared_rank(dst, r) = y;
        }
    }
    gdn_cluster_sync(C);
}

/* TRIG: where a block lets the next kernel launch (MEMRA_GDN_TRIGGER): 0
 * at its start, 1 after the conv, 2 before the delta. The next launch is
 * the out projection, whose early weight copies otherwise queue ahead of
 * the step's own loads (2 against 0: +0.3 %, four passes in one run).
 * SPLIT: delta_row's sums as on SPLIT P lanes. */
template <int EPT, bool CONV, int SPLIT = 1>
static __device__ __forceinline__ void gdn_step(const memra_gdn_args_t &g, int P, int R, int B, int trig)
{
    const int C = CONV ? R * B : 1; /* cluster size; B = 1 without CONV */
    if (CONV && C > 1)
        gdn_cluster_arrive();
    const memra_delta_args_t &a = g.delta;
    const int rank = (int)(blockIdx.x % C), d = (int)a.d, rows = d / B, m0 = (rank % B) * rows;
    const int64_t j = CONV ? blockIdx.x / C + (rank / B) * a.n_k : blockIdx.x, kh = j % a.n_k;
    gdn_conv_slot cs;
    if (CONV)
        cs = gdn_conv_prep(g, j, kh, C, m0, rows);
    /* the block's rows of the state (last written a token ago, long out of
     * L2) into L2 while the in-projection finishes: a prefetch moves no
     * data into the block, so it may run before the wait */
    if (threadIdx.x < 4) {
        const size_t q = (size_t)rows * d; /* floats; four parts of whole 16-byte units */
        const float *S0 = a.state + j * (size_t)d * d + (size_t)m0 * d;
        const size_t b0 = (q * threadIdx.x / 4) & ~(size_t)3, b1 = (q * (threadIdx.x + 1) / 4) & ~(size_t)3;
        if (b1 > b0)
            memra_prefetch_l2(S0 + b0, (int64_t)((b1 - b0) * sizeof(float)));
    }
    if (trig == 0)
        memra_pdl_launch();
    memra_pdl_wait();
    extern __shared__ float gsm[]; /* q, k (raw: delta_row applies their L2 scales), o and (CONV) v */
    __shared__ float scl[2];
    float *q_s = gsm, *k_s = q_s + d, *o_s = k_s + d, *v_s = o_s + d;
    const int tid = threadIdx.x, m = m0 + tid / P, part = tid % P;
    const bool on = tid / P < rows;
    float *S = a.state + j * (int64_t)d * d;
    float s[EPT];
    delta_load(s, S, m, part, P, d, on);
    for (int64_t t = 0; t < a.n_tokens; t++) { /* CONV: one token */
        /* the gate and norm weight of output row m0 + tid, loaded long before use */
        const float zt = tid < rows ? g.z[t * g.z_stride + j * d + m0 + tid] : 0.0f;
        const float wt = tid < rows ? g.norm_w[m0 + tid] : 0.0f;
        const double decay = exp((double)a.g[t * a.gb_stride + j]);
        const double beta = (double)a.beta[t * a.gb_stride + j];
        if (CONV) {
            gdn_conv_run(g, cs, C, q_s, k_s, v_s);
            if (trig == 1)
                memra_pdl_launch();
        } else {
            __syncthreads();
            for (int i = tid; i < d; i += blockDim.x) {
                q_s[i] = a.q[t * a.qk_stride + kh * d + i];
                k_s[i] = a.k[t * a.qk_stride + kh * d + i];
            }
        }
        const double vm = on ? (double)(CONV ? v_s[m] : a.v[t * a.v_stride + j * d + m]) : 0.0;
        if (!CONV) /* gdn_conv_run returns synchronized */
            __syncthreads();
        /* each barrier phase of this latency-bound step costs about a
         * microsecond: q's and k's L2 scales in one phase (a warp each; not
         * every warp: the float64 square root and division of 16 warps
         * made the step slower than a barrier), applied as delta_row reads
         * q and k (the same bits as a normed copy, without its phase) */
        for (int r = tid >> 5; r < 2; r += (int)(blockDim.x >> 5)) {
            const double tt = (double)row_sumsq_warp(r ? k_s : q_s, d);
            if ((tid & 31) == 0)
                scl[r] = (float)row_scale_of(false, tt, d, g.l2_eps);
        }
        __syncthreads();
        const float q_scl = scl[0], k_scl = scl[1];
        if (trig >= 2 || (trig == 1 && !CONV))
            memra_pdl_launch();
        const float o = delta_row<EPT, SPLIT>(s, q_s, k_s, part, P, d, decay, beta, vm, a.scale, q_scl, k_scl);
        if (on && part == 0) {
            if (B == 1) {
                o_s[m] = o;
            } else { /* into the o_s of every block of the head */
                const int r0 = rank - rank % B;
                for (int b = 0; b < B; b++)
                    *cooperative_groups::this_cluster().map_shared_rank(o_s + m, r0 + b) = o;
            }
        }
        gdn_cluster_sync(B > 1 ? C : 1);
        if ((tid & ~31) < rows) { /* the warps of the output rows (blockDim >= rows) sum o themselves: no barrier */
            const float o_scl = (float)row_scale_of(true, (double)row_sumsq_warp(o_s, d), d, g.norm_eps);
            if (tid < rows) {
                const float on_i = row_scaled(o_s[m0 + tid], o_scl, &wt, 0);
                g.y[t * a.n_v * d + j * d + m0 + tid] = memra_siluf(zt) * on_i; /* SWIGLU's arithmetic */
            }
        }
    }
    delta_store(s, S, m, part, P, d, on);
}

template <int EPT, bool CONV>
__global__ void __launch_bounds__(GDN_THREADS) gdn_kernel(const memra_gdn_args_t g, int P, int R, int B, int trig)
{
    gdn_step<EPT, CONV>(g, P, R, B, trig);
}

/* How the fused step runs A (memra__cuda_gdn's choices, which depend on A
 * alone): fused = false leaves the step to the sequence of ops. */
struct gdn_plan {
    bool fused;
    bool conv_in; /* the conv inside the kernel (else, with conv.w, the conv kernel first) */
    int B, P, threads;
    int64_t R;
};

/* Whether the conv's slots fit a block of THREADS with a head's D rows over
 * B blocks of a cluster of R B: 1/(R B) of the key head's 2D q|k channels
 * and the block's D/B v rows (gdn_conv_prep). */
static bool gdn_slots_fit(int64_t d, int64_t R, int64_t b, int threads)
{
    return (2 * d + R * b - 1) / (R * b) + d / b <= threads;
}

static gdn_plan gdn_plan_of(const memra_gdn_args_t *g)
{
    gdn_plan p = {};
    /* a block per head walks the tokens: prefill chunks keep the sequence,
     * whose delta kernel spreads a head over more blocks (pp512 3675 tok/s
     * against 3578 fused, one H200). Experiments: MEMRA_GDN_FUSED=N fuses
     * up to N tokens, 0 never. */
    static long max_tokens = -1;
    if (max_tokens < 0)
        max_tokens = memra__cuda_env_long("MEMRA_GDN_FUSED", 8);
    const int d = (int)g->delta.d;
    p.P = delta_lanes(d);
    p.threads = (d * p.P + 31) / 32 * 32;
    if (g->delta.n_tokens > max_tokens || g->delta.d > 256 || p.threads > GDN_THREADS)
        return p;
    p.fused = true;
    /* the conv inside when its outputs are exactly q|k|v of one token and
     * a key head's value heads fit a cluster; else the conv kernel first */
    const memra_delta_args_t &a = g->delta;
    const int64_t KD = a.n_k * a.d;
    p.R = a.n_v / a.n_k;
    const bool conv_fits = g->conv.w && a.n_tokens == 1 && a.n_v % a.n_k == 0 && g->conv.kernel <= GDN_CONV_K &&
                           g->conv.channels == 2 * KD + a.n_v * a.d && a.q == g->conv.out && a.k == a.q + KD &&
                           a.v == a.q + 2 * KD;
    /* with the conv, each head's rows over two blocks of the cluster,
     * each row over twice the lanes (a block keeps its threads, each
     * thread half the elements): the step's float64 pipe (three
     * conversions and five operations per state element) was its limit,
     * 3.3 us of an 11 us step (per-phase %globaltimer stamps, H200); one
     * run: 335.3 / 335.6 tok/s against 331.5 / 329.1 for a block per head */
    p.B = conv_fits && d % 2 == 0 && p.R * 2 <= GDN_MAX_CLUSTER && gdn_slots_fit(d, p.R, 2, p.threads) ? 2 : 1;
    p.conv_in = conv_fits && p.R * p.B <= GDN_MAX_CLUSTER && gdn_slots_fit(d, p.R, p.B, p.threads);
    return p;
}

static int gdn_trigger(void)
{
    static long trig = -1;
    if (trig < 0)
        trig = memra__cuda_env_long("MEMRA_GDN_TRIGGER", 2);
    return (int)trig;
}

memra_status_t memra__cuda_gdn(memra__backend_t *be, const memra_gdn_args_t *g, bool *done)
{
    *done = false;
    const gdn_plan p = gdn_plan_of(g);
    if (!p.fused)
        return MEMRA_OK;
    if (g->conv.w && !p.conv_in) {
        memra_status_t st = memra__cuda_conv(be, &g->conv);
        if (st)
            return st;
    }
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    const memra_delta_args_t &a = g->delta;
    const size_t smem = (size_t)a.d * 4 * sizeof(float);
    const int trig = gdn_trigger();
    if (p.conv_in && p.B == 2)
        memra__launch_cluster(gdn_kernel<DELTA_EPT / 2, true>, dim3((unsigned)(a.n_v * 2)), p.threads, smem, c->stream,
                              (unsigned)(p.R * 2), *g, 2 * p.P, (int)p.R, 2, trig);
    else if (p.conv_in)
        memra__launch_cluster(gdn_kernel<DELTA_EPT, true>, dim3((unsigned)a.n_v), p.threads, smem, c->stream,
                              (unsigned)p.R, *g, p.P, (int)p.R, 1, trig);
    else
        memra__launch(gdn_kernel<DELTA_EPT, false>, dim3((unsigned)a.n_v), p.threads, smem, c->stream, *g, p.P, 1, 1,
                      trig);
    c->after_step = true;
    MEMRA_CUDA_LAUNCHED(be);
    *done = true;
    return MEMRA_OK;
}

/* ---- several sequences' steps in one launch (memra_gdn_args_t items) ---------- */

/* What differs between the items of a batched step: every pointer the
 * kernel reads or writes per sequence. The rest (shapes, strides, the
 * layer's weights, eps, scale) is the first item's, the same in all. */
struct gdn_item {
    const float *conv_x;
    float *conv_state;
    const float *q, *k, *v, *g, *beta;
    float *state;
    const float *z;
    float *y;
};

/* By value (a kernel parameter: nothing to upload, so the launch queues
 * like any other). */
struct gdn_batch {
    memra_gdn_args_t base;
    gdn_item it[MEMRA_MAX_BATCH];
};

/* Item blockIdx.y's step: gdn_kernel's blocks with that item's pointers
 * (clusters run along x, so a cluster never mixes items). MINB: blocks an
 * SM the registers must allow. The one-sequence step (64 blocks of the
 * 9B's heads) has an SM per block and takes 128 registers a thread, which
 * leaves a block of 512 threads alone on its SM; a batched step has a
 * grid of blocks per sequence, and at one block an SM they run in waves.
 * Two blocks an SM took the 9B's steps of 16 and 32 rows up only 1.3 and
 * 3.7 % (H100, 2026-12-06). SPLIT = 2: a head's rows in one block where
 * the one-sequence plan splits them over two (memra__cuda_gdn_batch). */
template <int EPT, bool CONV, int MINB = 1, int SPLIT = 1>
__global__ void __launch_bounds__(GDN_THREADS, MINB) gdn_batch_kernel(const __grid_constant__ gdn_batch b, int P, int R,
                                                                      int B, int trig)
{
    const gdn_item &it = b.it[blockIdx.y];
    memra_gdn_args_t g = b.base;
    g.conv.x = it.conv_x;
    g.conv.state = it.conv_state;
    g.delta.q = it.q;
    g.delta.k = it.k;
    g.delta.v = it.v;
    g.delta.g = it.g;
    g.delta.beta = it.beta;
    g.delta.state = it.state;
    g.z = it.z;
    g.y = it.y;
    gdn_step<EPT, CONV, SPLIT>(g, P, R, B, trig);
}

/* X and Y run the same kernel with the same arguments but for the
 * per-item pointers (and the scratch, which the fused step leaves alone). */
static bool gdn_same_shape(const memra_gdn_args_t *x, const memra_gdn_args_t *y)
{
    const memra_conv_args_t &cx = x->conv, &cy = y->conv;
    const memra_delta_args_t &dx = x->delta, &dy = y->delta;
    return cx.w == cy.w && (!cx.w || (cx.x_stride == cy.x_stride && cx.n_tokens == cy.n_tokens &&
                                      cx.channels == cy.channels && cx.kernel == cy.kernel)) &&
           dx.qk_stride == dy.qk_stride && dx.v_stride == dy.v_stride && dx.gb_stride == dy.gb_stride &&
           dx.n_tokens == dy.n_tokens && dx.n_k == dy.n_k && dx.n_v == dy.n_v && dx.d == dy.d &&
           memcmp(&dx.scale, &dy.scale, sizeof dx.scale) == 0 && memcmp(&x->l2_eps, &y->l2_eps, sizeof x->l2_eps) == 0 &&
           x->norm_w == y->norm_w && memcmp(&x->norm_eps, &y->norm_eps, sizeof x->norm_eps) == 0 &&
           x->z_stride == y->z_stride;
}

/* Clusters of KERNEL (CLUSTER blocks of THREADS, SMEM bytes) the device
 * runs at once, cached per device and shape (cuda/dev_cache.cuh; 0:
 * unknown). WHICH tells the kernels apart in the one cache. */
template <typename K>
static int gdn_active_clusters(K *kernel, int which, unsigned cluster, int threads, size_t smem)
{
    static dev_cache_row cache[DEV_CACHE_DEVICES];
    dev_cache_row &row = dev_cache_here(cache);
    const uint64_t key = dev_cache_key((uint64_t)which << 40 | (uint64_t)(cluster & 15) << 32 |
                                       (uint64_t)(threads & 2047) << 20 | (uint64_t)(smem & 0xFFFFF));
    int n = 0;
    if (dev_cache_get(row, key, &n))
        return n;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(cluster * 64);
    cfg.blockDim = dim3((unsigned)threads);
    cfg.dynamicSmemBytes = smem;
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = cluster;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    if (cudaOccupancyMaxActiveClusters(&n, kernel, &cfg) != cudaSuccess) {
        cudaGetLastError();
        n = 0;
    }
    return dev_cache_put(row, key, n < 0 ? 0 : n > 0xFFFF ? 0xFFFF : n);
}

/* Whether M items of plan P run with a head's rows in one block. The
 * one-sequence plan splits them over two blocks (B = 2, clusters of 2R:
 * the 9B's 64 blocks of 512 threads, one an SM), and a batched step's
 * clusters run in waves of as many as the GPU holds: two 9B items took
 * twice one item's time (14.2 against 7.1 us, H100). A head in one block
 * (clusters of R, half the blocks, each thread twice the state) with
 * delta_row summing as the two-block lanes do (SPLIT = 2: the same bits)
 * runs in fewer waves; taken when it needs fewer than B = 2 does
 * (MEMRA_GDN_BATCH_WHOLE=0: never, 2: whenever it fits). */
static bool gdn_batch_whole_heads(const gdn_plan &p, const memra_delta_args_t &d, int m)
{
    static long mode = -1;
    if (mode < 0)
        mode = memra__cuda_env_long("MEMRA_GDN_BATCH_WHOLE", 1);
    const int64_t dd = d.d, heads = d.n_v / p.R; /* clusters an item, either plan */
    if (mode == 0 || !p.conv_in || p.B != 2 || !gdn_slots_fit(dd, p.R, 1, p.threads))
        return false;
    if (mode == 2)
        return true;
    const size_t smem = (size_t)dd * 4 * sizeof(float);
    const int two = gdn_active_clusters(gdn_batch_kernel<DELTA_EPT / 2, true>, 0, (unsigned)(2 * p.R), p.threads, smem);
    const int one =
        gdn_active_clusters(gdn_batch_kernel<DELTA_EPT, true, 1, 2>, 1, (unsigned)p.R, p.threads, smem);
    if (two < 1 || one < 1)
        return false;
    const int64_t n = heads * m;
    return (n + one - 1) / one < (n + two - 1) / two;
}

/* The one-token steps of one shape that the fused kernel takes whole (the
 * conv inside, or none), in one launch of gdn_kernel's blocks per item;
 * the rest is left to the one-item path. */
memra_status_t memra__cuda_gdn_batch(memra__backend_t *be, const memra_gdn_args_t *a, int32_t n, bool *done)
{
    gdn_batch b = {}; /* every byte defined: the whole struct is the kernel parameter */
    int idx[MEMRA_MAX_BATCH], m = 0;
    gdn_plan p0 = {};
    for (int32_t i = 0; i < n && i < MEMRA_MAX_BATCH; i++) {
        const gdn_plan p = gdn_plan_of(&a[i]);
        if (!p.fused || a[i].delta.n_tokens != 1 || (a[i].conv.w && !p.conv_in))
            continue;
        if (m == 0) {
            p0 = p;
            b.base = a[i];
        } else if (p.conv_in != p0.conv_in || p.B != p0.B || p.P != p0.P || p.threads != p0.threads || p.R != p0.R ||
                   !gdn_same_shape(&b.base, &a[i])) {
            continue;
        }
        b.it[m] = {a[i].conv.x, a[i].conv.state, a[i].delta.q, a[i].delta.k, a[i].delta.v, a[i].delta.g,
                   a[i].delta.beta, a[i].delta.state, a[i].z, a[i].y};
        idx[m++] = i;
    }
    if (m < 2)
        return MEMRA_OK; /* one step: the one-item path launches the same kernel */
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    const memra_delta_args_t &d = b.base.delta;
    const size_t smem = (size_t)d.d * 4 * sizeof(float);
    const int trig = gdn_trigger();
    /* steps of at least MEMRA_GDN_BATCH_MINB2 items (default 16; 0: none)
     * on the instance that two blocks an SM fit (64 registers, ~80 bytes
     * of spills): the same operations, allocated to fewer registers. The
     * 9B's steps of 16 and 32 rows +1.3 % and +3.7 %, of 4 and 8 rows -1 %
     * and level (H100, 2026-12-06; the 35B-A3B's 16 rows +0.2 %) */
    static long minb2 = -1;
    if (minb2 < 0)
        minb2 = memra__cuda_env_long("MEMRA_GDN_BATCH_MINB2", 16);
    if (gdn_batch_whole_heads(p0, d, m))
        memra__launch_cluster(gdn_batch_kernel<DELTA_EPT, true, 1, 2>, dim3((unsigned)d.n_v, (unsigned)m), p0.threads,
                              smem, c->stream, (unsigned)p0.R, b, p0.P, (int)p0.R, 1, trig);
    else if (p0.conv_in && p0.B == 2)
        memra__launch_cluster(minb2 > 0 && m >= minb2 ? gdn_batch_kernel<DELTA_EPT / 2, true, 2>
                                                      : gdn_batch_kernel<DELTA_EPT / 2, true>,
                              dim3((unsigned)(d.n_v * 2), (unsigned)m), p0.threads, smem, c->stream,
                              (unsigned)(p0.R * 2), b, 2 * p0.P, (int)p0.R, 2, trig);
    else if (p0.conv_in)
        memra__launch_cluster(gdn_batch_kernel<DELTA_EPT, true>, dim3((unsigned)d.n_v, (unsigned)m), p0.threads, smem,
                              c->stream, (unsigned)p0.R, b, p0.P, (int)p0.R, 1, trig);
    else
        memra__launch(gdn_batch_kernel<DELTA_EPT, false>, dim3((unsigned)d.n_v, (unsigned)m), p0.threads, smem,
                      c->stream, b, p0.P, 1, 1, trig);
    c->after_step = true;
    MEMRA_CUDA_LAUNCHED(be);
    for (int j = 0; j < m; j++)
        done[idx[j]] = true;
    return MEMRA_OK;
}

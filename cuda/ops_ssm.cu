/* qwen35's Gated DeltaNet recurrences: causal depthwise conv with SiLU and
 * the gated delta rule. Like the CPU reference (lib/cpu/ops_ssm.c) nothing
 * is carried in higher precision across a token: the conv state is a copy
 * of inputs, the delta state is rounded to float after every token, so n
 * one-token calls leave exactly what one n-token call leaves. Inside a
 * token the sums are float64, as in the reference. */
#include <math.h>

#include "cuda_common.cuh"

/* ---- conv ------------------------------------------------------------------- */

/* Thread per channel; walks the tokens in order. */
__global__ void conv_kernel(const memra_conv_args_t a)
{
    MEMRA_PDL_ENTER(); /* cuda_common.cuh */
    const int64_t K = a.kernel, k1 = K - 1;
    for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < a.channels;
         c += (int64_t)gridDim.x * blockDim.x) {
        const float *w = a.w + c * K;
        float *st = a.state + c * k1;
        /* element idx of [state (K-1) | x_0 .. x_{n-1}] */
#define SEQ(idx) ((idx) < k1 ? st[(idx)] : a.x[((idx) - k1) * a.x_stride + c])
        for (int64_t t = 0; t < a.n_tokens; t++) {
            double sum = 0.0;
            for (int64_t k = 0; k < K; k++)
                sum += (double)SEQ(t + k) * (double)w[k];
            a.out[t * a.channels + c] = (float)(sum / (1.0 + exp(-sum)));
        }
        /* ascending j reads index n+j >= j: the shift never reads a new value */
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
    memra__launch(conv_kernel, memra__cuda_blocks(a->channels, 128, 65535), 128, 0, c->stream, *a);
    MEMRA_CUDA_LAUNCHED(be);
    return MEMRA_OK;
}

/* ---- gated delta rule ---------------------------------------------------------- */

/* Rows m of a head's state (column m of S) never mix: u_m, δ_m and o_m
 * read row m alone. So a block takes RB rows of value head blockIdx.x;
 * thread (m, part) holds elements i = e*P + part of row m in registers for
 * the whole call; the P threads of a row sit in adjacent lanes and reduce
 * with shuffles. q and k of the token are staged in shared memory. */
#define DELTA_EPT 32
#define DELTA_THREADS 256
#define DELTA_ROWS 16 /* rows of the state per block (<= DELTA_THREADS / P) */

template <int EPT> __global__ void __launch_bounds__(DELTA_THREADS) delta_kernel(const memra_delta_args_t a, int P, int rb)
{
    MEMRA_PDL_ENTER(); /* cuda_common.cuh */
    extern __shared__ float dsm[];
    const int d = (int)a.d;
    float *q_s = dsm, *k_s = dsm + d;
    const int64_t j = blockIdx.x, kh = j % a.n_k;
    const int tid = threadIdx.x, m = blockIdx.y * rb + tid / P, part = tid % P;
    const bool on = m < d && tid / P < rb;
    float *S = a.state + j * (int64_t)d * d;
    float s[EPT];
#pragma unroll
    for (int e = 0; e < EPT; e++) {
        const int i = e * P + part;
        s[e] = on && i < d ? S[(int64_t)m * d + i] : 0.0f;
    }
    for (int64_t t = 0; t < a.n_tokens; t++) {
        __syncthreads();
        for (int i = tid; i < d; i += blockDim.x) {
            q_s[i] = a.q[t * a.qk_stride + kh * d + i];
            k_s[i] = a.k[t * a.qk_stride + kh * d + i];
        }
        __syncthreads();
        const double decay = exp((double)a.g[t * a.gb_stride + j]);
        const double beta = (double)a.beta[t * a.gb_stride + j];
        double u = 0.0;
#pragma unroll
        for (int e = 0; e < EPT; e++) {
            const int i = e * P + part;
            if (i < d)
                u += (double)s[e] * (double)k_s[i];
        }
        for (int o = 1; o < P; o <<= 1)
            u += __shfl_xor_sync(0xffffffffu, u, o);
        const double vm = on ? (double)a.v[t * a.v_stride + j * d + m] : 0.0;
        const double delta = beta * (vm - decay * u);
        double o_acc = 0.0;
#pragma unroll
        for (int e = 0; e < EPT; e++) {
            const int i = e * P + part;
            if (i < d) {
                s[e] = (float)__dadd_rn(__dmul_rn(decay, (double)s[e]), __dmul_rn((double)k_s[i], delta));
                o_acc += (double)s[e] * (double)q_s[i];
            }
        }
        for (int o = 1; o < P; o <<= 1)
            o_acc += __shfl_xor_sync(0xffffffffu, o_acc, o);
        if (on && part == 0)
            a.out[t * a.n_v * d + j * d + m] = (float)((double)a.scale * o_acc);
    }
    if (on) {
#pragma unroll
        for (int e = 0; e < EPT; e++) {
            const int i = e * P + part;
            if (i < d)
                S[(int64_t)m * d + i] = s[e];
        }
    }
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
    const int d = (int)a->d;
    int P = 1;
    while (P * DELTA_EPT < d)
        P <<= 1;
    /* rows per block: a head's rows over several blocks, so that a one-token
     * step (a latency-bound 2 MB state pass per layer at 9B) has blocks on
     * most SMs */
    const int rb = d < DELTA_ROWS ? d : DELTA_ROWS;
    const int threads = (rb * P + 31) / 32 * 32;
    const size_t smem = 2 * (size_t)d * sizeof(float);
    const dim3 grid((unsigned)a->n_v, (unsigned)((d + rb - 1) / rb));
    memra__launch(delta_kernel<DELTA_EPT>, grid, threads, smem, c->stream, *a, P, rb);
    MEMRA_CUDA_LAUNCHED(be);
    return MEMRA_OK;
}

/* The recurrent pieces of qwen35's Gated DeltaNet (model-spec §5.4): the
 * causal depthwise conv with SiLU and the gated delta rule.
 *
 * Both carry state across calls, and a batch of n tokens must leave exactly
 * what n one-token calls leave (chunked prefill and speculative decoding
 * rely on it). So nothing is kept in higher precision across a token
 * boundary: the conv state is a copy of inputs, the delta state is rounded
 * to float after every token, as one-token calls would store it. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "cpu_backend.h"

/* ---- conv ---------------------------------------------------------------- */

/* Element idx of the per-channel sequence [state (K-1) | x_0 .. x_{n-1}]. */
static float conv_seq(const memra_conv_args_t *a, int64_t c, int64_t idx)
{
    const int64_t k1 = a->kernel - 1;
    return idx < k1 ? a->state[c * k1 + idx] : a->x[(idx - k1) * a->x_stride + c];
}

static void conv_part(void *ctx, int64_t begin, int64_t end)
{
    const memra_conv_args_t *a = ctx;
    const int64_t K = a->kernel, k1 = K - 1;
    for (int64_t c = begin; c < end; c++) {
        const float *w = a->w + c * K;
        /* output t reads sequence positions t .. t+K-1; tap K-1 is x_t */
        for (int64_t t = 0; t < a->n_tokens; t++) {
            float sum = 0.0f; /* float32 as HF, with the GPU's bits (lib/fmath.h) */
            for (int64_t k = 0; k < K; k++)
                sum = fmaf(conv_seq(a, c, t + k), w[k], sum);
            a->out[t * a->channels + c] = memra_siluf(sum);
        }
        /* new state = last K-1 entries of the sequence; ascending j reads
         * index n+j >= j, so the in-place shift never reads a new value */
        for (int64_t j = 0; j < k1; j++)
            a->state[c * k1 + j] = conv_seq(a, c, a->n_tokens + j);
    }
}

memra_status_t memra__cpu_conv(memra__backend_t *be, const memra_conv_args_t *a)
{
    bool none;
    memra_status_t st = memra__check_conv(be, a, &none);
    if (st || none)
        return st;
    memra__pool_for(memra__cpu_pool(be), a->channels, 16, conv_part, (void *)a);
    return MEMRA_OK;
}

/* ---- gated delta rule ---------------------------------------------------- */

typedef struct delta_job {
    const memra_delta_args_t *a;
    atomic_int nomem;
} delta_job;

/* a·b over runs of four elements: each run a float32 FMA chain, the runs
 * added in float64 (as the GPU's lanes hold them: cuda/ops_ssm.cu
 * delta_row) */
static double delta_dot(const float *a, const float *b, int64_t d)
{
    double sum = 0.0;
    for (int64_t c = 0; c < d; c += 4) {
        float r = 0.0f;
        for (int64_t i = c; i < c + 4 && i < d; i++)
            r = fmaf(a[i], b[i], r);
        sum += (double)r;
    }
    return sum;
}

static void delta_part(void *ctx, int64_t begin, int64_t end)
{
    delta_job *jb = ctx;
    const memra_delta_args_t *a = jb->a;
    const int64_t d = a->d;
    double *delta = malloc((size_t)d * sizeof *delta);
    if (!delta) {
        atomic_store(&jb->nomem, 1);
        return;
    }
    for (int64_t j = begin; j < end; j++) {
        const int64_t kh = j % a->n_k;
        /* S[i][m] (i key, m value) lives at m*d + i: row m of `s` is column m of S */
        float *s = a->state + j * d * d;
        for (int64_t t = 0; t < a->n_tokens; t++) {
            const float *q = a->q + t * a->qk_stride + kh * d;
            const float *k = a->k + t * a->qk_stride + kh * d;
            const float *v = a->v + t * a->v_stride + j * d;
            const double decay = exp((double)a->g[t * a->gb_stride + j]);
            const double beta = a->beta[t * a->gb_stride + j];
            /* S = exp(g)·S;  u = Sᵀk;  δ = β(v − u) */
            for (int64_t m = 0; m < d; m++)
                delta[m] = beta * ((double)v[m] - decay * delta_dot(s + m * d, k, d));
            /* S = fma(k, δ, exp(g)·S) in float32, as HF keeps the state (and
             * the GPU: cuda/ops_ssm.cu delta_row);  o = Sᵀ(q·scale) */
            float *o = a->out + t * a->n_v * d + j * d;
            const float decay_f = (float)decay;
            for (int64_t m = 0; m < d; m++) {
                float *row = s + m * d;
                const float delta_f = (float)delta[m];
                for (int64_t i = 0; i < d; i++)
                    row[i] = fmaf(k[i], delta_f, decay_f * row[i]);
                o[m] = (float)((double)a->scale * delta_dot(row, q, d));
            }
        }
    }
    free(delta);
}

memra_status_t memra__cpu_delta(memra__backend_t *be, const memra_delta_args_t *a)
{
    bool none;
    memra_status_t st = memra__check_delta(be, a, &none);
    if (st || none)
        return st;
    delta_job jb = {.a = a};
    atomic_init(&jb.nomem, 0);
    memra__pool_for(memra__cpu_pool(be), a->n_v, 1, delta_part, &jb);
    if (atomic_load(&jb.nomem))
        return memra__fail(be->err, MEMRA_E_NOMEM, "delta: out of memory");
    return MEMRA_OK;
}

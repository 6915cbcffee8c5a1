/* Row-local ops: norm, elementwise and rope.
 *
 * norm's sum of squares is float32 in the GPU's fixed order (row_sumsq);
 * its scale and elementwise compute in float64 from the float inputs and
 * round once to float (for a single + or * that equals the float op exactly),
 * except SILU and SWIGLU: float32 with lib/fmath.h, whose bits the GPU shares.
 * rope instead follows ggml's float32 kernel step by step (model-spec §3.1),
 * because its incrementally built angle is a documented bit-exactness detail
 * of llama.cpp that the fixtures carry. */
#include <math.h>
#include <string.h>

#include "cpu_backend.h"

/* ---- norm ---------------------------------------------------------------- */

typedef struct norm_job {
    memra_norm_kind_t kind;
    const float *x, *w;
    float *y;
    int64_t xs, ys, dim;
    float eps;
} norm_job;

/* A row's sum of squares in float32 (HF's precision), in the GPU's fixed
 * order (cuda/math.cuh row_sumsq_part) so that both backends give the same
 * bits: "thread" t of SUMSQ_THREADS adds the squares of the 4-element
 * chunks t, t + SUMSQ_THREADS, ... in element order, each as one fmaf;
 * each "warp" of 32 partials is summed by an xor butterfly (steps 16, 8,
 * 4, 2, 1; lane l adds lane l ^ step, so every lane ends with the same
 * value and lane 0 is taken); the warps' sums are added in order. */
#define SUMSQ_THREADS 256 /* MEMRA_NORM_BLOCK */

static float row_sumsq(const float *x, int64_t dim)
{
    float total = 0.0f;
    for (int w = 0; w < SUMSQ_THREADS / 32; w++) {
        float v[32];
        for (int l = 0; l < 32; l++) {
            float p = 0.0f;
            for (int64_t c = w * 32 + l; 4 * c < dim; c += SUMSQ_THREADS)
                for (int64_t i = 4 * c; i < 4 * c + 4 && i < dim; i++)
                    p = fmaf(x[i], x[i], p);
            v[l] = p;
        }
        for (int o = 16; o > 0; o >>= 1) {
            float n[32];
            for (int l = 0; l < 32; l++)
                n[l] = v[l] + v[l ^ o];
            memcpy(v, n, sizeof v);
        }
        total += v[0];
    }
    return total;
}

static void norm_part(void *ctx, int64_t begin, int64_t end)
{
    const norm_job *j = ctx;
    for (int64_t r = begin; r < end; r++) {
        const float *x = j->x + r * j->xs;
        float *y = j->y + r * j->ys;
        const double sum = (double)row_sumsq(x, j->dim);
        double scale;
        if (j->kind == MEMRA_NORM_RMS)
            scale = 1.0 / sqrt(sum / (double)j->dim + (double)j->eps);
        else
            scale = 1.0 / fmax(sqrt(sum), (double)j->eps);
        /* x · s, then · w, each rounded to float32, as HF does (and the GPU:
         * cuda/math.cuh row_scaled); y may be x: every x[i] was read above */
        const float s = (float)scale;
        for (int64_t i = 0; i < j->dim; i++) {
            const float t = x[i] * s;
            y[i] = j->w ? t * j->w[i] : t;
        }
    }
}

memra_status_t memra__cpu_norm(memra__backend_t *be, memra_norm_kind_t kind, const float *x, int64_t xs,
                               const float *w, float *y, int64_t ys, int64_t n_rows, int64_t dim, float eps)
{
    bool none;
    memra_status_t st = memra__check_norm(be, kind, x, xs, y, ys, n_rows, dim, eps, &none);
    if (st || none)
        return st;
    norm_job j = {.kind = kind, .x = x, .w = w, .y = y, .xs = xs, .ys = ys, .dim = dim, .eps = eps};
    memra__pool_for(memra__cpu_pool(be), n_rows, 1, norm_part, &j);
    return MEMRA_OK;
}

/* ---- elementwise --------------------------------------------------------- */

/* Numerically stable softplus: log(1 + e^x) without overflow or loss. */
static double softplus(double x)
{
    return fmax(x, 0.0) + log1p(exp(-fabs(x)));
}

static float ew_one(const memra_ew_args_t *a, int64_t r, int64_t c)
{
    const double s = a->s;
    const double x = a->op == MEMRA_EW_FILL ? 0.0 : (double)a->a[r * a->as + c];
    const double b = memra__ew_reads_b(a->op) ? (double)a->b[r * a->bs + c] : 0.0;
    switch (a->op) {
    case MEMRA_EW_COPY: return (float)x;
    case MEMRA_EW_ADD: return (float)(x + b);
    case MEMRA_EW_MUL: return (float)(x * b);
    case MEMRA_EW_SCALE: return (float)(x * s);
    case MEMRA_EW_ADD_SCALED: return (float)(x + b * s);
    case MEMRA_EW_SILU: return memra_siluf((float)x);
    case MEMRA_EW_GELU: return (float)memra__cpu_gelu(x);
    case MEMRA_EW_SIGMOID: return (float)memra__cpu_sigmoid(x);
    case MEMRA_EW_SWIGLU: return memra_siluf((float)x) * (float)b;
    case MEMRA_EW_GEGLU: return (float)(memra__cpu_gelu(x) * b);
    case MEMRA_EW_MUL_SIGMOID: return (float)(x * memra__cpu_sigmoid(b));
    case MEMRA_EW_SOFTCAP: return (float)(s * tanh(x / s));
    case MEMRA_EW_SOFTPLUS_MUL: return (float)(softplus(x + b) * (double)a->aux[c]);
    case MEMRA_EW_FILL: return a->s;
    }
    return NAN; /* unreachable: the op was validated */
}

/* Split over all elements, not rows: decode calls are one long row. */
static void ew_part(void *ctx, int64_t begin, int64_t end)
{
    const memra_ew_args_t *a = ctx;
    for (int64_t i = begin; i < end; i++) {
        const int64_t r = i / a->cols, c = i % a->cols;
        a->y[r * a->ys + c] = ew_one(a, r, c);
    }
}

memra_status_t memra__cpu_elementwise(memra__backend_t *be, const memra_ew_args_t *a)
{
    bool none;
    memra_status_t st = memra__check_ew(be, a, &none);
    if (st || none)
        return st;
    memra__pool_for(memra__cpu_pool(be), a->rows * a->cols, 4096, ew_part, (void *)a);
    return MEMRA_OK;
}

/* ---- rope ---------------------------------------------------------------- */

static void rope_part(void *ctx, int64_t begin, int64_t end)
{
    const memra_rope_args_t *a = ctx;
    const int64_t half = a->n_rot / 2;
    const float theta_scale = powf(a->base, -2.0f / (float)a->n_rot);
    /* NORM pairs (2i, 2i+1), NEOX pairs (i, i + n_rot/2) */
    const int64_t step = a->mode == MEMRA_ROPE_NEOX ? 1 : 2;
    const int64_t other = a->mode == MEMRA_ROPE_NEOX ? half : 1;
    for (int64_t t = begin; t < end; t++) {
        float *xt = a->x + t * a->token_stride;
        float theta = (float)a->pos[t];
        for (int64_t i = 0; i < half; i++) {
            const float ff = a->freq_factors ? a->freq_factors[i] : 1.0f;
            const float cos_t = cosf(theta / ff), sin_t = sinf(theta / ff);
            for (int64_t h = 0; h < a->n_heads; h++) {
                float *p = xt + h * a->head_stride + i * step;
                const float x0 = p[0], x1 = p[other];
                p[0] = x0 * cos_t - x1 * sin_t;
                p[other] = x0 * sin_t + x1 * cos_t;
            }
            theta *= theta_scale;
        }
    }
}

memra_status_t memra__cpu_rope(memra__backend_t *be, const memra_rope_args_t *a)
{
    bool none;
    memra_status_t st = memra__check_rope(be, a, &none);
    if (st || none)
        return st;
    memra__pool_for(memra__cpu_pool(be), a->n_tokens, 1, rope_part, (void *)a);
    return MEMRA_OK;
}

/* Row-local ops: norm, elementwise and rope.
 *
 * Like the CPU reference (lib/cpu/ops_norm.c), norm and the transcendental
 * elementwise ops compute in float64 and round once; + and * in float equal
 * that exactly. rope follows the reference's float32 angle recurrence step
 * by step, with the same host-computed powf, so angles are bit-identical. */
#include <math.h>

#include "cuda_common.cuh"
#include "math.cuh"

/* ---- norm ------------------------------------------------------------------ */

#define NORM_THREADS MEMRA_NORM_BLOCK

__global__ void __launch_bounds__(NORM_THREADS)
    norm_kernel(int kind, const float *x, int64_t xs, const float *w, float *y, int64_t ys, int64_t n_rows,
                int64_t dim, float eps)
{
    MEMRA_PDL_ENTER(); /* cuda_common.cuh */
    __shared__ double red[NORM_THREADS / 32 + 1];
    for (int64_t r = blockIdx.x; r < n_rows; r += gridDim.x) {
        const float *xr = x + r * xs;
        float *yr = y + r * ys;
        const double scale = row_scale(kind == MEMRA_NORM_RMS, xr, dim, eps, red);
        /* in place is safe: each thread rewrites only the elements it read */
        for (int64_t i = threadIdx.x; i < dim; i += NORM_THREADS)
            yr[i] = row_scaled(xr[i], scale, w, i);
        __syncthreads();
    }
}

memra_status_t memra__cuda_norm(memra__backend_t *be, memra_norm_kind_t kind, const float *x, int64_t xs,
                                const float *w, float *y, int64_t ys, int64_t n_rows, int64_t dim, float eps)
{
    bool none;
    memra_status_t st = memra__check_norm(be, kind, x, xs, y, ys, n_rows, dim, eps, &none);
    if (st || none)
        return st;
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    memra__launch(norm_kernel, memra__cuda_blocks(n_rows, 1, 65535), NORM_THREADS, 0, c->stream, (int)kind, x, xs, w, y, ys, n_rows, dim, eps);
    MEMRA_CUDA_LAUNCHED(be);
    return MEMRA_OK;
}

/* ---- elementwise ------------------------------------------------------------- */

static __device__ __forceinline__ float ew_one(int op, float a, float b, float aux, float s)
{
    switch (op) {
    case MEMRA_EW_COPY: return a;
    case MEMRA_EW_ADD: return a + b;
    case MEMRA_EW_MUL: return a * b;
    case MEMRA_EW_SCALE: return a * s;
    case MEMRA_EW_ADD_SCALED: return (float)((double)a + (double)b * (double)s);
    case MEMRA_EW_SILU: return (float)d_silu(a);
    case MEMRA_EW_GELU: return (float)d_gelu(a);
    case MEMRA_EW_SIGMOID: return (float)d_sigmoid(a);
    case MEMRA_EW_SWIGLU: return (float)(d_silu(a) * (double)b);
    case MEMRA_EW_GEGLU: return (float)(d_gelu(a) * (double)b);
    case MEMRA_EW_MUL_SIGMOID: return (float)((double)a * d_sigmoid(b));
    case MEMRA_EW_SOFTCAP: return (float)((double)s * tanh((double)a / (double)s));
    case MEMRA_EW_SOFTPLUS_MUL: return (float)(d_softplus((double)a + (double)b) * (double)aux);
    case MEMRA_EW_FILL: return s;
    }
    return __int_as_float(0x7fc00000);
}

/* memra__ew_reads_b (lib/op_check.c) for the device */
static __device__ __forceinline__ bool ew_reads_b(int op)
{
    switch (op) {
    case MEMRA_EW_ADD:
    case MEMRA_EW_MUL:
    case MEMRA_EW_ADD_SCALED:
    case MEMRA_EW_SWIGLU:
    case MEMRA_EW_GEGLU:
    case MEMRA_EW_MUL_SIGMOID:
    case MEMRA_EW_SOFTPLUS_MUL:
        return true;
    default:
        return false;
    }
}

/* blockIdx.y (with a grid-stride loop) walks rows, x-threads columns, so
 * no 64-bit division per element. */
__global__ void ew_kernel(const memra_ew_args_t a)
{
    MEMRA_PDL_ENTER(); /* cuda_common.cuh */
    const bool rb = ew_reads_b(a.op), ra = a.op != MEMRA_EW_FILL;
    for (int64_t r = blockIdx.y; r < a.rows; r += gridDim.y) {
        const float *ar = a.a + r * a.as;
        const float *br = rb ? a.b + r * a.bs : NULL;
        float *yr = a.y + r * a.ys;
        for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < a.cols;
             c += (int64_t)gridDim.x * blockDim.x) {
            const float av = ra ? ar[c] : 0.0f;
            const float bv = rb ? br[c] : 0.0f;
            const float xv = a.op == MEMRA_EW_SOFTPLUS_MUL ? a.aux[c] : 0.0f;
            yr[c] = ew_one(a.op, av, bv, xv, a.s);
        }
    }
}

memra_status_t memra__cuda_elementwise(memra__backend_t *be, const memra_ew_args_t *a)
{
    bool none;
    memra_status_t st = memra__check_ew(be, a, &none);
    if (st || none)
        return st;
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    const unsigned bx = memra__cuda_blocks(a->cols, 256, 4096);
    unsigned by = memra__cuda_blocks(a->rows, 1, 65535);
    /* keep the grid bounded for many short rows */
    while ((uint64_t)bx * by > (1u << 20) && by > 1)
        by = (by + 1) / 2;
    memra__launch(ew_kernel, dim3(bx, by), 256, 0, c->stream, *a);
    MEMRA_CUDA_LAUNCHED(be);
    return MEMRA_OK;
}

/* ---- rope ------------------------------------------------------------------- */

/* Block per token; thread i rebuilds the angle of pair i with the same i
 * float multiplications the reference makes. */
__global__ void rope_kernel(const memra_rope_args_t a, float theta_scale)
{
    MEMRA_PDL_ENTER(); /* cuda_common.cuh */
    const int64_t half = a.n_rot / 2;
    const int64_t step = a.mode == MEMRA_ROPE_NEOX ? 1 : 2;
    const int64_t other = a.mode == MEMRA_ROPE_NEOX ? half : 1;
    for (int64_t t = blockIdx.x; t < a.n_tokens; t += gridDim.x) {
        float *xt = a.x + t * a.token_stride;
        for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
            float theta = (float)a.pos[t];
            for (int64_t k = 0; k < i; k++)
                theta = __fmul_rn(theta, theta_scale);
            const float ff = a.freq_factors ? a.freq_factors[i] : 1.0f;
            const float ang = __fdiv_rn(theta, ff);
            /* float64 then one rounding: the correctly rounded cosf/sinf */
            const float cos_t = (float)cos((double)ang), sin_t = (float)sin((double)ang);
            for (int64_t h = 0; h < a.n_heads; h++) {
                float *p = xt + h * a.head_stride + i * step;
                const float x0 = p[0], x1 = p[other];
                p[0] = __fsub_rn(__fmul_rn(x0, cos_t), __fmul_rn(x1, sin_t));
                p[other] = __fadd_rn(__fmul_rn(x0, sin_t), __fmul_rn(x1, cos_t));
            }
        }
    }
}

memra_status_t memra__cuda_rope(memra__backend_t *be, const memra_rope_args_t *a)
{
    bool none;
    memra_status_t st = memra__check_rope(be, a, &none);
    if (st || none)
        return st;
    /* host powf: the same libm result the CPU reference starts from */
    const float theta_scale = powf(a->base, -2.0f / (float)a->n_rot);
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    const int threads = a->n_rot / 2 >= 128 ? 128 : (int)((a->n_rot / 2 + 31) / 32 * 32);
    memra__launch(rope_kernel, memra__cuda_blocks(a->n_tokens, 1, 65535), threads, 0, c->stream, *a, theta_scale);
    MEMRA_CUDA_LAUNCHED(be);
    return MEMRA_OK;
}

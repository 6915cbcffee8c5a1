/* Helpers shared by the ops that must round like the CPU reference
 * (lib/cpu/ops_norm.c): the activation functions (float64, except SiLU:
 * float32 from lib/fmath.h) and the RMS/L2 row scale.
 * Fused kernels (the matvec's norm prologue and GLU epilogue) call the very
 * same functions as the stand-alone norm and elementwise kernels, so a fused
 * op gives the bits of its unfused sequence. */
#ifndef MEMRA_CUDA_MATH_CUH
#define MEMRA_CUDA_MATH_CUH

#include <math.h>

#include "fmath.h"

static __device__ __forceinline__ double d_sigmoid(double x)
{
    return 1.0 / (1.0 + exp(-x));
}

static __device__ __forceinline__ double d_gelu(double x)
{
    return 0.5 * x * (1.0 + tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x)));
}

static __device__ __forceinline__ double d_softplus(double x)
{
    return fmax(x, 0.0) + log1p(exp(-fabs(x)));
}

/* s * tanh(a / s), rounded once: the elementwise SOFTCAP and the matvec's
 * grouped stores of a mapped head (gemma4's final logit softcapping). */
static __device__ __forceinline__ float d_softcap(float a, float s)
{
    return (float)((double)s * tanh((double)a / (double)s));
}

/* act(g) * u of a GLU (SWIGLU / GEGLU), rounded once. */
static __device__ __forceinline__ float d_glu(bool gelu, float g, float u)
{
    return gelu ? (float)(d_gelu((double)g) * (double)u) : memra_siluf(g) * u;
}

/* act(g) * u of the MoE experts (moe_act_kernel and the fused gate/up
 * launch, cuda/mmv_moe.cuh): both activations in float64, rounded once.
 * Every rounding is explicit so that the two translation units that call
 * it cannot contract differently (x + 0.044715 x^3 is an FMA candidate);
 * the order is the C reference's left to right (lib/cpu/cpu_backend.h). */
static __device__ __forceinline__ float d_moe_glu(bool gelu, float g, float u)
{
    const double x = (double)g;
    double a;
    if (gelu) {
        const double x3 = __dmul_rn(__dmul_rn(__dmul_rn(0.044715, x), x), x);
        const double t = tanh(__dmul_rn(0.79788456080286535588, __dadd_rn(x, x3)));
        a = __dmul_rn(__dmul_rn(0.5, x), __dadd_rn(1.0, t));
    } else {
        a = __ddiv_rn(x, __dadd_rn(1.0, exp(-x)));
    }
    return (float)__dmul_rn(a, (double)u);
}

#define MEMRA_NORM_BLOCK 256 /* threads of every block that calls row_scale */

/* The xor-butterfly sum of a warp's values (every lane gets the same
 * bits: each step adds two equal partial sums in either order). */
static __device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* One term of a sum of squares: P + X·X, one float32 rounding (the CPU
 * reference's fmaf in lib/cpu/ops_norm.c). */
static __device__ __forceinline__ float row_sq_add(float x, float p)
{
    return __fmaf_rn(x, x, p);
}

/* The scale of row_scale from the sum of squares T of a DIM-wide row. */
static __device__ __forceinline__ double row_scale_of(bool rms, double t, int64_t dim, float eps)
{
    return rms ? 1.0 / sqrt(t / (double)dim + (double)eps) : 1.0 / fmax(sqrt(t), (double)eps);
}

/* row_scale from each thread's partial sum SUM (row_sumsq_part's order):
 * the block's fixed reduction. Every thread sums the warps' sums in order
 * itself (same bits everywhere: one barrier instead of a broadcast). */
static __device__ __forceinline__ double row_scale_reduce(bool rms, float sum, int64_t dim, float eps, float *red)
{
    sum = warp_sum(sum);
    if ((threadIdx.x & 31) == 0)
        red[threadIdx.x >> 5] = sum;
    __syncthreads();
    float t = 0.0f;
#pragma unroll
    for (int i = 0; i < MEMRA_NORM_BLOCK / 32; i++)
        t += red[i];
    __syncthreads(); /* red is reused by the next row */
    return row_scale_of(rms, (double)t, dim, eps);
}

/* The fixed order of a row's sum of squares, on the GPU (row_scale and
 * every fused copy of it: the matvec's x staging, the Gated DeltaNet
 * step, q/k norm + rope) and in the CPU reference (lib/cpu/ops_norm.c):
 * thread t of MEMRA_NORM_BLOCK takes the 4-element chunks t, t + MEMRA_NORM_BLOCK,
 * ... and adds each chunk's squares in element order (row_sq_add); then
 * the warp's xor-butterfly, then the warps' sums in order, all in float32
 * (HF's precision; float64 cost every normalized matvec launch ~0.2 us in
 * the kernel check: float-to-double conversions at a quarter of the
 * float64 rate, in each of its ~400 blocks). Chunks of four because the matvec stages x 16 bytes at
 * a time and sums the squares of what it holds in registers. */
static __device__ __forceinline__ float row_sumsq_part(const float *xr, int64_t dim)
{
    float sum = 0.0f;
    /* unrolled so that a thread's loads are in flight together (x sits in
     * L2 after the kernel that wrote it): the sum order is unchanged */
#pragma unroll 4
    for (int64_t c = threadIdx.x; 4 * c < dim; c += MEMRA_NORM_BLOCK)
#pragma unroll
        for (int q = 0; q < 4; q++)
            if (4 * c + q < dim)
                sum = row_sq_add(xr[4 * c + q], sum);
    return sum;
}

/* 1/rms (RMS: 1/sqrt(mean(x²)+eps)) or 1/max(||x||, eps) (L2) of one row,
 * for a block of MEMRA_NORM_BLOCK threads; every thread gets the result.
 * RED: MEMRA_NORM_BLOCK/32 floats of shared memory. */
static __device__ __forceinline__ double row_scale(bool rms, const float *xr, int64_t dim, float eps, float *red)
{
    return row_scale_reduce(rms, row_sumsq_part(xr, dim), dim, eps, red);
}

/* The sum of squares of a row of DIM <= 4 MEMRA_NORM_BLOCK floats in
 * row_scale's order (4-element chunk c on thread c of MEMRA_NORM_BLOCK, a
 * shuffle tree per warp, the warps' sums in order), computed by one warp
 * alone: its "virtual warp" v takes chunks [32 v, 32 v + 32). The virtual
 * warps past DIM would add +0.0 to a non-negative sum, so they are
 * skipped. Every lane returns the same bits (each butterfly step adds the
 * same two values on both lanes). */
static __device__ __forceinline__ float row_sumsq_warp(const float *row, int64_t dim)
{
    const int lane = threadIdx.x & 31;
    float t = 0.0f;
    for (int64_t v = 0; v < MEMRA_NORM_BLOCK / 32 && v * 128 < dim; v++) {
        const int64_t c = v * 32 + lane;
        float p = 0.0f;
#pragma unroll
        for (int q = 0; q < 4; q++)
            if (4 * c + q < dim)
                p = row_sq_add(row[4 * c + q], p);
        t += warp_sum(p);
    }
    return t;
}

/* x · s [· w] in float32, each product rounded (s: row_scale rounded to
 * float32): HF's order (x · rsqrt(...), then · weight). Its float64 form
 * (one rounding of x · s · w) took three float64 conversions per element,
 * a quarter-rate slot each, in every normalized matvec's staging (the
 * same x in each of ~400 blocks): tg128 +1 % (docs/PERFORMANCE.md). */
static __device__ __forceinline__ float row_scaled(float x, float s, const float *w, int64_t i)
{
    const float t = __fmul_rn(x, s);
    return w ? __fmul_rn(t, w[i]) : t;
}

/* (v, i) beats (w, j) in the order value descending, index ascending,
 * index -1 being none (it never beats, and anything beats it): argmax and
 * the route's top-k. A NaN value never beats a number. */
static __device__ __forceinline__ bool d_better(float v, int32_t i, float w, int32_t j)
{
    if (i < 0)
        return false;
    if (j < 0)
        return true;
    return v > w || (v == w && i < j);
}

/* The best (d_better) of a warp's 32 pairs, in every lane: the xor
 * butterfly. */
static __device__ __forceinline__ void d_warp_best(float &v, int32_t &i)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, v, o);
        const int32_t oi = __shfl_xor_sync(0xffffffffu, i, o);
        if (d_better(ov, oi, v, i)) {
            v = ov;
            i = oi;
        }
    }
}

/* d_warp_best by two warp reductions (redux.sync) where the butterfly
 * takes five rounds of two shuffles, for pairs whose values are numbers
 * (the route's candidates): the largest value as an order-preserving key
 * (-0 as +0, which d_better holds equal; index -1 the least key), the
 * least index among the lanes that hold it, and that lane's own value.
 * The same pair as d_warp_best's. */
static __device__ __forceinline__ void d_warp_best_redux(float &v, int32_t &i)
{
    const uint32_t b = __float_as_uint(v == 0.0f ? 0.0f : v);
    const uint32_t key = i < 0 ? 0u : (b & 0x80000000u) ? ~b : (b | 0x80000000u);
    const uint32_t mk = __reduce_max_sync(0xffffffffu, key);
    if (mk == 0u)
        return; /* no lane has a pair: each keeps its own, as the butterfly leaves them */
    const uint32_t id = __reduce_min_sync(0xffffffffu, key == mk ? (uint32_t)i : 0xffffffffu);
    const int src = __ffs(__ballot_sync(0xffffffffu, key == mk && (uint32_t)i == id)) - 1;
    v = __shfl_sync(0xffffffffu, v, src);
    i = (int32_t)id;
}

#endif

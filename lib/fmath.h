/* Float32 functions built from IEEE basic operations and fmaf alone, for
 * the CPU reference and the CUDA kernels alike, so that both get the same
 * bits (libm's expf and CUDA's differ in the last place, and the float64
 * forms the reference used before cost the GPU's latency-bound steps
 * float64 work on their critical path). Host and device. */
#ifndef MEMRA_FMATH_H
#define MEMRA_FMATH_H

#include <math.h>

#ifdef __CUDACC__
#define MEMRA_FM static __host__ __device__ __forceinline__
#else
#define MEMRA_FM static inline
#endif

/* e^x within ~1 ulp: Cody-Waite reduction by ln 2 (ln 2 = C1 + C2, C1
 * with few bits), then Cephes' degree-6 polynomial for e^r on
 * |r| <= ln(2)/2, then the exact scaling by 2^n. Every product that could
 * be fused is written as an explicit fmaf or sits alone in a call's
 * argument, so no compiler contraction changes the bits. */
MEMRA_FM float memra_expf(float x)
{
    if (!(x < 88.72283935546875f)) /* overflow, or NaN */
        return x != x ? x : INFINITY;
    if (x < -103.97208404541015625f)
        return 0.0f;
    const float n = rintf(x * 1.44269502162933349609375f);
    float r = fmaf(n, -0.693359375f, x);
    r = fmaf(n, 2.12194440e-4f, r);
    const float z = r * r;
    float p = 1.9875691500e-4f;
    p = fmaf(p, r, 1.3981999507e-3f);
    p = fmaf(p, r, 8.3334519073e-3f);
    p = fmaf(p, r, 4.1665795894e-2f);
    p = fmaf(p, r, 1.6666665459e-1f);
    p = fmaf(p, r, 5.0000001201e-1f);
    p = fmaf(p, z, r);
    p = p + 1.0f;
    return ldexpf(p, (int)n);
}

/* x · sigmoid(x) = x / (1 + e^-x), one IEEE division. */
MEMRA_FM float memra_siluf(float x)
{
    return x / (1.0f + memra_expf(-x));
}

#endif

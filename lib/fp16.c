/* Exact half and bfloat16 conversions (bit manipulation, no hardware
 * dependence), used by the quant reference and the GGUF tools. */
#include <string.h>

#include "internal.h"

static inline uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float memra__fp16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1F;
    uint32_t mant = h & 0x3FF;
    if (exp == 0x1F)
        return u2f(sign | 0x7F800000u | (mant << 13));
    if (exp == 0) {
        if (mant == 0)
            return u2f(sign);
        /* subnormal: value = mant * 2^-24 exactly representable in f32 */
        float v = (float)mant * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return u2f(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t memra__f32_to_fp16(float f)
{
    uint32_t x = f2u(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7FFFFFFFu;
    if (ax > 0x7F800000u) /* NaN: keep it quiet */
        return (uint16_t)(sign | 0x7E00 | ((ax >> 13) & 0x3FF));
    if (ax >= 0x477FF000u) /* rounds to >= 65520 -> inf */
        return (uint16_t)(sign | 0x7C00);
    if (ax < 0x38800000u) { /* below smallest normal half: subnormal or zero */
        if (ax < 0x33000000u) /* < 2^-25: rounds to zero */
            return (uint16_t)sign;
        uint32_t e = ax >> 23;
        uint32_t m = (ax & 0x7FFFFF) | 0x800000;
        uint32_t shift = 126 - e; /* 14 + (113 - e) - 1 */
        uint32_t half = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1)))
            half++;
        return (uint16_t)(sign | half);
    }
    uint32_t base = ax - 0x38000000u; /* rebias 127 -> 15 */
    uint32_t half = base >> 13;
    uint32_t rem = base & 0x1FFF;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1)))
        half++;
    return (uint16_t)(sign | half);
}

float memra__bf16_to_f32(uint16_t h)
{
    return u2f((uint32_t)h << 16);
}

uint16_t memra__f32_to_bf16(float f)
{
    uint32_t x = f2u(f);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u)
        return (uint16_t)((x >> 16) | 64); /* quiet NaN, as ggml does */
    return (uint16_t)((x + (0x7FFF + ((x >> 16) & 1))) >> 16);
}

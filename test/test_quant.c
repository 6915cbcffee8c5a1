/* Quant reference: bit-exact dequantization and f64 dot products against
 * fixtures/quant/quant-vectors.gguf (made by ggml), quantizer semantics and
 * round trips, and the half/bfloat16 conversions underneath all of it. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testutil.h"
#include "quant.h"
#include "internal.h"
#include "memra/gguf.h"

#define FIX_COLS 512
#define FIX_ROWS 16

/* ---- helpers ------------------------------------------------------------- */

static uint16_t rd16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

/* ---- fixture ------------------------------------------------------------- */

static memra_gguf_t *g_fix;
static const char *g_fix_missing = "fixture quant/quant-vectors.gguf not found";

static int group_setup(void **state)
{
    (void)state;
    const char *path = tu_fixture_path("quant/quant-vectors.gguf");
    if (!path)
        return 0;
    if (memra_gguf_open(path, &g_fix) != MEMRA_OK) {
        fprintf(stderr, "cannot open %s: %s\n", path, memra_last_error());
        return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    memra_gguf_close(g_fix);
    g_fix = NULL;
    return 0;
}

typedef struct fix_case {
    const char *name;
    memra_type_t type;
} fix_case;

static const fix_case k_cases[] = {
    {"F16", MEMRA_TYPE_F16},       {"BF16", MEMRA_TYPE_BF16},     {"Q4_0", MEMRA_TYPE_Q4_0},
    {"Q4_1", MEMRA_TYPE_Q4_1},     {"Q5_0", MEMRA_TYPE_Q5_0},     {"Q5_1", MEMRA_TYPE_Q5_1},
    {"Q8_0", MEMRA_TYPE_Q8_0},     {"MXFP4", MEMRA_TYPE_MXFP4},   {"Q2_K", MEMRA_TYPE_Q2_K},
    {"Q3_K", MEMRA_TYPE_Q3_K},     {"Q4_K", MEMRA_TYPE_Q4_K},     {"Q5_K", MEMRA_TYPE_Q5_K},
    {"Q6_K", MEMRA_TYPE_Q6_K},     {"IQ4_NL", MEMRA_TYPE_IQ4_NL}, {"IQ4_XS", MEMRA_TYPE_IQ4_XS},
};

/* Looks up NAME.SUFFIX, checks its type and element count, returns its data. */
static const void *fix_tensor(const char *name, const char *suffix, memra_type_t type, int64_t nel)
{
    char full[64];
    snprintf(full, sizeof full, "%s.%s", name, suffix);
    const int64_t i = memra_gguf_find_tensor(g_fix, full);
    if (i < 0) {
        fail_msg("tensor %s missing from the fixture", full);
        return NULL;
    }
    assert_int_equal(memra_gguf_tensor_type(g_fix, i), type);
    int64_t ne[4];
    memra_gguf_tensor_shape(g_fix, i, ne);
    assert_int_equal(ne[0] * ne[1] * ne[2] * ne[3], nel);
    if (nel % FIX_COLS == 0) {
        const size_t row = memra__row_bytes(type, FIX_COLS);
        assert_true(row > 0);
        assert_int_equal(memra_gguf_tensor_nbytes(g_fix, i), row * (size_t)(nel / FIX_COLS));
    }
    const void *p = memra_gguf_tensor_data(g_fix, i);
    assert_non_null(p);
    return p;
}

static void fix_load(const fix_case *c, const uint8_t **q, const float **ref, const float **x,
                     const float **y)
{
    *q = fix_tensor(c->name, "q", c->type, FIX_COLS * FIX_ROWS);
    *ref = fix_tensor(c->name, "ref", MEMRA_TYPE_F32, FIX_COLS * FIX_ROWS);
    *x = fix_tensor(c->name, "x", MEMRA_TYPE_F32, FIX_COLS);
    *y = fix_tensor(c->name, "y", MEMRA_TYPE_F32, FIX_ROWS);
}

/* Every row of T.q must dequantize to exactly the bits of T.ref. */
static void test_fixture_dequant(void **state)
{
    const fix_case *c = *state;
    if (!g_fix)
        TU_SKIP("%s", g_fix_missing);
    assert_true(memra__quant_can_compute(c->type));
    const uint8_t *q;
    const float *ref, *x, *y;
    fix_load(c, &q, &ref, &x, &y);

    const size_t row_bytes = memra__row_bytes(c->type, FIX_COLS);
    float out[FIX_COLS];
    int exact_rows = 0;
    for (int r = 0; r < FIX_ROWS; r++) {
        memset(out, 0x88, sizeof out); /* sentinel: a skipped element shows */
        assert_true(memra__dequantize_row(c->type, q + (size_t)r * row_bytes, out, FIX_COLS));
        const float *want = ref + (size_t)r * FIX_COLS;
        if (memcmp(out, want, sizeof out) == 0) {
            exact_rows++;
            continue;
        }
        for (int j = 0; j < FIX_COLS; j++) {
            if (tu_f2u(out[j]) != tu_f2u(want[j])) {
                print_error("%s row %d col %d: got %.9g (0x%08x), want %.9g (0x%08x)\n", c->name,
                            r, j, out[j], tu_f2u(out[j]), want[j], tu_f2u(want[j]));
                break;
            }
        }
    }
    printf("[   INFO   ] %-6s dequant: %d/%d rows bit-exact\n", c->name, exact_rows, FIX_ROWS);
    assert_int_equal(exact_rows, FIX_ROWS);
}

/* T.y is T.ref @ T.x in float64, stored as f32: allow 1e-5 relative. The
 * floor keeps a row whose terms cancel to ~0 from demanding more than the
 * f32-stored reference can hold. */
static void test_fixture_dot(void **state)
{
    const fix_case *c = *state;
    if (!g_fix)
        TU_SKIP("%s", g_fix_missing);
    const uint8_t *q;
    const float *ref, *x, *y;
    fix_load(c, &q, &ref, &x, &y);

    const size_t row_bytes = memra__row_bytes(c->type, FIX_COLS);
    double worst = 0.0;
    for (int r = 0; r < FIX_ROWS; r++) {
        const double got = memra__dot_row(c->type, q + (size_t)r * row_bytes, x, FIX_COLS);
        double mag = 0.0;
        for (int j = 0; j < FIX_COLS; j++)
            mag += fabs((double)ref[(size_t)r * FIX_COLS + j] * (double)x[j]);
        const double scale = fmax(fabs((double)y[r]), 1e-6 * mag);
        const double rel = scale > 0.0 ? fabs(got - (double)y[r]) / scale : fabs(got);
        if (rel > 1e-5)
            print_error("%s row %d: dot %.17g, want %.9g (rel %.3g)\n", c->name, r, got,
                        (double)y[r], rel);
        assert_true(rel <= 1e-5);
        if (rel > worst)
            worst = rel;
    }
    printf("[   INFO   ] %-6s dot: max rel err %.3g\n", c->name, worst);
}

/* The fixture's legacy blocks are ggml quantizations of real rows, so our
 * encoder applied to their dequantized values must give the same bytes back:
 * a dequantized block is a fixed point of ggml's rounding rules. */
static void test_fixture_requantize(void **state)
{
    const fix_case *c = *state;
    if (!g_fix)
        TU_SKIP("%s", g_fix_missing);
    assert_true(memra__quant_can_quantize(c->type));
    const uint8_t *q;
    const float *ref, *x, *y;
    fix_load(c, &q, &ref, &x, &y);

    const size_t row_bytes = memra__row_bytes(c->type, FIX_COLS);
    uint8_t *buf = malloc(row_bytes);
    assert_non_null(buf);
    int same = 0;
    for (int r = 0; r < FIX_ROWS; r++) {
        assert_true(memra__quantize_row(c->type, ref + (size_t)r * FIX_COLS, buf, FIX_COLS));
        if (memcmp(buf, q + (size_t)r * row_bytes, row_bytes) == 0)
            same++;
        else
            print_error("%s row %d: re-quantized bytes differ\n", c->name, r);
    }
    free(buf);
    printf("[   INFO   ] %-6s requantize: %d/%d rows identical\n", c->name, same, FIX_ROWS);
    assert_int_equal(same, FIX_ROWS);
}

/* ---- quantizer round trips ----------------------------------------------- */

#define RT_N 4096

static float *gauss_row(uint64_t seed, int n, float scale)
{
    float *x = malloc((size_t)n * sizeof *x);
    assert_non_null(x);
    for (int i = 0; i < n; i++)
        x[i] = scale * tu_rng_gauss(&seed);
    /* a zero block and a constant block exercise d == 0 and ties */
    for (int i = 0; i < 32 && i < n; i++)
        x[i] = 0.0f;
    for (int i = 32; i < 64 && i < n; i++)
        x[i] = -0.75f * scale;
    return x;
}

/* Q8_0 quantizes with the f32 scale d = amax/127 and stores it rounded to
 * f16, so the bound is half a step plus |q| times that rounding. */
static void test_q8_0_roundtrip(void **state)
{
    (void)state;
    const float scales[] = {1.0f, 1e-3f, 37.0f};
    for (size_t s = 0; s < MEMRA__ARRAY_LEN(scales); s++) {
        float *x = gauss_row(0x51ED + s, RT_N, scales[s]);
        const size_t nb = memra__row_bytes(MEMRA_TYPE_Q8_0, RT_N);
        assert_int_equal(nb, RT_N / 32 * 34);
        uint8_t *q = malloc(nb);
        float *back = malloc(RT_N * sizeof *back);
        assert_true(memra__quantize_row(MEMRA_TYPE_Q8_0, x, q, RT_N));
        assert_true(memra__dequantize_row(MEMRA_TYPE_Q8_0, q, back, RT_N));
        for (int b = 0; b < RT_N / 32; b++) {
            const float *xb = x + 32 * b;
            const uint8_t *blk = q + 34 * b;
            float amax = 0.0f;
            for (int j = 0; j < 32; j++)
                amax = fmaxf(amax, fabsf(xb[j]));
            const float d32 = amax / 127.0f;
            const uint16_t dbits = rd16(blk);
            assert_int_equal(dbits, memra__f32_to_fp16(d32));
            const double d16 = memra__fp16_to_f32(dbits);
            for (int j = 0; j < 32; j++) {
                const int qv = (int8_t)blk[2 + j];
                assert_true(qv >= -127 && qv <= 127);
                const double bound = 0.5 * d32 * (1 + 1e-6) + abs(qv) * fabs(d32 - d16) + 1e-30;
                const double err = fabs((double)back[32 * b + j] - xb[j]);
                if (err > bound)
                    fail_msg("Q8_0 block %d elem %d: x=%g back=%g err=%g bound=%g", b, j, xb[j],
                             back[32 * b + j], err, bound);
            }
        }
        /* the all-zero block must stay exactly zero */
        for (int j = 0; j < 32; j++)
            assert_true(back[j] == 0.0f);
        free(x);
        free(q);
        free(back);
    }
}

/* Q4_0 maps the signed extreme to -8; the opposite side clamps at +7, so an
 * element beyond 7.5 steps there may be a whole step off. */
static void test_q4_0_roundtrip(void **state)
{
    (void)state;
    float *x = gauss_row(0x40, RT_N, 2.5f);
    uint8_t *q = malloc(memra__row_bytes(MEMRA_TYPE_Q4_0, RT_N));
    float *back = malloc(RT_N * sizeof *back);
    assert_true(memra__quantize_row(MEMRA_TYPE_Q4_0, x, q, RT_N));
    assert_true(memra__dequantize_row(MEMRA_TYPE_Q4_0, q, back, RT_N));
    for (int b = 0; b < RT_N / 32; b++) {
        const float *xb = x + 32 * b;
        const uint8_t *blk = q + 18 * b;
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < 32; j++) {
            if (amax < fabsf(xb[j])) {
                amax = fabsf(xb[j]);
                max = xb[j];
            }
        }
        const float d32 = max / -8.0f;
        assert_int_equal(rd16(blk), memra__f32_to_fp16(d32));
        const double d16 = memra__fp16_to_f32(rd16(blk));
        const double ad = fabs(d32);
        for (int j = 0; j < 32; j++) {
            const int qv = j < 16 ? (blk[2 + j] & 0xF) : (blk[2 + j - 16] >> 4);
            const double steps = d32 != 0.0f ? xb[j] / (double)d32 : 0.0;
            const double slack = 8 * fabs(d32 - d16) + 1e-6 * ad + 1e-30;
            const double bound = (steps > 7.4 ? ad : 0.5 * ad) + slack;
            const double err = fabs((double)back[32 * b + j] - xb[j]);
            if (err > bound)
                fail_msg("Q4_0 block %d elem %d (q=%d): x=%g back=%g err=%g bound=%g", b, j, qv,
                         xb[j], back[32 * b + j], err, bound);
        }
    }
    /* zero block: every quant is the midpoint 8, and d = 0/-8 is stored as
     * -0 (0x8000), as ggml writes it */
    assert_int_equal(rd16(q), 0x8000);
    for (int j = 0; j < 16; j++)
        assert_int_equal(q[2 + j], 0x88);
    free(x);
    free(q);
    free(back);
}

/* A hand-checked Q4_0 block: x = j - 16, so the extreme is -16 (j = 0),
 * d = 2, and x = 15 lands on 16 before the clamp to 15. */
static void test_q4_0_known_block(void **state)
{
    (void)state;
    float x[32];
    for (int j = 0; j < 32; j++)
        x[j] = (float)(j - 16);
    uint8_t blk[18];
    float back[32];
    assert_true(memra__quantize_row(MEMRA_TYPE_Q4_0, x, blk, 32));
    assert_int_equal(rd16(blk), 0x4000); /* 2.0 */
    assert_int_equal(blk[2] & 0xF, 0);   /* x[0] = -16 -> -8 steps */
    assert_int_equal(blk[17] >> 4, 15);  /* x[31] = 15 -> clamped */
    assert_int_equal(blk[2 + 1] & 0xF, 1); /* x[1] = -15 -> -7.5 + 8.5 = 1 */
    assert_true(memra__dequantize_row(MEMRA_TYPE_Q4_0, blk, back, 32));
    assert_true(back[0] == -16.0f);
    assert_true(back[31] == 14.0f);
    assert_true(back[16] == 0.0f);
}

/* Q8_0: the extreme element always lands on +-127 exactly. */
static void test_q8_0_known_block(void **state)
{
    (void)state;
    float x[32];
    for (int j = 0; j < 32; j++)
        x[j] = (float)j * 0.25f - 3.0f; /* -3 .. 4.75 */
    uint8_t blk[34];
    assert_true(memra__quantize_row(MEMRA_TYPE_Q8_0, x, blk, 32));
    assert_int_equal(rd16(blk), memra__f32_to_fp16(4.75f / 127.0f));
    assert_int_equal((int8_t)blk[2 + 31], 127);
    assert_int_equal((int8_t)blk[2 + 12], 0);
    assert_int_equal((int8_t)blk[2 + 0], (int)roundf(-3.0f * (1.0f / (4.75f / 127.0f))));
}

/* Q4_1 / Q5_0 / Q5_1: the bound is half a step from the f32 scale plus the
 * f16 rounding of d (and of the min for the offset formats). */
static void check_roundtrip_generic(memra_type_t type, int levels, bool offset)
{
    float *x = gauss_row(0x77 + (uint64_t)type, RT_N, 1.5f);
    uint8_t *q = malloc(memra__row_bytes(type, RT_N));
    float *back = malloc(RT_N * sizeof *back);
    assert_true(memra__quantize_row(type, x, q, RT_N));
    assert_true(memra__dequantize_row(type, q, back, RT_N));
    for (int b = 0; b < RT_N / 32; b++) {
        const float *xb = x + 32 * b;
        float lo = INFINITY, hi = -INFINITY, amax = 0.0f;
        for (int j = 0; j < 32; j++) {
            lo = fminf(lo, xb[j]);
            hi = fmaxf(hi, xb[j]);
            amax = fmaxf(amax, fabsf(xb[j]));
        }
        const double d = offset ? (hi - lo) / (double)(levels - 1) : amax / (levels / 2.0);
        /* f16 rounding of d (rel 2^-11) times up to `levels` steps, plus the min */
        const double slack = levels * d * 4.9e-4 + (offset ? fabs(lo) * 4.9e-4 : 0.0) + 1e-6;
        for (int j = 0; j < 32; j++) {
            const double err = fabs((double)back[32 * b + j] - xb[j]);
            /* symmetric formats clamp on the side opposite the extreme */
            const double steps = offset ? 0.5 : 1.0;
            if (err > steps * d + slack)
                fail_msg("%s block %d elem %d: x=%g back=%g err=%g d=%g", memra_type_name(type), b,
                         j, xb[j], back[32 * b + j], err, d);
        }
    }
    free(x);
    free(q);
    free(back);
}

static void test_q4_1_q5_roundtrip(void **state)
{
    (void)state;
    assert_true(memra__quant_can_quantize(MEMRA_TYPE_Q4_1));
    check_roundtrip_generic(MEMRA_TYPE_Q4_1, 16, true);
    assert_true(memra__quant_can_quantize(MEMRA_TYPE_Q5_0));
    check_roundtrip_generic(MEMRA_TYPE_Q5_0, 32, false);
    assert_true(memra__quant_can_quantize(MEMRA_TYPE_Q5_1));
    check_roundtrip_generic(MEMRA_TYPE_Q5_1, 32, true);
}

/* Every non-NaN half / bfloat16 pattern survives f32 and back unchanged
 * through the row quantizer; NaNs stay NaNs. */
static void test_f16_bf16_roundtrip_exhaustive(void **state)
{
    (void)state;
    const memra_type_t types[2] = {MEMRA_TYPE_F16, MEMRA_TYPE_BF16};
    float *vals = malloc(65536 * sizeof *vals);
    uint8_t *enc = malloc(65536 * 2);
    float *back = malloc(65536 * sizeof *back);
    assert_non_null(vals);
    for (int t = 0; t < 2; t++) {
        const bool half = types[t] == MEMRA_TYPE_F16;
        for (uint32_t h = 0; h < 65536; h++)
            vals[h] = half ? memra__fp16_to_f32((uint16_t)h) : memra__bf16_to_f32((uint16_t)h);
        assert_int_equal(memra__row_bytes(types[t], 65536), 65536 * 2);
        assert_true(memra__quantize_row(types[t], vals, enc, 65536));
        assert_true(memra__dequantize_row(types[t], enc, back, 65536));
        for (uint32_t h = 0; h < 65536; h++) {
            const uint16_t got = rd16(enc + 2 * h);
            if (isnan(vals[h])) {
                assert_true(isnan(back[h]));
                assert_int_equal(got & 0x8000, h & 0x8000);
                continue;
            }
            if (got != h)
                fail_msg("%s: pattern 0x%04x came back as 0x%04x", half ? "F16" : "BF16", h, got);
            assert_int_equal(tu_f2u(back[h]), tu_f2u(vals[h]));
        }
    }
    free(vals);
    free(enc);
    free(back);
}

/* ---- half / bfloat16 conversion edge cases -------------------------------- */

static void test_fp16_edges(void **state)
{
    (void)state;
    /* decode */
    assert_int_equal(tu_f2u(memra__fp16_to_f32(0x0000)), 0x00000000u);
    assert_int_equal(tu_f2u(memra__fp16_to_f32(0x8000)), 0x80000000u);
    assert_true(memra__fp16_to_f32(0x0001) == ldexpf(1.0f, -24));
    assert_true(memra__fp16_to_f32(0x8001) == -ldexpf(1.0f, -24));
    assert_true(memra__fp16_to_f32(0x03FF) == 1023.0f * ldexpf(1.0f, -24));
    assert_true(memra__fp16_to_f32(0x0400) == ldexpf(1.0f, -14));
    assert_true(memra__fp16_to_f32(0x3C00) == 1.0f);
    assert_true(memra__fp16_to_f32(0x7BFF) == 65504.0f);
    assert_true(memra__fp16_to_f32(0xC000) == -2.0f);
    assert_true(isinf(memra__fp16_to_f32(0x7C00)) && memra__fp16_to_f32(0x7C00) > 0);
    assert_true(isinf(memra__fp16_to_f32(0xFC00)) && memra__fp16_to_f32(0xFC00) < 0);
    assert_true(isnan(memra__fp16_to_f32(0x7E00)));
    assert_true(isnan(memra__fp16_to_f32(0x7C01))); /* signalling pattern is still NaN */
    assert_true(isnan(memra__fp16_to_f32(0xFE00)));

    /* encode: overflow and infinities */
    assert_int_equal(memra__f32_to_fp16(65504.0f), 0x7BFF);
    assert_int_equal(memra__f32_to_fp16(65519.996f), 0x7BFF); /* just below the tie */
    assert_int_equal(memra__f32_to_fp16(65520.0f), 0x7C00);    /* tie rounds to even = inf */
    assert_int_equal(memra__f32_to_fp16(1e10f), 0x7C00);
    assert_int_equal(memra__f32_to_fp16(-1e10f), 0xFC00);
    assert_int_equal(memra__f32_to_fp16(INFINITY), 0x7C00);
    assert_int_equal(memra__f32_to_fp16(-INFINITY), 0xFC00);
    assert_int_equal(memra__f32_to_fp16(tu_u2f(0x7F7FFFFFu)), 0x7C00);
    /* NaN stays NaN (exponent all ones, mantissa non-zero), sign kept */
    uint16_t n = memra__f32_to_fp16(NAN);
    assert_int_equal(n & 0x7C00, 0x7C00);
    assert_true((n & 0x03FF) != 0);
    n = memra__f32_to_fp16(tu_u2f(0xFF800001u)); /* signalling, payload only in low bits */
    assert_int_equal(n & 0xFC00, 0xFC00);
    assert_true((n & 0x03FF) != 0);

    /* zeros and subnormals */
    assert_int_equal(memra__f32_to_fp16(0.0f), 0x0000);
    assert_int_equal(memra__f32_to_fp16(-0.0f), 0x8000);
    assert_int_equal(memra__f32_to_fp16(ldexpf(1.0f, -24)), 0x0001);
    assert_int_equal(memra__f32_to_fp16(ldexpf(1.0f, -25)), 0x0000);         /* tie -> even 0 */
    assert_int_equal(memra__f32_to_fp16(-ldexpf(1.0f, -25)), 0x8000);
    assert_int_equal(memra__f32_to_fp16(ldexpf(1.0f, -25) * 1.0000001f), 0x0001); /* above tie */
    assert_int_equal(memra__f32_to_fp16(ldexpf(3.0f, -25)), 0x0002);         /* 1.5 ulp tie -> 2 */
    assert_int_equal(memra__f32_to_fp16(ldexpf(5.0f, -25)), 0x0002);         /* 2.5 ulp tie -> 2 */
    assert_int_equal(memra__f32_to_fp16(ldexpf(1.0f, -30)), 0x0000);
    assert_int_equal(memra__f32_to_fp16(tu_u2f(0x00000001u)), 0x0000); /* f32 subnormal */
    assert_int_equal(memra__f32_to_fp16(1023.0f * ldexpf(1.0f, -24)), 0x03FF);
    assert_int_equal(memra__f32_to_fp16(1023.5f * ldexpf(1.0f, -24)), 0x0400); /* tie -> even */
    assert_int_equal(memra__f32_to_fp16(ldexpf(1.0f, -14)), 0x0400);

    /* normal ties round to even */
    assert_int_equal(memra__f32_to_fp16(1.0f + ldexpf(1.0f, -11)), 0x3C00);
    assert_int_equal(memra__f32_to_fp16(1.0f + ldexpf(3.0f, -11)), 0x3C02);
    assert_int_equal(memra__f32_to_fp16(1.0f + ldexpf(1.0f, -11) + ldexpf(1.0f, -20)), 0x3C01);
    assert_int_equal(memra__f32_to_fp16(-1.0f - ldexpf(3.0f, -11)), 0xBC02);
    assert_int_equal(memra__f32_to_fp16(2047.0f / 1024.0f + ldexpf(1.0f, -11)), 0x4000); /* carry into exponent */
}

static void test_bf16_edges(void **state)
{
    (void)state;
    assert_true(memra__bf16_to_f32(0x3F80) == 1.0f);
    assert_int_equal(tu_f2u(memra__bf16_to_f32(0x8000)), 0x80000000u);
    assert_int_equal(tu_f2u(memra__bf16_to_f32(0x0001)), 0x00010000u); /* subnormal kept */
    assert_true(isinf(memra__bf16_to_f32(0x7F80)));
    assert_true(isnan(memra__bf16_to_f32(0x7FC0)));

    assert_int_equal(memra__f32_to_bf16(1.0f), 0x3F80);
    assert_int_equal(memra__f32_to_bf16(-0.0f), 0x8000);
    assert_int_equal(memra__f32_to_bf16(1.0f + ldexpf(1.0f, -8)), 0x3F80); /* tie -> even */
    assert_int_equal(memra__f32_to_bf16(1.0f + ldexpf(3.0f, -8)), 0x3F82); /* tie -> even (up) */
    assert_int_equal(memra__f32_to_bf16(tu_u2f(0x3F808001u)), 0x3F81);         /* above tie */
    assert_int_equal(memra__f32_to_bf16(INFINITY), 0x7F80);
    assert_int_equal(memra__f32_to_bf16(-INFINITY), 0xFF80);
    assert_int_equal(memra__f32_to_bf16(tu_u2f(0x7F7FFFFFu)), 0x7F80); /* FLT_MAX rounds to inf */
    assert_int_equal(memra__f32_to_bf16(tu_u2f(0x00008000u)), 0x0000); /* subnormal tie -> even */
    assert_int_equal(memra__f32_to_bf16(tu_u2f(0x00018000u)), 0x0002);
    assert_int_equal(memra__f32_to_bf16(tu_u2f(0x00010000u)), 0x0001);
    /* a NaN whose payload sits only in the dropped bits must not become inf */
    const uint16_t n = memra__f32_to_bf16(tu_u2f(0x7F800001u));
    assert_true(isnan(memra__bf16_to_f32(n)));
    assert_true((n & 0x0040) != 0); /* quiet bit set */
    assert_int_equal(memra__f32_to_bf16(tu_u2f(0xFFC00000u)), 0xFFC0);
}

#if defined(__FLT16_MAX__)
/* The compiler's own f32 -> _Float16 conversion rounds to nearest even:
 * compare on many random bit patterns and every exponent. */
static void test_fp16_vs_compiler(void **state)
{
    (void)state;
    uint64_t s = 0xF16;
    for (int i = 0; i < 2000000; i++) {
        uint32_t u = (uint32_t)tu_rng_next(&s);
        if (i & 1) /* concentrate on the half range and its edges */
            u = (u & 0x807FFFFFu) | ((uint32_t)(98 + (tu_rng_next(&s) % 48)) << 23);
        const float f = tu_u2f(u);
        if (isnan(f))
            continue;
        const _Float16 h = (_Float16)f;
        uint16_t want;
        memcpy(&want, &h, 2);
        const uint16_t got = memra__f32_to_fp16(f);
        if (got != want)
            fail_msg("f32 0x%08x -> 0x%04x, compiler says 0x%04x", u, got, want);
        const float back = (float)h;
        assert_int_equal(tu_f2u(memra__fp16_to_f32(want)), tu_f2u(back));
    }
}
#endif

/* ---- type coverage and argument checks ------------------------------------ */

static void test_type_support(void **state)
{
    (void)state;
    const memra_type_t computable[] = {
        MEMRA_TYPE_F32,  MEMRA_TYPE_F16,  MEMRA_TYPE_BF16,  MEMRA_TYPE_Q4_0,   MEMRA_TYPE_Q4_1,
        MEMRA_TYPE_Q5_0, MEMRA_TYPE_Q5_1, MEMRA_TYPE_Q8_0,  MEMRA_TYPE_Q2_K,   MEMRA_TYPE_Q3_K,
        MEMRA_TYPE_Q4_K, MEMRA_TYPE_Q5_K, MEMRA_TYPE_Q6_K,  MEMRA_TYPE_IQ4_NL, MEMRA_TYPE_IQ4_XS,
        MEMRA_TYPE_MXFP4,
    };
    for (size_t i = 0; i < MEMRA__ARRAY_LEN(computable); i++)
        assert_true(memra__quant_can_compute(computable[i]));

    const memra_type_t other[] = {
        MEMRA_TYPE_Q8_1,  MEMRA_TYPE_Q8_K,  MEMRA_TYPE_IQ2_XXS, MEMRA_TYPE_IQ2_XS, MEMRA_TYPE_IQ3_XXS,
        MEMRA_TYPE_IQ1_S, MEMRA_TYPE_IQ3_S, MEMRA_TYPE_IQ2_S,   MEMRA_TYPE_I8,     MEMRA_TYPE_I32,
        MEMRA_TYPE_F64,   MEMRA_TYPE_IQ1_M, MEMRA_TYPE_TQ1_0,   MEMRA_TYPE_TQ2_0,  MEMRA_TYPE_NVFP4,
        MEMRA_TYPE_Q1_0,  (memra_type_t)4,  (memra_type_t)31,   MEMRA_TYPE_COUNT,  (memra_type_t)-1,
    };
    uint8_t raw[512] = {0};
    float out[256], xin[256] = {0};
    for (size_t i = 0; i < MEMRA__ARRAY_LEN(other); i++) {
        assert_false(memra__quant_can_compute(other[i]));
        assert_false(memra__quant_can_quantize(other[i]));
        assert_false(memra__dequantize_row(other[i], raw, out, 256));
        assert_true(isnan(memra__dot_row(other[i], raw, xin, 256)));
        assert_false(memra__quantize_row(other[i], xin, raw, 256));
    }

    const memra_type_t quantizable[] = {MEMRA_TYPE_F32, MEMRA_TYPE_F16, MEMRA_TYPE_BF16,
                                        MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q4_0};
    for (size_t i = 0; i < MEMRA__ARRAY_LEN(quantizable); i++)
        assert_true(memra__quant_can_quantize(quantizable[i]));
    assert_false(memra__quant_can_quantize(MEMRA_TYPE_Q4_K));
    assert_false(memra__quantize_row(MEMRA_TYPE_Q6_K, xin, raw, 256));

    /* sizes: whole blocks only */
    assert_int_equal(memra__row_bytes(MEMRA_TYPE_F32, 7), 28);
    assert_int_equal(memra__row_bytes(MEMRA_TYPE_BF16, 3), 6);
    assert_int_equal(memra__row_bytes(MEMRA_TYPE_Q4_0, 64), 36);
    assert_int_equal(memra__row_bytes(MEMRA_TYPE_Q4_1, 32), 20);
    assert_int_equal(memra__row_bytes(MEMRA_TYPE_Q5_0, 32), 22);
    assert_int_equal(memra__row_bytes(MEMRA_TYPE_Q5_1, 32), 24);
    assert_int_equal(memra__row_bytes(MEMRA_TYPE_Q8_0, 96), 102);
    assert_int_equal(memra__row_bytes(MEMRA_TYPE_MXFP4, 32), 17);
    assert_int_equal(memra__row_bytes(MEMRA_TYPE_IQ4_NL, 32), 18);
    assert_int_equal(memra__row_bytes(MEMRA_TYPE_Q2_K, 256), 84);
    assert_int_equal(memra__row_bytes(MEMRA_TYPE_Q3_K, 256), 110);
    assert_int_equal(memra__row_bytes(MEMRA_TYPE_Q4_K, 512), 288);
    assert_int_equal(memra__row_bytes(MEMRA_TYPE_Q5_K, 256), 176);
    assert_int_equal(memra__row_bytes(MEMRA_TYPE_Q6_K, 256), 210);
    assert_int_equal(memra__row_bytes(MEMRA_TYPE_IQ4_XS, 256), 136);
    assert_int_equal(memra__row_bytes(MEMRA_TYPE_Q4_0, 33), 0);
    assert_int_equal(memra__row_bytes(MEMRA_TYPE_Q4_K, 128), 0);
    assert_int_equal(memra__row_bytes(MEMRA_TYPE_Q8_0, -32), 0);
    assert_int_equal(memra__row_bytes((memra_type_t)99, 32), 0);

    /* a partial block is refused rather than read past */
    assert_false(memra__dequantize_row(MEMRA_TYPE_Q8_0, raw, out, 31));
    assert_true(isnan(memra__dot_row(MEMRA_TYPE_Q4_K, raw, xin, 32)));
    assert_false(memra__quantize_row(MEMRA_TYPE_Q4_0, xin, raw, 48));
    /* empty rows are fine */
    assert_true(memra__dequantize_row(MEMRA_TYPE_Q4_K, raw, out, 0));
    assert_true(memra__dot_row(MEMRA_TYPE_Q8_0, raw, xin, 0) == 0.0);
}

/* Dot of float rows: exact small integers, and agreement with
 * dequantize-then-dot for every block type on a row longer than one chunk
 * and not a multiple of it. */
static void test_dot_consistency(void **state)
{
    (void)state;
    float a[8] = {1, 2, 3, 4, 5, 6, 7, 8}, b[8] = {8, 7, 6, 5, 4, 3, 2, 1};
    assert_true(memra__dot_row(MEMRA_TYPE_F32, a, b, 8) == 120.0);
    uint16_t h[8], bf[8];
    for (int i = 0; i < 8; i++) {
        h[i] = memra__f32_to_fp16(a[i]);
        bf[i] = memra__f32_to_bf16(a[i]);
    }
    assert_true(memra__dot_row(MEMRA_TYPE_F16, h, b, 8) == 120.0);
    assert_true(memra__dot_row(MEMRA_TYPE_BF16, bf, b, 8) == 120.0);

    enum { N = 768 + 32 * 3 }; /* not a multiple of 256 for the 32-blocks */
    uint64_t s = 0xD07;
    float x[N], deq[N];
    static uint8_t raw[N * 4];
    for (int i = 0; i < N; i++)
        x[i] = tu_rng_gauss(&s);
    for (size_t k = 0; k < MEMRA__ARRAY_LEN(k_cases); k++) {
        const memra_type_t t = k_cases[k].type;
        const int64_t n = memra_type_block_size(t) == 256 ? 768 : N;
        const size_t nbytes = memra__row_bytes(t, n);
        assert_true(nbytes > 0 && nbytes <= sizeof raw);
        for (size_t i = 0; i < nbytes; i++)
            raw[i] = (uint8_t)tu_rng_next(&s);
        /* keep the f16 scales finite and modest so the sum is meaningful */
        if (t == MEMRA_TYPE_F16)
            for (size_t i = 1; i < nbytes; i += 2)
                raw[i] &= 0x3B;
        if (t == MEMRA_TYPE_BF16)
            for (size_t i = 1; i < nbytes; i += 2)
                raw[i] = (uint8_t)((raw[i] & 0x80) | 0x3E | (raw[i] & 1));
        assert_true(memra__dequantize_row(t, raw, deq, n));
        double want = 0.0;
        bool finite = true;
        for (int64_t i = 0; i < n; i++) {
            finite = finite && isfinite(deq[i]);
            want += (double)deq[i] * x[i];
        }
        const double got = memra__dot_row(t, raw, x, n);
        if (finite)
            assert_true(got == want); /* same products, same order */
        else
            assert_true(!isfinite(got));
    }
}

/* Named entries so that a failure says which type it was. */
#define FIX_ENTRY(fn, tag, i, T) {#tag " " #T, fn, NULL, NULL, (void *)&k_cases[i]}
#define FIX_TESTS(i, T) \
    FIX_ENTRY(test_fixture_dequant, dequant, i, T), FIX_ENTRY(test_fixture_dot, dot, i, T)
#define REQ_TEST(i, T) FIX_ENTRY(test_fixture_requantize, requantize, i, T)

int main(void)
{
    const struct CMUnitTest tests[] = {
        FIX_TESTS(0, F16),
        FIX_TESTS(1, BF16),
        FIX_TESTS(2, Q4_0),
        FIX_TESTS(3, Q4_1),
        FIX_TESTS(4, Q5_0),
        FIX_TESTS(5, Q5_1),
        FIX_TESTS(6, Q8_0),
        FIX_TESTS(7, MXFP4),
        FIX_TESTS(8, Q2_K),
        FIX_TESTS(9, Q3_K),
        FIX_TESTS(10, Q4_K),
        FIX_TESTS(11, Q5_K),
        FIX_TESTS(12, Q6_K),
        FIX_TESTS(13, IQ4_NL),
        FIX_TESTS(14, IQ4_XS),
        /* F16, BF16 and the legacy formats ggml quantized from real rows */
        REQ_TEST(0, F16),
        REQ_TEST(1, BF16),
        REQ_TEST(2, Q4_0),
        REQ_TEST(3, Q4_1),
        REQ_TEST(4, Q5_0),
        REQ_TEST(5, Q5_1),
        REQ_TEST(6, Q8_0),
        cmocka_unit_test(test_q8_0_roundtrip),
        cmocka_unit_test(test_q4_0_roundtrip),
        cmocka_unit_test(test_q4_0_known_block),
        cmocka_unit_test(test_q8_0_known_block),
        cmocka_unit_test(test_q4_1_q5_roundtrip),
        cmocka_unit_test(test_f16_bf16_roundtrip_exhaustive),
        cmocka_unit_test(test_fp16_edges),
        cmocka_unit_test(test_bf16_edges),
#if defined(__FLT16_MAX__)
        cmocka_unit_test(test_fp16_vs_compiler),
#endif
        cmocka_unit_test(test_type_support),
        cmocka_unit_test(test_dot_consistency),
    };
    return cmocka_run_group_tests_name("quant", tests, group_setup, group_teardown);
}

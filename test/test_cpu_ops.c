/* CPU reference backend ops against independent float64 implementations
 * written here with different loop structures, on seeded random inputs.
 *
 * Tolerances (|got - ref|, ref in float64 over the same float inputs):
 *   matmul, moe composition pieces  1e-7·|ref| + 1e-12·Σ|w·x|  (= correctly rounded)
 *   get_rows, conv state            bit-exact
 *   norm                            1e-6·|ref|
 *   elementwise, conv output        1e-6·max(1, |ref|)
 *   rope                            (|x0|+|x1|)·(3e-7·(i+2)·θ_i + 1e-6)  (float angle built
 *                                   incrementally, model-spec §3.1; bit-exact vs ggml's recipe)
 *   attention                       1e-6·max|v|
 *   delta                           2e-6·(n_tokens+1)·max(1, |ref|)
 *   route weights                   1e-6·|ref|, ids exact
 *   moe                             3e-6·Σ_j|w_j·s_e|·Σ_f|D_if·h_f| + 1e-7
 * and bit-identity wherever the batch shape or thread count must not matter:
 * prefill vs one-row calls (matmul, attention, conv, delta, moe), 1 vs 5
 * threads, moe and matmul_ex vs their compositions of matmul/norm/elementwise. Sentinels (a NaN
 * payload) around every output check that strides are honoured; NaN in the
 * gaps of every input checks that nothing reads them. */
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
#include "backend.h"
#include "fmath.h"
#include "quant.h"

static memra__backend_t *g_be;  /* 5 threads */
static memra__backend_t *g_be1; /* 1 thread */

/* ---- helpers ------------------------------------------------------------- */

#define SENT_BITS 0x7fa5a5a5u

static float sent(void)
{
    return tu_u2f(SENT_BITS);
}

static bool is_sent(float f)
{
    return tu_f2u(f) == SENT_BITS;
}

static float *sent_buf(size_t n)
{
    float *p = malloc(n * sizeof *p);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++)
        p[i] = sent();
    return p;
}

/* A strided matrix of rows x cols inside a buffer of `total` floats: the
 * gaps and the tail hold sentinels (NaN), the cells random values. */
static float *rand_mat(uint64_t *rng, int64_t rows, int64_t cols, int64_t stride, size_t total, float sigma)
{
    float *p = sent_buf(total);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            p[r * stride + c] = tu_rng_gauss(rng) * sigma;
    return p;
}

/* Every float outside the rows x cols cells must still be a sentinel. */
static void check_sent_outside(const float *p, size_t total, int64_t rows, int64_t cols, int64_t stride,
                               const char *what)
{
    for (size_t i = 0; i < total; i++) {
        const int64_t r = (int64_t)i / stride, c = (int64_t)i % stride;
        const bool cell = r < rows && c < cols;
        if (!cell && !is_sent(p[i]))
            fail_msg("%s: sentinel at %zu (row %lld col %lld) overwritten", what, i, (long long)r,
                     (long long)c);
        if (cell && is_sent(p[i]))
            fail_msg("%s: cell at row %lld col %lld never written", what, (long long)r, (long long)c);
    }
}

static void check_close(double got, double ref, double tol, const char *what, int64_t i)
{
    if (!(fabs(got - ref) <= tol))
        fail_msg("%s[%lld]: got %.9g want %.9g (diff %.3g > tol %.3g)", what, (long long)i, got, ref,
                 fabs(got - ref), tol);
}

static void check_bits(const float *a, const float *b, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof *a) != 0)
            fail_msg("%s: not bit-identical at %zu: %.9g vs %.9g", what, i, a[i], b[i]);
}

/* A test weight: ne2 matrices of ne1 rows, quantized from gaussian values,
 * with 0xFF (NaN in every float/half format) in the row and matrix padding so
 * that reading padding poisons the result. deq holds the dequantized values. */
typedef struct tw {
    memra_weight_t w;
    uint8_t *data;
    double *deq; /* [ne2][ne1][ne0] */
} tw;

static void tw_make(tw *t, memra_type_t type, int64_t ne0, int64_t ne1, int64_t ne2, size_t row_pad,
                    size_t mat_pad, float sigma, uint64_t *rng)
{
    const size_t rb = memra__row_bytes(type, ne0);
    assert_true(rb > 0);
    memset(t, 0, sizeof *t);
    t->w.type = type;
    t->w.ne[0] = ne0;
    t->w.ne[1] = ne1;
    t->w.ne[2] = ne2;
    t->w.ne[3] = 1;
    t->w.nb1 = rb + row_pad;
    t->w.nb2 = t->w.nb1 * (size_t)ne1 + mat_pad;
    t->data = malloc(t->w.nb2 * (size_t)ne2);
    t->deq = malloc((size_t)(ne0 * ne1 * ne2) * sizeof *t->deq);
    float *row = malloc((size_t)ne0 * sizeof *row);
    assert_true(t->data && t->deq && row);
    memset(t->data, 0xFF, t->w.nb2 * (size_t)ne2);
    for (int64_t e = 0; e < ne2; e++)
        for (int64_t o = 0; o < ne1; o++) {
            uint8_t *dst = t->data + (size_t)e * t->w.nb2 + (size_t)o * t->w.nb1;
            for (int64_t i = 0; i < ne0; i++)
                row[i] = tu_rng_gauss(rng) * sigma;
            assert_true(memra__quantize_row(type, row, dst, ne0));
            assert_true(memra__dequantize_row(type, dst, row, ne0));
            for (int64_t i = 0; i < ne0; i++)
                t->deq[(e * ne1 + o) * ne0 + i] = row[i];
        }
    free(row);
    t->w.data = t->data;
}

static void tw_free(tw *t)
{
    free(t->data);
    free(t->deq);
}

/* ---- matmul / get_rows --------------------------------------------------- */

typedef struct mm_case {
    memra_type_t type;
    int64_t ne0, ne1, n_rows;
} mm_case;

static const mm_case k_mm_cases[] = {
    {MEMRA_TYPE_F32, 37, 19, 1},   {MEMRA_TYPE_F32, 37, 19, 6},   {MEMRA_TYPE_F16, 64, 33, 5},
    {MEMRA_TYPE_BF16, 32, 7, 3},   {MEMRA_TYPE_Q8_0, 96, 33, 1},  {MEMRA_TYPE_Q8_0, 256, 70, 13},
    {MEMRA_TYPE_Q4_0, 160, 21, 4}, {MEMRA_TYPE_Q4_0, 32, 1, 2},   {MEMRA_TYPE_F16, 5, 3, 1},
};

static void test_matmul(void **state)
{
    (void)state;
    uint64_t rng = 0x1234567;
    for (size_t ci = 0; ci < MEMRA__ARRAY_LEN(k_mm_cases); ci++) {
        const mm_case *c = &k_mm_cases[ci];
        tw w;
        tw_make(&w, c->type, c->ne0, c->ne1, 1, 2 * (ci % 2), 0, 1.0f, &rng);
        const int64_t ldx = c->ne0 + 3, ldy = c->ne1 + 5;
        const size_t xt = (size_t)(c->n_rows * ldx), yt = (size_t)(c->n_rows * ldy + 7);
        float *x = rand_mat(&rng, c->n_rows, c->ne0, ldx, xt, 1.0f);
        float *y = sent_buf(yt), *y1 = sent_buf(yt), *yd = sent_buf(yt);

        assert_int_equal(g_be->iface->matmul(g_be, &w.w, x, ldx, y, ldy, c->n_rows), MEMRA_OK);
        check_sent_outside(y, yt, c->n_rows, c->ne1, ldy, "matmul y");

        /* float64 reference, input-element-major so the summation order differs */
        double *acc = calloc((size_t)c->ne1, sizeof *acc), *mag = calloc((size_t)c->ne1, sizeof *mag);
        for (int64_t r = 0; r < c->n_rows; r++) {
            for (int64_t o = 0; o < c->ne1; o++)
                acc[o] = mag[o] = 0.0;
            for (int64_t i = c->ne0 - 1; i >= 0; i--)
                for (int64_t o = 0; o < c->ne1; o++) {
                    const double p = w.deq[o * c->ne0 + i] * (double)x[r * ldx + i];
                    acc[o] += p;
                    mag[o] += fabs(p);
                }
            for (int64_t o = 0; o < c->ne1; o++) {
                check_close(y[r * ldy + o], acc[o], 1e-7 * fabs(acc[o]) + 1e-12 * mag[o], "matmul", o);
                /* the documented identity with the quant library's dot */
                const float d = (float)memra__dot_row(c->type, (const uint8_t *)w.w.data + o * w.w.nb1,
                                                      x + r * ldx, c->ne0);
                check_bits(&y[r * ldy + o], &d, 1, "matmul vs memra__dot_row");
            }
        }
        /* prefill == row-by-row decode, and independent of the thread count */
        for (int64_t r = 0; r < c->n_rows; r++)
            assert_int_equal(g_be->iface->matmul(g_be, &w.w, x + r * ldx, ldx, yd + r * ldy, ldy, 1), MEMRA_OK);
        assert_int_equal(g_be1->iface->matmul(g_be1, &w.w, x, ldx, y1, ldy, c->n_rows), MEMRA_OK);
        check_bits(y, yd, yt, "matmul prefill vs decode");
        check_bits(y, y1, yt, "matmul 5 vs 1 threads");
        free(acc);
        free(mag);
        free(x);
        free(y);
        free(y1);
        free(yd);
        tw_free(&w);
    }
}

static void test_matmul_errors(void **state)
{
    (void)state;
    uint64_t rng = 7;
    tw w;
    tw_make(&w, MEMRA_TYPE_Q8_0, 64, 4, 1, 0, 0, 1.0f, &rng);
    float x[64 * 2] = {0}, y[8];
    memra_weight_t bad = w.w;
    bad.type = MEMRA_TYPE_Q8_1;
    assert_int_equal(g_be->iface->matmul(g_be, &bad, x, 64, y, 4, 1), MEMRA_E_UNSUPPORTED);
    bad = w.w;
    bad.ne[0] = 48; /* not whole blocks */
    assert_int_equal(g_be->iface->matmul(g_be, &bad, x, 64, y, 4, 1), MEMRA_E_INVALID);
    assert_int_equal(g_be->iface->matmul(g_be, &w.w, x, 32, y, 4, 2), MEMRA_E_INVALID);
    assert_int_equal(g_be->iface->matmul(g_be, &w.w, x, 64, y, 4, 0), MEMRA_OK);
    tw_free(&w);
}

/* matmul_ex is defined as its unfused sequence (lib/backend.h): norm into
 * x_tmp, matmuls, then the epilogue as an elementwise op. On the CPU it must
 * be that sequence bit for bit, write only its outputs' rows, and refuse
 * malformed requests. */
static void mx_sequence(const memra_mm_args_t *a, float **y)
{
    const int64_t n = a->n_rows, ne0 = a->w[0]->ne[0];
    float *xn = malloc((size_t)(n * ne0) * sizeof *xn);
    const float *x = a->x;
    int64_t ldx = a->ldx;
    if (a->norm) {
        assert_int_equal(g_be->iface->norm(g_be, MEMRA_NORM_RMS, a->x, a->ldx, a->norm_w, xn, ne0, n, ne0, a->eps),
                         MEMRA_OK);
        x = xn;
        ldx = ne0;
    }
    const int64_t f = a->w[0]->ne[1];
    float *t0 = malloc((size_t)(n * f) * sizeof *t0), *t1 = malloc((size_t)(n * f) * sizeof *t1);
    if (a->epi == MEMRA_MM_STORE) {
        for (int i = 0; i < a->n_w; i++) {
            assert_int_equal(g_be->iface->matmul(g_be, a->w[i], x, ldx, y[i], a->ldy[i], n), MEMRA_OK);
            if (a->post[i] != MEMRA_EW_COPY) {
                const memra_ew_args_t e = {.op = a->post[i], .y = y[i], .a = y[i], .b = a->post_b[i],
                                           .aux = a->post_aux[i], .rows = n, .cols = a->w[i]->ne[1],
                                           .ys = a->ldy[i], .as = a->ldy[i], .bs = a->post_bs[i]};
                assert_int_equal(g_be->iface->elementwise(g_be, &e), MEMRA_OK);
            }
        }
    } else {
        assert_int_equal(g_be->iface->matmul(g_be, a->w[0], x, ldx, t0, f, n), MEMRA_OK);
        memra_ew_args_t e = {.op = MEMRA_EW_ADD, .y = y[0], .a = y[0], .b = t0, .rows = n, .cols = f,
                             .ys = a->ldy[0], .as = a->ldy[0], .bs = f};
        if (a->epi == MEMRA_MM_GLU) {
            assert_int_equal(g_be->iface->matmul(g_be, a->w[1], x, ldx, t1, f, n), MEMRA_OK);
            e.op = a->act == MEMRA_ACT_GELU ? MEMRA_EW_GEGLU : MEMRA_EW_SWIGLU;
            e.a = t0;
            e.as = f;
            e.b = t1;
        }
        assert_int_equal(g_be->iface->elementwise(g_be, &e), MEMRA_OK);
    }
    free(xn);
    free(t0);
    free(t1);
}

static void test_matmul_ex(void **state)
{
    (void)state;
    uint64_t rng = 0x5eed;
    const int64_t ne0 = 96, n = 3, ldx = ne0 + 5;
    const int64_t rows[3] = {7, 5, 9};
    tw w[3];
    for (int i = 0; i < 3; i++)
        tw_make(&w[i], i == 1 ? MEMRA_TYPE_F16 : MEMRA_TYPE_Q8_0, ne0, i == 2 ? 7 : rows[i], 1, 0, 0, 1.0f, &rng);
    float *x = rand_mat(&rng, n, ne0, ldx, (size_t)(n * ldx), 2.0f);
    float *x_copy = malloc((size_t)(n * ldx) * sizeof *x_copy);
    memcpy(x_copy, x, (size_t)(n * ldx) * sizeof *x);
    float nw[96], pb[7], pa[7];
    for (int i = 0; i < 96; i++)
        nw[i] = 0.5f + (float)tu_rng_unit(&rng);
    for (int i = 0; i < 7; i++) {
        pb[i] = (float)tu_rng_unit(&rng) * 4.0f - 2.0f;
        pa[i] = -0.1f - 3.0f * (float)tu_rng_unit(&rng);
    }
    float *x_tmp = malloc((size_t)(n * ne0) * sizeof *x_tmp), *tmp0 = malloc(64 * sizeof *tmp0),
          *tmp1 = malloc(64 * sizeof *tmp1);
    static const memra_mm_epi_t epis[4] = {MEMRA_MM_STORE, MEMRA_MM_GLU, MEMRA_MM_GLU, MEMRA_MM_ADD};
    for (int c = 0; c < 4; c++) {
        memra_mm_args_t a = {.x = x, .ldx = ldx, .n_rows = n, .norm = c != 3, .norm_w = c == 2 ? NULL : nw,
                             .eps = 1e-6f, .epi = epis[c], .act = c == 2 ? MEMRA_ACT_GELU : MEMRA_ACT_SILU,
                             .x_tmp = x_tmp, .tmp = {tmp0, tmp1}};
        if (c == 0) { /* three weights of two types, sigmoid and softplus·a on two of them */
            a.n_w = 3;
            for (int i = 0; i < 3; i++)
                a.w[i] = &w[i].w;
            a.post[1] = MEMRA_EW_SIGMOID;
            a.post[2] = MEMRA_EW_SOFTPLUS_MUL;
            a.post_b[2] = pb;
            a.post_aux[2] = pa;
        } else if (c < 3) { /* GLU halves: both 7 rows */
            a.n_w = 2;
            a.w[0] = &w[0].w;
            a.w[1] = &w[2].w;
        } else {
            a.n_w = 1;
            a.w[0] = &w[2].w;
        }
        const int n_out = a.epi == MEMRA_MM_STORE ? a.n_w : 1;
        float *got[3] = {NULL}, *want[3] = {NULL};
        size_t tot[3];
        for (int i = 0; i < n_out; i++) {
            a.ldy[i] = a.w[i]->ne[1] + 2;
            tot[i] = (size_t)(n * a.ldy[i] + 3);
            got[i] = sent_buf(tot[i]);
            want[i] = sent_buf(tot[i]);
            if (a.epi == MEMRA_MM_ADD)
                for (size_t k = 0; k < tot[i]; k++)
                    got[i][k] = want[i][k] = (int64_t)(k / (size_t)a.ldy[i]) < n &&
                                                     (int64_t)(k % (size_t)a.ldy[i]) < a.w[i]->ne[1]
                                                 ? (float)k
                                                 : sent();
            a.y[i] = got[i];
        }
        assert_int_equal(memra__matmul_ex(g_be, &a), MEMRA_OK);
        mx_sequence(&a, want);
        for (int i = 0; i < n_out; i++) {
            check_bits(got[i], want[i], tot[i], "matmul_ex vs its sequence");
            check_sent_outside(got[i], tot[i], n, a.w[i]->ne[1], a.ldy[i], "matmul_ex y");
            free(got[i]);
            free(want[i]);
        }
        check_bits(x, x_copy, (size_t)(n * ldx), "matmul_ex leaves x alone");
    }

    /* a pre step and a GEGLU post op with a row vector (gemma4's per-layer
     * gate): norm_ex(pre) into x, then the matmul and GEGLU(y, b's rows) */
    {
        const int64_t ld = ne0 + 4, lb = 9;
        float *px = rand_mat(&rng, n, ne0, ld, (size_t)(n * ld), 2.0f), *pad = rand_mat(&rng, n, ne0, ld, (size_t)(n * ld), 4.0f);
        float *b = rand_mat(&rng, n, 7, lb, (size_t)(n * lb), 2.0f);
        float *px2 = malloc((size_t)(n * ld) * sizeof *px2), *xs[2], *ys[2];
        memcpy(px2, px, (size_t)(n * ld) * sizeof *px);
        for (int k = 0; k < 2; k++) {
            xs[k] = sent_buf((size_t)(n * ld));
            ys[k] = sent_buf((size_t)(n * lb));
        }
        memra_norm_args_t pre[2];
        for (int k = 0; k < 2; k++)
            pre[k] = (memra_norm_args_t){.x = k ? px2 : px, .xs = ld, .w = nw, .eps = 1e-6f, .add = pad, .adds = ld,
                                         .scale = 0.5f, .y = xs[k], .ys = ld, .rows = n, .dim = ne0,
                                         .tmp = k ? px2 : px};
        memra_mm_args_t a = {.x = xs[0], .ldx = ld, .n_rows = n, .n_w = 1, .w = {&w[0].w}, .y = {ys[0]}, .ldy = {lb},
                             .post = {MEMRA_EW_GEGLU}, .post_b = {b}, .post_bs = {lb}, .x_tmp = x_tmp,
                             .tmp = {tmp0, tmp1}, .pre = &pre[0]};
        assert_int_equal(memra__matmul_ex(g_be, &a), MEMRA_OK);
        assert_int_equal(memra__norm_ex(g_be, &pre[1]), MEMRA_OK);
        a.x = xs[1];
        a.pre = NULL;
        mx_sequence(&a, &ys[1]);
        check_bits(xs[0], xs[1], (size_t)(n * ld), "matmul_ex's pre step vs norm_ex");
        check_bits(ys[0], ys[1], (size_t)(n * lb), "matmul_ex with a pre step and GEGLU vs its sequence");
        check_sent_outside(ys[0], (size_t)(n * lb), n, 7, lb, "matmul_ex GEGLU y");
        /* malformed: the pre step's rows are not x; GEGLU without its vector */
        a.x = xs[0];
        a.pre = &pre[0];
        pre[0].ys = ld + 4;
        assert_int_equal(memra__matmul_ex(g_be, &a), MEMRA_E_INVALID);
        pre[0].ys = ld;
        pre[0].y = xs[1];
        assert_int_equal(memra__matmul_ex(g_be, &a), MEMRA_E_INVALID);
        a.pre = NULL;
        a.post_b[0] = NULL;
        assert_int_equal(memra__matmul_ex(g_be, &a), MEMRA_E_INVALID);
        free(px);
        free(pad);
        free(b);
        free(px2);
        for (int k = 0; k < 2; k++) {
            free(xs[k]);
            free(ys[k]);
        }
    }

    /* malformed requests: a message and MEMRA_E_INVALID, nothing written */
    float y[64];
    const memra_mm_args_t ok = {.x = x, .ldx = ldx, .n_rows = 1, .n_w = 1, .w = {&w[0].w}, .y = {y},
                                .ldy = {7}, .x_tmp = x_tmp, .tmp = {tmp0, tmp1}};
    memra_mm_args_t bad = ok;
    bad.n_w = 0;
    assert_int_equal(memra__matmul_ex(g_be, &bad), MEMRA_E_INVALID);
    bad = ok;
    bad.epi = MEMRA_MM_GLU; /* one weight */
    assert_int_equal(memra__matmul_ex(g_be, &bad), MEMRA_E_INVALID);
    bad = ok;
    bad.epi = MEMRA_MM_GLU;
    bad.n_w = 2;
    bad.w[1] = &w[1].w; /* 5 rows against 7 */
    assert_int_equal(memra__matmul_ex(g_be, &bad), MEMRA_E_INVALID);
    bad = ok;
    bad.epi = MEMRA_MM_ADD;
    bad.post[0] = MEMRA_EW_SIGMOID; /* post ops only after STORE */
    assert_int_equal(memra__matmul_ex(g_be, &bad), MEMRA_E_INVALID);
    bad = ok;
    bad.post[0] = MEMRA_EW_SOFTPLUS_MUL; /* without its vectors */
    assert_int_equal(memra__matmul_ex(g_be, &bad), MEMRA_E_INVALID);
    bad = ok;
    bad.post[0] = MEMRA_EW_GELU; /* not a post op */
    assert_int_equal(memra__matmul_ex(g_be, &bad), MEMRA_E_INVALID);
    bad = ok;
    bad.norm = true;
    bad.x_tmp = NULL;
    assert_int_equal(memra__matmul_ex(g_be, &bad), MEMRA_E_INVALID);
    tw wide;
    tw_make(&wide, MEMRA_TYPE_Q8_0, 128, 3, 1, 0, 0, 1.0f, &rng);
    bad = ok;
    bad.n_w = 2;
    bad.w[1] = &wide.w; /* another width */
    bad.y[1] = y + 32;
    assert_int_equal(memra__matmul_ex(g_be, &bad), MEMRA_E_INVALID);
    bad = ok;
    bad.n_rows = 2;
    bad.ldy[0] = 6; /* below 7 outputs */
    assert_int_equal(memra__matmul_ex(g_be, &bad), MEMRA_E_INVALID);
    assert_true(memra_last_error()[0] != '\0');
    tw_free(&wide);
    for (int i = 0; i < 3; i++)
        tw_free(&w[i]);
    free(x);
    free(x_copy);
    free(x_tmp);
    free(tmp0);
    free(tmp1);
}

static void test_get_rows(void **state)
{
    (void)state;
    uint64_t rng = 99;
    const memra_type_t types[] = {MEMRA_TYPE_Q4_0, MEMRA_TYPE_F16, MEMRA_TYPE_Q8_0, MEMRA_TYPE_F32};
    const int64_t ne0s[] = {64, 37, 32, 5};
    for (size_t ti = 0; ti < MEMRA__ARRAY_LEN(types); ti++) {
        const int64_t ne0 = ne0s[ti], ne1 = 10, n = 6, ldy = ne0 + 2;
        tw w;
        tw_make(&w, types[ti], ne0, ne1, 1, 4, 0, 1.0f, &rng);
        const int32_t ids[6] = {3, 0, 9, 3, 7, 1};
        const size_t yt = (size_t)(n * ldy + 3);
        float *y = sent_buf(yt);
        assert_int_equal(g_be->iface->get_rows(g_be, &w.w, ids, n, y, ldy), MEMRA_OK);
        check_sent_outside(y, yt, n, ne0, ldy, "get_rows");
        for (int64_t r = 0; r < n; r++)
            for (int64_t i = 0; i < ne0; i++)
                if ((double)y[r * ldy + i] != w.deq[ids[r] * ne0 + i])
                    fail_msg("get_rows row %lld elem %lld differs", (long long)r, (long long)i);
        const int32_t bad1[2] = {0, 10}, bad2[1] = {-1};
        assert_int_equal(g_be->iface->get_rows(g_be, &w.w, bad1, 2, y, ldy), MEMRA_E_RANGE);
        assert_int_equal(g_be->iface->get_rows(g_be, &w.w, bad2, 1, y, ldy), MEMRA_E_RANGE);
        free(y);
        tw_free(&w);
    }
}

/* ---- norm ---------------------------------------------------------------- */

static void test_norm(void **state)
{
    (void)state;
    uint64_t rng = 4242;
    const int64_t dims[] = {1, 7, 128, 4099};
    for (int kind = 0; kind < 2; kind++)
        for (size_t di = 0; di < MEMRA__ARRAY_LEN(dims); di++)
            for (int with_w = 0; with_w < 2; with_w++)
                for (int inplace = 0; inplace < 2; inplace++) {
                    const int64_t dim = dims[di], rows = 5, xs = dim + 1, ys = inplace ? xs : dim + 3;
                    const float eps = kind == MEMRA_NORM_RMS ? 1e-6f : 1e-5f;
                    const size_t xt = (size_t)(rows * xs + 2), yt = (size_t)(rows * ys + 2);
                    float *x = rand_mat(&rng, rows, dim, xs, xt, 2.0f);
                    for (int64_t i = 0; i < dim; i++)
                        x[2 * xs + i] = 0.0f; /* a zero row: eps must keep it finite */
                    float *x0 = malloc(xt * sizeof *x0);
                    memcpy(x0, x, xt * sizeof *x0);
                    float *w = with_w ? rand_mat(&rng, 1, dim, dim, (size_t)dim, 1.0f) : NULL;
                    float *y = inplace ? x : sent_buf(yt);
                    assert_int_equal(g_be->iface->norm(g_be, (memra_norm_kind_t)kind, x, xs, w, y, ys, rows, dim,
                                                       eps),
                                     MEMRA_OK);
                    check_sent_outside(y, inplace ? xt : yt, rows, dim, ys, "norm y");
                    for (int64_t r = 0; r < rows; r++) {
                        double ss = 0.0;
                        for (int64_t i = dim - 1; i >= 0; i--)
                            ss += (double)x0[r * xs + i] * x0[r * xs + i];
                        const double den = kind == MEMRA_NORM_RMS ? sqrt(ss / dim + eps) : fmax(sqrt(ss), eps);
                        for (int64_t i = 0; i < dim; i++) {
                            const double ref = x0[r * xs + i] / den * (w ? w[i] : 1.0);
                            check_close(y[r * ys + i], ref, 1e-6 * fabs(ref), "norm", i);
                        }
                    }
                    if (!inplace)
                        free(y);
                    free(x);
                    free(x0);
                    free(w);
                }
}

/* norm_ex is defined as its sequence (lib/backend.h): norm (into tmp when
 * there is an add), ADD(add, normed), SCALE when scale != 1. On the CPU it
 * must be that sequence bit for bit, write only y's cells, and refuse
 * malformed requests. Also the identity gemma4's router relies on: a norm
 * with weight w is the weightless norm times w (elementwise MUL) bit for
 * bit. */
static void test_norm_ex(void **state)
{
    (void)state;
    uint64_t rng = 777;
    const int64_t rows = 3, dim = 96, xs = dim + 5;
    const size_t xt = (size_t)(rows * xs + 2);
    /* add: 0 none, 1 separate y, 2 y = add; w; scale */
    static const struct {
        int add;
        bool w;
        float scale;
    } cs[] = {{0, true, 1.0f}, {0, true, 0.125f}, {1, true, 1.0f}, {1, false, 3.0f}, {2, true, 0.37f}, {2, true, 1.0f}};
    float *w = rand_mat(&rng, 1, dim, dim, (size_t)dim, 1.0f);
    for (size_t c = 0; c < MEMRA__ARRAY_LEN(cs); c++) {
        const int64_t ys = dim + 3, adds = cs[c].add == 2 ? ys : dim + 1;
        const size_t yt = (size_t)(rows * ys + 2), at = (size_t)(rows * adds + 2);
        float *x = rand_mat(&rng, rows, dim, xs, xt, 2.0f), *x2 = malloc(xt * sizeof *x2);
        float *add = rand_mat(&rng, rows, dim, adds, at, 3.0f), *add2 = malloc(at * sizeof *add2);
        memcpy(x2, x, xt * sizeof *x);
        memcpy(add2, add, at * sizeof *add);
        float *y = cs[c].add == 2 ? add : sent_buf(yt), *y2 = cs[c].add == 2 ? add2 : sent_buf(yt);
        /* tmp is x, as the forward passes it (normed in place by the sequence) */
        const memra_norm_args_t a = {.x = x, .xs = xs, .w = cs[c].w ? w : NULL, .eps = 1e-6f,
                                     .add = cs[c].add ? add : NULL, .adds = adds, .scale = cs[c].scale, .y = y,
                                     .ys = ys, .rows = rows, .dim = dim, .tmp = x};
        assert_int_equal(memra__norm_ex(g_be, &a), MEMRA_OK);
        const memra__backend_i *o = g_be->iface;
        if (cs[c].add) {
            assert_int_equal(o->norm(g_be, MEMRA_NORM_RMS, x2, xs, a.w, x2, xs, rows, dim, a.eps), MEMRA_OK);
            const memra_ew_args_t e = {.op = MEMRA_EW_ADD, .y = y2, .a = add2, .b = x2, .rows = rows, .cols = dim,
                                       .ys = ys, .as = adds, .bs = xs};
            assert_int_equal(o->elementwise(g_be, &e), MEMRA_OK);
        } else {
            assert_int_equal(o->norm(g_be, MEMRA_NORM_RMS, x2, xs, a.w, y2, ys, rows, dim, a.eps), MEMRA_OK);
        }
        if (cs[c].scale != 1.0f) {
            const memra_ew_args_t e = {.op = MEMRA_EW_SCALE, .y = y2, .a = y2, .rows = rows, .cols = dim, .ys = ys,
                                       .as = ys, .s = cs[c].scale};
            assert_int_equal(o->elementwise(g_be, &e), MEMRA_OK);
        }
        check_bits(y, y2, cs[c].add == 2 ? at : yt, "norm_ex vs its sequence");
        check_sent_outside(y, cs[c].add == 2 ? at : yt, rows, dim, ys, "norm_ex y");
        if (cs[c].add != 2) {
            free(y);
            free(y2);
        }
        free(x);
        free(x2);
        free(add);
        free(add2);
    }

    /* norm(x, w) == MUL(norm(x), w) */
    float *x = rand_mat(&rng, rows, dim, xs, xt, 2.0f), *yw = sent_buf(xt), *yn = sent_buf(xt);
    assert_int_equal(g_be->iface->norm(g_be, MEMRA_NORM_RMS, x, xs, w, yw, xs, rows, dim, 1e-6f), MEMRA_OK);
    assert_int_equal(g_be->iface->norm(g_be, MEMRA_NORM_RMS, x, xs, NULL, yn, xs, rows, dim, 1e-6f), MEMRA_OK);
    const memra_ew_args_t mul = {.op = MEMRA_EW_MUL, .y = yn, .a = yn, .b = w, .rows = rows, .cols = dim, .ys = xs,
                                 .as = xs, .bs = 0};
    assert_int_equal(g_be->iface->elementwise(g_be, &mul), MEMRA_OK);
    check_bits(yw, yn, xt, "norm with w vs norm then MUL w");

    /* malformed requests */
    const memra_norm_args_t ok = {.x = x, .xs = xs, .w = w, .eps = 1e-6f, .add = yn, .adds = xs, .scale = 1.0f,
                                  .y = yw, .ys = xs, .rows = rows, .dim = dim, .tmp = x};
    memra_norm_args_t bad = ok;
    bad.tmp = NULL; /* an add needs the sequence's scratch */
    assert_int_equal(memra__norm_ex(g_be, &bad), MEMRA_E_INVALID);
    bad = ok;
    bad.y = yn; /* y is add with another stride */
    bad.ys = xs + 1;
    assert_int_equal(memra__norm_ex(g_be, &bad), MEMRA_E_INVALID);
    bad = ok;
    bad.adds = dim - 1;
    assert_int_equal(memra__norm_ex(g_be, &bad), MEMRA_E_INVALID);
    bad = ok;
    bad.scale = NAN;
    assert_int_equal(memra__norm_ex(g_be, &bad), MEMRA_E_INVALID);
    assert_int_equal(memra__norm_ex(g_be, NULL), MEMRA_E_INVALID);
    assert_true(memra_last_error()[0] != '\0');
    free(x);
    free(yw);
    free(yn);
    free(w);
}

/* A norm chain is its steps' norm_ex calls in order, bit for bit (gemma4's
 * MoE post-attention chain: r = x + rms(a), then two norms of r; and its
 * post-FFN chain: f normed in place, f = f + rms(e), x = r + rms(f) * s),
 * and steps sharing memory other than row for row, or reading an earlier
 * step's scratch, are refused. */
static void test_norm_chain(void **state)
{
    (void)state;
    uint64_t rng = 4242;
    const int64_t rows = 3, D = 80, cf = D + 7;
    const size_t rt = (size_t)(rows * D), ct = (size_t)(rows * cf);
    float *w[4];
    for (int i = 0; i < 4; i++)
        w[i] = rand_mat(&rng, 1, D, D, (size_t)D, 1.0f);
    /* [0] the chain, [1] its steps one by one */
    float *a[2], *x[2], *r[2], *rn[2], *h2[2], *e[2], *f[2];
    a[0] = rand_mat(&rng, rows, D, D, rt, 2.0f);
    x[0] = rand_mat(&rng, rows, D, cf, ct, 3.0f);
    e[0] = rand_mat(&rng, rows, D, D, rt, 2.0f);
    f[0] = rand_mat(&rng, rows, D, D, rt, 1.5f);
    r[0] = sent_buf(rt);
    rn[0] = sent_buf(rt);
    h2[0] = sent_buf(rt);
    float **bufs[] = {a, x, e, f, r, rn, h2};
    const size_t lens[] = {rt, ct, rt, rt, rt, rt, rt};
    for (size_t i = 0; i < MEMRA__ARRAY_LEN(bufs); i++) {
        bufs[i][1] = malloc(lens[i] * sizeof(float));
        memcpy(bufs[i][1], bufs[i][0], lens[i] * sizeof(float));
    }
    for (int s = 0; s < 2; s++) {
        const memra_norm_args_t A[3] = {
            {.x = a[s], .xs = D, .w = w[0], .eps = 1e-6f, .add = x[s], .adds = cf, .scale = 1.0f, .y = r[s], .ys = D,
             .rows = rows, .dim = D, .tmp = a[s]},
            {.x = r[s], .xs = D, .w = w[1], .eps = 1e-6f, .scale = 0.11f, .y = rn[s], .ys = D, .rows = rows, .dim = D},
            {.x = r[s], .xs = D, .w = w[2], .eps = 1e-6f, .scale = 1.0f, .y = h2[s], .ys = D, .rows = rows, .dim = D},
        };
        const memra_norm_args_t B[3] = {
            {.x = f[s], .xs = D, .w = w[3], .eps = 1e-6f, .scale = 1.0f, .y = f[s], .ys = D, .rows = rows, .dim = D},
            {.x = e[s], .xs = D, .w = w[1], .eps = 1e-6f, .add = f[s], .adds = D, .scale = 1.0f, .y = f[s], .ys = D,
             .rows = rows, .dim = D, .tmp = e[s]},
            {.x = f[s], .xs = D, .w = w[2], .eps = 1e-6f, .add = r[s], .adds = D, .scale = 0.5f, .y = x[s], .ys = cf,
             .rows = rows, .dim = D, .tmp = f[s]},
        };
        if (s == 0) {
            assert_int_equal(memra__norm_chain(g_be, A, 3), MEMRA_OK);
            assert_int_equal(memra__norm_chain(g_be, B, 3), MEMRA_OK);
        } else {
            for (int i = 0; i < 3; i++)
                assert_int_equal(memra__norm_ex(g_be, &A[i]), MEMRA_OK);
            for (int i = 0; i < 3; i++)
                assert_int_equal(memra__norm_ex(g_be, &B[i]), MEMRA_OK);
        }
    }
    check_bits(r[0], r[1], rt, "chain r");
    check_bits(rn[0], rn[1], rt, "chain rn");
    check_bits(h2[0], h2[1], rt, "chain h2");
    check_bits(x[0], x[1], ct, "chain x");
    check_bits(f[0], f[1], rt, "chain f");

    /* refused: a stride that maps other rows, a read of an earlier
     * step's scratch, a write over a weight, rows that differ, counts */
    const memra_norm_args_t s0 = {.x = a[0], .xs = D, .w = w[0], .eps = 1e-6f, .add = x[0], .adds = cf,
                                  .scale = 1.0f, .y = r[0], .ys = D, .rows = rows, .dim = D, .tmp = a[0]};
    const memra_norm_args_t s1 = {.x = r[0], .xs = D, .w = w[1], .eps = 1e-6f, .scale = 1.0f, .y = rn[0],
                                  .ys = D, .rows = rows, .dim = D};
    memra_norm_args_t c[2] = {s0, s1};
    assert_int_equal(memra__norm_chain(g_be, c, 2), MEMRA_OK);
    c[1].xs = 2 * D;
    assert_int_equal(memra__norm_chain(g_be, c, 2), MEMRA_E_INVALID);
    c[1] = s1;
    c[1].x = a[0];
    assert_int_equal(memra__norm_chain(g_be, c, 2), MEMRA_E_INVALID);
    c[1] = s1;
    c[1].y = w[0];
    c[1].rows = 1;
    c[0].rows = 1;
    assert_int_equal(memra__norm_chain(g_be, c, 2), MEMRA_E_INVALID);
    c[0] = s0;
    c[1] = s1;
    c[1].rows = rows - 1;
    assert_int_equal(memra__norm_chain(g_be, c, 2), MEMRA_E_INVALID);
    assert_int_equal(memra__norm_chain(g_be, c, 0), MEMRA_E_INVALID);
    assert_int_equal(memra__norm_chain(g_be, c, MEMRA_NORM_CHAIN_MAX + 1), MEMRA_E_INVALID);

    /* two parts of one carry row (gemma4's hidden row and its normed copy
     * for the next layer, rows cw apart): accepted, the sequence's bits;
     * a copy that reaches into the hidden rows is refused */
    const int64_t cw = 2 * D + 8;
    float *cy[2];
    for (int s = 0; s < 2; s++) {
        cy[s] = sent_buf((size_t)(rows * cw));
        const memra_norm_args_t C[2] = {
            {.x = e[0], .xs = D, .w = w[0], .eps = 1e-6f, .scale = 0.5f, .y = cy[s], .ys = cw, .rows = rows,
             .dim = D},
            {.x = cy[s], .xs = cw, .w = w[1], .eps = 1e-6f, .scale = 1.0f, .y = cy[s] + D + 8, .ys = cw,
             .rows = rows, .dim = D},
        };
        if (s == 0) {
            assert_int_equal(memra__norm_chain(g_be, C, 2), MEMRA_OK);
            memra_norm_args_t bad[2] = {C[0], C[1]};
            bad[1].y = cy[s] + D / 2;
            assert_int_equal(memra__norm_chain(g_be, bad, 2), MEMRA_E_INVALID);
            bad[1].y = cy[s] + D + 9; /* its rows end past the row's end: into the next row's hidden part */
            assert_int_equal(memra__norm_chain(g_be, bad, 2), MEMRA_E_INVALID);
        } else {
            for (int i = 0; i < 2; i++)
                assert_int_equal(memra__norm_ex(g_be, &C[i]), MEMRA_OK);
        }
    }
    check_bits(cy[0], cy[1], (size_t)(rows * cw), "chain carry parts");
    free(cy[0]);
    free(cy[1]);
    for (size_t i = 0; i < MEMRA__ARRAY_LEN(bufs); i++)
        for (int s = 0; s < 2; s++)
            free(bufs[i][s]);
    for (int i = 0; i < 4; i++)
        free(w[i]);
}

/* memra__router is matmul_ex and then route, bit for bit (qwen35moe's
 * shape: the router and the shared expert's one-row gate in one call), and
 * refuses a route that does not take the first weight's packed outputs. */
static void test_router(void **state)
{
    (void)state;
    uint64_t rng = 777;
    const int64_t n = 3, E = 48, X = 16, K = 4;
    tw r, g;
    tw_make(&r, MEMRA_TYPE_F32, E, X, 1, 0, 0, 1.0f, &rng);
    tw_make(&g, MEMRA_TYPE_F32, E, 1, 1, 0, 0, 1.0f, &rng);
    float *x = rand_mat(&rng, n, E, E, (size_t)(n * E), 1.0f);
    float *logits[2], *sg[2], *wts[2];
    int32_t *ids[2];
    memra_mm_args_t m[2];
    memra_route_args_t rt[2];
    for (int s = 0; s < 2; s++) {
        logits[s] = sent_buf((size_t)(n * X));
        sg[s] = sent_buf((size_t)n);
        wts[s] = sent_buf((size_t)(n * K));
        ids[s] = calloc((size_t)(n * K), sizeof(int32_t));
        m[s] = (memra_mm_args_t){.x = x, .ldx = E, .n_rows = n, .n_w = 2, .w = {&r.w, &g.w}, .y = {logits[s], sg[s]},
                                 .ldy = {X, 1}};
        rt[s] = (memra_route_args_t){.logits = logits[s], .ids = ids[s], .weights = wts[s], .n_tokens = n,
                                     .n_expert = X, .k = K, .norm = true};
    }
    assert_int_equal(memra__router(g_be, &m[0], &rt[0]), MEMRA_OK);
    assert_int_equal(memra__matmul_ex(g_be, &m[1]), MEMRA_OK);
    assert_int_equal(g_be->iface->route(g_be, &rt[1]), MEMRA_OK);
    check_bits(logits[0], logits[1], (size_t)(n * X), "router logits");
    check_bits(sg[0], sg[1], (size_t)n, "router shared gate");
    check_bits(wts[0], wts[1], (size_t)(n * K), "router weights");
    assert_memory_equal(ids[0], ids[1], (size_t)(n * K) * sizeof(int32_t));

    /* refused: the route on another buffer, other token or expert counts,
     * strided logits; no arguments */
    memra_route_args_t bad = rt[0];
    bad.logits = logits[1];
    assert_int_equal(memra__router(g_be, &m[0], &bad), MEMRA_E_INVALID);
    bad = rt[0];
    bad.n_tokens = n - 1;
    assert_int_equal(memra__router(g_be, &m[0], &bad), MEMRA_E_INVALID);
    bad = rt[0];
    bad.n_expert = X - 1;
    assert_int_equal(memra__router(g_be, &m[0], &bad), MEMRA_E_INVALID);
    bad = rt[0];
    bad.k = X + 1;
    assert_int_equal(memra__router(g_be, &m[0], &bad), MEMRA_E_INVALID);
    memra_mm_args_t mb = m[0];
    mb.ldy[0] = X + 1;
    assert_int_equal(memra__router(g_be, &mb, &rt[0]), MEMRA_E_INVALID);
    assert_int_equal(memra__router(g_be, NULL, &rt[0]), MEMRA_E_INVALID);
    assert_true(memra_last_error()[0] != '\0');
    for (int s = 0; s < 2; s++) {
        free(logits[s]);
        free(sg[s]);
        free(wts[s]);
        free(ids[s]);
    }
    free(x);
    tw_free(&r);
    tw_free(&g);
}

/* qk_norm_rope with gemma4's three parts (q and k normed with weights and
 * roped, v normed without weight and not roped, v reading k's src) is the
 * sequence of norm and rope calls bit for bit, with the step's stores that
 * sequence and then kv_store's bytes; four parts, three stores and a store
 * of a type no cache holds are refused. */
static void test_qk_norm_rope_parts(void **state)
{
    (void)state;
    uint64_t rng = 31337;
    const int64_t n = 3, H = 4, Hkv = 2, hd = 32, n_rot = 16, qd = H * hd, kd = Hkv * hd, kvs = kd + 4;
    float *q = rand_mat(&rng, n, qd, qd, (size_t)(n * qd), 1.5f), *k = rand_mat(&rng, n, kd, kd, (size_t)(n * kd), 1.5f);
    float *qw = rand_mat(&rng, 1, hd, hd, (size_t)hd, 1.0f), *kw = rand_mat(&rng, 1, hd, hd, (size_t)hd, 1.0f);
    float *ff = malloc((size_t)(n_rot / 2) * sizeof *ff);
    for (int64_t i = 0; i < n_rot / 2; i++)
        ff[i] = 1.0f + (float)i;
    const int32_t pos[3] = {5, 900, 17};
    const size_t kt = (size_t)(n * kvs);
    float *got[3] = {sent_buf((size_t)(n * qd)), sent_buf(kt), sent_buf(kt)};
    float *want[3] = {sent_buf((size_t)(n * qd)), sent_buf(kt), sent_buf(kt)};
    const memra_rope_args_t rope = {.n_tokens = n, .head_dim = hd, .n_rot = n_rot, .pos = pos, .base = 10000.0f,
                                    .freq_factors = ff, .mode = MEMRA_ROPE_NEOX};
    memra_qk_args_t a = {
        .part = {{.src = q, .src_head_stride = hd, .src_token_stride = qd, .dst = got[0], .dst_head_stride = hd,
                  .dst_token_stride = qd, .n_heads = H, .norm_w = qw},
                 {.src = k, .src_head_stride = hd, .src_token_stride = kd, .dst = got[1], .dst_head_stride = hd,
                  .dst_token_stride = kvs, .n_heads = Hkv, .norm_w = kw},
                 {.src = k, .src_head_stride = hd, .src_token_stride = kd, .dst = got[2], .dst_head_stride = hd,
                  .dst_token_stride = kvs, .n_heads = Hkv, .norm_w = NULL, .no_rope = true}},
        .n_parts = 3, .eps = 1e-6f, .rope = rope};
    assert_int_equal(memra__qk_norm_rope(g_be, &a), MEMRA_OK);
    const memra__backend_i *o = g_be->iface;
    assert_int_equal(o->norm(g_be, MEMRA_NORM_RMS, q, hd, qw, want[0], hd, n * H, hd, 1e-6f), MEMRA_OK);
    for (int64_t t = 0; t < n; t++) {
        assert_int_equal(o->norm(g_be, MEMRA_NORM_RMS, k + t * kd, hd, kw, want[1] + t * kvs, hd, Hkv, hd, 1e-6f),
                         MEMRA_OK);
        assert_int_equal(o->norm(g_be, MEMRA_NORM_RMS, k + t * kd, hd, NULL, want[2] + t * kvs, hd, Hkv, hd, 1e-6f),
                         MEMRA_OK);
    }
    memra_rope_args_t r = rope;
    r.x = want[0];
    r.n_heads = H;
    r.head_stride = hd;
    r.token_stride = qd;
    assert_int_equal(o->rope(g_be, &r), MEMRA_OK);
    r.x = want[1];
    r.n_heads = Hkv;
    r.token_stride = kvs;
    assert_int_equal(o->rope(g_be, &r), MEMRA_OK);
    check_bits(got[0], want[0], (size_t)(n * qd), "qk_norm_rope q");
    check_bits(got[1], want[1], kt, "qk_norm_rope k");
    check_bits(got[2], want[2], kt, "qk_norm_rope v (norm only)");
    check_sent_outside(got[2], kt, n, kd, kvs, "qk_norm_rope v");
    /* with the step's stores: the same rows, then k and v into F16 cache
     * rows from position 7 (kv_store's bytes: the same op after the step) */
    const size_t rb = (size_t)kd * 2 + 8;
    uint8_t *cache[2][2];
    for (int c = 0; c < 2; c++)
        for (int j = 0; j < 2; j++) {
            cache[c][j] = malloc(rb * 12);
            memset(cache[c][j], 0xA5, rb * 12);
        }
    memra_kv_store_args_t st[2];
    for (int j = 0; j < 2; j++)
        st[j] = (memra_kv_store_args_t){.src = got[1 + j], .src_stride = kvs, .dst = cache[0][j] + 7 * rb,
                                        .dst_row_bytes = rb, .type = MEMRA_TYPE_F16, .rows = n, .cols = kd, .pos = 7};
    a.store = st;
    a.n_store = 2;
    assert_int_equal(memra__qk_norm_rope(g_be, &a), MEMRA_OK);
    check_bits(got[0], want[0], (size_t)(n * qd), "qk_norm_rope q, with stores");
    check_bits(got[1], want[1], kt, "qk_norm_rope k, with stores");
    for (int j = 0; j < 2; j++) {
        memra_kv_store_args_t w = st[j];
        w.src = want[1 + j];
        w.dst = cache[1][j] + 7 * rb;
        assert_int_equal(o->kv_store(g_be, &w), MEMRA_OK);
        assert_memory_equal(cache[0][j], cache[1][j], rb * 12);
    }
    a.n_store = 3; /* more than MEMRA_QK_MAX_STORES */
    assert_int_equal(memra__qk_norm_rope(g_be, &a), MEMRA_E_INVALID);
    a.n_store = 2;
    st[1].type = MEMRA_TYPE_Q4_K; /* not a cache type: kv_store's own refusal */
    assert_int_equal(memra__qk_norm_rope(g_be, &a), MEMRA_E_UNSUPPORTED);
    a.n_store = 0;
    a.n_parts = 4;
    assert_int_equal(memra__qk_norm_rope(g_be, &a), MEMRA_E_INVALID);
    for (int c = 0; c < 2; c++)
        for (int j = 0; j < 2; j++)
            free(cache[c][j]);
    for (int i = 0; i < 3; i++) {
        free(got[i]);
        free(want[i]);
    }
    free(q);
    free(k);
    free(qw);
    free(kw);
    free(ff);
}

/* ---- elementwise --------------------------------------------------------- */

static double ref_gelu(double x)
{
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * pow(x, 3.0))));
}

static double ref_sigmoid(double x)
{
    return 1.0 / (1.0 + exp(-x));
}

static double ref_ew(memra_ew_op_t op, double a, double b, double c, double s)
{
    switch (op) {
    case MEMRA_EW_COPY: return a;
    case MEMRA_EW_ADD: return a + b;
    case MEMRA_EW_MUL: return a * b;
    case MEMRA_EW_SCALE: return a * s;
    case MEMRA_EW_ADD_SCALED: return a + b * s;
    case MEMRA_EW_SILU: return a * ref_sigmoid(a);
    case MEMRA_EW_GELU: return ref_gelu(a);
    case MEMRA_EW_SIGMOID: return ref_sigmoid(a);
    case MEMRA_EW_SWIGLU: return a * ref_sigmoid(a) * b;
    case MEMRA_EW_GEGLU: return ref_gelu(a) * b;
    case MEMRA_EW_MUL_SIGMOID: return a * ref_sigmoid(b);
    case MEMRA_EW_SOFTCAP: return s * tanh(a / s);
    case MEMRA_EW_SOFTPLUS_MUL: return (a + b > 30.0 ? a + b : log(1.0 + exp(a + b))) * c;
    case MEMRA_EW_FILL: return s;
    }
    return NAN;
}

static void test_elementwise(void **state)
{
    (void)state;
    uint64_t rng = 77;
    const struct {
        int64_t rows, cols;
        bool bcast;
    } shapes[] = {{4, 37, false}, {3, 8, true}, {1, 10007, false}, {1, 1, false}};
    for (int op = MEMRA_EW_COPY; op <= MEMRA_EW_FILL; op++)
        for (size_t si = 0; si < MEMRA__ARRAY_LEN(shapes); si++)
            for (int inplace = 0; inplace < 2; inplace++) {
                const int64_t rows = shapes[si].rows, cols = shapes[si].cols;
                const int64_t as = cols + 2, bs = shapes[si].bcast ? 0 : cols + 1;
                const int64_t ys = inplace ? as : cols + 4;
                const float sigma = op == MEMRA_EW_SOFTCAP ? 20.0f : 3.0f;
                const size_t at = (size_t)(rows * as + 1), bt = (size_t)((bs ? rows : 1) * (cols + 1));
                const size_t yt = (size_t)(rows * ys + 5);
                float *a = rand_mat(&rng, rows, cols, as, at, sigma);
                float *a0 = malloc(at * sizeof *a0);
                memcpy(a0, a, at * sizeof *a0);
                float *b = rand_mat(&rng, bs ? rows : 1, cols, cols + 1, bt, 3.0f);
                float *aux = rand_mat(&rng, 1, cols, cols, (size_t)cols, 1.0f);
                float *y = inplace ? a : sent_buf(yt);
                memra_ew_args_t ea = {.op = (memra_ew_op_t)op, .y = y, .a = a, .b = b, .aux = aux, .rows = rows,
                                      .cols = cols, .ys = ys, .as = as, .bs = bs,
                                      .s = op == MEMRA_EW_SOFTCAP ? 5.0f : 0.75f};
                assert_int_equal(g_be->iface->elementwise(g_be, &ea), MEMRA_OK);
                check_sent_outside(y, inplace ? at : yt, rows, cols, ys, "elementwise y");
                for (int64_t r = 0; r < rows; r++)
                    for (int64_t c = 0; c < cols; c++) {
                        const double ref = ref_ew((memra_ew_op_t)op, a0[r * as + c], b[r * bs + c], aux[c], ea.s);
                        check_close(y[r * ys + c], ref, 1e-6 * fmax(1.0, fabs(ref)), "elementwise", op);
                    }
                if (!inplace)
                    free(y);
                free(a);
                free(a0);
                free(b);
                free(aux);
            }
}

static void test_gelu_values(void **state)
{
    (void)state;
    /* tanh form, not erf: gelu_tanh(1) = 0.8411919906..., gelu_erf(1) = 0.8413447460... */
    const float x[4] = {1.0f, -1.0f, 3.0f, -10.0f};
    const double want[4] = {0.8411919906082768, -0.15880800939172324, 2.996362607918227, -0.0};
    float y[4];
    memra_ew_args_t ea = {.op = MEMRA_EW_GELU, .y = y, .a = x, .rows = 1, .cols = 4, .ys = 4, .as = 4};
    assert_int_equal(g_be->iface->elementwise(g_be, &ea), MEMRA_OK);
    for (int i = 0; i < 4; i++)
        check_close(y[i], want[i], 1e-7, "gelu", i);
    /* missing b is an error, not a crash */
    ea.op = MEMRA_EW_ADD;
    assert_int_equal(g_be->iface->elementwise(g_be, &ea), MEMRA_E_INVALID);
}

/* lib/fmath.h, which the CPU reference and the CUDA kernels share (SiLU):
 * e^x against libm's float64 exp at ~4M floats spread over the whole range
 * whose result is a normal float (stride 1021 through the bit patterns),
 * within 1.5 units in the last place; the edges and specials exactly. */
static void test_fmath_expf(void **state)
{
    (void)state;
    double worst = 0.0;
    for (uint64_t b = 0; b <= 0xffffffffu; b += 1021) {
        const float x = tu_u2f((uint32_t)b);
        if (!(x > -87.3f && x < 88.7f))
            continue;
        const double ref = exp((double)x), ulp = ldexp(1.0, ilogb(ref) - 23);
        const double err = fabs((double)memra_expf(x) - ref) / ulp;
        if (err > worst)
            worst = err;
        if (err > 1.5)
            fail_msg("memra_expf(%a) = %a, exp = %a: %.3f ulp", (double)x, (double)memra_expf(x), ref, err);
    }
    assert_true(worst > 0.0); /* the sweep ran */
    assert_true(memra_expf(0.0f) == 1.0f);
    assert_true(memra_expf(1.0f) == 0x1.5bf0a8p+1f);
    assert_true(isinf(memra_expf(89.0f)) && isinf(memra_expf(INFINITY)));
    assert_true(memra_expf(-104.0f) == 0.0f && memra_expf(-INFINITY) == 0.0f);
    assert_true(isnan(memra_expf(NAN)));
    /* SiLU: x / (1 + e^-x), saturating at both ends */
    assert_true(memra_siluf(0.0f) == 0.0f);
    assert_true(memra_siluf(100.0f) == 100.0f);
    assert_true(memra_siluf(-200.0f) == 0.0f);
    check_close(memra_siluf(-3.5f), -3.5 / (1.0 + exp(3.5)), 2e-7, "silu", 0);
}

/* ---- rope ---------------------------------------------------------------- */

typedef struct rope_case {
    memra_rope_mode_t mode;
    int64_t n_tokens, n_heads, head_dim, n_rot;
    float base;
    int ff_kind; /* 0 none, 1 mixed incl. 1e30, 2 proportional [1..1, 1e30..] */
} rope_case;

static const rope_case k_rope_cases[] = {
    {MEMRA_ROPE_NORM, 1, 3, 16, 16, 10000.0f, 0},   {MEMRA_ROPE_NEOX, 1, 3, 16, 16, 10000.0f, 0},
    {MEMRA_ROPE_NORM, 5, 3, 32, 24, 1000000.0f, 1}, {MEMRA_ROPE_NEOX, 5, 3, 32, 24, 1000000.0f, 1},
    {MEMRA_ROPE_NEOX, 4, 2, 64, 64, 1000000.0f, 2}, {MEMRA_ROPE_NEOX, 3, 4, 128, 64, 10000000.0f, 0},
    {MEMRA_ROPE_NORM, 2, 1, 10, 6, 500000.0f, 1},
};

static void test_rope(void **state)
{
    (void)state;
    uint64_t rng = 31337;
    for (size_t ci = 0; ci < MEMRA__ARRAY_LEN(k_rope_cases); ci++) {
        const rope_case *c = &k_rope_cases[ci];
        const int64_t hd = c->head_dim, half = c->n_rot / 2, hs = hd + 2, ts = c->n_heads * hs + 5;
        const size_t total = (size_t)(c->n_tokens * ts + 3);
        float *x = sent_buf(total);
        for (int64_t t = 0; t < c->n_tokens; t++)
            for (int64_t h = 0; h < c->n_heads; h++)
                for (int64_t i = 0; i < hd; i++)
                    x[t * ts + h * hs + i] = tu_rng_gauss(&rng);
        float *x0 = malloc(total * sizeof *x0), *xg = malloc(total * sizeof *xg);
        memcpy(x0, x, total * sizeof *x0);
        memcpy(xg, x, total * sizeof *xg);
        int32_t pos[8];
        for (int64_t t = 0; t < c->n_tokens; t++)
            pos[t] = t == 0 ? (int32_t)(ci * 37 % 300) : (int32_t)tu_rng_int(&rng, 300);
        float ff[64];
        for (int64_t i = 0; i < half; i++)
            ff[i] = c->ff_kind == 1 ? (i % 3 == 0 ? 1e30f : i % 3 == 1 ? 1.0f : 2.5f)
                                    : (c->ff_kind == 2 && i >= half / 2 ? 1e30f : 1.0f);
        memra_rope_args_t ra = {.x = x, .n_tokens = c->n_tokens, .n_heads = c->n_heads, .head_dim = hd,
                                .head_stride = hs, .token_stride = ts, .n_rot = c->n_rot, .pos = pos,
                                .base = c->base, .freq_factors = c->ff_kind ? ff : NULL, .mode = c->mode};
        assert_int_equal(g_be->iface->rope(g_be, &ra), MEMRA_OK);

        /* ggml's recipe (rope_cache_init + rotate): a cos/sin cache per token
         * from the float angle θ_{i+1} = θ_i·powf(base, -2/n_rot), then every
         * head; the backend must match it bit for bit */
        for (int64_t t = 0; t < c->n_tokens; t++) {
            float cache[128];
            float theta = (float)pos[t];
            const float tsc = powf(c->base, -2.0f / (float)c->n_rot);
            for (int64_t i0 = 0; i0 < c->n_rot; i0 += 2) {
                const float f = c->ff_kind ? ff[i0 / 2] : 1.0f;
                cache[i0] = cosf(theta / f);
                cache[i0 + 1] = sinf(theta / f);
                theta *= tsc;
            }
            for (int64_t h = 0; h < c->n_heads; h++) {
                float *p = xg + t * ts + h * hs;
                for (int64_t i0 = 0; i0 < c->n_rot; i0 += 2) {
                    const int64_t a = c->mode == MEMRA_ROPE_NEOX ? i0 / 2 : i0;
                    const int64_t b = c->mode == MEMRA_ROPE_NEOX ? i0 / 2 + half : i0 + 1;
                    const float v0 = p[a], v1 = p[b];
                    p[a] = v0 * cache[i0] - v1 * cache[i0 + 1];
                    p[b] = v0 * cache[i0 + 1] + v1 * cache[i0];
                }
            }
        }
        check_bits(x, xg, total, "rope vs ggml recipe");

        /* float64 with the closed-form angle */
        for (int64_t t = 0; t < c->n_tokens; t++)
            for (int64_t h = 0; h < c->n_heads; h++) {
                const float *in = x0 + t * ts + h * hs;
                const float *out = x + t * ts + h * hs;
                for (int64_t i = 0; i < half; i++) {
                    const double th = pos[t] * pow(c->base, -2.0 * (double)i / (double)c->n_rot) /
                                      (c->ff_kind ? ff[i] : 1.0);
                    const int64_t a = c->mode == MEMRA_ROPE_NEOX ? i : 2 * i;
                    const int64_t b = c->mode == MEMRA_ROPE_NEOX ? i + half : 2 * i + 1;
                    const double r0 = in[a] * cos(th) - in[b] * sin(th);
                    const double r1 = in[a] * sin(th) + in[b] * cos(th);
                    const double tol = (fabs(in[a]) + fabs(in[b])) * (3e-7 * (double)(i + 2) * th + 1e-6);
                    check_close(out[a], r0, tol, "rope", i);
                    check_close(out[b], r1, tol, "rope", i);
                    if (c->ff_kind && ff[i] == 1e30f && (out[a] != in[a] || out[b] != in[b]))
                        fail_msg("rope: pair %lld with freq factor 1e30 was not left as is", (long long)i);
                }
                for (int64_t i = c->n_rot; i < hd; i++)
                    if (memcmp(&out[i], &in[i], sizeof *in) != 0)
                        fail_msg("rope: pass-through dim %lld changed", (long long)i);
            }
        for (size_t i = 0; i < total; i++)
            if (is_sent(x0[i]) && !is_sent(x[i]))
                fail_msg("rope: gap element %zu written", i);
        free(x);
        free(x0);
        free(xg);
    }
    memra_rope_args_t bad = {.x = (float[4]){0}, .n_tokens = 1, .n_heads = 1, .head_dim = 4, .n_rot = 3,
                             .pos = (int32_t[1]){0}, .base = 10000.0f};
    assert_int_equal(g_be->iface->rope(g_be, &bad), MEMRA_E_INVALID);
}

/* ---- attention ----------------------------------------------------------- */

typedef struct attn_case {
    int64_t n_head, n_kv, hd, pos0, n_tokens, n_swa;
    float scale;
} attn_case;

static const attn_case k_attn_cases[] = {
    {4, 4, 16, 0, 1, 0, 0.25f}, {4, 4, 16, 0, 6, 0, 0.25f}, {4, 2, 13, 5, 6, 0, 0.3f},
    {8, 2, 16, 9, 4, 3, 1.0f},  {8, 2, 16, 9, 4, 1, 0.25f}, {6, 3, 8, 0, 7, 4, 0.5f},
    {2, 1, 32, 20, 1, 5, 0.2f}, {8, 8, 4, 30, 3, 100, 1.0f},
};

static void run_attn(memra__backend_t *be, const attn_case *c, const float *q, int64_t q_stride, const float *k,
                     const float *v, int64_t kv_stride, float *out, int64_t pos0, int64_t n_tokens)
{
    memra_attn_args_t aa = {.q = q, .k_cache = k, .v_cache = v, .out = out, .n_tokens = n_tokens, .pos0 = pos0,
                            .n_head = c->n_head, .n_kv_head = c->n_kv, .head_dim = c->hd, .q_stride = q_stride,
                            .kv_stride = kv_stride, .scale = c->scale, .n_swa = c->n_swa};
    assert_int_equal(be->iface->attention(be, &aa), MEMRA_OK);
}

static void test_attention(void **state)
{
    (void)state;
    uint64_t rng = 555;
    for (size_t ci = 0; ci < MEMRA__ARRAY_LEN(k_attn_cases); ci++) {
        const attn_case *c = &k_attn_cases[ci];
        const int64_t hd = c->hd, qw = c->n_head * hd, kvw = c->n_kv * hd;
        const int64_t qs = qw + 3, kvs = kvw + 2, n_pos = c->pos0 + c->n_tokens;
        /* two extra cache rows of NaN: reading a future key poisons the output */
        const size_t qt = (size_t)(c->n_tokens * qs), kt = (size_t)((n_pos + 2) * kvs);
        const size_t ot = (size_t)(c->n_tokens * qw + 9);
        float *q = rand_mat(&rng, c->n_tokens, qw, qs, qt, 1.0f);
        float *k = rand_mat(&rng, n_pos, kvw, kvs, kt, 1.0f);
        float *v = rand_mat(&rng, n_pos, kvw, kvs, kt, 1.0f);
        float *out = sent_buf(ot), *out1 = sent_buf(ot), *outd = sent_buf(ot);
        run_attn(g_be, c, q, qs, k, v, kvs, out, c->pos0, c->n_tokens);
        check_sent_outside(out, ot, c->n_tokens, qw, qw, "attention out");
        double vmax = 0.0;
        for (int64_t p = 0; p < n_pos; p++)
            for (int64_t i = 0; i < kvw; i++)
                vmax = fmax(vmax, fabs(v[p * kvs + i]));

        /* float64: kv-head-major, full-length masked score rows */
        const int64_t group = c->n_head / c->n_kv;
        double *sc = malloc((size_t)n_pos * sizeof *sc);
        for (int64_t g = 0; g < c->n_kv; g++)
            for (int64_t r = 0; r < group; r++)
                for (int64_t t = 0; t < c->n_tokens; t++) {
                    const int64_t h = g * group + r, p = c->pos0 + t;
                    double mx = -INFINITY;
                    for (int64_t kp = 0; kp < n_pos; kp++) {
                        const bool visible = kp <= p && (c->n_swa == 0 || p - kp < c->n_swa);
                        double s = 0.0;
                        for (int64_t d = 0; d < hd; d++)
                            s += (double)q[t * qs + h * hd + d] * k[kp * kvs + g * hd + d];
                        sc[kp] = visible ? s * c->scale : -INFINITY;
                        mx = fmax(mx, sc[kp]);
                    }
                    double z = 0.0;
                    for (int64_t kp = 0; kp < n_pos; kp++)
                        z += sc[kp] = exp(sc[kp] - mx);
                    for (int64_t d = 0; d < hd; d++) {
                        double o = 0.0;
                        for (int64_t kp = 0; kp < n_pos; kp++)
                            if (sc[kp] > 0.0)
                                o += sc[kp] / z * v[kp * kvs + g * hd + d];
                        check_close(out[t * qw + h * hd + d], o, 1e-6 * vmax, "attention", d);
                    }
                }
        /* prefill == token-by-token decode; independent of thread count */
        for (int64_t t = 0; t < c->n_tokens; t++)
            run_attn(g_be, c, q + t * qs, qs, k, v, kvs, outd + t * qw, c->pos0 + t, 1);
        run_attn(g_be1, c, q, qs, k, v, kvs, out1, c->pos0, c->n_tokens);
        check_bits(out, outd, ot, "attention prefill vs decode");
        check_bits(out, out1, ot, "attention 5 vs 1 threads");
        free(sc);
        free(q);
        free(k);
        free(v);
        free(out);
        free(out1);
        free(outd);
    }
    float dummy[16] = {0};
    memra_attn_args_t bad = {.q = dummy, .k_cache = dummy, .v_cache = dummy, .out = dummy, .n_tokens = 1,
                             .n_head = 3, .n_kv_head = 2, .head_dim = 2, .q_stride = 6, .kv_stride = 4};
    assert_int_equal(g_be->iface->attention(g_be, &bad), MEMRA_E_INVALID);
}

/* KV cache types: kv_store writes memra__quantize_row's bits (and the
 * roundings worked out by hand below); attention over F16/BF16/Q8_0 rows
 * gives the bits of the F32 attention over those rows dequantized by
 * memra__dequantize_row, in prefill and decode alike. */
static void test_kv_store_values(void **state)
{
    (void)state;
    /* f16: 1 + 2^-11 is a tie (to even: 1.0), 1 + 3·2^-11 rounds up to
     * 1 + 2^-9; 65520 overflows to inf; bf16: 1 + 2^-8 ties to 1.0 */
    const float x[4] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65520.0f, 1.0f + 0x1p-8f};
    uint16_t h[4] = {0}, b[4] = {0};
    memra_kv_store_args_t a = {.src = x, .src_stride = 4, .dst = h, .dst_row_bytes = 8, .type = MEMRA_TYPE_F16,
                               .rows = 1, .cols = 4};
    assert_int_equal(g_be->iface->kv_store(g_be, &a), MEMRA_OK);
    assert_int_equal(h[0], 0x3C00);
    assert_int_equal(h[1], 0x3C02);
    assert_int_equal(h[2], 0x7C00);
    a.dst = b;
    a.type = MEMRA_TYPE_BF16;
    assert_int_equal(g_be->iface->kv_store(g_be, &a), MEMRA_OK);
    assert_int_equal(b[3], 0x3F80);
    assert_int_equal(b[0], 0x3F80);

    /* q8_0: x_j = j - 16 has amax 16, d = 16/127 (stored as f16 0x3008:
     * 0.1259765625, 16/127 to 10 bits), q_j = roundf(x_j / d with the float d):
     * -16 -> -127, 1 -> 8 (7.9375), 2 -> 16 (15.875), 15 -> 119 (119.0625) */
    float y[32];
    for (int j = 0; j < 32; j++)
        y[j] = (float)(j - 16);
    uint8_t blk[2][40];
    memset(blk, 0xAA, sizeof blk);
    a = (memra_kv_store_args_t){.src = y, .src_stride = 0, .dst = blk, .dst_row_bytes = 40, .type = MEMRA_TYPE_Q8_0,
                                .rows = 2, .cols = 32};
    assert_int_equal(g_be->iface->kv_store(g_be, &a), MEMRA_E_INVALID); /* src stride below the columns */
    a.src_stride = 32;
    a.rows = 1;
    assert_int_equal(g_be->iface->kv_store(g_be, &a), MEMRA_OK);
    assert_int_equal(blk[0][0] | blk[0][1] << 8, 0x3008);
    assert_int_equal((int8_t)blk[0][2 + 0], -127);
    assert_int_equal((int8_t)blk[0][2 + 17], 8);
    assert_int_equal((int8_t)blk[0][2 + 18], 16);
    assert_int_equal((int8_t)blk[0][2 + 31], 119);
    assert_int_equal(blk[0][34], 0xAA); /* nothing past the block */
    assert_int_equal(blk[1][0], 0xAA);  /* nor in the next row */

    /* bad arguments: a clear status, nothing written */
    a.cols = 20;
    assert_int_equal(g_be->iface->kv_store(g_be, &a), MEMRA_E_INVALID); /* not whole q8_0 blocks */
    a.cols = 32;
    a.type = MEMRA_TYPE_Q4_K; /* not a cache type (q4_0 is, for V rows) */
    assert_int_equal(g_be->iface->kv_store(g_be, &a), MEMRA_E_UNSUPPORTED);
    a.type = MEMRA_TYPE_F16;
    a.dst = NULL;
    assert_int_equal(g_be->iface->kv_store(g_be, &a), MEMRA_E_INVALID);
}

static void test_attention_kv_types(void **state)
{
    (void)state;
    static const memra_type_t types[] = {MEMRA_TYPE_F32, MEMRA_TYPE_F16, MEMRA_TYPE_BF16, MEMRA_TYPE_Q8_0};
    static const attn_case cases[] = {{4, 2, 32, 5, 6, 0, 0.2f}, {8, 2, 64, 30, 3, 17, 1.0f}, {2, 1, 64, 0, 9, 0, 0.125f}};
    uint64_t rng = 777;
    for (size_t ci = 0; ci < MEMRA__ARRAY_LEN(cases); ci++) {
        const attn_case *c = &cases[ci];
        const int64_t hd = c->hd, qw = c->n_head * hd, kvw = c->n_kv * hd, n_pos = c->pos0 + c->n_tokens;
        float *q = rand_mat(&rng, c->n_tokens, qw, qw, (size_t)(c->n_tokens * qw), 1.0f);
        float *kv[2] = {rand_mat(&rng, n_pos, kvw, kvw, (size_t)(n_pos * kvw), 2.0f),
                        rand_mat(&rng, n_pos, kvw, kvw, (size_t)(n_pos * kvw), 1.0f)};
        for (size_t kt = 0; kt < MEMRA__ARRAY_LEN(types); kt++)
            for (size_t vt = 0; vt < MEMRA__ARRAY_LEN(types); vt++) {
                const memra_type_t ty[2] = {types[kt], types[vt]};
                void *rows[2];
                float *deq[2];
                size_t rb[2];
                for (int i = 0; i < 2; i++) { /* typed rows (+6 bytes of padding a row), and their floats */
                    rb[i] = memra__row_bytes(ty[i], kvw) + (ty[i] == MEMRA_TYPE_F32 ? 8 : 6);
                    rows[i] = malloc(rb[i] * (size_t)n_pos);
                    deq[i] = malloc((size_t)(n_pos * kvw) * sizeof(float));
                    assert_true(rows[i] && deq[i]);
                    memra_kv_store_args_t st = {.src = kv[i], .src_stride = kvw, .dst = rows[i], .dst_row_bytes = rb[i],
                                                .type = ty[i], .rows = n_pos, .cols = kvw};
                    assert_int_equal(g_be->iface->kv_store(g_be, &st), MEMRA_OK);
                    uint8_t *want = malloc(rb[i]);
                    for (int64_t p = 0; p < n_pos; p++) {
                        const uint8_t *row = (const uint8_t *)rows[i] + (size_t)p * rb[i];
                        assert_true(memra__quantize_row(ty[i], kv[i] + p * kvw, want, kvw));
                        assert_memory_equal(row, want, memra__row_bytes(ty[i], kvw));
                        assert_true(memra__dequantize_row(ty[i], row, deq[i] + p * kvw, kvw));
                    }
                    free(want);
                }
                const size_t ot = (size_t)(c->n_tokens * qw);
                float *want = sent_buf(ot), *got = sent_buf(ot), *dec = sent_buf(ot);
                run_attn(g_be, c, q, qw, deq[0], deq[1], kvw, want, c->pos0, c->n_tokens);
                memra_attn_args_t aa = {.q = q, .k_cache = rows[0], .v_cache = rows[1], .out = got,
                                        .n_tokens = c->n_tokens, .pos0 = c->pos0, .n_head = c->n_head,
                                        .n_kv_head = c->n_kv, .head_dim = hd, .q_stride = qw, .scale = c->scale,
                                        .n_swa = c->n_swa, .k_type = ty[0], .v_type = ty[1], .k_row_bytes = rb[0],
                                        .v_row_bytes = rb[1]};
                assert_int_equal(g_be->iface->attention(g_be, &aa), MEMRA_OK);
                check_bits(want, got, ot, "typed attention vs f32 over the dequantized rows");
                for (int64_t t = 0; t < c->n_tokens; t++) {
                    memra_attn_args_t one = aa;
                    one.q = q + t * qw;
                    one.out = dec + t * qw;
                    one.n_tokens = 1;
                    one.pos0 = c->pos0 + t;
                    assert_int_equal(g_be1->iface->attention(g_be1, &one), MEMRA_OK);
                }
                check_bits(got, dec, ot, "typed attention prefill vs decode");
                if (ty[0] != MEMRA_TYPE_F32) { /* a typed row stride below its row: refused */
                    memra_attn_args_t bad = aa;
                    bad.k_row_bytes = memra__row_bytes(ty[0], kvw) - 1;
                    assert_int_equal(g_be->iface->attention(g_be, &bad), MEMRA_E_INVALID);
                }
                for (int i = 0; i < 2; i++) {
                    free(rows[i]);
                    free(deq[i]);
                }
                free(want);
                free(got);
                free(dec);
            }
        free(q);
        free(kv[0]);
        free(kv[1]);
    }
    /* q8_0 heads must be whole blocks; types outside the four are refused */
    float dummy[64] = {0};
    memra_attn_args_t bad = {.q = dummy, .k_cache = dummy, .v_cache = dummy, .out = dummy, .n_tokens = 1,
                             .n_head = 1, .n_kv_head = 1, .head_dim = 16, .q_stride = 16, .kv_stride = 16,
                             .k_type = MEMRA_TYPE_Q8_0, .k_row_bytes = 34};
    assert_int_equal(g_be->iface->attention(g_be, &bad), MEMRA_E_UNSUPPORTED);
    bad.k_type = MEMRA_TYPE_Q4_0;
    assert_int_equal(g_be->iface->attention(g_be, &bad), MEMRA_E_UNSUPPORTED);
    bad.k_type = MEMRA_TYPE_F16;
    bad.k_row_bytes = 0; /* a typed cache needs its row stride in bytes */
    assert_int_equal(g_be->iface->attention(g_be, &bad), MEMRA_E_INVALID);
}

static void test_argmax(void **state)
{
    (void)state;
    int32_t out = -1;
    const float a[5] = {1.0f, 5.0f, 5.0f, NAN, 2.0f};
    assert_int_equal(g_be->iface->argmax(g_be, a, 5, &out), MEMRA_OK);
    assert_int_equal(out, 1);
    const float b[3] = {NAN, -INFINITY, -INFINITY};
    assert_int_equal(g_be->iface->argmax(g_be, b, 3, &out), MEMRA_OK);
    assert_int_equal(out, 1);
    const float c[2] = {NAN, NAN};
    assert_int_equal(g_be->iface->argmax(g_be, c, 2, &out), MEMRA_OK);
    assert_int_equal(out, 0);
    uint64_t rng = 3;
    float *x = rand_mat(&rng, 1, 100003, 100003, 100003, 1.0f);
    int32_t want = 0;
    for (int32_t i = 100002; i >= 0; i--)
        if (x[i] >= x[want])
            want = i;
    assert_int_equal(g_be->iface->argmax(g_be, x, 100003, &out), MEMRA_OK);
    assert_int_equal(out, want);
    assert_int_equal(g_be->iface->argmax(g_be, x, 0, &out), MEMRA_E_INVALID);
    free(x);
}

/* ---- conv ---------------------------------------------------------------- */

static void run_conv(memra__backend_t *be, const float *x, int64_t xs, float *st, const float *w, float *out,
                     int64_t n, int64_t C, int64_t K)
{
    memra_conv_args_t ca = {.x = x, .x_stride = xs, .state = st, .w = w, .out = out, .n_tokens = n,
                            .channels = C, .kernel = K};
    assert_int_equal(be->iface->conv(be, &ca), MEMRA_OK);
}

static void test_conv(void **state)
{
    (void)state;
    uint64_t rng = 8080;
    const int64_t cases[][3] = {{7, 4, 1}, {7, 4, 2}, {33, 4, 9}, {5, 2, 3}, {9, 1, 4}, {16, 3, 5}, {40, 4, 3}};
    for (size_t ci = 0; ci < MEMRA__ARRAY_LEN(cases); ci++) {
        const int64_t C = cases[ci][0], K = cases[ci][1], n = cases[ci][2], k1 = K - 1, xs = C + 3;
        const size_t xt = (size_t)(n * xs), st_n = (size_t)(C * k1) + 1, ot = (size_t)(n * C + 4);
        float *x = rand_mat(&rng, n, C, xs, xt, 1.0f);
        float *w = rand_mat(&rng, C, K, K, (size_t)(C * K), 0.5f);
        float *s0 = rand_mat(&rng, 1, (int64_t)st_n - 1, (int64_t)st_n, st_n, 1.0f);
        float *sa = malloc(st_n * sizeof *sa), *sb = malloc(st_n * sizeof *sb), *sc = malloc(st_n * sizeof *sc);
        memcpy(sa, s0, st_n * sizeof *sa);
        memcpy(sb, s0, st_n * sizeof *sb);
        memcpy(sc, s0, st_n * sizeof *sc);
        float *out = sent_buf(ot), *outd = sent_buf(ot), *outs = sent_buf(ot);
        run_conv(g_be, x, xs, sa, w, out, n, C, K);
        check_sent_outside(out, ot, n, C, C, "conv out");
        assert_true(is_sent(sa[st_n - 1]));

        /* float64 over the explicit per-channel sequence [state | x] */
        double *seq = malloc((size_t)(k1 + n) * sizeof *seq);
        for (int64_t c = 0; c < C; c++) {
            for (int64_t i = 0; i < k1; i++)
                seq[i] = s0[c * k1 + i];
            for (int64_t t = 0; t < n; t++)
                seq[k1 + t] = x[t * xs + c];
            for (int64_t t = 0; t < n; t++) {
                double z = 0.0;
                for (int64_t kk = K - 1; kk >= 0; kk--)
                    z += seq[t + kk] * w[c * K + kk];
                const double ref = z * ref_sigmoid(z);
                check_close(out[t * C + c], ref, 1e-6 * fmax(1.0, fabs(ref)), "conv", t);
            }
            for (int64_t i = 0; i < k1; i++)
                if ((double)sa[c * k1 + i] != seq[n + i])
                    fail_msg("conv state ch %lld [%lld]: got %g want %g", (long long)c, (long long)i,
                             sa[c * k1 + i], seq[n + i]);
        }
        /* a batch == token-by-token calls == a 2 + (n-2) split, bit for bit */
        for (int64_t t = 0; t < n; t++)
            run_conv(g_be, x + t * xs, xs, sb, w, outd + t * C, 1, C, K);
        const int64_t n1 = n < 2 ? n : 2;
        run_conv(g_be1, x, xs, sc, w, outs, n1, C, K);
        if (n > n1)
            run_conv(g_be1, x + n1 * xs, xs, sc, w, outs + n1 * C, n - n1, C, K);
        check_bits(out, outd, ot, "conv batch vs single out");
        check_bits(sa, sb, st_n, "conv batch vs single state");
        check_bits(out, outs, ot, "conv batch vs split out");
        check_bits(sa, sc, st_n, "conv batch vs split state");
        free(seq);
        free(x);
        free(w);
        free(s0);
        free(sa);
        free(sb);
        free(sc);
        free(out);
        free(outd);
        free(outs);
    }
}

/* ---- gated delta rule ---------------------------------------------------- */

typedef struct delta_in {
    int64_t n_k, n_v, d, n;
    int64_t qks, vs, gbs;
    float *q, *k, *v, *g, *beta, *state;
} delta_in;

static void l2_rows(float *p, int64_t n_rows, int64_t stride, int64_t heads, int64_t d)
{
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t h = 0; h < heads; h++) {
            float *x = p + r * stride + h * d;
            double ss = 0.0;
            for (int64_t i = 0; i < d; i++)
                ss += (double)x[i] * x[i];
            for (int64_t i = 0; i < d; i++)
                x[i] = (float)(x[i] / sqrt(ss));
        }
}

static void delta_make(delta_in *in, uint64_t *rng, int64_t n_k, int64_t n_v, int64_t d, int64_t n)
{
    in->n_k = n_k;
    in->n_v = n_v;
    in->d = d;
    in->n = n;
    in->qks = n_k * d + 1;
    in->vs = n_v * d + 2;
    in->gbs = n_v + 1;
    in->q = rand_mat(rng, n, n_k * d, in->qks, (size_t)(n * in->qks), 1.0f);
    in->k = rand_mat(rng, n, n_k * d, in->qks, (size_t)(n * in->qks), 1.0f);
    l2_rows(in->q, n, in->qks, n_k, d);
    l2_rows(in->k, n, in->qks, n_k, d);
    in->v = rand_mat(rng, n, n_v * d, in->vs, (size_t)(n * in->vs), 1.0f);
    in->g = rand_mat(rng, n, n_v, in->gbs, (size_t)(n * in->gbs), 1.0f);
    in->beta = rand_mat(rng, n, n_v, in->gbs, (size_t)(n * in->gbs), 1.0f);
    for (int64_t t = 0; t < n; t++)
        for (int64_t j = 0; j < n_v; j++) {
            float *g = &in->g[t * in->gbs + j], *b = &in->beta[t * in->gbs + j];
            *g = (float)-log1p(exp(*g - 1.0)); /* -softplus: log decay <= 0 */
            *b = (float)ref_sigmoid(*b);
        }
    in->state = rand_mat(rng, 1, n_v * d * d, n_v * d * d, (size_t)(n_v * d * d), 0.3f);
}

static void delta_free(delta_in *in)
{
    free(in->q);
    free(in->k);
    free(in->v);
    free(in->g);
    free(in->beta);
    free(in->state);
}

static void run_delta(memra__backend_t *be, const delta_in *in, int64_t t0, int64_t n, float *state, float *out)
{
    memra_delta_args_t da = {.q = in->q + t0 * in->qks, .k = in->k + t0 * in->qks, .v = in->v + t0 * in->vs,
                             .g = in->g + t0 * in->gbs, .beta = in->beta + t0 * in->gbs, .qk_stride = in->qks,
                             .v_stride = in->vs, .gb_stride = in->gbs, .state = state,
                             .out = out + t0 * in->n_v * in->d, .n_tokens = n, .n_k = in->n_k, .n_v = in->n_v,
                             .d = in->d, .scale = (float)(1.0 / sqrt((double)in->d))};
    assert_int_equal(be->iface->delta(be, &da), MEMRA_OK);
}

static void test_delta(void **state)
{
    (void)state;
    uint64_t rng = 2718;
    const int64_t cases[][4] = {{1, 1, 8, 1}, {2, 4, 8, 7}, {3, 3, 5, 4}, {2, 6, 16, 9}, {4, 4, 4, 1}, {1, 3, 7, 12}};
    for (size_t ci = 0; ci < MEMRA__ARRAY_LEN(cases); ci++) {
        delta_in in;
        delta_make(&in, &rng, cases[ci][0], cases[ci][1], cases[ci][2], cases[ci][3]);
        const int64_t d = in.d, nv = in.n_v, n = in.n, sn = nv * d * d;
        const size_t ot = (size_t)(n * nv * d + 3);
        float *sa = malloc((size_t)sn * sizeof *sa), *sb = malloc((size_t)sn * sizeof *sb);
        float *sc = malloc((size_t)sn * sizeof *sc);
        memcpy(sa, in.state, (size_t)sn * sizeof *sa);
        memcpy(sb, in.state, (size_t)sn * sizeof *sb);
        memcpy(sc, in.state, (size_t)sn * sizeof *sc);
        float *out = sent_buf(ot), *outd = sent_buf(ot), *outs = sent_buf(ot);
        run_delta(g_be, &in, 0, n, sa, out);
        check_sent_outside(out, ot, n, nv * d, nv * d, "delta out");

        /* float64, HF layout S[i][m] (i key, m value), step by step as in §5.4 */
        double *S = malloc((size_t)(d * d) * sizeof *S), *u = malloc((size_t)d * sizeof *u);
        const double scale = 1.0 / sqrt((double)d);
        for (int64_t j = 0; j < nv; j++) {
            const int64_t kh = j % in.n_k;
            for (int64_t i = 0; i < d; i++)
                for (int64_t m = 0; m < d; m++)
                    S[i * d + m] = in.state[j * d * d + m * d + i];
            double smax = 1.0;
            for (int64_t t = 0; t < n; t++) {
                const float *q = in.q + t * in.qks + kh * d, *k = in.k + t * in.qks + kh * d;
                const float *v = in.v + t * in.vs + j * d;
                const double eg = exp(in.g[t * in.gbs + j]), beta = in.beta[t * in.gbs + j];
                for (int64_t i = 0; i < d * d; i++)
                    S[i] *= eg;
                for (int64_t m = 0; m < d; m++) {
                    u[m] = 0.0;
                    for (int64_t i = 0; i < d; i++)
                        u[m] += S[i * d + m] * k[i];
                }
                for (int64_t i = 0; i < d; i++)
                    for (int64_t m = 0; m < d; m++)
                        S[i * d + m] += k[i] * beta * (v[m] - u[m]);
                for (int64_t i = 0; i < d * d; i++)
                    smax = fmax(smax, fabs(S[i]));
                for (int64_t m = 0; m < d; m++) {
                    double o = 0.0;
                    for (int64_t i = 0; i < d; i++)
                        o += S[i * d + m] * (q[i] * scale);
                    check_close(out[t * nv * d + j * d + m], o, 2e-6 * (double)(n + 1) * smax, "delta out", m);
                }
            }
            for (int64_t i = 0; i < d; i++)
                for (int64_t m = 0; m < d; m++)
                    check_close(sa[j * d * d + m * d + i], S[i * d + m], 2e-6 * (double)(n + 1) * smax,
                                "delta state", i * d + m);
        }
        /* batch == token-by-token == a 3 + rest split, bit for bit */
        for (int64_t t = 0; t < n; t++)
            run_delta(g_be, &in, t, 1, sb, outd);
        const int64_t n1 = n < 3 ? n : 3;
        run_delta(g_be1, &in, 0, n1, sc, outs);
        if (n > n1)
            run_delta(g_be1, &in, n1, n - n1, sc, outs);
        check_bits(out, outd, ot, "delta batch vs single out");
        check_bits(sa, sb, (size_t)sn, "delta batch vs single state");
        check_bits(out, outs, ot, "delta batch vs split out");
        check_bits(sa, sc, (size_t)sn, "delta batch vs split state");
        free(S);
        free(u);
        free(sa);
        free(sb);
        free(sc);
        free(out);
        free(outd);
        free(outs);
        delta_free(&in);
    }
}

/* ---- route --------------------------------------------------------------- */

static memra_status_t run_route(const float *logits, int64_t n, int64_t ne, int64_t k, bool norm, int32_t *ids,
                                float *w)
{
    memra_route_args_t ra = {.logits = logits, .ids = ids, .weights = w, .n_tokens = n, .n_expert = ne, .k = k,
                             .norm = norm};
    return g_be->iface->route(g_be, &ra);
}

static void test_route(void **state)
{
    (void)state;
    uint64_t rng = 1618;
    const struct {
        int64_t ne, k;
        bool norm;
    } cases[] = {{8, 2, true}, {8, 2, false}, {13, 4, true}, {64, 8, true}, {5, 5, false}, {1, 1, true}, {256, 8, true}};
    for (size_t ci = 0; ci < MEMRA__ARRAY_LEN(cases); ci++) {
        const int64_t ne = cases[ci].ne, k = cases[ci].k, n = 3;
        float *l = rand_mat(&rng, n, ne, ne, (size_t)(n * ne), 2.0f);
        int32_t ids[3 * 8];
        float w[3 * 8];
        assert_int_equal(run_route(l, n, ne, k, cases[ci].norm, ids, w), MEMRA_OK);
        for (int64_t t = 0; t < n; t++) {
            /* float64 probabilities, insertion-sorted by (prob desc, id asc) */
            double p[256], z = 0.0;
            int32_t order[256];
            for (int64_t e = 0; e < ne; e++)
                z += p[e] = exp(l[t * ne + e]);
            for (int64_t e = 0; e < ne; e++) {
                p[e] /= z;
                int64_t at = e;
                while (at > 0 && p[order[at - 1]] < p[e])
                    at--;
                memmove(order + at + 1, order + at, (size_t)(e - at) * sizeof *order);
                order[at] = (int32_t)e;
            }
            double sum = 0.0;
            for (int64_t j = 0; j < k; j++)
                sum += p[order[j]];
            for (int64_t j = 0; j < k; j++) {
                assert_int_equal(ids[t * k + j], order[j]);
                const double ref = p[order[j]] / (cases[ci].norm ? fmax(sum, 6.103515625e-5) : 1.0);
                check_close(w[t * k + j], ref, 1e-6 * ref, "route weight", j);
            }
        }
        free(l);
    }
}

static void test_route_ties_and_clamp(void **state)
{
    (void)state;
    int32_t ids[8];
    float w[8];
    const float l[6] = {1, 3, 3, 0, 3, 2};
    assert_int_equal(run_route(l, 1, 6, 3, false, ids, w), MEMRA_OK);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 2);
    assert_int_equal(ids[2], 4);
    assert_true(w[0] == w[1] && w[1] == w[2]);
    assert_int_equal(run_route(l, 1, 6, 4, true, ids, w), MEMRA_OK);
    assert_int_equal(ids[3], 5);
    const float eq[6] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
    assert_int_equal(run_route(eq, 1, 6, 2, true, ids, w), MEMRA_OK);
    assert_int_equal(ids[0], 0);
    assert_int_equal(ids[1], 1);
    check_close(w[0], 0.5, 1e-7, "route tie weight", 0);
    /* 20000 equal experts, k = 1: the top prob 5e-5 is below the clamp */
    const int64_t ne = 20000;
    float *z = calloc((size_t)ne, sizeof *z);
    assert_int_equal(run_route(z, 1, ne, 1, true, ids, w), MEMRA_OK);
    assert_int_equal(ids[0], 0);
    check_close(w[0], (1.0 / 20000) / 6.103515625e-5, 1e-6, "route clamp", 0);
    assert_int_equal(run_route(z, 1, ne, 1, false, ids, w), MEMRA_OK);
    check_close(w[0], 1.0 / 20000, 1e-11, "route no clamp without norm", 0);
    free(z);
    const float bad[3] = {0, NAN, 1};
    assert_int_equal(run_route(bad, 1, 3, 1, true, ids, w), MEMRA_E_RANGE);
    assert_int_equal(run_route(l, 1, 6, 7, true, ids, w), MEMRA_E_INVALID);
}

/* ---- moe ----------------------------------------------------------------- */

typedef struct moe_case {
    memra_type_t type;
    int64_t n_embd, n_ff, n_expert, k, n_tokens;
    bool fused;
    memra_act_t act;
    bool scale;
} moe_case;

static const moe_case k_moe_cases[] = {
    {MEMRA_TYPE_F32, 24, 10, 5, 2, 1, false, MEMRA_ACT_SILU, false},
    {MEMRA_TYPE_F32, 24, 10, 5, 3, 6, true, MEMRA_ACT_GELU, true},
    {MEMRA_TYPE_Q8_0, 64, 32, 6, 2, 4, false, MEMRA_ACT_SILU, true},
    {MEMRA_TYPE_Q4_0, 64, 32, 4, 4, 3, true, MEMRA_ACT_GELU, false},
    {MEMRA_TYPE_F16, 32, 32, 8, 2, 70, false, MEMRA_ACT_SILU, true},
};

typedef struct moe_fix {
    tw gate, up, down; /* gate holds the fused gate_up when fused */
    float *x, *wts, *scale;
    int32_t *ids;
} moe_fix;

static void moe_make(moe_fix *f, const moe_case *c, uint64_t *rng)
{
    tw_make(&f->gate, c->type, c->n_embd, c->fused ? 2 * c->n_ff : c->n_ff, c->n_expert, 0, 64, 0.2f, rng);
    if (!c->fused)
        tw_make(&f->up, c->type, c->n_embd, c->n_ff, c->n_expert, 0, 64, 0.2f, rng);
    tw_make(&f->down, c->type, c->n_ff, c->n_embd, c->n_expert, 0, 64, 0.2f, rng);
    f->x = rand_mat(rng, c->n_tokens, c->n_embd, c->n_embd, (size_t)(c->n_tokens * c->n_embd), 1.0f);
    f->wts = malloc((size_t)(c->n_tokens * c->k) * sizeof *f->wts);
    f->ids = malloc((size_t)(c->n_tokens * c->k) * sizeof *f->ids);
    f->scale = c->scale ? rand_mat(rng, 1, c->n_expert, c->n_expert, (size_t)c->n_expert, 1.0f) : NULL;
    for (int64_t t = 0; t < c->n_tokens; t++)
        for (int64_t j = 0; j < c->k; j++) {
            int32_t e;
            bool dup;
            do { /* distinct experts per token, as route gives */
                e = (int32_t)tu_rng_int(rng, c->n_expert);
                dup = false;
                for (int64_t i = 0; i < j; i++)
                    dup |= f->ids[t * c->k + i] == e;
            } while (dup);
            f->ids[t * c->k + j] = e;
            f->wts[t * c->k + j] = (float)tu_rng_unit(rng);
        }
}

static void moe_free(moe_fix *f, const moe_case *c)
{
    tw_free(&f->gate);
    if (!c->fused)
        tw_free(&f->up);
    tw_free(&f->down);
    free(f->x);
    free(f->wts);
    free(f->ids);
    free(f->scale);
}

static memra_status_t run_moe(memra__backend_t *be, const moe_fix *f, const moe_case *c, int64_t t0, int64_t n,
                              float *out)
{
    memra_moe_args_t ma = {.x = f->x + t0 * c->n_embd, .ids = f->ids + t0 * c->k, .weights = f->wts + t0 * c->k,
                           .gate = c->fused ? NULL : &f->gate.w, .up = c->fused ? NULL : &f->up.w,
                           .gate_up = c->fused ? &f->gate.w : NULL, .down = &f->down.w,
                           .expert_scale = f->scale, .out = out + t0 * c->n_embd, .n_tokens = n, .k = c->k,
                           .n_embd = c->n_embd, .n_ff = c->n_ff, .act = c->act};
    return be->iface->moe(be, &ma);
}

/* Rows [row0, row0+rows) of expert e as a plain 2-D weight. */
static memra_weight_t expert_view(const tw *t, int64_t e, int64_t row0, int64_t rows)
{
    memra_weight_t w = t->w;
    w.data = t->data + (size_t)e * t->w.nb2 + (size_t)row0 * t->w.nb1;
    w.ne[1] = rows;
    w.ne[2] = 1;
    w.nb2 = w.nb1 * (size_t)rows;
    return w;
}

static void test_moe(void **state)
{
    (void)state;
    uint64_t rng = 4711;
    for (size_t ci = 0; ci < MEMRA__ARRAY_LEN(k_moe_cases); ci++) {
        const moe_case *c = &k_moe_cases[ci];
        moe_fix f;
        moe_make(&f, c, &rng);
        const int64_t n = c->n_tokens, ne = c->n_embd, nff = c->n_ff;
        const size_t ot = (size_t)(n * ne + 5);
        float *out = sent_buf(ot), *out1 = sent_buf(ot), *outd = sent_buf(ot), *outc = sent_buf(ot);
        assert_int_equal(run_moe(g_be, &f, c, 0, n, out), MEMRA_OK);
        check_sent_outside(out, ot, n, ne, ne, "moe out");

        /* float64 over the dequantized weights, no intermediate rounding */
        const tw *G = &f.gate, *U = c->fused ? &f.gate : &f.up;
        const int64_t up0 = c->fused ? nff : 0, grows = G->w.ne[1];
        double *h = malloc((size_t)nff * sizeof *h);
        for (int64_t t = 0; t < n; t++) {
            double acc[64] = {0}, mag[64] = {0};
            for (int64_t j = 0; j < c->k; j++) {
                const int64_t e = f.ids[t * c->k + j];
                const double ws = f.wts[t * c->k + j] * (f.scale ? f.scale[e] : 1.0);
                for (int64_t r = 0; r < nff; r++) {
                    double g = 0.0, u = 0.0;
                    for (int64_t i = 0; i < ne; i++) {
                        g += G->deq[(e * grows + r) * ne + i] * f.x[t * ne + i];
                        u += U->deq[(e * grows + up0 + r) * ne + i] * f.x[t * ne + i];
                    }
                    h[r] = (c->act == MEMRA_ACT_GELU ? ref_gelu(g) : g * ref_sigmoid(g)) * u;
                }
                for (int64_t i = 0; i < ne; i++)
                    for (int64_t r = 0; r < nff; r++) {
                        const double p = f.down.deq[(e * ne + i) * nff + r] * h[r];
                        acc[i] += ws * p;
                        mag[i] += fabs(ws * p);
                    }
            }
            for (int64_t i = 0; i < ne; i++)
                check_close(out[t * ne + i], acc[i], 3e-6 * mag[i] + 1e-7, "moe", i);
        }
        free(h);

        /* == the composition matmul, elementwise SWIGLU/GEGLU, matmul, then the
         * float64 weighted sum in slot order */
        float g[64], u[64], hh[64], y[64];
        for (int64_t t = 0; t < n; t++) {
            double acc[64] = {0};
            for (int64_t j = 0; j < c->k; j++) {
                const int64_t e = f.ids[t * c->k + j];
                const memra_weight_t wg = expert_view(G, e, 0, nff), wu = expert_view(U, e, up0, nff);
                const memra_weight_t wd = expert_view(&f.down, e, 0, ne);
                assert_int_equal(g_be->iface->matmul(g_be, &wg, f.x + t * ne, ne, g, nff, 1), MEMRA_OK);
                assert_int_equal(g_be->iface->matmul(g_be, &wu, f.x + t * ne, ne, u, nff, 1), MEMRA_OK);
                memra_ew_args_t ea = {.op = c->act == MEMRA_ACT_GELU ? MEMRA_EW_GEGLU : MEMRA_EW_SWIGLU, .y = hh,
                                      .a = g, .b = u, .rows = 1, .cols = nff, .ys = nff, .as = nff, .bs = nff};
                assert_int_equal(g_be->iface->elementwise(g_be, &ea), MEMRA_OK);
                assert_int_equal(g_be->iface->matmul(g_be, &wd, hh, nff, y, ne, 1), MEMRA_OK);
                for (int64_t i = 0; i < ne; i++)
                    acc[i] += (double)f.wts[t * c->k + j] * (f.scale ? (double)f.scale[e] : 1.0) * (double)y[i];
            }
            for (int64_t i = 0; i < ne; i++)
                outc[t * ne + i] = (float)acc[i];
        }
        check_bits(out, outc, (size_t)(n * ne), "moe vs composed ops");
        /* prefill == token-by-token; independent of thread count */
        for (int64_t t = 0; t < n; t++)
            assert_int_equal(run_moe(g_be, &f, c, t, 1, outd), MEMRA_OK);
        assert_int_equal(run_moe(g_be1, &f, c, 0, n, out1), MEMRA_OK);
        check_bits(out, outd, ot, "moe prefill vs decode");
        check_bits(out, out1, ot, "moe 5 vs 1 threads");

        if (ci == 0) {
            const int32_t keep = f.ids[0];
            f.ids[0] = (int32_t)c->n_expert;
            assert_int_equal(run_moe(g_be, &f, c, 0, 1, out), MEMRA_E_RANGE);
            f.ids[0] = keep;
        }
        free(out);
        free(out1);
        free(outd);
        free(outc);
        moe_free(&f, c);
    }
}

/* memra__moe with a shared expert: the routed moe plus the one-expert moe
 * weighted by sigmoid(logit), added (the bits of that sequence); the moe
 * slot rejects a shared expert and memra__moe its bad shapes; a backend's
 * moe_fused takes the call when it accepts it; with accumulate the sum is
 * added into strided rows. */
static int g_fused_calls;

static memra_status_t fake_moe_fused(memra__backend_t *be, const memra_moe_args_t *a, bool *done)
{
    (void)be;
    g_fused_calls++;
    *done = a->n_tokens == 2; /* takes 2-token calls, declines the rest */
    return MEMRA_OK;
}

static void test_moe_shared(void **state)
{
    (void)state;
    uint64_t rng = 9173;
    const moe_case c = {MEMRA_TYPE_Q8_0, 64, 32, 6, 2, 3, false, MEMRA_ACT_SILU, true};
    const int64_t n = c.n_tokens, ne = c.n_embd, fs = 32;
    moe_fix f;
    moe_make(&f, &c, &rng);
    tw sg, su, sd;
    tw_make(&sg, MEMRA_TYPE_Q8_0, ne, fs, 1, 0, 0, 0.2f, &rng);
    tw_make(&su, MEMRA_TYPE_Q8_0, ne, fs, 1, 0, 0, 0.2f, &rng);
    tw_make(&sd, MEMRA_TYPE_Q8_0, fs, ne, 1, 0, 0, 0.2f, &rng);
    const float logit[3] = {-1.5f, 0.25f, 3.0f};
    int32_t sh_ids[3], zero_ids[3] = {0, 0, 0};
    float sh_w[3], sig[3];
    float *sh_out = sent_buf((size_t)(n * ne)), *routed = sent_buf((size_t)(n * ne)), *one = sent_buf((size_t)(n * ne));
    const size_t ot = (size_t)(n * ne + 5);
    float *out = sent_buf(ot), *expect = sent_buf(ot);

    memra_moe_shared_t sh = {.gate = &sg.w, .up = &su.w, .down = &sd.w, .n_ff = fs, .logit = logit,
                             .ids_tmp = sh_ids, .w_tmp = sh_w, .out_tmp = sh_out};
    memra_moe_args_t ma = {.x = f.x, .ids = f.ids, .weights = f.wts, .gate = &f.gate.w, .up = &f.up.w,
                           .down = &f.down.w, .expert_scale = f.scale, .out = out, .n_tokens = n, .k = c.k,
                           .n_embd = ne, .n_ff = c.n_ff, .act = c.act, .shared = &sh};
    assert_int_equal(memra__moe(g_be, &ma), MEMRA_OK);
    check_sent_outside(out, ot, n, ne, ne, "moe shared out");

    /* the sequence by hand: routed, the one-expert moe (the elementwise SIGMOID's weights), the add */
    assert_int_equal(run_moe(g_be, &f, &c, 0, n, routed), MEMRA_OK);
    for (int64_t t = 0; t < n; t++)
        sig[t] = (float)(1.0 / (1.0 + exp(-(double)logit[t])));
    const memra_moe_args_t se = {.x = f.x, .ids = zero_ids, .weights = sig, .gate = &sg.w, .up = &su.w,
                                 .down = &sd.w, .out = one, .n_tokens = n, .k = 1, .n_embd = ne, .n_ff = fs,
                                 .act = c.act};
    assert_int_equal(g_be->iface->moe(g_be, &se), MEMRA_OK);
    for (int64_t i = 0; i < n * ne; i++)
        expect[i] = routed[i] + one[i];
    check_bits(out, expect, (size_t)(n * ne), "moe + shared vs the sequence");

    /* the slot takes no shared expert; bad shared shapes and missing scratch */
    assert_int_equal(g_be->iface->moe(g_be, &ma), MEMRA_E_INVALID);
    memra_moe_shared_t bad = sh;
    bad.n_ff = fs + 1;
    ma.shared = &bad;
    assert_int_equal(memra__moe(g_be, &ma), MEMRA_E_INVALID);
    bad = sh;
    bad.w_tmp = NULL;
    assert_int_equal(memra__moe(g_be, &ma), MEMRA_E_INVALID);
    bad = sh;
    bad.down = &su.w; /* [ne][fs] where [fs][ne] belongs */
    assert_int_equal(memra__moe(g_be, &ma), MEMRA_E_INVALID);
    ma.shared = &sh;

    /* dispatch: an accepting moe_fused runs instead of the sequence */
    memra__backend_i fi = *g_be->iface;
    fi.moe_fused = fake_moe_fused;
    memra__backend_t fb = *g_be;
    fb.iface = &fi;
    float *untouched = sent_buf(ot);
    ma.out = untouched;
    ma.n_tokens = 2;
    g_fused_calls = 0;
    assert_int_equal(memra__moe(&fb, &ma), MEMRA_OK);
    assert_int_equal(g_fused_calls, 1);
    check_sent_outside(untouched, ot, 0, ne, ne, "moe taken by moe_fused");
    ma.out = out;
    ma.n_tokens = n;
    assert_int_equal(memra__moe(&fb, &ma), MEMRA_OK);
    assert_int_equal(g_fused_calls, 2);
    check_bits(out, expect, (size_t)(n * ne), "moe declined by moe_fused");

    /* accumulate: the sum added into strided residual rows (ld > n_embd),
     * the gaps untouched, through acc_tmp; its refusals */
    const int64_t ld = ne + 3;
    const size_t rt = (size_t)(n * ld);
    float *res = sent_buf(rt), *res_want = sent_buf(rt), *acc = sent_buf((size_t)(n * ne));
    for (int64_t t = 0; t < n; t++)
        for (int64_t i = 0; i < ne; i++)
            res[t * ld + i] = res_want[t * ld + i] = 0.01f * (float)(t * ne + i) - 1.0f;
    for (int64_t t = 0; t < n; t++)
        for (int64_t i = 0; i < ne; i++)
            res_want[t * ld + i] += expect[t * ne + i];
    memra_moe_args_t ac = ma;
    ac.out = res;
    ac.accumulate = true;
    ac.out_stride = ld;
    ac.acc_tmp = acc;
    assert_int_equal(memra__moe(g_be, &ac), MEMRA_OK);
    check_bits(res, res_want, rt, "moe accumulated into strided rows vs the sum added");
    ac.acc_tmp = NULL; /* the sequence's scratch */
    assert_int_equal(memra__moe(g_be, &ac), MEMRA_E_INVALID);
    ac.acc_tmp = acc;
    ac.out_stride = ne - 1; /* rows overlapping */
    assert_int_equal(memra__moe(g_be, &ac), MEMRA_E_INVALID);
    ac.out_stride = ld;
    ac.accumulate = false; /* a stride without accumulate */
    assert_int_equal(memra__moe(g_be, &ac), MEMRA_E_INVALID);
    ac.accumulate = true;
    ac.shared = NULL; /* the slot takes no accumulate either */
    assert_int_equal(g_be->iface->moe(g_be, &ac), MEMRA_E_INVALID);
    check_bits(res, res_want, rt, "refused calls leave the rows");

    free(res);
    free(res_want);
    free(acc);
    free(untouched);
    free(out);
    free(expect);
    free(sh_out);
    free(routed);
    free(one);
    tw_free(&sg);
    tw_free(&su);
    tw_free(&sd);
    moe_free(&f, &c);
}

/* ---- runner -------------------------------------------------------------- */

static int setup(void **state)
{
    (void)state;
    if (memra__cpu_backend_create(5, &g_be) != MEMRA_OK || memra__cpu_backend_create(1, &g_be1) != MEMRA_OK)
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    memra__cpu_backend_destroy(g_be);
    memra__cpu_backend_destroy(g_be1);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul),      cmocka_unit_test(test_matmul_errors), cmocka_unit_test(test_matmul_ex),
        cmocka_unit_test(test_get_rows),    cmocka_unit_test(test_norm),
        cmocka_unit_test(test_norm_ex),     cmocka_unit_test(test_norm_chain),     cmocka_unit_test(test_router),     cmocka_unit_test(test_qk_norm_rope_parts),
        cmocka_unit_test(test_elementwise), cmocka_unit_test(test_gelu_values), cmocka_unit_test(test_fmath_expf),
        cmocka_unit_test(test_rope),        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_kv_store_values), cmocka_unit_test(test_attention_kv_types),
        cmocka_unit_test(test_argmax),      cmocka_unit_test(test_conv),
        cmocka_unit_test(test_delta),       cmocka_unit_test(test_route),
        cmocka_unit_test(test_route_ties_and_clamp), cmocka_unit_test(test_moe),
        cmocka_unit_test(test_moe_shared),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

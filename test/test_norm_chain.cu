/* norm_chain_smem_kernel's plan (cuda/norm_chain_plan.h) run on the CPU:
 * gemma4's norm_ex chains and single steps planned as the CUDA launcher
 * plans them, executed slot by slot the way the kernel's 256 threads do
 * (each thread's 4-float chunks, its sum of squares, the warps' xor
 * butterflies, the warps in order, the rounded steps of each element), and
 * every output compared bit for bit with the CPU reference's
 * memra__norm_chain (the sequence of plain ops). Needs nvcc (the plan is
 * C++), not a GPU: the kernel's copies and barriers are the kernel
 * check's (norm_ex.*, norm_chain.*, compared there with the sequence on
 * the GPU). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include <cmocka.h> /* no C++ guards in Debian 12's cmocka */

#include "backend.h"
}

#include "norm_chain_plan.h"

#define THREADS 256 /* NCS_THREADS: MEMRA_NORM_BLOCK */

static memra__backend_t *g_cpu;
static uint64_t rng_state = 0x243F6A8885A308D3ull;

static float rng_unif(float lo, float hi)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return lo + (hi - lo) * (float)((rng_state >> 40) * 0x1p-24);
}

/* A buffer of N floats, 64-byte aligned (+ OFF floats: misaligned on
 * purpose), filled from [lo, hi). Freed at the end of the test. */
static float *g_bufs[64];
static int g_nbufs;

static float *buf(int64_t n, float lo, float hi, int off)
{
    float *b = (float *)aligned_alloc(64, (size_t)((n + off + 15) / 16 * 16) * sizeof(float));
    assert_non_null(b);
    g_bufs[g_nbufs++] = b;
    for (int64_t i = 0; i < n + off; i++)
        b[i] = rng_unif(lo, hi);
    return b + off;
}

static void free_bufs(void)
{
    while (g_nbufs)
        free(g_bufs[--g_nbufs]);
}

/* The kernel's scale of a row in slot X: thread t's chunks t, t + 256, ...
 * squared in element order (fmaf), each warp's 32 sums by the xor
 * butterfly, the 8 warps' sums in order, then 1 / sqrt(mean + eps) in
 * float64 rounded to float. */
static float plan_scale(const float *x, int64_t dim, float eps)
{
    const int64_t nc = dim / 4;
    float total = 0.0f;
    for (int w = 0; w < THREADS / 32; w++) {
        float v[32];
        for (int l = 0; l < 32; l++) {
            float p = 0.0f;
            for (int64_t c = w * 32 + l; c < nc; c += THREADS)
                for (int e = 0; e < 4; e++)
                    p = fmaf(x[4 * c + e], x[4 * c + e], p);
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
    return (float)(1.0 / sqrt((double)total / (double)dim + (double)eps));
}

/* Runs plan PL as norm_chain_smem_kernel does, row by row. */
static void run_plan(const ncs_plan *pl)
{
    const int64_t ld = pl->ld * 4, dim = pl->dim;
    float *sm = (float *)calloc((size_t)(pl->n_slots * ld), sizeof(float));
    assert_non_null(sm);
    for (int s = 0; s < pl->n_w; s++)
        memcpy(sm + s * ld, pl->src[s].p, (size_t)dim * sizeof(float));
    for (int64_t r = 0; r < pl->rows; r++) {
        for (int s = pl->n_w; s < pl->n_load; s++)
            memcpy(sm + s * ld, pl->src[s].p + r * pl->src[s].stride, (size_t)dim * sizeof(float));
        float sc[MEMRA_NORM_CHAIN_MAX] = {0};
        for (int i = 0; i < pl->n; i++) {
            const ncs_step *st = &pl->s[i];
            const float *x = sm + st->x * ld;
            if (st->share >= 0) {
                assert_true(st->share < i);
                sc[i] = sc[st->share];
            } else {
                sc[i] = plan_scale(x, dim, st->eps);
            }
            for (int64_t e = 0; e < dim; e++) {
                float q = x[e] * sc[i];
                if (st->w >= 0)
                    q = q * sm[st->w * ld + e];
                if (st->add >= 0)
                    q = sm[st->add * ld + e] + q;
                if (st->scale != 1.0f)
                    q = q * st->scale;
                if (st->y_slot >= 0)
                    sm[st->y_slot * ld + e] = q;
                if (st->store)
                    st->y[r * st->ys + e] = q;
            }
        }
    }
    free(sm);
}

/* A chain's buffers, twice: the reference's and the plan's. */
typedef struct side {
    memra_norm_args_t s[MEMRA_NORM_CHAIN_MAX];
} side;

/* The N steps of REF (on the CPU reference) and of PLAN's side (planned and
 * run as the kernel would): every y row equal bit for bit. OUTS: the y
 * buffers to compare (ROWS x DIM each, strides OUT_S). */
static void check_chain(side *ref, side *got, int n, float *const *ref_out, float *const *got_out, const int64_t *out_s,
                        int n_out, ncs_plan *pl)
{
    assert_int_equal(memra__norm_chain(g_cpu, ref->s, n), MEMRA_OK);
    assert_true(ncs_make_plan(got->s, n, pl));
    run_plan(pl);
    const int64_t rows = ref->s[0].rows, dim = ref->s[0].dim;
    for (int k = 0; k < n_out; k++)
        for (int64_t r = 0; r < rows; r++)
            if (memcmp(ref_out[k] + r * out_s[k], got_out[k] + r * out_s[k], (size_t)dim * sizeof(float)))
                fail_msg("output %d row %lld differs from the reference", k, (long long)r);
}

/* Copies of N floats (the reference and the plan each get their own). */
static float *dup(const float *p, int64_t n, int off)
{
    float *b = buf(n, 0.0f, 0.0f, off);
    memcpy(b, p, (size_t)n * sizeof(float));
    return b;
}

/* gemma4's post-attention chain of a MoE layer (lib/arch_gemma4_forward.c):
 * r = x + rms(a, w0); rn = rms(r, w1) * s; h2 = rms(r, w2). */
static void post_attn(int64_t rows, int64_t dim)
{
    const int64_t rs = dim + 4, cf = dim + 12;
    const float *a0 = buf(rows * rs, -2.0f, 2.0f, 0), *x0 = buf(rows * cf, -4.0f, 4.0f, 0);
    const float *w = buf(3 * dim, 0.5f, 1.5f, 0);
    side sd[2];
    float *outs[2][3];
    for (int k = 0; k < 2; k++) {
        float *a = dup(a0, rows * rs, 0), *x = dup(x0, rows * cf, 0);
        float *r = buf(rows * rs, 0, 0, 0), *rn = buf(rows * rs, 0, 0, 0), *h2 = buf(rows * rs, 0, 0, 0);
        sd[k].s[0] = memra_norm_args_t{.x = a, .xs = rs, .w = w, .eps = 1e-6f, .add = x, .adds = cf, .scale = 1.0f,
                                         .y = r, .ys = rs, .rows = rows, .dim = dim, .tmp = a};
        sd[k].s[1] = memra_norm_args_t{.x = r, .xs = rs, .w = w + dim, .eps = 1e-6f, .scale = 0.018844f, .y = rn,
                                         .ys = rs, .rows = rows, .dim = dim};
        sd[k].s[2] = memra_norm_args_t{.x = r, .xs = rs, .w = w + 2 * dim, .eps = 1e-6f, .scale = 1.0f, .y = h2,
                                         .ys = rs, .rows = rows, .dim = dim};
        outs[k][0] = r;
        outs[k][1] = rn;
        outs[k][2] = h2;
    }
    const int64_t os[3] = {rs, rs, rs};
    ncs_plan pl;
    check_chain(&sd[0], &sd[1], 3, outs[0], outs[1], os, 3, &pl);
    /* r stays in shared memory for both later steps, which share its scale */
    assert_true(pl.s[0].y_slot >= 0);
    assert_int_equal(pl.s[1].x, pl.s[0].y_slot);
    assert_int_equal(pl.s[2].x, pl.s[0].y_slot);
    assert_int_equal(pl.s[1].share, -1);
    assert_int_equal(pl.s[2].share, 1);
    assert_true(pl.s[0].store && pl.s[1].store && pl.s[2].store);
    assert_int_equal(pl.n_w, 3);
    assert_int_equal(pl.n_load, 5); /* three weights, a and x */
    free_bufs();
}

/* gemma4's post-FFN chain of a MoE layer: f = rms(f, w0) in place; f = f +
 * rms(e, w1); x = (r + rms(f, w2)) * s. */
static void post_ffn(int64_t rows, int64_t dim)
{
    const int64_t rs = dim + 4, cf = dim + 12;
    const float *f0 = buf(rows * rs, -2.0f, 2.0f, 0), *e0 = buf(rows * rs, -2.0f, 2.0f, 0);
    const float *r0 = buf(rows * rs, -4.0f, 4.0f, 0), *w = buf(3 * dim, 0.5f, 1.5f, 0);
    side sd[2];
    float *outs[2][2];
    for (int k = 0; k < 2; k++) {
        float *f = dup(f0, rows * rs, 0), *e = dup(e0, rows * rs, 0), *r = dup(r0, rows * rs, 0);
        float *x = buf(rows * cf, 0, 0, 0);
        sd[k].s[0] = memra_norm_args_t{.x = f, .xs = rs, .w = w, .eps = 1e-6f, .scale = 1.0f, .y = f, .ys = rs,
                                         .rows = rows, .dim = dim};
        sd[k].s[1] = memra_norm_args_t{.x = e, .xs = rs, .w = w + dim, .eps = 1e-6f, .add = f, .adds = rs,
                                         .scale = 1.0f, .y = f, .ys = rs, .rows = rows, .dim = dim, .tmp = e};
        sd[k].s[2] = memra_norm_args_t{.x = f, .xs = rs, .w = w + 2 * dim, .eps = 1e-6f, .add = r, .adds = rs,
                                         .scale = 0.73f, .y = x, .ys = cf, .rows = rows, .dim = dim, .tmp = f};
        outs[k][0] = f;
        outs[k][1] = x;
    }
    /* the sequence's step 2 norms f in place as its scratch (tmp = f): after
     * a fused chain f holds step 1's output, so only x is the chain's
     * promise there */
    const int64_t os[1] = {cf};
    ncs_plan pl;
    check_chain(&sd[0], &sd[1], 3, &outs[0][1], &outs[1][1], os, 1, &pl);
    assert_false(pl.s[0].store); /* step 1 rewrites f */
    assert_true(pl.s[1].store && pl.s[2].store);
    assert_int_equal(pl.s[1].add, pl.s[0].y_slot);
    assert_int_equal(pl.s[2].x, pl.s[1].y_slot);
    assert_int_equal(pl.s[2].share, -1);
    free_bufs();
}

static void test_post_attn(void **state)
{
    (void)state;
    post_attn(1, 2816);
    post_attn(5, 2816);
    post_attn(1, 5376);
    post_attn(3, 2560);
    post_attn(2, 1540); /* a last chunk per thread past 1536 */
}

static void test_post_ffn(void **state)
{
    (void)state;
    post_ffn(1, 2816);
    post_ffn(8, 1536);
    post_ffn(3, 5376);
    post_ffn(1, 4096);
}

/* One norm_ex step as gemma4 calls it: ADD 0 none, 1 into a separate y, 2
 * in place on the residual (y = add, tmp = x); W a weight or none. */
static void single(int64_t rows, int64_t dim, bool weight, int add, float scale)
{
    const int64_t xs = dim + 4, ys = dim + 8, adds = add == 2 ? ys : dim + 12;
    const float *x0 = buf(rows * xs, -2.0f, 2.0f, 0), *a0 = buf(rows * adds, -4.0f, 4.0f, 0);
    const float *w = weight ? buf(dim, 0.5f, 1.5f, 0) : NULL;
    side sd[2];
    float *outs[2];
    for (int k = 0; k < 2; k++) {
        float *x = dup(x0, rows * xs, 0), *y = add == 2 ? dup(a0, rows * adds, 0) : buf(rows * ys, 0, 0, 0);
        float *ad = add == 1 ? dup(a0, rows * adds, 0) : add == 2 ? y : NULL;
        sd[k].s[0] = memra_norm_args_t{.x = x, .xs = xs, .w = w, .eps = 1e-6f, .add = ad, .adds = adds,
                                         .scale = scale, .y = y, .ys = ys, .rows = rows, .dim = dim,
                                         .tmp = ad ? x : NULL};
        outs[k] = y;
    }
    const int64_t os[1] = {ys};
    ncs_plan pl;
    check_chain(&sd[0], &sd[1], 1, &outs[0], &outs[1], os, 1, &pl);
    assert_true(pl.s[0].store);
    assert_int_equal(pl.s[0].y_slot, -1);
    free_bufs();
}

static void test_single(void **state)
{
    (void)state;
    single(1, 2560, true, 2, 1.0f);   /* the E4B's post-attention norm */
    single(1, 2560, true, 2, 0.37f);  /* its PLE norm with the layer scale */
    single(1, 2816, true, 0, 0.018844f);
    single(3, 2816, true, 1, 1.0f);
    single(35, 256, true, 1, 0.70710677f); /* the per-layer inputs' norm */
    single(2, 640, false, 1, 1.5f);
    single(4, 4, true, 2, 0.5f);
}

/* What the plan declines: rows off 16 bytes, widths not of whole chunks or
 * past 8192, too many rows; the CUDA backend then runs norm_chain_kernel. */
static void test_declines(void **state)
{
    (void)state;
    float *x = buf(4 * 8208, -1.0f, 1.0f, 0), *y = buf(4 * 8208, 0, 0, 0), *xo = buf(4 * 8208, -1.0f, 1.0f, 1);
    ncs_plan pl;
    memra_norm_args_t a;
    memset(&a, 0, sizeof a);
    a.x = x;
    a.y = y;
    a.xs = a.ys = a.dim = 2816;
    a.eps = 1e-6f;
    a.scale = 1.0f;
    a.rows = 2;
    assert_true(ncs_make_plan(&a, 1, &pl));
    a.x = xo;
    assert_false(ncs_make_plan(&a, 1, &pl)); /* x off 16 bytes */
    a.x = x;
    a.xs = 2818;
    assert_false(ncs_make_plan(&a, 1, &pl)); /* its rows off 16 bytes */
    a.xs = a.ys = 2814;
    a.dim = 2814;
    assert_false(ncs_make_plan(&a, 1, &pl)); /* not whole chunks */
    a.xs = a.ys = a.dim = 8196;
    assert_false(ncs_make_plan(&a, 1, &pl)); /* wider than 8192 */
    a.xs = a.ys = a.dim = 8192;
    assert_true(ncs_make_plan(&a, 1, &pl));
    /* eight rows of shared memory (x, f and three weights copied, two
     * outputs kept, a third row read) at 8192 floats: over NCS_SMEM_MAX */
    float *w = buf(3 * 8192, 0.5f, 1.5f, 0), *f = buf(8192, -1.0f, 1.0f, 0), *r = buf(8192, -1.0f, 1.0f, 0);
    memra_norm_args_t c[3];
    memset(c, 0, sizeof c);
    for (int i = 0; i < 3; i++) {
        c[i].xs = c[i].ys = c[i].adds = c[i].dim = 8192;
        c[i].rows = 1;
        c[i].eps = 1e-6f;
        c[i].scale = 1.0f;
        c[i].w = w + i * 8192;
    }
    c[0].x = c[0].y = f;
    c[1].x = x;
    c[1].add = c[1].y = f;
    c[2].x = f;
    c[2].add = r;
    c[2].y = y;
    assert_false(ncs_make_plan(c, 3, &pl));
    c[0].dim = c[1].dim = c[2].dim = 4096;
    assert_true(ncs_make_plan(c, 3, &pl));
    a.xs = a.ys = a.dim = 16;
    a.rows = NCS_MAX_ROWS + 1;
    assert_false(ncs_make_plan(&a, 1, &pl));
    free_bufs();
}

static int setup(void **state)
{
    (void)state;
    return memra__cpu_backend_create(2, &g_cpu) == MEMRA_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    memra__cpu_backend_destroy(g_cpu);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_post_attn),
        cmocka_unit_test(test_post_ffn),
        cmocka_unit_test(test_single),
        cmocka_unit_test(test_declines),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

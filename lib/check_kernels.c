/* memra_check_kernels: every CUDA op against the CPU reference.
 *
 * Both backends are reached the way forwards reach them, through engines
 * and the backend interface (lib/backend.h). Each case draws seeded random
 * inputs, uploads the same bytes to both sides, poisons the outputs with a
 * NaN sentinel inside guard zones (and in the gaps of strided rows), runs
 * the op on both, and compares: unwritten elements and stray writes fail
 * whatever the numbers say. Bounds per op class:
 *   exact  bit-identical (get_rows, argmax, route ids, row invariance);
 *   ulp    max error in units in the last place of the reference (ops both
 *          sides compute in float64 and round once: norm, elementwise,
 *          conv, route weights);
 *   nmse   sum (got-ref)^2 / sum ref^2 (float32 reductions: matmul,
 *          attention, delta, moe: 1e-7; rope: 1e-12; fast f16 prefill:
 *          1e-6, bf16: 5e-5). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "engine_impl.h"
#include "internal.h"
#include "memra/check.h"
#include "quant.h"

void memra_kernel_check_params_init(memra_kernel_check_params_t *p, uint32_t size)
{
    if (!p || size < sizeof(uint32_t))
        return;
    memra_kernel_check_params_t d = {
        .size = size < sizeof d ? size : (uint32_t)sizeof d,
        .device = 0,
        .seed = 1,
        .test = NULL,
        .bench = 0,
        .bench_iters = 20,
        .big = 1,
    };
    memcpy(p, &d, d.size);
}

#define KC_SENTINEL 0x7FA5A5A5u
#define KC_GUARD 64   /* floats of guard zone before and after every output */
#define KC_MAX_MEM 128

#define TOL_F32 1e-7  /* float32 reductions */
#define TOL_F16 1e-6  /* fast prefill, f16 inputs */
#define TOL_BF16 5e-5 /* fast prefill, bf16 inputs (MEMRA_FAST_GEMM=bf16) */
#define TOL_ULP 2.0   /* float64 both sides, one rounding */

typedef struct kc_mem {
    memra__backend_t *be; /* NULL: host malloc */
    void *p;
} kc_mem;

typedef struct kc {
    memra_kernel_check_params_t p;
    memra_kernel_check_report_t *rep;
    memra_engine_t *e_cpu, *e_gpu, *e_fast;
    memra__backend_t *cpu, *gpu, *fast;
    uint64_t rng;
    memra_status_t err; /* first hard (non-mismatch) error */
    kc_mem mem[KC_MAX_MEM];
    int n_mem;
} kc;

/* ---- small utilities ------------------------------------------------------ */

static uint64_t kc_next(kc *k)
{
    /* splitmix64: fast, and every seed gives a good stream */
    uint64_t z = (k->rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float kc_unif(kc *k, float lo, float hi)
{
    return lo + (hi - lo) * (float)((kc_next(k) >> 40) * (1.0 / 16777216.0));
}

static int64_t kc_int(kc *k, int64_t n)
{
    return (int64_t)(kc_next(k) % (uint64_t)n);
}

static double kc_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *kc_track(kc *k, memra__backend_t *be, void *p)
{
    if (!p) {
        if (!k->err)
            k->err = memra__fail(NULL, MEMRA_E_NOMEM, "kernel check: out of %s memory", be ? "device" : "host");
        return NULL;
    }
    if (k->n_mem == KC_MAX_MEM) {
        if (be)
            be->iface->free(be, p);
        else
            free(p);
        if (!k->err)
            k->err = memra__fail(NULL, MEMRA_E_INTERNAL, "kernel check: too many buffers in one case");
        return NULL;
    }
    k->mem[k->n_mem++] = (kc_mem){be, p};
    return p;
}

static void *kc_host(kc *k, size_t bytes)
{
    return kc_track(k, NULL, malloc(bytes ? bytes : 1));
}

static void kc_release(kc *k)
{
    if (k->gpu)
        k->gpu->iface->synchronize(k->gpu);
    if (k->fast)
        k->fast->iface->synchronize(k->fast);
    for (int i = k->n_mem - 1; i >= 0; i--) {
        if (k->mem[i].be)
            k->mem[i].be->iface->free(k->mem[i].be, k->mem[i].p);
        else
            free(k->mem[i].p);
    }
    k->n_mem = 0;
}

/* BYTES of HOST on BE (the CPU backend gets its own copy too, so in-place
 * ops on one side never see the other's writes). */
static void *kc_put(kc *k, memra__backend_t *be, const void *host, size_t bytes)
{
    void *d = kc_track(k, be, be->iface->alloc(be, bytes ? bytes : 1));
    if (!d)
        return NULL;
    memra_status_t st = be->iface->upload(be, d, host, bytes);
    if (st && !k->err)
        k->err = st;
    return st ? NULL : d;
}

static float *kc_randf(kc *k, size_t n, float lo, float hi)
{
    float *v = kc_host(k, n * sizeof *v);
    if (v)
        for (size_t i = 0; i < n; i++)
            v[i] = kc_unif(k, lo, hi);
    return v;
}

/* ---- outputs: sentinel, guards, strided rows --------------------------------- */

typedef struct kc_out {
    int64_t rows, cols, ld; /* the written region: rows x cols, rows ld floats apart */
} kc_out;

static size_t kc_total(const kc_out *o)
{
    return 2 * KC_GUARD + (size_t)((o->rows - 1) * o->ld + o->cols);
}

static bool kc_written(const kc_out *o, size_t i)
{
    if (i < KC_GUARD)
        return false;
    const int64_t j = (int64_t)(i - KC_GUARD);
    const int64_t r = j / o->ld, c = j % o->ld;
    return r < o->rows && c < o->cols;
}

/* A poisoned output buffer on BE; INIT (rows x cols, dense) fills the
 * written region when the op works in place. Returns the region's start. */
static float *kc_out_new(kc *k, memra__backend_t *be, const kc_out *o, const float *init)
{
    const size_t n = kc_total(o);
    float *h = kc_host(k, n * sizeof *h);
    if (!h)
        return NULL;
    const uint32_t s = KC_SENTINEL;
    for (size_t i = 0; i < n; i++)
        memcpy(&h[i], &s, sizeof s);
    if (init)
        for (int64_t r = 0; r < o->rows; r++)
            memcpy(h + KC_GUARD + r * o->ld, init + r * o->cols, (size_t)o->cols * sizeof *h);
    float *d = kc_put(k, be, h, n * sizeof *h);
    return d ? d + KC_GUARD : NULL;
}

static float *kc_out_get(kc *k, memra__backend_t *be, const float *d, const kc_out *o)
{
    const size_t n = kc_total(o);
    float *h = kc_host(k, n * sizeof *h);
    if (!h || !d)
        return NULL;
    memra_status_t st = be->iface->download(be, h, d - KC_GUARD, n * sizeof *h);
    if (!st)
        st = be->iface->synchronize(be);
    if (st) {
        if (!k->err)
            k->err = st;
        return NULL;
    }
    return h;
}

typedef struct kc_acc {
    double max_abs, se, sr, max_ulp;
    int64_t n_diff_bits;
    bool guard_ok;
    char note[64];
} kc_acc;

static void kc_acc_init(kc_acc *a)
{
    memset(a, 0, sizeof *a);
    a->guard_ok = true;
}

static bool is_sentinel(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u == KC_SENTINEL;
}

static double ulp_of(float r)
{
    const float a = fabsf(r);
    if (!isfinite(a))
        return INFINITY;
    return (double)nextafterf(a, INFINITY) - (double)a;
}

/* Accumulates GOT against REF (both whole buffers of layout O). */
static void kc_cmp(kc_acc *a, const float *ref, const float *got, const kc_out *o, const char *what)
{
    if (!ref || !got) {
        a->guard_ok = false;
        snprintf(a->note, sizeof a->note, "%s: no output", what);
        return;
    }
    const size_t n = kc_total(o);
    for (size_t i = 0; i < n; i++) {
        if (!kc_written(o, i)) {
            if (!is_sentinel(got[i]) || !is_sentinel(ref[i])) {
                if (a->guard_ok)
                    snprintf(a->note, sizeof a->note, "%s: stray %s write at %+lld", what,
                             is_sentinel(got[i]) ? "cpu" : "cuda", (long long)i - KC_GUARD);
                a->guard_ok = false;
            }
            continue;
        }
        if (is_sentinel(got[i]) || is_sentinel(ref[i])) {
            if (a->guard_ok)
                snprintf(a->note, sizeof a->note, "%s: %s left element %lld unwritten", what,
                         is_sentinel(got[i]) ? "cuda" : "cpu", (long long)i - KC_GUARD);
            a->guard_ok = false;
            continue;
        }
        uint32_t ub, ur;
        memcpy(&ub, &got[i], 4);
        memcpy(&ur, &ref[i], 4);
        if (ub != ur)
            a->n_diff_bits++;
        const double r = ref[i], g = got[i];
        double d;
        if (isnan(r) || isnan(g))
            d = isnan(r) && isnan(g) ? 0.0 : INFINITY;
        else if (isinf(r) || isinf(g))
            d = r == g ? 0.0 : INFINITY;
        else
            d = fabs(g - r);
        if (!(d <= a->max_abs))
            a->max_abs = d;
        a->se += d * d;
        a->sr += isfinite(r) ? r * r : 0.0;
        const double u = d == 0.0 ? 0.0 : d / ulp_of(ref[i]);
        if (!(u <= a->max_ulp))
            a->max_ulp = u;
    }
}

/* ---- report lines ------------------------------------------------------------ */

static memra_kernel_check_line_t *kc_line(kc *k, const char *name, const char *kind, double tol, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static memra_kernel_check_line_t *kc_line(kc *k, const char *name, const char *kind, double tol, const char *fmt, ...)
{
    if (k->err)
        return NULL;
    if (k->p.test && *k->p.test && strncmp(name, k->p.test, strlen(k->p.test)) != 0)
        return NULL;
    memra_kernel_check_report_t *rep = k->rep;
    if (rep->n_lines == MEMRA_KERNEL_CHECK_MAX_LINES) {
        rep->truncated++;
        return NULL;
    }
    memra_kernel_check_line_t *L = &rep->lines[rep->n_lines++];
    memset(L, 0, sizeof *L);
    snprintf(L->name, sizeof L->name, "%s", name);
    snprintf(L->tol_kind, sizeof L->tol_kind, "%s", kind);
    L->tol = tol;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(L->shape, sizeof L->shape, fmt, ap);
    va_end(ap);
    L->guard_ok = 1;
    return L;
}

static void kc_finish(kc *k, memra_kernel_check_line_t *L, const kc_acc *a)
{
    L->max_abs_err = a->max_abs;
    L->nmse = a->sr > 0 ? a->se / a->sr : (a->se > 0 ? INFINITY : 0.0);
    L->max_ulp = a->max_ulp;
    L->guard_ok = a->guard_ok;
    snprintf(L->note, sizeof L->note, "%s", a->note);
    bool ok;
    if (strcmp(L->tol_kind, "exact") == 0)
        ok = a->n_diff_bits == 0;
    else if (strcmp(L->tol_kind, "ulp") == 0)
        ok = a->max_ulp <= L->tol;
    else
        ok = L->nmse <= L->tol;
    if (!ok && !L->note[0])
        snprintf(L->note, sizeof L->note, "%lld elements differ; outside the %s bound",
                 (long long)a->n_diff_bits, L->tol_kind);
    L->pass = ok && a->guard_ok;
    if (!L->pass)
        k->rep->n_failed++;
}

static void kc_op_failed(kc *k, memra_kernel_check_line_t *L, const char *side, memra_status_t st)
{
    L->pass = 0;
    L->guard_ok = 0;
    snprintf(L->note, sizeof L->note, "%s op: %s", side, memra_strerror(st));
    k->rep->n_failed++;
}

/* The op of one case on one side (0 = cpu, 1 = cuda pointers) on BE. */
typedef memra_status_t (*kc_run_fn)(void *c, memra__backend_t *be, int side);

/* Side SIDE of a case on the device backend BE, awaited; false (line
 * failed, WHAT names the side) on an error. */
static bool kc_run_gpu(kc *k, memra_kernel_check_line_t *L, kc_run_fn run, void *c, memra__backend_t *be, int side,
                       const char *what)
{
    memra_status_t st = run(c, be, side);
    if (!st)
        st = be->iface->synchronize(be);
    if (st) {
        kc_op_failed(k, L, what, st);
        return false;
    }
    return true;
}

/* Runs both sides; false (line failed) when either op returns an error. */
static bool kc_run2(kc *k, memra_kernel_check_line_t *L, kc_run_fn run, void *c, memra__backend_t *gpu_be)
{
    memra_status_t st = run(c, k->cpu, 0);
    if (st) {
        kc_op_failed(k, L, "cpu", st);
        return false;
    }
    return kc_run_gpu(k, L, run, c, gpu_be, 1, "cuda");
}

/* The end of a GPU-against-GPU bit-identity check: fails the line on ST,
 * else compares GOT to REF for each of the N outputs (both on the GPU
 * engine, layouts O). */
typedef struct kc_pair {
    const float *ref, *got;
    const kc_out *o;
    const char *what;
} kc_pair;

static void kc_finish_exact(kc *k, memra_kernel_check_line_t *L, memra_status_t st, const kc_pair *p, int n)
{
    if (st) {
        kc_op_failed(k, L, "cuda", st);
        return;
    }
    kc_acc acc;
    kc_acc_init(&acc);
    for (int i = 0; i < n; i++)
        kc_cmp(&acc, kc_out_get(k, k->gpu, p[i].ref, p[i].o), kc_out_get(k, k->gpu, p[i].got, p[i].o), p[i].o,
               p[i].what);
    kc_finish(k, L, &acc);
}

/* Fused ops (matmul_ex, gdn, qk_norm_rope) are checked twice: against the
 * CPU reference within their bound, and against the GPU engine's own
 * sequence of plain ops bit for bit. kc_run_seq runs side 2 of a case on
 * the GPU engine with every fused slot removed (so the memra__ wrapper
 * runs the defining sequence); kc_finish_fused fails the line A (vs the
 * CPU) whenever E (fused vs that sequence) saw a differing bit. */
static bool kc_run_seq(kc *k, memra_kernel_check_line_t *L, kc_run_fn run, void *c, memra__backend_t *gb)
{
    memra__backend_i seq_i = *gb->iface;
    seq_i.matmul_ex = NULL;
    seq_i.gdn = NULL;
    seq_i.qk_norm_rope = NULL;
    memra__backend_t seq = *gb;
    seq.iface = &seq_i;
    return kc_run_gpu(k, L, run, c, &seq, 2, "cuda sequence");
}

static void kc_finish_fused(kc *k, memra_kernel_check_line_t *L, kc_acc *a, const kc_acc *e)
{
    if (e->n_diff_bits && !a->note[0])
        snprintf(a->note, sizeof a->note, "fused != cuda sequence in %lld elements", (long long)e->n_diff_bits);
    if (e->n_diff_bits || !e->guard_ok) {
        a->guard_ok = false; /* fails the line whatever the bound */
        if (!e->guard_ok && !a->note[0])
            snprintf(a->note, sizeof a->note, "sequence: %.50s", e->note);
    }
    kc_finish(k, L, a);
}

/* Mean time of back-to-back calls, after ~50 ms of the same calls: the
 * check is bursty (CPU references in between), and an idle GPU sits at a
 * low clock that a short timed loop would measure instead of the op. At
 * least bench_iters calls and ~20 ms are timed. */
static void kc_bench(kc *k, memra_kernel_check_line_t *L, kc_run_fn run, void *c, memra__backend_t *be, double bytes)
{
    if (!k->p.bench || !L)
        return;
    const int iters = k->p.bench_iters > 0 ? k->p.bench_iters : 20;
    double t0 = kc_now();
    while (kc_now() - t0 < 0.05) {
        for (int i = 0; i < 8; i++)
            if (run(c, be, 1))
                return;
        if (be->iface->synchronize(be))
            return;
    }
    int n = 0;
    t0 = kc_now();
    do {
        for (int i = 0; i < iters; i++)
            if (run(c, be, 1))
                return;
        n += iters;
        if (be->iface->synchronize(be))
            return;
    } while (kc_now() - t0 < 0.02);
    L->bench_us = (kc_now() - t0) / n * 1e6;
    L->bench_gbs = bytes > 0 ? bytes / (L->bench_us * 1e3) : 0.0;
}

/* The end of a CUDA-against-CPU case with one output: compares Y_GPU (on
 * GB) with Y_CPU, finishes the line, and times the CUDA side (--bench). */
static void kc_finish_vs_cpu(kc *k, memra_kernel_check_line_t *L, memra__backend_t *gb, const float *y_cpu,
                             const float *y_gpu, const kc_out *o, const char *what, kc_run_fn run, void *c,
                             double bytes)
{
    kc_acc a;
    kc_acc_init(&a);
    kc_cmp(&a, kc_out_get(k, k->cpu, y_cpu, o), kc_out_get(k, gb, y_gpu, o), o, what);
    kc_finish(k, L, &a);
    kc_bench(k, L, run, c, gb, bytes);
}

/* The ceiling the matvec numbers are read against: a device-to-device copy
 * of 2 GiB (bytes read + bytes written). */
typedef struct cp_case {
    void *dst, *src;
    size_t n;
} cp_case;

static memra_status_t cp_run(void *c, memra__backend_t *be, int side)
{
    cp_case *p = c;
    (void)side;
    return be->iface->copy(be, p->dst, p->src, p->n);
}

static void kc_roofline(kc *k)
{
    if (!k->p.bench)
        return;
    memra_kernel_check_line_t *L = kc_line(k, "roofline.copy", "exact", 0, "device copy of 2 GiB (read + write)");
    if (!L)
        return;
    cp_case c = {.n = (size_t)1 << 31};
    c.src = kc_track(k, k->gpu, k->gpu->iface->alloc(k->gpu, c.n));
    c.dst = kc_track(k, k->gpu, k->gpu->iface->alloc(k->gpu, c.n));
    if (!c.src || !c.dst)
        return;
    kc_acc a;
    kc_acc_init(&a);
    kc_finish(k, L, &a);
    kc_bench(k, L, cp_run, &c, k->gpu, 2.0 * (double)c.n);
}

/* ---- weights ------------------------------------------------------------------ */

static const char *tname(memra_type_t t)
{
    switch (t) {
    case MEMRA_TYPE_F32: return "f32";
    case MEMRA_TYPE_F16: return "f16";
    case MEMRA_TYPE_BF16: return "bf16";
    case MEMRA_TYPE_Q4_0: return "q4_0";
    case MEMRA_TYPE_Q4_1: return "q4_1";
    case MEMRA_TYPE_Q5_0: return "q5_0";
    case MEMRA_TYPE_Q5_1: return "q5_1";
    case MEMRA_TYPE_Q8_0: return "q8_0";
    case MEMRA_TYPE_MXFP4: return "mxfp4";
    case MEMRA_TYPE_IQ4_NL: return "iq4_nl";
    case MEMRA_TYPE_Q2_K: return "q2_k";
    case MEMRA_TYPE_Q3_K: return "q3_k";
    case MEMRA_TYPE_Q4_K: return "q4_k";
    case MEMRA_TYPE_Q5_K: return "q5_k";
    case MEMRA_TYPE_Q6_K: return "q6_k";
    case MEMRA_TYPE_IQ4_XS: return "iq4_xs";
    default: return "?";
    }
}

static void put_fp16(uint8_t *p, float v)
{
    const uint16_t h = memra__f32_to_fp16(v);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

/* Random bytes with sane scale fields: every block decodes to finite values
 * of moderate size. */
static void kc_fill_blocks(kc *k, memra_type_t t, uint8_t *b, int64_t n_blocks)
{
    const size_t bb = memra_type_block_bytes(t);
    for (int64_t i = 0; i < n_blocks; i++, b += bb) {
        for (size_t j = 0; j < bb; j += 8) {
            const uint64_t r = kc_next(k);
            memcpy(b + j, &r, bb - j < 8 ? bb - j : 8);
        }
        const float d = kc_unif(k, 0.002f, 0.02f), m = kc_unif(k, 0.002f, 0.02f);
        switch (t) {
        case MEMRA_TYPE_Q4_0:
        case MEMRA_TYPE_Q5_0:
        case MEMRA_TYPE_Q8_0:
        case MEMRA_TYPE_IQ4_NL:
        case MEMRA_TYPE_IQ4_XS:
            put_fp16(b, d);
            break;
        case MEMRA_TYPE_Q4_1:
        case MEMRA_TYPE_Q5_1:
            put_fp16(b, d);
            put_fp16(b + 2, -8 * m);
            break;
        case MEMRA_TYPE_Q4_K:
        case MEMRA_TYPE_Q5_K:
            put_fp16(b, d * 0.1f);
            put_fp16(b + 2, m * 0.1f);
            break;
        case MEMRA_TYPE_Q2_K:
            put_fp16(b + 80, d);
            put_fp16(b + 82, m);
            break;
        case MEMRA_TYPE_Q3_K:
            put_fp16(b + 108, d * 0.2f);
            break;
        case MEMRA_TYPE_Q6_K:
            put_fp16(b + 208, d * 0.05f);
            break;
        case MEMRA_TYPE_MXFP4:
            b[0] = (uint8_t)(118 + kc_int(k, 8));
            break;
        default:
            break;
        }
    }
}

/* A host weight of NE2 x NE1 rows of NE0 elements (rows NB1_PAD bytes apart
 * beyond their size); *bytes gets the whole size. */
static uint8_t *kc_weight_host(kc *k, memra_type_t t, int64_t ne0, int64_t ne1, int64_t ne2, size_t nb1_pad,
                               size_t *nb1, size_t *bytes)
{
    const size_t row = memra__row_bytes(t, ne0);
    *nb1 = row + nb1_pad;
    *bytes = *nb1 * (size_t)ne1 * (size_t)ne2;
    uint8_t *w = kc_host(k, *bytes);
    if (!w)
        return NULL;
    memset(w, 0, *bytes);
    const int64_t nbr = ne0 / memra_type_block_size(t);
    for (int64_t r = 0; r < ne1 * ne2; r++) {
        uint8_t *p = w + (size_t)r * *nb1;
        if (t == MEMRA_TYPE_F32 || t == MEMRA_TYPE_F16 || t == MEMRA_TYPE_BF16) {
            for (int64_t i = 0; i < ne0; i++) {
                const float v = kc_unif(k, -1.0f, 1.0f);
                if (t == MEMRA_TYPE_F32) {
                    memcpy(p + 4 * i, &v, 4);
                } else {
                    const uint16_t h = t == MEMRA_TYPE_F16 ? memra__f32_to_fp16(v) : memra__f32_to_bf16(v);
                    p[2 * i] = (uint8_t)h;
                    p[2 * i + 1] = (uint8_t)(h >> 8);
                }
            }
        } else {
            kc_fill_blocks(k, t, p, nbr);
        }
    }
    return w;
}

/* The same weight on both sides: w[0] host (the CPU backend uses weights in
 * place), w[1] device. */
static bool kc_weight(kc *k, memra_type_t t, int64_t ne0, int64_t ne1, int64_t ne2, size_t nb1_pad,
                      memra_weight_t w[2])
{
    size_t nb1, bytes;
    uint8_t *h = kc_weight_host(k, t, ne0, ne1, ne2, nb1_pad, &nb1, &bytes);
    if (!h)
        return false;
    void *d = kc_put(k, k->gpu, h, bytes);
    if (!d)
        return false;
    for (int s = 0; s < 2; s++) {
        memset(&w[s], 0, sizeof w[s]);
        w[s].data = s ? d : h;
        w[s].type = t;
        w[s].ne[0] = ne0;
        w[s].ne[1] = ne1;
        w[s].ne[2] = ne2;
        w[s].ne[3] = 1;
        w[s].nb1 = nb1;
        w[s].nb2 = nb1 * (size_t)ne1;
    }
    return true;
}

/* Host data to both sides: p[0] cpu copy, p[1] cuda copy. */
static bool kc_both(kc *k, const void *host, size_t bytes, void *p[2])
{
    p[0] = kc_put(k, k->cpu, host, bytes);
    p[1] = kc_put(k, k->gpu, host, bytes);
    return p[0] && p[1];
}

/* ---- matmul ------------------------------------------------------------------ */

typedef struct mm_case {
    memra_weight_t w[2];
    const float *x[2];
    float *y[2];
    int64_t ldx, ldy, n_rows;
} mm_case;

static memra_status_t mm_run(void *c, memra__backend_t *be, int side)
{
    mm_case *m = c;
    return be->iface->matmul(be, &m->w[side], m->x[side], m->ldx, m->y[side], m->ldy, m->n_rows);
}

static void kc_matmul(kc *k, const char *name, memra_type_t t, int64_t ne0, int64_t ne1, int64_t n_rows, bool fast,
                      int64_t pad, size_t nb1_pad)
{
    const bool bf = getenv("MEMRA_FAST_GEMM") && strcmp(getenv("MEMRA_FAST_GEMM"), "bf16") == 0;
    const double tol = fast && n_rows > 8 ? (bf ? TOL_BF16 : TOL_F16) : TOL_F32;
    memra_kernel_check_line_t *L =
        kc_line(k, name, "nmse", tol, "%s W[%lld x %lld] x %lld rows%s%s", tname(t), (long long)ne1, (long long)ne0,
                (long long)n_rows, fast ? " fast" : " exact", pad || nb1_pad ? " strided" : "");
    if (!L)
        return;
    mm_case c = {.ldx = ne0 + pad, .ldy = ne1 + pad, .n_rows = n_rows};
    void *xp[2];
    float *x = kc_randf(k, (size_t)(n_rows * c.ldx), -1.0f, 1.0f);
    const kc_out o = {n_rows, ne1, c.ldy};
    if (!x || !kc_weight(k, t, ne0, ne1, 1, nb1_pad, c.w) || !kc_both(k, x, (size_t)(n_rows * c.ldx) * 4, xp))
        return;
    c.x[0] = xp[0];
    c.x[1] = xp[1];
    c.y[0] = kc_out_new(k, k->cpu, &o, NULL);
    c.y[1] = kc_out_new(k, k->gpu, &o, NULL);
    if (!c.y[0] || !c.y[1])
        return;
    memra__backend_t *gb = fast ? k->fast : k->gpu;
    if (!kc_run2(k, L, mm_run, &c, gb))
        return;
    kc_finish_vs_cpu(k, L, gb, c.y[0], c.y[1], &o, "y", mm_run, &c, (double)(c.w[1].nb1 * (size_t)ne1));
}

/* Exact mode: N rows in one call equal N one-row calls bit for bit (what
 * makes GPU prefill chunk-invariant). */
static void kc_matmul_rowinv(kc *k, memra_type_t t, int64_t ne0, int64_t ne1, int64_t n_rows)
{
    memra_kernel_check_line_t *L = kc_line(k, "matmul.rowinv", "exact", 0, "%s W[%lld x %lld], %lld rows vs 1+1+..",
                                           tname(t), (long long)ne1, (long long)ne0, (long long)n_rows);
    if (!L)
        return;
    memra_weight_t w[2];
    float *x = kc_randf(k, (size_t)(n_rows * ne0), -1.0f, 1.0f);
    const kc_out o = {n_rows, ne1, ne1};
    if (!x || !kc_weight(k, t, ne0, ne1, 1, 0, w))
        return;
    const float *xd = kc_put(k, k->gpu, x, (size_t)(n_rows * ne0) * 4);
    float *ya = kc_out_new(k, k->gpu, &o, NULL), *yb = kc_out_new(k, k->gpu, &o, NULL);
    if (!xd || !ya || !yb)
        return;
    memra_status_t st = k->gpu->iface->matmul(k->gpu, &w[1], xd, ne0, ya, ne1, n_rows);
    for (int64_t r = 0; !st && r < n_rows; r++)
        st = k->gpu->iface->matmul(k->gpu, &w[1], xd + r * ne0, ne0, yb + r * ne1, ne1, 1);
    const kc_pair p = {yb, ya, &o, "y"};
    kc_finish_exact(k, L, st, &p, 1);
}

/* A decode matvec into page-locked host memory that the backend maps
 * (host_map: the forward's head writes a decode step's logits there) equals
 * the same matvec into device memory bit for bit, guards included. The
 * CUDA backend writes it with the Q8_0 fast path's grouped stores, or
 * through device memory and a copy. */
static void kc_matmul_mapped(kc *k, memra_type_t t, int64_t ne0, int64_t ne1)
{
    memra_kernel_check_line_t *L = kc_line(k, "matmul.mapped", "exact", 0, "%s W[%lld x %lld] into mapped host memory",
                                           tname(t), (long long)ne1, (long long)ne0);
    if (!L)
        return;
    memra__backend_t *be = k->gpu;
    memra_weight_t w[2];
    float *x = kc_randf(k, (size_t)ne0, -1.0f, 1.0f);
    const kc_out o = {1, ne1, ne1};
    const size_t n = kc_total(&o);
    if (!x || !kc_weight(k, t, ne0, ne1, 1, 0, w))
        return;
    const float *xd = kc_put(k, be, x, (size_t)ne0 * 4);
    float *yd = kc_out_new(k, be, &o, NULL);
    float *pin = memra_engine_host_alloc(k->e_gpu, n * sizeof *pin);
    if (!xd || !yd || !pin) {
        memra_host_free(pin);
        kc_op_failed(k, L, "cuda", MEMRA_E_NOMEM);
        return;
    }
    const uint32_t sent = KC_SENTINEL;
    for (size_t i = 0; i < n; i++)
        memcpy(&pin[i], &sent, sizeof sent);
    float *ym = be->iface->host_map ? be->iface->host_map(be, pin, n * sizeof *pin) : NULL;
    memra_status_t st = be->iface->matmul(be, &w[1], xd, ne0, yd, ne1, 1);
    if (!st && ym)
        st = be->iface->matmul(be, &w[1], xd, ne0, ym + KC_GUARD, ne1, 1);
    if (!st)
        st = be->iface->synchronize(be);
    if (st) {
        memra_host_free(pin);
        kc_op_failed(k, L, "cuda", st);
        return;
    }
    kc_acc acc;
    kc_acc_init(&acc);
    if (ym)
        kc_cmp(&acc, kc_out_get(k, be, yd, &o), pin, &o, "y");
    else
        snprintf(acc.note, sizeof acc.note, "not mapped (MEMRA_MAP_LOGITS=0?): forward downloads");
    memra_host_free(pin);
    kc_finish(k, L, &acc);
}

/* ---- fused matmuls (matmul_ex) ---------------------------------------------------- */

typedef struct mx_case {
    memra_mm_args_t a[3]; /* cpu, cuda fused, cuda sequence */
    memra__backend_t *gpu;      /* the engine the cuda side runs on */
} mx_case;

static memra_status_t mx_run(void *c, memra__backend_t *be, int side)
{
    mx_case *m = c;
    return memra__matmul_ex(be, &m->a[side]);
}

/* matmul_ex of N_W weights (types T[i], NE1[i] rows, NE0 wide) over N_ROWS
 * x rows: against the CPU reference (its unfused sequence) within the
 * matmul bound, and the CUDA fused path against the CUDA unfused sequence
 * bit for bit (what lets the forwards fuse without changing a logit). */
static void kc_matmul_ex(kc *k, const char *name, int n_w, const memra_type_t *t, int64_t ne0, const int64_t *ne1,
                         int64_t n_rows, bool norm, memra_mm_epi_t epi, memra_act_t act, bool fast, bool conv)
{
    const int64_t K = 4; /* conv: weight 0's outputs through qwen35's causal conv + SiLU, checked with its state */
    /* four STORE weights: the middle two get qwen35's sigmoid / softplus·a post ops (its order) */
    const bool post = epi == MEMRA_MM_STORE && n_w == 4;
    const bool bf = getenv("MEMRA_FAST_GEMM") && strcmp(getenv("MEMRA_FAST_GEMM"), "bf16") == 0;
    const double tol = fast && n_rows > 8 ? (bf ? TOL_BF16 : TOL_F16) : TOL_F32;
    const char *en = epi == MEMRA_MM_ADD ? " add" : epi == MEMRA_MM_GLU ? (act == MEMRA_ACT_GELU ? " geglu" : " swiglu") : "";
    memra_kernel_check_line_t *L = kc_line(k, name, "nmse", tol, "%s%s W[%lld..] x %d, %lld wide, %lld rows%s%s%s%s%s",
                                           tname(t[0]), n_w > 1 && t[n_w - 1] != t[0] ? "+" : "", (long long)ne1[0],
                                           n_w, (long long)ne0, (long long)n_rows, norm ? " norm" : "", en,
                                           post ? " sigmoid/softplus" : "", conv ? " conv" : "", fast ? " fast" : "");
    if (!L)
        return;
    memra__backend_t *gb = fast ? k->fast : k->gpu;
    mx_case c;
    memset(&c, 0, sizeof c);
    const int64_t ldx = ne0 + 3;
    float *x = kc_randf(k, (size_t)(n_rows * ldx), -1.0f, 1.0f);
    float *nw = kc_randf(k, (size_t)ne0, 0.5f, 1.5f);
    void *xp[2], *np[2];
    if (!x || !nw || !kc_both(k, x, (size_t)(n_rows * ldx) * 4, xp) || !kc_both(k, nw, (size_t)ne0 * 4, np))
        return;
    memra_weight_t w[MEMRA_MM_MAX_W][2];
    kc_out o[MEMRA_MM_MAX_W];
    int64_t ne1_max = 0;
    for (int i = 0; i < n_w; i++) {
        if (!kc_weight(k, t[i], ne0, ne1[i], 1, 0, w[i]))
            return;
        o[i] = (kc_out){n_rows, ne1[i], ne1[i] + (conv && i == 0 ? 0 : 5)};
        if (ne1[i] > ne1_max)
            ne1_max = ne1[i];
    }
    const kc_out os = {1, ne1[0] * (K - 1), ne1[0] * (K - 1)};
    float *cw = conv ? kc_randf(k, (size_t)(ne1[0] * K), -0.5f, 0.5f) : NULL;
    float *cst = conv ? kc_randf(k, (size_t)(ne1[0] * (K - 1)), -1.0f, 1.0f) : NULL;
    void *cwp[2] = {NULL, NULL};
    if (conv && (!cw || !cst || !kc_both(k, cw, (size_t)(ne1[0] * K) * 4, cwp)))
        return;
    float *init = epi == MEMRA_MM_ADD ? kc_randf(k, (size_t)(n_rows * ne1[0]), -4.0f, 4.0f) : NULL;
    void *pb[2] = {NULL, NULL}, *pa[2] = {NULL, NULL};
    if (post) {
        float *b = kc_randf(k, (size_t)ne1[2], -2.0f, 2.0f), *aux = kc_randf(k, (size_t)ne1[2], -3.0f, -0.1f);
        if (!b || !aux || !kc_both(k, b, (size_t)ne1[2] * 4, pb) || !kc_both(k, aux, (size_t)ne1[2] * 4, pa))
            return;
    }
    for (int s = 0; s < 2; s++) {
        memra__backend_t *be = s ? gb : k->cpu;
        memra_mm_args_t *a = &c.a[s];
        a->x = xp[s];
        a->ldx = ldx;
        a->n_rows = n_rows;
        a->norm = norm;
        a->norm_w = np[s];
        a->eps = 1e-6f;
        a->n_w = n_w;
        a->epi = epi;
        a->act = act;
        if (conv) {
            a->conv_w = cwp[s];
            a->conv_k = K;
            if (!(a->conv_state = kc_out_new(k, be, &os, cst)))
                return;
        }
        if (post) {
            a->post[1] = MEMRA_EW_SIGMOID;
            a->post[2] = MEMRA_EW_SOFTPLUS_MUL;
            a->post_b[2] = pb[s];
            a->post_aux[2] = pa[s];
        }
        for (int i = 0; i < n_w; i++) {
            a->w[i] = &w[i][s];
            a->ldy[i] = o[i].ld;
            if (!(a->y[i] = kc_out_new(k, be, &o[i], i == 0 ? init : NULL)))
                return;
        }
        a->x_tmp = kc_track(k, be, be->iface->alloc(be, (size_t)(n_rows * ne0) * 4));
        a->tmp[0] = kc_track(k, be, be->iface->alloc(be, (size_t)(n_rows * ne1_max) * 4));
        a->tmp[1] = kc_track(k, be, be->iface->alloc(be, (size_t)(n_rows * ne1_max) * 4));
        if (!a->x_tmp || !a->tmp[0] || !a->tmp[1])
            return;
    }
    memra_mm_args_t *u = &c.a[2];
    *u = c.a[1];
    for (int i = 0; i < n_w; i++)
        if (!(u->y[i] = kc_out_new(k, gb, &o[i], i == 0 ? init : NULL)))
            return;
    if (conv && !(u->conv_state = kc_out_new(k, gb, &os, cst)))
        return;
    if (!kc_run2(k, L, mx_run, &c, gb) || !kc_run_seq(k, L, mx_run, &c, gb))
        return;
    kc_acc a, e;
    kc_acc_init(&a);
    kc_acc_init(&e);
    const int n_out = epi == MEMRA_MM_STORE ? n_w : 1;
    for (int i = 0; i < n_out; i++) {
        const float *got = kc_out_get(k, gb, c.a[1].y[i], &o[i]);
        kc_cmp(&a, kc_out_get(k, k->cpu, c.a[0].y[i], &o[i]), got, &o[i], "y");
        kc_cmp(&e, kc_out_get(k, gb, u->y[i], &o[i]), got, &o[i], "y");
    }
    if (conv) {
        const float *got = kc_out_get(k, gb, c.a[1].conv_state, &os);
        kc_cmp(&a, kc_out_get(k, k->cpu, c.a[0].conv_state, &os), got, &os, "conv state");
        kc_cmp(&e, kc_out_get(k, gb, u->conv_state, &os), got, &os, "conv state");
    }
    kc_finish_fused(k, L, &a, &e);
    double bytes = 0;
    for (int i = 0; i < n_w; i++)
        bytes += (double)(w[i][1].nb1 * (size_t)ne1[i]);
    kc_bench(k, L, mx_run, &c, gb, bytes);
}

/* ---- get_rows ------------------------------------------------------------------ */

typedef struct gr_case {
    memra_weight_t w[2];
    const int32_t *ids[2];
    float *y[2];
    int64_t n, ldy;
} gr_case;

static memra_status_t gr_run(void *c, memra__backend_t *be, int side)
{
    gr_case *g = c;
    return be->iface->get_rows(be, &g->w[side], g->ids[side], g->n, g->y[side], g->ldy);
}

static void kc_get_rows(kc *k, memra_type_t t, int64_t ne0, int64_t ne1, int64_t n)
{
    char name[48];
    snprintf(name, sizeof name, "get_rows.%s", tname(t));
    memra_kernel_check_line_t *L =
        kc_line(k, name, "exact", 0, "%s E[%lld x %lld], %lld ids", tname(t), (long long)ne1, (long long)ne0, (long long)n);
    if (!L)
        return;
    gr_case c = {.n = n, .ldy = ne0 + 3};
    int32_t *ids = kc_host(k, (size_t)n * sizeof *ids);
    void *ip[2];
    const kc_out o = {n, ne0, c.ldy};
    if (!ids || !kc_weight(k, t, ne0, ne1, 1, 0, c.w))
        return;
    for (int64_t i = 0; i < n; i++)
        ids[i] = (int32_t)(i == 0 ? ne1 - 1 : kc_int(k, ne1));
    if (!kc_both(k, ids, (size_t)n * sizeof *ids, ip))
        return;
    c.ids[0] = ip[0];
    c.ids[1] = ip[1];
    c.y[0] = kc_out_new(k, k->cpu, &o, NULL);
    c.y[1] = kc_out_new(k, k->gpu, &o, NULL);
    if (!c.y[0] || !c.y[1] || !kc_run2(k, L, gr_run, &c, k->gpu))
        return;
    kc_finish_vs_cpu(k, L, k->gpu, c.y[0], c.y[1], &o, "y", gr_run, &c, (double)(n * ne0 * 4 + n * (int64_t)c.w[1].nb1));
}

/* ---- norm ------------------------------------------------------------------ */

typedef struct nm_case {
    memra_norm_kind_t kind;
    const float *x[2], *w[2];
    float *y[2];
    int64_t xs, ys, rows, dim;
    float eps;
} nm_case;

static memra_status_t nm_run(void *c, memra__backend_t *be, int side)
{
    nm_case *n = c;
    return be->iface->norm(be, n->kind, n->x[side], n->xs, n->w[side], n->y[side], n->ys, n->rows, n->dim, n->eps);
}

static void kc_norm(kc *k, const char *name, memra_norm_kind_t kind, int64_t rows, int64_t dim, bool weight,
                    bool in_place, int64_t pad)
{
    memra_kernel_check_line_t *L = kc_line(k, name, "ulp", TOL_ULP, "%s %lld x %lld%s%s", kind == MEMRA_NORM_RMS ? "rms" : "l2",
                                           (long long)rows, (long long)dim, weight ? " *w" : "", in_place ? " in place" : "");
    if (!L)
        return;
    nm_case c = {.kind = kind, .xs = dim + pad, .ys = dim + pad, .rows = rows, .dim = dim, .eps = 1e-6f};
    float *x = kc_randf(k, (size_t)(rows * c.xs), -2.0f, 2.0f), *w = kc_randf(k, (size_t)dim, 0.5f, 1.5f);
    const kc_out o = {rows, dim, c.ys};
    if (!x || !w)
        return;
    void *wp[2] = {NULL, NULL}, *xp[2];
    if (weight && !kc_both(k, w, (size_t)dim * 4, wp))
        return;
    c.w[0] = wp[0];
    c.w[1] = wp[1];
    if (in_place) {
        float *dense = kc_host(k, (size_t)(rows * dim) * 4);
        if (!dense)
            return;
        for (int64_t r = 0; r < rows; r++)
            memcpy(dense + r * dim, x + r * c.xs, (size_t)dim * 4);
        c.y[0] = kc_out_new(k, k->cpu, &o, dense);
        c.y[1] = kc_out_new(k, k->gpu, &o, dense);
        c.x[0] = c.y[0];
        c.x[1] = c.y[1];
    } else {
        if (!kc_both(k, x, (size_t)(rows * c.xs) * 4, xp))
            return;
        c.x[0] = xp[0];
        c.x[1] = xp[1];
        c.y[0] = kc_out_new(k, k->cpu, &o, NULL);
        c.y[1] = kc_out_new(k, k->gpu, &o, NULL);
    }
    if (!c.y[0] || !c.y[1] || !kc_run2(k, L, nm_run, &c, k->gpu))
        return;
    kc_finish_vs_cpu(k, L, k->gpu, c.y[0], c.y[1], &o, "y", nm_run, &c, (double)(rows * dim * 8));
}

/* ---- elementwise ----------------------------------------------------------- */

static const char *ew_name(memra_ew_op_t op)
{
    static const char *n[] = {"copy", "add", "mul", "scale", "add_scaled", "silu", "gelu", "sigmoid",
                              "swiglu", "geglu", "mul_sigmoid", "softcap", "softplus_mul", "fill"};
    return (unsigned)op <= MEMRA_EW_FILL ? n[op] : "?";
}

static bool ew_binary(memra_ew_op_t op)
{
    return op == MEMRA_EW_ADD || op == MEMRA_EW_MUL || op == MEMRA_EW_ADD_SCALED || op == MEMRA_EW_SWIGLU ||
           op == MEMRA_EW_GEGLU || op == MEMRA_EW_MUL_SIGMOID || op == MEMRA_EW_SOFTPLUS_MUL;
}

typedef struct ew_case {
    memra_ew_args_t a[2];
} ew_case;

static memra_status_t ew_run(void *c, memra__backend_t *be, int side)
{
    return be->iface->elementwise(be, &((ew_case *)c)->a[side]);
}

/* MODE 0: strided rows; 1: b broadcast (bs 0); 2: in place (y = a). */
static void kc_ew(kc *k, memra_ew_op_t op, int64_t rows, int64_t cols, int mode)
{
    static const char *suffix[] = {"", ".bcast", ".inplace"};
    char name[48];
    snprintf(name, sizeof name, "elementwise.%s%s", ew_name(op), suffix[mode]);
    memra_kernel_check_line_t *L = kc_line(k, name, "ulp", TOL_ULP, "%lld x %lld", (long long)rows, (long long)cols);
    if (!L)
        return;
    const int64_t ys = mode == 2 ? cols + 2 : cols + 5, as = mode == 2 ? ys : cols + 3;
    const int64_t bs = mode == 1 ? 0 : cols + 1;
    const float lim = op == MEMRA_EW_SOFTCAP ? 90.0f : 8.0f;
    float *a = kc_randf(k, (size_t)(rows * as), -lim, lim), *b = kc_randf(k, (size_t)(rows * (cols + 1)), -4.0f, 4.0f);
    float *aux = kc_randf(k, (size_t)cols, -2.0f, 2.0f);
    const kc_out o = {rows, cols, ys};
    if (!a || !b || !aux)
        return;
    ew_case c;
    void *ap[2], *bp[2], *xp[2];
    if (!kc_both(k, a, (size_t)(rows * as) * 4, ap) || !kc_both(k, b, (size_t)(rows * (cols + 1)) * 4, bp) ||
        !kc_both(k, aux, (size_t)cols * 4, xp))
        return;
    for (int s = 0; s < 2; s++) {
        memra__backend_t *be = s ? k->gpu : k->cpu;
        c.a[s] = (memra_ew_args_t){.op = op, .a = ap[s], .b = ew_binary(op) ? bp[s] : NULL,
                                   .aux = op == MEMRA_EW_SOFTPLUS_MUL ? xp[s] : NULL, .rows = rows, .cols = cols,
                                   .ys = ys, .as = as, .bs = bs, .s = op == MEMRA_EW_SOFTCAP ? 30.0f : 0.7f};
        if (mode == 2) {
            float *dense = kc_host(k, (size_t)(rows * cols) * 4);
            if (!dense)
                return;
            for (int64_t r = 0; r < rows; r++)
                memcpy(dense + r * cols, a + r * as, (size_t)cols * 4);
            c.a[s].y = kc_out_new(k, be, &o, dense);
            c.a[s].a = c.a[s].y;
        } else {
            c.a[s].y = kc_out_new(k, be, &o, NULL);
        }
        if (!c.a[s].y)
            return;
    }
    if (!kc_run2(k, L, ew_run, &c, k->gpu))
        return;
    kc_finish_vs_cpu(k, L, k->gpu, c.a[0].y, c.a[1].y, &o, "y", ew_run, &c, (double)(rows * cols * (ew_binary(op) ? 12 : 8)));
}

/* ---- rope ----------------------------------------------------------------- */

typedef struct rp_case {
    memra_rope_args_t a[2];
} rp_case;

static memra_status_t rp_run(void *c, memra__backend_t *be, int side)
{
    return be->iface->rope(be, &((rp_case *)c)->a[side]);
}

static void kc_rope(kc *k, const char *name, memra_rope_mode_t mode, int64_t n_tokens, int64_t n_heads, int64_t hd,
                    int64_t n_rot, bool ff, int32_t max_pos)
{
    memra_kernel_check_line_t *L =
        kc_line(k, name, "nmse", 1e-12, "%s %lld tok x %lld heads x %lld, n_rot %lld%s, pos < %d",
                mode == MEMRA_ROPE_NEOX ? "neox" : "norm", (long long)n_tokens, (long long)n_heads, (long long)hd,
                (long long)n_rot, ff ? ", freq factors" : "", max_pos);
    if (!L)
        return;
    const int64_t ts = n_heads * hd + 8;
    const kc_out o = {n_tokens, ts - 8, ts};
    float *x = kc_randf(k, (size_t)(n_tokens * (ts - 8)), -2.0f, 2.0f), *f = kc_randf(k, (size_t)(n_rot / 2), 1.0f, 8.0f);
    int32_t *pos = kc_host(k, (size_t)n_tokens * 4);
    if (!x || !f || !pos)
        return;
    for (int64_t t = 0; t < n_tokens; t++)
        pos[t] = (int32_t)(t == 0 ? max_pos - 1 : kc_int(k, max_pos));
    void *pp[2], *fp[2];
    if (!kc_both(k, pos, (size_t)n_tokens * 4, pp) || !kc_both(k, f, (size_t)(n_rot / 2) * 4, fp))
        return;
    rp_case c;
    for (int s = 0; s < 2; s++) {
        c.a[s] = (memra_rope_args_t){.x = kc_out_new(k, s ? k->gpu : k->cpu, &o, x), .n_tokens = n_tokens,
                                     .n_heads = n_heads, .head_dim = hd, .head_stride = hd, .token_stride = ts,
                                     .n_rot = n_rot, .pos = pp[s], .base = 1000000.0f, .freq_factors = ff ? fp[s] : NULL,
                                     .mode = mode};
        if (!c.a[s].x)
            return;
    }
    if (!kc_run2(k, L, rp_run, &c, k->gpu))
        return;
    kc_finish_vs_cpu(k, L, k->gpu, c.a[0].x, c.a[1].x, &o, "x", rp_run, &c, (double)(n_tokens * n_heads * hd * 8));
}

/* ---- attention --------------------------------------------------------------- */

typedef struct at_case {
    memra_attn_args_t a[2];
} at_case;

static memra_status_t at_run(void *c, memra__backend_t *be, int side)
{
    return be->iface->attention(be, &((at_case *)c)->a[side]);
}

static void kc_attention(kc *k, const char *name, int64_t n_tokens, int64_t pos0, int64_t n_head, int64_t n_kv,
                         int64_t hd, int64_t n_swa, bool gated)
{
    memra_kernel_check_line_t *L =
        kc_line(k, name, "nmse", TOL_F32, "%lld q at pos %lld, %lld/%lld heads x %lld, swa %lld%s", (long long)n_tokens,
                (long long)pos0, (long long)n_head, (long long)n_kv, (long long)hd, (long long)n_swa,
                gated ? ", sigmoid gate" : "");
    if (!L)
        return;
    const int64_t n_keys = pos0 + n_tokens, kvs = n_kv * hd + 4, qs = n_head * hd + 4;
    const kc_out o = {n_tokens, n_head * hd, n_head * hd};
    float *q = kc_randf(k, (size_t)(n_tokens * qs), -1.0f, 1.0f);
    float *kv = kc_randf(k, (size_t)(2 * n_keys * kvs), -1.0f, 1.0f);
    void *qp[2], *kp[2], *gp[2] = {NULL, NULL};
    if (!q || !kv || !kc_both(k, q, (size_t)(n_tokens * qs) * 4, qp) || !kc_both(k, kv, (size_t)(2 * n_keys * kvs) * 4, kp))
        return;
    /* a gate laid out as qwen35's: head h's gate 2*hd apart, after its q */
    float *gt = gated ? kc_randf(k, (size_t)(n_tokens * 2 * n_head * hd), -4.0f, 4.0f) : NULL;
    if (gated && (!gt || !kc_both(k, gt, (size_t)(n_tokens * 2 * n_head * hd) * 4, gp)))
        return;
    at_case c;
    for (int s = 0; s < 2; s++) {
        c.a[s] = (memra_attn_args_t){.q = qp[s], .k_cache = kp[s], .v_cache = (float *)kp[s] + n_keys * kvs,
                                     .out = kc_out_new(k, s ? k->gpu : k->cpu, &o, NULL), .n_tokens = n_tokens,
                                     .pos0 = pos0, .n_head = n_head, .n_kv_head = n_kv, .head_dim = hd, .q_stride = qs,
                                     .kv_stride = kvs, .scale = 1.0f / sqrtf((float)hd), .n_swa = n_swa,
                                     .gate = gated ? (const float *)gp[s] + hd : NULL, .gate_stride = 2 * n_head * hd,
                                     .gate_head_stride = 2 * hd};
        if (!c.a[s].out)
            return;
    }
    if (!kc_run2(k, L, at_run, &c, k->gpu))
        return;
    kc_acc a;
    kc_acc_init(&a);
    kc_cmp(&a, kc_out_get(k, k->cpu, c.a[0].out, &o), kc_out_get(k, k->gpu, c.a[1].out, &o), &o, "out");
    kc_finish(k, L, &a);
    const int64_t span = n_swa > 0 && n_swa < n_keys ? n_swa : n_keys;
    kc_bench(k, L, at_run, &c, k->gpu, (double)(2 * span * n_kv * hd * 4));
}

/* N queries in one call equal N one-query calls bit for bit. */
static void kc_attention_rowinv(kc *k, const char *name, int64_t n_tokens, int64_t pos0, int64_t n_head, int64_t n_kv,
                                int64_t hd)
{
    memra_kernel_check_line_t *L = kc_line(k, name, "exact", 0, "%lld q at pos %lld vs 1+1+.., %lld/%lld x %lld",
                                           (long long)n_tokens, (long long)pos0, (long long)n_head, (long long)n_kv,
                                           (long long)hd);
    if (!L)
        return;
    const int64_t n_keys = pos0 + n_tokens, kvs = n_kv * hd, qs = n_head * hd;
    const kc_out o = {n_tokens, qs, qs};
    float *q = kc_randf(k, (size_t)(n_tokens * qs), -1.0f, 1.0f), *kv = kc_randf(k, (size_t)(2 * n_keys * kvs), -1.0f, 1.0f);
    if (!q || !kv)
        return;
    float *qd = kc_put(k, k->gpu, q, (size_t)(n_tokens * qs) * 4), *kd = kc_put(k, k->gpu, kv, (size_t)(2 * n_keys * kvs) * 4);
    float *ya = kc_out_new(k, k->gpu, &o, NULL), *yb = kc_out_new(k, k->gpu, &o, NULL);
    if (!qd || !kd || !ya || !yb)
        return;
    memra_attn_args_t a = {.q = qd, .k_cache = kd, .v_cache = kd + n_keys * kvs, .out = ya, .n_tokens = n_tokens,
                           .pos0 = pos0, .n_head = n_head, .n_kv_head = n_kv, .head_dim = hd, .q_stride = qs,
                           .kv_stride = kvs, .scale = 1.0f / sqrtf((float)hd), .n_swa = 0};
    memra_status_t st = k->gpu->iface->attention(k->gpu, &a);
    for (int64_t t = 0; !st && t < n_tokens; t++) {
        memra_attn_args_t b = a;
        b.q = qd + t * qs;
        b.out = yb + t * qs;
        b.n_tokens = 1;
        b.pos0 = pos0 + t;
        st = k->gpu->iface->attention(k->gpu, &b);
    }
    const kc_pair p = {yb, ya, &o, "out"};
    kc_finish_exact(k, L, st, &p, 1);
}

/* ---- conv ----------------------------------------------------------------- */

typedef struct cv_case {
    memra_conv_args_t a[2];
} cv_case;

static memra_status_t cv_run(void *c, memra__backend_t *be, int side)
{
    return be->iface->conv(be, &((cv_case *)c)->a[side]);
}

static void kc_conv(kc *k, const char *name, int64_t n_tokens, int64_t channels, int64_t K)
{
    memra_kernel_check_line_t *L = kc_line(k, name, "ulp", TOL_ULP, "%lld tok x %lld ch, kernel %lld (out + state)",
                                           (long long)n_tokens, (long long)channels, (long long)K);
    if (!L)
        return;
    const int64_t xs = channels + 7;
    const kc_out oo = {n_tokens, channels, channels}, os = {channels, K - 1, K - 1};
    float *x = kc_randf(k, (size_t)(n_tokens * xs), -2.0f, 2.0f), *w = kc_randf(k, (size_t)(channels * K), -1.0f, 1.0f);
    float *st = kc_randf(k, (size_t)(channels * (K - 1)), -2.0f, 2.0f);
    void *xp[2], *wp[2];
    if (!x || !w || !st || !kc_both(k, x, (size_t)(n_tokens * xs) * 4, xp) || !kc_both(k, w, (size_t)(channels * K) * 4, wp))
        return;
    cv_case c;
    for (int s = 0; s < 2; s++) {
        memra__backend_t *be = s ? k->gpu : k->cpu;
        c.a[s] = (memra_conv_args_t){.x = xp[s], .x_stride = xs, .state = kc_out_new(k, be, &os, st), .w = wp[s],
                                     .out = kc_out_new(k, be, &oo, NULL), .n_tokens = n_tokens, .channels = channels,
                                     .kernel = K};
        if (!c.a[s].state || !c.a[s].out)
            return;
    }
    if (!kc_run2(k, L, cv_run, &c, k->gpu))
        return;
    kc_acc a;
    kc_acc_init(&a);
    kc_cmp(&a, kc_out_get(k, k->cpu, c.a[0].out, &oo), kc_out_get(k, k->gpu, c.a[1].out, &oo), &oo, "out");
    kc_cmp(&a, kc_out_get(k, k->cpu, c.a[0].state, &os), kc_out_get(k, k->gpu, c.a[1].state, &os), &os, "state");
    kc_finish(k, L, &a);
    kc_bench(k, L, cv_run, &c, k->gpu, (double)(n_tokens * channels * 8 + channels * (2 * K - 1) * 4));
}

/* ---- delta ---------------------------------------------------------------- */

typedef struct dl_case {
    memra_delta_args_t a[2];
} dl_case;

static memra_status_t dl_run(void *c, memra__backend_t *be, int side)
{
    return be->iface->delta(be, &((dl_case *)c)->a[side]);
}

/* Inputs as qwen35 feeds them: L2-normed q/k heads, log decay <= 0,
 * beta in (0, 1). Row strides wider than the rows. */
static bool dl_inputs(kc *k, int64_t n, int64_t n_k, int64_t n_v, int64_t d, float **qk, float **v, float **g,
                      float **b, float **state)
{
    const int64_t qks = 2 * n_k * d + 4, vs = n_v * d + 4, gs = n_v + 2;
    *qk = kc_randf(k, (size_t)(n * qks), -1.0f, 1.0f);
    *v = kc_randf(k, (size_t)(n * vs), -1.0f, 1.0f);
    *g = kc_randf(k, (size_t)(n * gs), -1.5f, 0.0f);
    *b = kc_randf(k, (size_t)(n * gs), 0.05f, 0.95f);
    *state = kc_randf(k, (size_t)(n_v * d * d), -0.1f, 0.1f);
    if (!*qk || !*v || !*g || !*b || !*state)
        return false;
    for (int64_t t = 0; t < n; t++)
        for (int64_t h = 0; h < 2 * n_k; h++) {
            float *p = *qk + t * qks + h * d;
            double s = 0;
            for (int64_t i = 0; i < d; i++)
                s += (double)p[i] * p[i];
            for (int64_t i = 0; i < d; i++)
                p[i] = (float)(p[i] / sqrt(s));
        }
    return true;
}

static void kc_delta(kc *k, const char *name, int64_t n, int64_t n_k, int64_t n_v, int64_t d)
{
    memra_kernel_check_line_t *L = kc_line(k, name, "nmse", TOL_F32, "%lld tok, %lld k / %lld v heads x %lld (out + state)",
                                           (long long)n, (long long)n_k, (long long)n_v, (long long)d);
    if (!L)
        return;
    float *qk, *v, *g, *b, *state;
    if (!dl_inputs(k, n, n_k, n_v, d, &qk, &v, &g, &b, &state))
        return;
    const int64_t qks = 2 * n_k * d + 4, vs = n_v * d + 4, gs = n_v + 2;
    const kc_out oo = {n, n_v * d, n_v * d}, os = {n_v, d * d, d * d};
    void *qp[2], *vp[2], *gp[2], *bp[2];
    if (!kc_both(k, qk, (size_t)(n * qks) * 4, qp) || !kc_both(k, v, (size_t)(n * vs) * 4, vp) ||
        !kc_both(k, g, (size_t)(n * gs) * 4, gp) || !kc_both(k, b, (size_t)(n * gs) * 4, bp))
        return;
    dl_case c;
    for (int s = 0; s < 2; s++) {
        memra__backend_t *be = s ? k->gpu : k->cpu;
        c.a[s] = (memra_delta_args_t){.q = qp[s], .k = (float *)qp[s] + n_k * d, .v = vp[s], .g = gp[s], .beta = bp[s],
                                      .qk_stride = qks, .v_stride = vs, .gb_stride = gs,
                                      .state = kc_out_new(k, be, &os, state), .out = kc_out_new(k, be, &oo, NULL),
                                      .n_tokens = n, .n_k = n_k, .n_v = n_v, .d = d, .scale = 1.0f / sqrtf((float)d)};
        if (!c.a[s].state || !c.a[s].out)
            return;
    }
    if (!kc_run2(k, L, dl_run, &c, k->gpu))
        return;
    kc_acc a;
    kc_acc_init(&a);
    kc_cmp(&a, kc_out_get(k, k->cpu, c.a[0].out, &oo), kc_out_get(k, k->gpu, c.a[1].out, &oo), &oo, "out");
    kc_cmp(&a, kc_out_get(k, k->cpu, c.a[0].state, &os), kc_out_get(k, k->gpu, c.a[1].state, &os), &os, "state");
    kc_finish(k, L, &a);
    kc_bench(k, L, dl_run, &c, k->gpu, (double)(2 * n_v * d * d * 4));
}

/* N tokens in one call leave what N one-token calls leave, bit for bit. */
static void kc_delta_rowinv(kc *k, int64_t n, int64_t n_k, int64_t n_v, int64_t d)
{
    memra_kernel_check_line_t *L = kc_line(k, "delta.rowinv", "exact", 0, "%lld tok vs 1+1+.., %lld/%lld x %lld",
                                           (long long)n, (long long)n_k, (long long)n_v, (long long)d);
    if (!L)
        return;
    float *qk, *v, *g, *b, *state;
    if (!dl_inputs(k, n, n_k, n_v, d, &qk, &v, &g, &b, &state))
        return;
    const int64_t qks = 2 * n_k * d + 4, vs = n_v * d + 4, gs = n_v + 2;
    const kc_out oo = {n, n_v * d, n_v * d}, os = {n_v, d * d, d * d};
    float *qd = kc_put(k, k->gpu, qk, (size_t)(n * qks) * 4), *vd = kc_put(k, k->gpu, v, (size_t)(n * vs) * 4);
    float *gd = kc_put(k, k->gpu, g, (size_t)(n * gs) * 4), *bd = kc_put(k, k->gpu, b, (size_t)(n * gs) * 4);
    float *sa = kc_out_new(k, k->gpu, &os, state), *sb = kc_out_new(k, k->gpu, &os, state);
    float *oa = kc_out_new(k, k->gpu, &oo, NULL), *ob = kc_out_new(k, k->gpu, &oo, NULL);
    if (!qd || !vd || !gd || !bd || !sa || !sb || !oa || !ob)
        return;
    memra_delta_args_t a = {.q = qd, .k = qd + n_k * d, .v = vd, .g = gd, .beta = bd, .qk_stride = qks, .v_stride = vs,
                            .gb_stride = gs, .state = sa, .out = oa, .n_tokens = n, .n_k = n_k, .n_v = n_v, .d = d,
                            .scale = 1.0f / sqrtf((float)d)};
    memra_status_t st = k->gpu->iface->delta(k->gpu, &a);
    for (int64_t t = 0; !st && t < n; t++) {
        memra_delta_args_t o1 = a;
        o1.q = qd + t * qks;
        o1.k = o1.q + n_k * d;
        o1.v = vd + t * vs;
        o1.g = gd + t * gs;
        o1.beta = bd + t * gs;
        o1.state = sb;
        o1.out = ob + t * n_v * d;
        o1.n_tokens = 1;
        st = k->gpu->iface->delta(k->gpu, &o1);
    }
    const kc_pair p[2] = {{ob, oa, &oo, "out"}, {sb, sa, &os, "state"}};
    kc_finish_exact(k, L, st, p, 2);
}

/* ---- per-head norm + rope of q and k -------------------------------------------- */

typedef struct qk_case {
    memra_qk_args_t a[3]; /* cpu, cuda fused, cuda sequence */
} qk_case;

static memra_status_t qk_run(void *c, memra__backend_t *be, int side)
{
    return memra__qk_norm_rope(be, &((qk_case *)c)->a[side]);
}

/* memra__qk_norm_rope as qwen35 calls it (q heads interleaved with their
 * gates, 2hd apart; k heads into cache-like rows): against the CPU
 * reference (its sequence) and bit for bit against the CUDA sequence. */
static void kc_qk_norm_rope(kc *k, const char *name, int64_t n, int64_t H, int64_t Hkv, int64_t hd, int64_t n_rot)
{
    memra_kernel_check_line_t *L = kc_line(k, name, "nmse", TOL_F32, "%lld tok, %lld q / %lld k heads x %lld, n_rot %lld",
                                           (long long)n, (long long)H, (long long)Hkv, (long long)hd, (long long)n_rot);
    if (!L)
        return;
    const int64_t qs = 2 * H * hd, ks = Hkv * hd, kvs = Hkv * hd + 8;
    float *qg = kc_randf(k, (size_t)(n * qs), -2.0f, 2.0f), *kr = kc_randf(k, (size_t)(n * ks), -2.0f, 2.0f);
    float *qw = kc_randf(k, (size_t)hd, 0.5f, 1.5f), *kw = kc_randf(k, (size_t)hd, 0.5f, 1.5f);
    int32_t *pos = kc_host(k, (size_t)n * 4);
    if (!qg || !kr || !qw || !kw || !pos)
        return;
    for (int64_t t = 0; t < n; t++)
        pos[t] = (int32_t)(t == 0 ? 40000 : kc_int(k, 40000));
    void *qp[2], *kp[2], *qwp[2], *kwp[2], *pp[2];
    if (!kc_both(k, qg, (size_t)(n * qs) * 4, qp) || !kc_both(k, kr, (size_t)(n * ks) * 4, kp) ||
        !kc_both(k, qw, (size_t)hd * 4, qwp) || !kc_both(k, kw, (size_t)hd * 4, kwp) ||
        !kc_both(k, pos, (size_t)n * 4, pp))
        return;
    const kc_out oq = {n, H * hd, H * hd}, ok = {n, Hkv * hd, kvs};
    qk_case c;
    for (int s = 0; s < 3; s++) {
        memra__backend_t *be = s ? k->gpu : k->cpu;
        const int i = s ? 1 : 0;
        memra_qk_args_t a = {
            .part = {{.src = qp[i], .src_head_stride = 2 * hd, .src_token_stride = qs, .dst = kc_out_new(k, be, &oq, NULL),
                      .dst_head_stride = hd, .dst_token_stride = H * hd, .n_heads = H, .norm_w = qwp[i]},
                     {.src = kp[i], .src_head_stride = hd, .src_token_stride = ks, .dst = kc_out_new(k, be, &ok, NULL),
                      .dst_head_stride = hd, .dst_token_stride = kvs, .n_heads = Hkv, .norm_w = kwp[i]}},
            .n_parts = 2, .eps = 1e-6f,
            .rope = {.n_tokens = n, .head_dim = hd, .n_rot = n_rot, .pos = pp[i], .base = 10000000.0f,
                     .mode = MEMRA_ROPE_NEOX}};
        if (!a.part[0].dst || !a.part[1].dst)
            return;
        c.a[s] = a;
    }
    if (!kc_run2(k, L, qk_run, &c, k->gpu) || !kc_run_seq(k, L, qk_run, &c, k->gpu))
        return;
    kc_acc a, e;
    kc_acc_init(&a);
    kc_acc_init(&e);
    const kc_out *o[2] = {&oq, &ok};
    for (int p = 0; p < 2; p++) {
        const float *got = kc_out_get(k, k->gpu, c.a[1].part[p].dst, o[p]);
        kc_cmp(&a, kc_out_get(k, k->cpu, c.a[0].part[p].dst, o[p]), got, o[p], p ? "k" : "q");
        kc_cmp(&e, kc_out_get(k, k->gpu, c.a[2].part[p].dst, o[p]), got, o[p], p ? "k" : "q");
    }
    kc_finish_fused(k, L, &a, &e);
    kc_bench(k, L, qk_run, &c, k->gpu, (double)(n * (2 * H + 2 * Hkv) * hd * 4));
}

/* ---- the fused Gated DeltaNet step -------------------------------------------- */

typedef struct gd_case {
    memra_gdn_args_t a[3]; /* cpu, cuda fused, cuda sequence */
} gd_case;

static memra_status_t gd_run(void *c, memra__backend_t *be, int side)
{
    return memra__gdn(be, &((gd_case *)c)->a[side]);
}

/* memra__gdn on raw (un-normed) q/k rows as the conv leaves them (q|k|v in
 * one row), or with CONV on the raw projections through the conv (4 taps,
 * its state an output too): against the CPU reference within the f32
 * bound, and the CUDA fused step against the CUDA sequence of separate ops
 * bit for bit. */
static void kc_gdn(kc *k, const char *name, int64_t n, int64_t n_k, int64_t n_v, int64_t d, bool conv_on)
{
    memra_kernel_check_line_t *L =
        kc_line(k, name, "nmse", TOL_F32, "%lld tok, %lld k / %lld v heads x %lld (y + state%s)", (long long)n,
                (long long)n_k, (long long)n_v, (long long)d, conv_on ? " + conv state" : "");
    if (!L)
        return;
    /* with the conv its rows are exactly q|k|v (the fused kernel's layout) */
    const int64_t KD = n_k * d, VD = n_v * d, C = 2 * KD + VD + (conv_on ? 0 : 4), gs = n_v + 2, zs = VD + 3, K = 4;
    float *conv = kc_randf(k, (size_t)(n * C), -1.0f, 1.0f), *g = kc_randf(k, (size_t)(n * gs), -1.5f, 0.0f);
    float *cw = kc_randf(k, (size_t)(C * K), -0.6f, 0.6f), *cst = kc_randf(k, (size_t)(C * (K - 1)), -1.0f, 1.0f);
    void *cwp[2];
    if (!cw || !cst || !kc_both(k, cw, (size_t)(C * K) * 4, cwp))
        return;
    const kc_out ocs = {C, K - 1, K - 1}, ocv = {n, C, C};
    float *b = kc_randf(k, (size_t)(n * gs), 0.05f, 0.95f), *state = kc_randf(k, (size_t)(n_v * d * d), -0.1f, 0.1f);
    float *z = kc_randf(k, (size_t)(n * zs), -3.0f, 3.0f), *nw = kc_randf(k, (size_t)d, 0.5f, 1.5f);
    void *cp[2], *gp[2], *bp[2], *zp[2], *np[2];
    if (!conv || !g || !b || !state || !z || !nw || !kc_both(k, conv, (size_t)(n * C) * 4, cp) ||
        !kc_both(k, g, (size_t)(n * gs) * 4, gp) || !kc_both(k, b, (size_t)(n * gs) * 4, bp) ||
        !kc_both(k, z, (size_t)(n * zs) * 4, zp) || !kc_both(k, nw, (size_t)d * 4, np))
        return;
    const kc_out oy = {n, VD, VD}, os = {n_v, d * d, d * d};
    gd_case c;
    for (int s = 0; s < 3; s++) {
        memra__backend_t *be = s ? k->gpu : k->cpu;
        const float *cv = cp[s ? 1 : 0];
        memra_gdn_args_t a = {
            .delta = {.q = cv, .k = cv + KD, .v = cv + 2 * KD, .g = gp[s ? 1 : 0], .beta = bp[s ? 1 : 0],
                      .qk_stride = C, .v_stride = C, .gb_stride = gs, .state = kc_out_new(k, be, &os, state),
                      .n_tokens = n, .n_k = n_k, .n_v = n_v, .d = d, .scale = 1.0f / sqrtf((float)d)},
            .l2_eps = 1e-6f, .norm_w = np[s ? 1 : 0], .norm_eps = 1e-6f, .z = zp[s ? 1 : 0], .z_stride = zs,
            .y = kc_out_new(k, be, &oy, NULL),
            .qk_tmp = kc_track(k, be, be->iface->alloc(be, (size_t)(n * 2 * KD) * 4)),
            .o_tmp = kc_track(k, be, be->iface->alloc(be, (size_t)(n * VD) * 4))};
        if (!a.delta.state || !a.y || !a.qk_tmp || !a.o_tmp)
            return;
        a.delta.out = a.o_tmp;
        if (conv_on) { /* cv holds the raw projections; q|k|v come out of the conv */
            float *out = kc_out_new(k, be, &ocv, NULL);
            a.conv = (memra_conv_args_t){.x = cv, .x_stride = C, .state = kc_out_new(k, be, &ocs, cst),
                                         .w = cwp[s ? 1 : 0], .out = out, .n_tokens = n, .channels = C, .kernel = K};
            if (!out || !a.conv.state)
                return;
            a.delta.q = out;
            a.delta.k = out + KD;
            a.delta.v = out + 2 * KD;
        }
        c.a[s] = a;
    }
    if (!kc_run2(k, L, gd_run, &c, k->gpu) || !kc_run_seq(k, L, gd_run, &c, k->gpu))
        return;
    kc_acc a, e;
    kc_acc_init(&a);
    kc_acc_init(&e);
    const float *gy = kc_out_get(k, k->gpu, c.a[1].y, &oy), *gst = kc_out_get(k, k->gpu, c.a[1].delta.state, &os);
    kc_cmp(&a, kc_out_get(k, k->cpu, c.a[0].y, &oy), gy, &oy, "y");
    kc_cmp(&a, kc_out_get(k, k->cpu, c.a[0].delta.state, &os), gst, &os, "state");
    kc_cmp(&e, kc_out_get(k, k->gpu, c.a[2].y, &oy), gy, &oy, "y");
    kc_cmp(&e, kc_out_get(k, k->gpu, c.a[2].delta.state, &os), gst, &os, "state");
    if (conv_on) {
        const float *gcs = kc_out_get(k, k->gpu, c.a[1].conv.state, &ocs);
        kc_cmp(&a, kc_out_get(k, k->cpu, c.a[0].conv.state, &ocs), gcs, &ocs, "conv state");
        kc_cmp(&e, kc_out_get(k, k->gpu, c.a[2].conv.state, &ocs), gcs, &ocs, "conv state");
    }
    kc_finish_fused(k, L, &a, &e);
    kc_bench(k, L, gd_run, &c, k->gpu, (double)(2 * n_v * d * d * 4));
}

/* ---- route ---------------------------------------------------------------- */

typedef struct rt_case {
    memra_route_args_t a[2];
} rt_case;

static memra_status_t rt_run(void *c, memra__backend_t *be, int side)
{
    return be->iface->route(be, &((rt_case *)c)->a[side]);
}

static void kc_route(kc *k, int64_t n, int64_t n_expert, int64_t top_k, bool norm, bool ties)
{
    char name[48];
    snprintf(name, sizeof name, "route.e%lld_k%lld%s%s", (long long)n_expert, (long long)top_k, norm ? "" : ".nonorm",
             ties ? ".ties" : "");
    memra_kernel_check_line_t *L = kc_line(k, name, "ulp", TOL_ULP, "%lld tok, %lld experts, top %lld (ids exact)",
                                           (long long)n, (long long)n_expert, (long long)top_k);
    if (!L)
        return;
    float *l = kc_randf(k, (size_t)(n * n_expert), -4.0f, 4.0f);
    void *lp[2];
    if (!l)
        return;
    if (ties) /* coarse logits: many exact ties, the lower id must win */
        for (int64_t i = 0; i < n * n_expert; i++)
            l[i] = floorf(l[i]);
    const kc_out o = {n, top_k, top_k};
    if (!kc_both(k, l, (size_t)(n * n_expert) * 4, lp))
        return;
    rt_case c;
    for (int s = 0; s < 2; s++) {
        memra__backend_t *be = s ? k->gpu : k->cpu;
        c.a[s] = (memra_route_args_t){.logits = lp[s], .ids = (int32_t *)kc_out_new(k, be, &o, NULL),
                                      .weights = kc_out_new(k, be, &o, NULL), .n_tokens = n, .n_expert = n_expert,
                                      .k = top_k, .norm = norm};
        if (!c.a[s].ids || !c.a[s].weights)
            return;
    }
    if (!kc_run2(k, L, rt_run, &c, k->gpu))
        return;
    kc_acc ai, aw;
    kc_acc_init(&ai);
    kc_acc_init(&aw);
    /* ids compared as bit patterns: any difference is a wrong pick */
    kc_cmp(&ai, kc_out_get(k, k->cpu, (float *)c.a[0].ids, &o), kc_out_get(k, k->gpu, (float *)c.a[1].ids, &o), &o, "ids");
    kc_cmp(&aw, kc_out_get(k, k->cpu, c.a[0].weights, &o), kc_out_get(k, k->gpu, c.a[1].weights, &o), &o, "weights");
    if (ai.n_diff_bits && !aw.note[0]) {
        snprintf(aw.note, sizeof aw.note, "%lld expert ids differ", (long long)ai.n_diff_bits);
        aw.max_ulp = INFINITY;
    }
    aw.guard_ok = aw.guard_ok && ai.guard_ok;
    if (!ai.guard_ok)
        snprintf(aw.note, sizeof aw.note, "%s", ai.note);
    kc_finish(k, L, &aw);
    kc_bench(k, L, rt_run, &c, k->gpu, 0);
}

/* ---- moe ------------------------------------------------------------------ */

typedef struct mo_case {
    memra_weight_t gate[2], up[2], down[2];
    memra_moe_args_t a[2];
} mo_case;

static memra_status_t mo_run(void *c, memra__backend_t *be, int side)
{
    return be->iface->moe(be, &((mo_case *)c)->a[side]);
}

static void kc_moe(kc *k, const char *name, memra_type_t tg, memra_type_t td, int64_t n, int64_t n_expert, int64_t top_k,
                   int64_t n_embd, int64_t n_ff, bool fused, bool scale, memra_act_t act)
{
    memra_kernel_check_line_t *L =
        kc_line(k, name, "nmse", TOL_F32, "%lld tok, %lld experts top %lld, %lld->%lld, %s/%s%s%s", (long long)n,
                (long long)n_expert, (long long)top_k, (long long)n_embd, (long long)n_ff, tname(tg), tname(td),
                fused ? " gate_up" : "", scale ? " scaled" : "");
    if (!L)
        return;
    mo_case c;
    memset(&c, 0, sizeof c);
    if (!kc_weight(k, tg, n_embd, fused ? 2 * n_ff : n_ff, n_expert, 0, c.gate) ||
        (!fused && !kc_weight(k, tg, n_embd, n_ff, n_expert, 0, c.up)) ||
        !kc_weight(k, td, n_ff, n_embd, n_expert, 0, c.down))
        return;
    float *x = kc_randf(k, (size_t)(n * n_embd), -1.0f, 1.0f), *w = kc_randf(k, (size_t)(n * top_k), 0.05f, 0.5f);
    float *sc = kc_randf(k, (size_t)n_expert, 0.5f, 2.0f);
    int32_t *ids = kc_host(k, (size_t)(n * top_k) * 4);
    if (!x || !w || !sc || !ids)
        return;
    for (int64_t t = 0; t < n; t++) /* distinct experts per token, as route gives */
        for (int64_t j = 0; j < top_k; j++) {
            int32_t e;
            bool dup;
            do {
                e = (int32_t)kc_int(k, n_expert);
                dup = false;
                for (int64_t i = 0; i < j; i++)
                    dup |= ids[t * top_k + i] == e;
            } while (dup);
            ids[t * top_k + j] = e;
        }
    void *xp[2], *wp[2], *sp[2], *ip[2];
    const kc_out o = {n, n_embd, n_embd};
    if (!kc_both(k, x, (size_t)(n * n_embd) * 4, xp) || !kc_both(k, w, (size_t)(n * top_k) * 4, wp) ||
        !kc_both(k, sc, (size_t)n_expert * 4, sp) || !kc_both(k, ids, (size_t)(n * top_k) * 4, ip))
        return;
    for (int s = 0; s < 2; s++) {
        c.a[s] = (memra_moe_args_t){.x = xp[s], .ids = ip[s], .weights = wp[s], .gate = fused ? NULL : &c.gate[s],
                                    .up = fused ? NULL : &c.up[s], .gate_up = fused ? &c.gate[s] : NULL,
                                    .down = &c.down[s], .expert_scale = scale ? sp[s] : NULL,
                                    .out = kc_out_new(k, s ? k->gpu : k->cpu, &o, NULL), .n_tokens = n, .k = top_k,
                                    .n_embd = n_embd, .n_ff = n_ff, .act = act};
        if (!c.a[s].out)
            return;
    }
    if (!kc_run2(k, L, mo_run, &c, k->gpu))
        return;
    kc_acc a;
    kc_acc_init(&a);
    kc_cmp(&a, kc_out_get(k, k->cpu, c.a[0].out, &o), kc_out_get(k, k->gpu, c.a[1].out, &o), &o, "out");
    kc_finish(k, L, &a);
    const double per_expert = (double)(c.gate[1].nb2 + (fused ? 0 : c.up[1].nb2) + c.down[1].nb2);
    kc_bench(k, L, mo_run, &c, k->gpu, per_expert * (double)(top_k < n * top_k ? n * top_k : top_k));
}

/* ---- argmax --------------------------------------------------------------- */

static void kc_argmax(kc *k, const char *name, int64_t n, int kind)
{
    memra_kernel_check_line_t *L = kc_line(k, name, "exact", 0, "%lld values%s", (long long)n,
                                           kind == 1 ? ", ties" : kind == 2 ? ", NaN" : "");
    if (!L)
        return;
    float *x = kc_randf(k, (size_t)n, -10.0f, 10.0f);
    if (!x)
        return;
    if (kind == 1) { /* the max several times: the lowest index wins */
        for (int i = 0; i < 5; i++)
            x[kc_int(k, n)] = 11.0f;
    } else if (kind == 2) {
        for (int i = 0; i < 50; i++)
            x[kc_int(k, n)] = NAN;
        x[0] = NAN;
    }
    void *xp[2];
    if (!kc_both(k, x, (size_t)n * 4, xp))
        return;
    int32_t r[2] = {-1, -1};
    memra_status_t st = k->cpu->iface->argmax(k->cpu, xp[0], n, &r[0]);
    if (st) {
        kc_op_failed(k, L, "cpu", st);
        return;
    }
    st = k->gpu->iface->argmax(k->gpu, xp[1], n, &r[1]);
    if (st) {
        kc_op_failed(k, L, "cuda", st);
        return;
    }
    kc_acc a;
    kc_acc_init(&a);
    if (r[0] != r[1]) {
        a.n_diff_bits = 1;
        a.max_abs = fabs((double)r[0] - r[1]);
        snprintf(a.note, sizeof a.note, "cpu %d, cuda %d", r[0], r[1]);
    }
    kc_finish(k, L, &a);
    if (k->p.bench) {
        const int iters = k->p.bench_iters > 0 ? k->p.bench_iters : 20;
        const double t0 = kc_now();
        for (int i = 0; i < iters; i++)
            k->gpu->iface->argmax(k->gpu, xp[1], n, &r[1]);
        L->bench_us = (kc_now() - t0) / iters * 1e6;
        L->bench_gbs = (double)n * 4 / (L->bench_us * 1e3);
    }
}

/* ---- transfers ---------------------------------------------------------------- */

/* Counts the bytes of GOT that differ from WANT into A (an exact line). */
static void kc_bytes(kc_acc *a, const uint8_t *want, const uint8_t *got, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (want[i] != got[i]) {
            if (!a->n_diff_bits)
                snprintf(a->note, sizeof a->note, "%s: %zu bytes, byte %zu differs", what, n, i);
            a->n_diff_bits++;
        }
}

/* The device backend's own copies, each read back bit for bit: uploads of
 * whole 8-byte words (a step's token ids and positions: written by the
 * stream, cuda/cuda_backend.cu), small staged and large plain uploads;
 * downloads into malloc and into page-locked memory. A second upload to
 * the same place must win. */
static void kc_transfer(kc *k)
{
    static const size_t sizes[] = {8, 16, 64, 72, 1000, 4112, (size_t)64 << 10, (size_t)1 << 20, ((size_t)1 << 20) + 4};
    memra_kernel_check_line_t *L =
        kc_line(k, "transfer", "exact", 0, "uploads, downloads of 8 B to 1 MiB (malloc, page-locked)");
    if (!L)
        return;
    kc_acc a;
    kc_acc_init(&a);
    memra__backend_t *be = k->gpu;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0] && !k->err; si++) {
        const size_t n = sizes[si];
        uint8_t *first = kc_host(k, n), *src = kc_host(k, n), *h = kc_host(k, n);
        if (!first || !src || !h)
            return;
        for (size_t i = 0; i < n; i++) {
            first[i] = (uint8_t)kc_next(k);
            src[i] = (uint8_t)kc_next(k);
        }
        void *d = kc_put(k, be, first, n);
        if (!d)
            return;
        memra_status_t st = be->iface->upload(be, d, src, n);
        memset(first, 0x5A, n); /* the caller may reuse its buffer at once */
        memset(h, 0xA5, n);
        if (!st)
            st = be->iface->download(be, h, d, n);
        if (!st)
            st = be->iface->synchronize(be);
        if (st) {
            kc_op_failed(k, L, "cuda", st);
            return;
        }
        kc_bytes(&a, src, h, n, "malloc");
        uint8_t *pin = memra_engine_host_alloc(k->e_gpu, n);
        if (!pin) {
            kc_op_failed(k, L, "cuda", MEMRA_E_NOMEM);
            return;
        }
        memset(pin, 0xA5, n);
        st = be->iface->download(be, pin, d, n);
        if (!st)
            st = be->iface->synchronize(be);
        if (!st)
            kc_bytes(&a, src, pin, n, "page-locked");
        memra_host_free(pin);
        if (st) {
            kc_op_failed(k, L, "cuda", st);
            return;
        }
    }
    kc_finish(k, L, &a);
}

/* ---- the suite --------------------------------------------------------------- */

static void kc_case_done(kc *k)
{
    kc_release(k);
}

/* One case, then its buffers released. */
#define KC(call)                                                                                   \
    do {                                                                                           \
        call;                                                                                      \
        kc_case_done(k);                                                                           \
    } while (0)

static void run_suite(kc *k)
{
    static const memra_type_t types[] = {
        MEMRA_TYPE_F32,  MEMRA_TYPE_F16,    MEMRA_TYPE_BF16, MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q4_0, MEMRA_TYPE_Q4_1,
        MEMRA_TYPE_Q5_0, MEMRA_TYPE_Q5_1,   MEMRA_TYPE_MXFP4, MEMRA_TYPE_IQ4_NL, MEMRA_TYPE_Q2_K, MEMRA_TYPE_Q3_K,
        MEMRA_TYPE_Q4_K, MEMRA_TYPE_Q5_K,   MEMRA_TYPE_Q6_K, MEMRA_TYPE_IQ4_XS,
    };
    const bool big = k->p.big != 0;
    char name[48];
    KC(kc_roofline(k));
    KC(kc_transfer(k));
    /* matmul at fixture shapes, every type: decode, a few rows (matvec),
     * prefill fast (f16 GEMM) and exact */
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        const memra_type_t t = types[i];
        const int64_t ne0 = memra_type_block_size(t) == 256 ? 256 : 64;
        snprintf(name, sizeof name, "matmul.%s.decode", tname(t));
        KC(kc_matmul(k, name, t, ne0, 3000, 1, false, 0, 0));
        snprintf(name, sizeof name, "matmul.%s.rows5", tname(t));
        KC(kc_matmul(k, name, t, ne0, 3000, 5, false, 8, 0));
        snprintf(name, sizeof name, "matmul.%s.prefill_fast", tname(t));
        KC(kc_matmul(k, name, t, ne0, 3000, 40, true, 8, 0));
        snprintf(name, sizeof name, "matmul.%s.prefill_exact", tname(t));
        KC(kc_matmul(k, name, t, ne0, 3000, 40, false, 0, 0));
    }
    /* rows not 16-byte aligned: the staged loads start mid-chunk */
    KC(kc_matmul(k, "matmul.q8_0.nb1_odd", MEMRA_TYPE_Q8_0, 64, 1000, 1, false, 0, 6));
    /* 67 blocks a row: a segment ends on an unpaired block, and rows of
     * 2278 bytes start at every even offset (pairs and the fallback) */
    KC(kc_matmul(k, "matmul.q8_0.odd_blocks", MEMRA_TYPE_Q8_0, 2144, 700, 1, false, 0, 0));
    KC(kc_matmul(k, "matmul.q8_0.odd_blocks_rows3", MEMRA_TYPE_Q8_0, 2144, 700, 3, false, 4, 0));
    KC(kc_matmul(k, "matmul.q4_k.nb1_odd", MEMRA_TYPE_Q4_K, 512, 1000, 3, false, 0, 2));
    KC(kc_matmul(k, "matmul.f16.nb1_odd", MEMRA_TYPE_F16, 72, 500, 2, false, 0, 2));
    KC(kc_matmul(k, "matmul.f32.ne0_odd", MEMRA_TYPE_F32, 37, 700, 1, false, 3, 0));
    KC(kc_matmul_rowinv(k, MEMRA_TYPE_Q8_0, big ? 4096 : 256, 1024, 7));
    KC(kc_matmul_rowinv(k, MEMRA_TYPE_Q4_K, big ? 4096 : 256, 512, 11));
    if (big) { /* one-row calls: the fast path's default map (out projections), its warp pairs (attention in) */
        KC(kc_matmul_rowinv(k, MEMRA_TYPE_Q8_0, 4096, 4096, 3));
        KC(kc_matmul_rowinv(k, MEMRA_TYPE_Q8_0, 4096, 10240, 2));
    }
    /* the grouped fast path (a vocabulary of whole 32-row groups, then a
     * short last group) and a type that goes through device memory */
    KC(kc_matmul_mapped(k, MEMRA_TYPE_Q8_0, 4096, big ? 248320 : 5024));
    KC(kc_matmul_mapped(k, MEMRA_TYPE_Q8_0, 2048, 3001));
    KC(kc_matmul_mapped(k, MEMRA_TYPE_Q4_K, 256, 3000));
    if (big) {
        /* Qwen3.5-9B shapes: hidden 4096, ff 12288, vocab 248320 */
        static const memra_type_t bt[] = {MEMRA_TYPE_F16, MEMRA_TYPE_BF16, MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q4_0,
                                          MEMRA_TYPE_Q4_K, MEMRA_TYPE_Q5_K, MEMRA_TYPE_Q6_K, MEMRA_TYPE_IQ4_XS};
        for (size_t i = 0; i < sizeof bt / sizeof bt[0]; i++) {
            snprintf(name, sizeof name, "matmul.%s.4096_ff", tname(bt[i]));
            KC(kc_matmul(k, name, bt[i], 4096, 12288, 1, false, 0, 0));
        }
        KC(kc_matmul(k, "matmul.q8_0.ff_down", MEMRA_TYPE_Q8_0, 12288, 4096, 1, false, 0, 0));
        KC(kc_matmul(k, "matmul.q8_0.vocab", MEMRA_TYPE_Q8_0, 4096, 248320, 1, false, 0, 0));
        KC(kc_matmul(k, "matmul.q8_0.vocab_rows3", MEMRA_TYPE_Q8_0, 4096, 248320, 3, false, 0, 0));
        KC(kc_matmul(k, "matmul.q8_0.prefill_fast_ff", MEMRA_TYPE_Q8_0, 4096, 12288, 64, true, 0, 0));
        KC(kc_matmul(k, "matmul.q6_k.prefill_fast_ff", MEMRA_TYPE_Q6_K, 4096, 12288, 64, true, 0, 0));
        KC(kc_matmul(k, "matmul.q8_0.prefill_exact_ff", MEMRA_TYPE_Q8_0, 4096, 12288, 16, false, 0, 0));
    }

    /* fused matmuls: norm + projections, gate/up GLU, projection + residual;
     * the last five at Qwen3.5-9B decode shapes (big only) */
    {
        static const memra_type_t q8[4] = {MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q8_0};
        static const memra_type_t mix[3] = {MEMRA_TYPE_Q4_K, MEMRA_TYPE_Q6_K, MEMRA_TYPE_Q4_K};
        static const memra_type_t k4[2] = {MEMRA_TYPE_Q4_K, MEMRA_TYPE_Q4_K};
        static const memra_type_t q40[2] = {MEMRA_TYPE_Q4_0, MEMRA_TYPE_Q4_0};
        static const memra_type_t f32[2] = {MEMRA_TYPE_F32, MEMRA_TYPE_F32};
        static const int64_t proj[4] = {384, 16, 16, 256}, glu[2] = {700, 700}, one[1] = {300},
                             mixr[3] = {256, 96, 512}, gdn[4] = {8192, 32, 32, 4096}, ff[2] = {12288, 12288},
                             hid[1] = {4096};
        static const struct {
            const char *name;
            int n_w;
            const memra_type_t *t;
            int64_t ne0;
            const int64_t *ne1;
            int64_t rows;
            bool norm;
            memra_mm_epi_t epi;
            memra_act_t act;
            bool fast, big, conv;
        } mx[] = {
            {"matmul_ex.proj4", 4, q8, 256, proj, 1, true, MEMRA_MM_STORE, MEMRA_ACT_SILU, false, false, false},
            {"matmul_ex.swiglu", 2, q8, 256, glu, 1, true, MEMRA_MM_GLU, MEMRA_ACT_SILU, false, false, false},
            {"matmul_ex.geglu_rows5", 2, k4, 512, glu, 5, true, MEMRA_MM_GLU, MEMRA_ACT_GELU, false, false, false},
            {"matmul_ex.add", 1, q8, 768, one, 1, false, MEMRA_MM_ADD, MEMRA_ACT_SILU, false, false, false},
            {"matmul_ex.add_rows3", 1, q40, 512, one, 3, true, MEMRA_MM_ADD, MEMRA_ACT_SILU, false, false, false},
            {"matmul_ex.mixed_types", 3, mix, 512, mixr, 2, true, MEMRA_MM_STORE, MEMRA_ACT_SILU, false, false, false},
            {"matmul_ex.f32_unfused", 2, f32, 96, glu, 1, true, MEMRA_MM_GLU, MEMRA_ACT_SILU, false, false, false},
            {"matmul_ex.prefill_fast", 2, q8, 256, glu, 40, true, MEMRA_MM_GLU, MEMRA_ACT_SILU, true, false, false},
            {"matmul_ex.prefill_exact", 4, q8, 256, proj, 24, true, MEMRA_MM_STORE, MEMRA_ACT_SILU, false, false, false},
            {"matmul_ex.proj4_conv", 4, q8, 256, proj, 1, true, MEMRA_MM_STORE, MEMRA_ACT_SILU, false, false, true},
            {"matmul_ex.proj4_conv_rows3", 4, q8, 256, proj, 3, true, MEMRA_MM_STORE, MEMRA_ACT_SILU, false, false, true},
            {"matmul_ex.q8_0.gdn_in", 4, q8, 4096, gdn, 1, true, MEMRA_MM_STORE, MEMRA_ACT_SILU, false, true, true},
            {"matmul_ex.q8_0.ffn_glu", 2, q8, 4096, ff, 1, true, MEMRA_MM_GLU, MEMRA_ACT_SILU, false, true, false},
            {"matmul_ex.q8_0.down_add", 1, q8, 12288, hid, 1, false, MEMRA_MM_ADD, MEMRA_ACT_SILU, false, true, false},
            {"matmul_ex.q8_0.out_add", 1, q8, 4096, hid, 1, false, MEMRA_MM_ADD, MEMRA_ACT_SILU, false, true, false},
            {"matmul_ex.q8_0.gdn_in_noconv", 4, q8, 4096, gdn, 1, true, MEMRA_MM_STORE, MEMRA_ACT_SILU, false, true, false},
        };
        for (size_t i = 0; i < sizeof mx / sizeof mx[0]; i++) {
            if (mx[i].big && !big)
                continue;
            KC(kc_matmul_ex(k, mx[i].name, mx[i].n_w, mx[i].t, mx[i].ne0, mx[i].ne1, mx[i].rows, mx[i].norm, mx[i].epi,
                         mx[i].act, mx[i].fast, mx[i].conv));
        }
    }

    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        const int64_t ne0 = memra_type_block_size(types[i]) == 256 ? 256 : 64;
        KC(kc_get_rows(k, types[i], ne0, 3000, 7));
    }
    if (big) {
        KC(kc_get_rows(k, MEMRA_TYPE_Q8_0, 4096, 20000, 5));
    }

    KC(kc_norm(k, "norm.rms", MEMRA_NORM_RMS, 5, 64, true, false, 3));
    KC(kc_norm(k, "norm.rms.noweight", MEMRA_NORM_RMS, 3, 64, false, false, 0));
    KC(kc_norm(k, "norm.rms.inplace", MEMRA_NORM_RMS, 4, 4096, true, true, 0));
    KC(kc_norm(k, "norm.rms.heads", MEMRA_NORM_RMS, 64, 256, true, false, 0));
    KC(kc_norm(k, "norm.l2", MEMRA_NORM_L2, 48, 128, false, false, 0));
    if (big) {
        KC(kc_norm(k, "norm.rms.4096", MEMRA_NORM_RMS, 1, 4096, true, false, 0));
    }

    for (int op = MEMRA_EW_COPY; op <= MEMRA_EW_FILL; op++) {
        KC(kc_ew(k, (memra_ew_op_t)op, 4, 3001, 0));
        if (ew_binary((memra_ew_op_t)op)) {
            KC(kc_ew(k, (memra_ew_op_t)op, 5, 777, 1));
        }
        if (op != MEMRA_EW_FILL) {
            KC(kc_ew(k, (memra_ew_op_t)op, 3, 500, 2));
        }
    }
    if (big) {
        KC(kc_ew(k, MEMRA_EW_SWIGLU, 1, 12288, 0));
    }

    KC(kc_rope(k, "rope.norm", MEMRA_ROPE_NORM, 5, 4, 64, 64, false, 4096));
    KC(kc_rope(k, "rope.neox", MEMRA_ROPE_NEOX, 5, 3, 128, 128, false, 32768));
    KC(kc_rope(k, "rope.neox.partial", MEMRA_ROPE_NEOX, 6, 16, 256, 64, false, 262144));
    KC(kc_rope(k, "rope.norm.freq", MEMRA_ROPE_NORM, 4, 4, 128, 128, true, 100000));
    KC(kc_rope(k, "rope.neox.freq512", MEMRA_ROPE_NEOX, 3, 8, 512, 512, true, 8192));
    KC(kc_qk_norm_rope(k, "qk_norm_rope.decode", 1, 16, 4, 256, 64));
    KC(kc_qk_norm_rope(k, "qk_norm_rope.prefill", 7, 16, 4, 256, 64));
    KC(kc_qk_norm_rope(k, "qk_norm_rope.full", 3, 4, 2, 128, 128));

    KC(kc_attention(k, "attention.fixture", 7, 0, 4, 2, 16, 0, false));
    KC(kc_attention(k, "attention.fixture.hd64", 40, 0, 2, 1, 64, 0, false));
    KC(kc_attention(k, "attention.gqa", 5, 17, 4, 1, 32, 0, false));
    KC(kc_attention(k, "attention.odd_hd", 3, 9, 2, 2, 18, 0, false));
    KC(kc_attention(k, "attention.decode.hd256", 1, 3000, 16, 4, 256, 0, false));
    KC(kc_attention(k, "attention.decode.long", 1, 20000, 16, 4, 256, 0, false));
    KC(kc_attention(k, "attention.prefill.hd256", 9, 600, 16, 4, 256, 0, false));
    KC(kc_attention(k, "attention.swa", 9, 500, 8, 4, 256, 128, false));
    KC(kc_attention(k, "attention.swa.decode", 1, 5000, 8, 2, 256, 1024, false));
    KC(kc_attention(k, "attention.hd512", 3, 700, 8, 1, 512, 0, false));
    KC(kc_attention(k, "attention.gated.decode", 1, 3000, 16, 4, 256, 0, true));
    /* up to 16 splits the last split merges in registers (cuda/ops_attn.cu) */
    KC(kc_attention(k, "attention.gated.decode.d600", 1, 600, 16, 4, 256, 0, true));
    KC(kc_attention(k, "attention.decode.16splits", 1, 1023, 16, 4, 256, 0, false));
    KC(kc_attention(k, "attention.gated.short", 3, 40, 4, 2, 64, 0, true));
    KC(kc_attention_rowinv(k, "attention.rowinv", 6, 300, 4, 2, 128));
    /* on CUDA, a call of more (query, head) pairs than the backend keeps
     * split counters for merges its splits in a second kernel, one query
     * in the last split's block: both must give the same bits */
    KC(kc_attention_rowinv(k, "attention.rowinv.merge", 36, 100, 128, 8, 16));

    KC(kc_conv(k, "conv.fixture", 7, 96, 4));
    KC(kc_conv(k, "conv.decode", 1, 8192, 4));
    KC(kc_conv(k, "conv.prefill", 9, 8192, 4));
    KC(kc_conv(k, "conv.short", 2, 64, 4));

    KC(kc_delta(k, "delta.fixture", 5, 2, 4, 16));
    KC(kc_delta(k, "delta.decode", 1, 16, 32, 128));
    KC(kc_delta(k, "delta.prefill", 6, 16, 32, 128));
    KC(kc_delta(k, "delta.d64", 3, 2, 6, 64));
    KC(kc_delta_rowinv(k, 5, 16, 32, 128));
    KC(kc_gdn(k, "gdn.fixture", 5, 2, 4, 16, false));
    KC(kc_gdn(k, "gdn.decode", 1, 16, 32, 128, false));
    KC(kc_gdn(k, "gdn.prefill", 6, 16, 32, 128, false));
    KC(kc_gdn(k, "gdn.d64", 3, 2, 6, 64, false));
    /* the conv inside the step, on CUDA a cluster of a key head's value
     * heads, each head in two blocks: clusters of 4 (9B, 35B-A3B), 6
     * (27B), 2; in one block per head when two do not fit (r8: 8) */
    KC(kc_gdn(k, "gdn.conv.decode", 1, 16, 32, 128, true));
    KC(kc_gdn(k, "gdn.conv.27b", 1, 16, 48, 128, true));
    KC(kc_gdn(k, "gdn.conv.fixture", 1, 2, 4, 16, true));
    KC(kc_gdn(k, "gdn.conv.d64", 1, 2, 6, 64, true));
    KC(kc_gdn(k, "gdn.conv.r1", 1, 4, 4, 128, true));
    KC(kc_gdn(k, "gdn.conv.r8", 1, 2, 16, 64, true));
    KC(kc_gdn(k, "gdn.conv.prefill", 6, 16, 32, 128, true));

    KC(kc_route(k, 5, 8, 2, false, false));
    KC(kc_route(k, 5, 128, 8, true, false));
    KC(kc_route(k, 3, 256, 8, true, false));
    KC(kc_route(k, 4, 128, 8, true, true));
    KC(kc_route(k, 3, 1, 1, false, false));

    KC(kc_moe(k, "moe.fixture", MEMRA_TYPE_F32, MEMRA_TYPE_F32, 5, 8, 2, 64, 32, false, true, MEMRA_ACT_GELU));
    KC(kc_moe(k, "moe.fixture.gate_up", MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q8_0, 4, 8, 2, 64, 64, true, false, MEMRA_ACT_SILU));
    KC(kc_moe(k, "moe.shared", MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q8_0, 3, 1, 1, 256, 128, false, false, MEMRA_ACT_SILU));
    if (big) {
        KC(kc_moe(k, "moe.decode", MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q8_0, 1, 128, 8, 2048, 512, true, false, MEMRA_ACT_SILU));
        KC(kc_moe(k, "moe.prefill", MEMRA_TYPE_Q4_K, MEMRA_TYPE_Q6_K, 6, 128, 8, 2048, 512, false, false, MEMRA_ACT_SILU));
        KC(kc_moe(k, "moe.gemma", MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q8_0, 2, 128, 8, 2816, 704, true, true, MEMRA_ACT_GELU));
    }

    KC(kc_argmax(k, "argmax.fixture", 3000, 0));
    KC(kc_argmax(k, "argmax.vocab", 248320, 0));
    KC(kc_argmax(k, "argmax.ties", 248320, 1));
    KC(kc_argmax(k, "argmax.nan", 5000, 2));
}

memra_status_t memra_check_kernels(const memra_kernel_check_params_t *params, memra_kernel_check_report_t *report)
{
    if (!report || report->size < sizeof(uint32_t))
        return memra__fail(NULL, MEMRA_E_INVALID, "memra_check_kernels: NULL report or report->size unset");
    if (report->size < sizeof *report)
        return memra__fail(NULL, MEMRA_E_INVALID, "memra_check_kernels: report->size %u is older than this library's %zu",
                           report->size, sizeof *report);
    const uint32_t rsize = report->size;
    memset(report, 0, sizeof *report);
    report->size = rsize;
    kc k;
    memset(&k, 0, sizeof k);
    memra_kernel_check_default_params(&k.p);
    if (params) {
        const size_t n = params->size < sizeof k.p ? params->size : sizeof k.p;
        memcpy(&k.p, params, n);
        k.p.size = sizeof k.p;
    }
    k.rep = report;
    k.rng = k.p.seed * 0x2545F4914F6CDD1Dull + 1;
    /* MEMRA_KERNEL_CHECK_CPU=1 checks the harness itself: the "device"
     * side is a second CPU engine, so every case must come out exact. */
    int32_t self = 0;
    if (memra__env_int("MEMRA_KERNEL_CHECK_CPU", 0, 1, 0, &self))
        return MEMRA_E_INVALID;
    const bool cpu_only = self == 1;
    if (!cpu_only && memra_cuda_device_count() <= 0)
        return memra__fail(NULL, MEMRA_E_NO_DEVICE, "kernel check: no CUDA device (or a build without CUDA)");
    memra_engine_params_t ep;
    memra_engine_default_params(&ep);
    memra_status_t st = memra_engine_create(&ep, &k.e_cpu);
    if (!st) {
        ep.backend = cpu_only ? MEMRA_BACKEND_CPU : MEMRA_BACKEND_CUDA;
        ep.device = k.p.device;
        ep.fast = 0;
        st = memra_engine_create(&ep, &k.e_gpu);
    }
    if (!st) {
        ep.fast = 1;
        st = memra_engine_create(&ep, &k.e_fast);
    }
    if (!st) {
        memra_engine_info_t info = {.size = sizeof info};
        if (memra_engine_get_info(k.e_gpu, &info) == MEMRA_OK)
            snprintf(report->device_name, sizeof report->device_name, "%s", info.device_name);
        k.cpu = k.e_cpu->be;
        k.gpu = k.e_gpu->be;
        k.fast = k.e_fast->be;
        if (!k.cpu->iface->matmul || !k.gpu->iface->matmul)
            st = memra__fail(NULL, MEMRA_E_UNSUPPORTED, "kernel check: a backend lacks its ops");
    }
    if (!st) {
        run_suite(&k);
        kc_release(&k);
        st = k.err;
    }
    memra_engine_destroy(k.e_fast);
    memra_engine_destroy(k.e_gpu);
    memra_engine_destroy(k.e_cpu);
    if (st)
        return st;
    if (report->n_lines == 0 && !report->truncated && k.p.test && *k.p.test)
        return memra__fail(NULL, MEMRA_E_NOT_FOUND, "kernel check: no case name starts with '%s'", k.p.test);
    report->all_green = report->n_lines > 0 && report->n_failed == 0;
    if (!report->all_green)
        return memra__fail(NULL, MEMRA_E_MISMATCH, "kernel check: %d of %d cases failed", report->n_failed,
                           report->n_lines);
    return MEMRA_OK;
}

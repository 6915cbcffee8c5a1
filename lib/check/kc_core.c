/* The kernel check's case runner: seeded inputs, tracked buffers, poisoned
 * outputs, the compare, report lines and the run/compare tails every case
 * ends with (see kc.h). */
#include "kc.h"

/* ---- small utilities ------------------------------------------------------ */

uint64_t memra__kc_next(kc *k)
{
    /* splitmix64: fast, and every seed gives a good stream */
    uint64_t z = (k->rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

float memra__kc_unif(kc *k, float lo, float hi)
{
    return lo + (hi - lo) * (float)((memra__kc_next(k) >> 40) * (1.0 / 16777216.0));
}

int64_t memra__kc_int(kc *k, int64_t n)
{
    return (int64_t)(memra__kc_next(k) % (uint64_t)n);
}

double memra__kc_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void *memra__kc_track(kc *k, memra__backend_t *be, void *p)
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

void *memra__kc_host(kc *k, size_t bytes)
{
    return memra__kc_track(k, NULL, malloc(bytes ? bytes : 1));
}

void memra__kc_release(kc *k)
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
void *memra__kc_put(kc *k, memra__backend_t *be, const void *host, size_t bytes)
{
    void *d = memra__kc_track(k, be, be->iface->alloc(be, bytes ? bytes : 1));
    if (!d)
        return NULL;
    memra_status_t st = be->iface->upload(be, d, host, bytes);
    if (st && !k->err)
        k->err = st;
    return st ? NULL : d;
}

float *memra__kc_randf(kc *k, size_t n, float lo, float hi)
{
    float *v = memra__kc_host(k, n * sizeof *v);
    if (v)
        for (size_t i = 0; i < n; i++)
            v[i] = memra__kc_unif(k, lo, hi);
    return v;
}

/* ---- outputs: sentinel, guards, strided rows --------------------------------- */

size_t memra__kc_total(const kc_out *o)
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
float *memra__kc_out_new(kc *k, memra__backend_t *be, const kc_out *o, const float *init)
{
    const size_t n = memra__kc_total(o);
    float *h = memra__kc_host(k, n * sizeof *h);
    if (!h)
        return NULL;
    const uint32_t s = KC_SENTINEL;
    for (size_t i = 0; i < n; i++)
        memcpy(&h[i], &s, sizeof s);
    if (init)
        for (int64_t r = 0; r < o->rows; r++)
            memcpy(h + KC_GUARD + r * o->ld, init + r * o->cols, (size_t)o->cols * sizeof *h);
    float *d = memra__kc_put(k, be, h, n * sizeof *h);
    return d ? d + KC_GUARD : NULL;
}

float *memra__kc_out_get(kc *k, memra__backend_t *be, const float *d, const kc_out *o)
{
    const size_t n = memra__kc_total(o);
    float *h = memra__kc_host(k, n * sizeof *h);
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

void memra__kc_acc_init(kc_acc *a)
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
void memra__kc_cmp(kc_acc *a, const float *ref, const float *got, const kc_out *o, const char *what)
{
    if (!ref || !got) {
        a->guard_ok = false;
        snprintf(a->note, sizeof a->note, "%s: no output", what);
        return;
    }
    const size_t n = memra__kc_total(o);
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

memra_kernel_check_line_t *memra__kc_line(kc *k, const char *name, const char *kind, double tol, const char *fmt, ...)
{
    if (k->err)
        return NULL;
    if (k->p.test && *k->p.test && strncmp(name, k->p.test, strlen(k->p.test)) != 0)
        return NULL;
    memra_kernel_check_report_t *rep = k->rep;
    if (rep->n_lines == k->cap) {
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

void memra__kc_finish(kc *k, memra_kernel_check_line_t *L, const kc_acc *a)
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

void memra__kc_op_failed(kc *k, memra_kernel_check_line_t *L, const char *side, memra_status_t st)
{
    L->pass = 0;
    L->guard_ok = 0;
    snprintf(L->note, sizeof L->note, "%s op: %s", side, memra_strerror(st));
    k->rep->n_failed++;
}

/* Side SIDE of a case on the device backend BE, awaited; false (line
 * failed, WHAT names the side) on an error. */
static bool kc_run_gpu(kc *k, memra_kernel_check_line_t *L, kc_run_fn run, void *c, memra__backend_t *be, int side,
                       const char *what)
{
    memra_status_t st = run(c, be, side);
    if (!st)
        st = be->iface->synchronize(be);
    if (st) {
        memra__kc_op_failed(k, L, what, st);
        return false;
    }
    return true;
}

/* Runs both sides; false (line failed) when either op returns an error. */
bool memra__kc_run2(kc *k, memra_kernel_check_line_t *L, kc_run_fn run, void *c, memra__backend_t *gpu_be)
{
    memra_status_t st = run(c, k->cpu, 0);
    if (st) {
        memra__kc_op_failed(k, L, "cpu", st);
        return false;
    }
    return kc_run_gpu(k, L, run, c, gpu_be, 1, "cuda");
}

/* The end of a GPU-against-GPU bit-identity check: fails the line on ST,
 * else compares GOT to REF for each of the N outputs (both on the GPU
 * engine, layouts O). */
void memra__kc_finish_exact(kc *k, memra_kernel_check_line_t *L, memra_status_t st, const kc_pair *p, int n)
{
    if (st) {
        memra__kc_op_failed(k, L, "cuda", st);
        return;
    }
    kc_acc acc;
    memra__kc_acc_init(&acc);
    for (int i = 0; i < n; i++)
        memra__kc_cmp(&acc, memra__kc_out_get(k, k->gpu, p[i].ref, p[i].o), memra__kc_out_get(k, k->gpu, p[i].got, p[i].o), p[i].o,
               p[i].what);
    memra__kc_finish(k, L, &acc);
}

/* Fused ops (matmul_ex, gdn, qk_norm_rope, norm_ex and its chains, moe) are checked twice: against the
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
    seq_i.norm_ex = NULL;
    seq_i.moe_fused = NULL;
    seq_i.router = NULL;
    memra__backend_t seq = *gb;
    seq.iface = &seq_i;
    return kc_run_gpu(k, L, run, c, &seq, 2, "cuda sequence");
}

/* WHAT names the exact comparison's sides in the note ("fused != cuda
 * sequence"). */
static void kc_finish_fused(kc *k, memra_kernel_check_line_t *L, kc_acc *a, const kc_acc *e, const char *what)
{
    if (e->n_diff_bits && !a->note[0])
        snprintf(a->note, sizeof a->note, "%s in %lld elements", what, (long long)e->n_diff_bits);
    if (e->n_diff_bits || !e->guard_ok) {
        a->guard_ok = false; /* fails the line whatever the bound */
        if (!e->guard_ok && !a->note[0])
            snprintf(a->note, sizeof a->note, "sequence: %.50s", e->note);
    }
    memra__kc_finish(k, L, a);
}

/* Batched ops likewise: side 2 runs on GB with the batched slots removed
 * (attention_batch, kv_store_batch, gdn_batch), so the memra__ wrapper
 * runs every item through its one-item slot (fused ones included). */
static bool kc_run_single(kc *k, memra_kernel_check_line_t *L, kc_run_fn run, void *c, memra__backend_t *gb)
{
    memra__backend_i one_i = *gb->iface;
    one_i.attention_batch = NULL;
    one_i.kv_store_batch = NULL;
    one_i.gdn_batch = NULL;
    memra__backend_t one = *gb;
    one.iface = &one_i;
    return kc_run_gpu(k, L, run, c, &one, 2, "cuda one-item launches");
}

/* The tail shared by fused and batched cases: runs side 0 on the CPU,
 * side 1 on GB, side 2 on GB through SIDE2 (the plain sequence, or one
 * launch per item), compares each of the N outputs (F[i].got against
 * F[i].ref within the bound, and bit for bit against F[i].seq), finishes
 * the line (WHAT names a side-2 mismatch) and times side 1 (--bench). */
static void kc_check_two_ways(kc *k, memra_kernel_check_line_t *L, memra__backend_t *gb, const kc_fused_out *f, int n,
                              kc_run_fn run, void *c, double bytes,
                              bool (*side2)(kc *, memra_kernel_check_line_t *, kc_run_fn, void *, memra__backend_t *),
                              const char *what)
{
    if (!memra__kc_run2(k, L, run, c, gb) || !side2(k, L, run, c, gb))
        return;
    kc_acc a, e;
    memra__kc_acc_init(&a);
    memra__kc_acc_init(&e);
    for (int i = 0; i < n; i++) {
        const float *got = memra__kc_out_get(k, gb, f[i].got, f[i].o);
        if (f[i].ref) /* else an output compared with the sequence alone (kc_fused_out) */
            memra__kc_cmp(&a, memra__kc_out_get(k, k->cpu, f[i].ref, f[i].o), got, f[i].o, f[i].what);
        memra__kc_cmp(&e, memra__kc_out_get(k, gb, f[i].seq, f[i].o), got, f[i].o, f[i].what);
    }
    kc_finish_fused(k, L, &a, &e, what);
    memra__kc_bench(k, L, run, c, gb, bytes);
}

void memra__kc_check_fused(kc *k, memra_kernel_check_line_t *L, memra__backend_t *gb, const kc_fused_out *f, int n,
                           kc_run_fn run, void *c, double bytes)
{
    kc_check_two_ways(k, L, gb, f, n, run, c, bytes, kc_run_seq, "fused != cuda sequence");
}

void memra__kc_check_batch(kc *k, memra_kernel_check_line_t *L, memra__backend_t *gb, const kc_fused_out *f, int n,
                           kc_run_fn run, void *c, double bytes)
{
    kc_check_two_ways(k, L, gb, f, n, run, c, bytes, kc_run_single, "batched != one-item launches");
}

/* Mean time of back-to-back calls, after ~50 ms of the same calls: the
 * check is bursty (CPU references in between), and an idle GPU sits at a
 * low clock that a short timed loop would measure instead of the op. At
 * least bench_iters calls and ~20 ms are timed. */
void memra__kc_bench(kc *k, memra_kernel_check_line_t *L, kc_run_fn run, void *c, memra__backend_t *be, double bytes)
{
    if (!k->p.bench || !L)
        return;
    const int iters = k->p.bench_iters > 0 ? k->p.bench_iters : 20;
    double t0 = memra__kc_now();
    while (memra__kc_now() - t0 < 0.05) {
        for (int i = 0; i < 8; i++)
            if (run(c, be, 1))
                return;
        if (be->iface->synchronize(be))
            return;
    }
    int n = 0;
    t0 = memra__kc_now();
    do {
        for (int i = 0; i < iters; i++)
            if (run(c, be, 1))
                return;
        n += iters;
        if (be->iface->synchronize(be))
            return;
    } while (memra__kc_now() - t0 < 0.02);
    L->bench_us = (memra__kc_now() - t0) / n * 1e6;
    L->bench_gbs = bytes > 0 ? bytes / (L->bench_us * 1e3) : 0.0;
}

/* The end of a CUDA-against-CPU case: compares each of the N outputs
 * (P[i].ref on the CPU engine, P[i].got on GB), finishes the line, and
 * times the CUDA side (--bench). */
void memra__kc_finish_cpu_pairs(kc *k, memra_kernel_check_line_t *L, memra__backend_t *gb, const kc_pair *p, int n)
{
    kc_acc a;
    memra__kc_acc_init(&a);
    for (int i = 0; i < n; i++)
        memra__kc_cmp(&a, memra__kc_out_get(k, k->cpu, p[i].ref, p[i].o), memra__kc_out_get(k, gb, p[i].got, p[i].o),
                      p[i].o, p[i].what);
    memra__kc_finish(k, L, &a);
}

static void kc_finish_vs_cpu(kc *k, memra_kernel_check_line_t *L, memra__backend_t *gb, const kc_pair *p, int n,
                             kc_run_fn run, void *c, double bytes)
{
    memra__kc_finish_cpu_pairs(k, L, gb, p, n);
    memra__kc_bench(k, L, run, c, gb, bytes);
}

/* The whole tail of a CUDA-against-CPU case: runs both sides (side 1 on
 * GB), then memra__kc_finish_vs_cpu; an op's error fails the line. */
void memra__kc_check_vs_cpu(kc *k, memra_kernel_check_line_t *L, memra__backend_t *gb, const kc_pair *p, int n,
                            kc_run_fn run, void *c, double bytes)
{
    if (memra__kc_run2(k, L, run, c, gb))
        kc_finish_vs_cpu(k, L, gb, p, n, run, c, bytes);
}

/* The inputs of a fused matmul case on both sides: N_ROWS random x rows LDX
 * floats apart in [-1, 1) and NE0 norm weights in [0.5, 1.5) (that draw
 * order). False when an allocation or upload failed. */
bool memra__kc_mm_inputs(kc *k, int64_t n_rows, int64_t ldx, int64_t ne0, void *xp[2], void *np[2])
{
    float *x = memra__kc_randf(k, (size_t)(n_rows * ldx), -1.0f, 1.0f);
    float *nw = memra__kc_randf(k, (size_t)ne0, 0.5f, 1.5f);
    return x && nw && memra__kc_both(k, x, (size_t)(n_rows * ldx) * 4, xp) &&
           memra__kc_both(k, nw, (size_t)ne0 * 4, np);
}

/* qwen35's post-op inputs of a four-projection case on both sides: N biases
 * in [-2, 2) and N multipliers in [-3, -0.1) (that draw order). */
bool memra__kc_mm_post(kc *k, int64_t n, void *pb[2], void *pa[2])
{
    float *b = memra__kc_randf(k, (size_t)n, -2.0f, 2.0f), *aux = memra__kc_randf(k, (size_t)n, -3.0f, -0.1f);
    return b && aux && memra__kc_both(k, b, (size_t)n * 4, pb) && memra__kc_both(k, aux, (size_t)n * 4, pa);
}

/* ---- weights ------------------------------------------------------------------ */

const char *memra__kc_tname(memra_type_t t)
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
            const uint64_t r = memra__kc_next(k);
            memcpy(b + j, &r, bb - j < 8 ? bb - j : 8);
        }
        const float d = memra__kc_unif(k, 0.002f, 0.02f), m = memra__kc_unif(k, 0.002f, 0.02f);
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
            b[0] = (uint8_t)(118 + memra__kc_int(k, 8));
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
    uint8_t *w = memra__kc_host(k, *bytes);
    if (!w)
        return NULL;
    memset(w, 0, *bytes);
    const int64_t nbr = ne0 / memra_type_block_size(t);
    for (int64_t r = 0; r < ne1 * ne2; r++) {
        uint8_t *p = w + (size_t)r * *nb1;
        if (t == MEMRA_TYPE_F32 || t == MEMRA_TYPE_F16 || t == MEMRA_TYPE_BF16) {
            for (int64_t i = 0; i < ne0; i++) {
                const float v = memra__kc_unif(k, -1.0f, 1.0f);
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
bool memra__kc_weight(kc *k, memra_type_t t, int64_t ne0, int64_t ne1, int64_t ne2, size_t nb1_pad,
                      memra_weight_t w[2])
{
    size_t nb1, bytes;
    uint8_t *h = kc_weight_host(k, t, ne0, ne1, ne2, nb1_pad, &nb1, &bytes);
    if (!h)
        return false;
    void *d = memra__kc_put(k, k->gpu, h, bytes);
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
bool memra__kc_both(kc *k, const void *host, size_t bytes, void *p[2])
{
    p[0] = memra__kc_put(k, k->cpu, host, bytes);
    p[1] = memra__kc_put(k, k->gpu, host, bytes);
    return p[0] && p[1];
}

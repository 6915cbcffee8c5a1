/* Several threads on one engine or one model: the CPU pool shared by two
 * callers, deferred steps of one cache while the caller clears or creates
 * another, two models on one caller engine, and one model called from two
 * threads (the second refused with MEMRA_E_BUSY). The model-level cases use a
 * memra-synth Qwen3.5 shape (2 layers, 512 tokens) because its recurrent
 * state (262,144 floats a layer) is large enough for a cache clear to use
 * the pool; the tiny fixtures' state is not. A watchdog bounds every test:
 * a deadlock fails the run instead of hanging it. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "cpu/pool.h"
#include "memra/memra.h"
#include "model_impl.h"
#include "testutil.h"

/* The static archive only yields an arch object when something references
 * it strongly (model.c's references are weak). */
static const memra__arch_t *const k_archs[] = {&memra__arch_qwen35};

#define WATCHDOG_S 150 /* whole runner; a hang is a failure, not a stuck CI job */
#define N_THREADS 4    /* pool size of the engines below, whatever the machine has */

static char g_synth[512];

/* Writes the memra-synth model once per run ($MEMRA_SYNTH is the tool,
 * set by test/meson.build); NULL (the caller skips) without it. */
static const char *synth_model(void)
{
    if (g_synth[0])
        return g_synth;
    const char *tool = getenv("MEMRA_SYNTH");
    if (!tool || access(tool, X_OK) != 0)
        return NULL;
    const char *tmp = getenv("TMPDIR");
    char path[256], cmd[1024];
    snprintf(path, sizeof path, "%s/memra-test-conc-%d.gguf", tmp ? tmp : "/tmp", (int)getpid());
    snprintf(cmd, sizeof cmd, "'%s' --model qwen3.5-0.8b --type q8_0 --layers 2 --vocab 512 --out '%s' >/dev/null",
             tool, path);
    if (system(cmd) != 0)
        return NULL;
    snprintf(g_synth, sizeof g_synth, "%s", path);
    return g_synth;
}

#define NEED_SYNTH(path)                                                                \
    const char *path = synth_model();                                                   \
    if (!path) {                                                                        \
        TU_SKIP("memra-synth not available (set MEMRA_SYNTH to the memra-synth tool)"); \
        return;                                                                         \
    }

static memra_engine_t *cpu_engine(void)
{
    memra_engine_params_t ep;
    memra_engine_default_params(&ep);
    ep.n_threads = N_THREADS;
    memra_engine_t *e = NULL;
    assert_int_equal(memra_engine_create(&ep, &e), MEMRA_OK);
    return e;
}

static memra_model_t *load_on(const char *path, memra_engine_t *e, int32_t streams)
{
    memra_model_params_t p;
    memra_model_default_params(&p);
    p.engine = e;
    p.n_stages = 1;
    p.streams = streams;
    memra_model_t *m = NULL;
    memra_status_t st = memra_model_load(path, &p, &m);
    if (st)
        fail_msg("load %s: %s (%s)", path, memra_status_name(st), memra_last_error());
    return m;
}

static int32_t tok_at(int32_t i, int32_t vocab) { return (int32_t)((i * 977u + 13u) % (uint32_t)vocab); }

/* Logits of N decode steps on a fresh cache of M: the reference. */
static float *reference(memra_model_t *m, int32_t n)
{
    int32_t V = memra_model_n_vocab(m);
    memra_cache_t *c = NULL;
    assert_int_equal(memra_cache_create(m, n, &c), MEMRA_OK);
    float *out = malloc((size_t)n * (size_t)V * sizeof *out);
    for (int32_t i = 0; i < n; i++)
        assert_int_equal(memra_decode_step(m, c, tok_at(i, V), out + (size_t)i * V), MEMRA_OK);
    assert_int_equal(memra_cache_free(c), MEMRA_OK);
    return out;
}

/* ---- the pool itself ------------------------------------------------------------------ */

typedef struct fill_job {
    int32_t *out;
    int32_t value;
} fill_job;

static void fill_part(void *ctx, int64_t b, int64_t e)
{
    fill_job *j = ctx;
    for (int64_t i = b; i < e; i++)
        j->out[i] = j->value;
}

typedef struct pool_caller {
    memra__pool_t *pool;
    int32_t *buf;
    int64_t n;
    int32_t id;
    int rounds;
    int bad_rounds;
} pool_caller;

static void *pool_loop(void *arg)
{
    pool_caller *pc = arg;
    for (int r = 0; r < pc->rounds; r++) {
        fill_job j = {pc->buf, pc->id * 100000 + r};
        memra__pool_for(pc->pool, pc->n, 64, fill_part, &j);
        for (int64_t i = 0; i < pc->n; i++)
            if (pc->buf[i] != j.value) {
                pc->bad_rounds++;
                break;
            }
    }
    return NULL;
}

/* Two threads run loops on one pool at once: each loop covers exactly its
 * own range with its own function and context. */
static void test_pool_two_callers(void **state)
{
    (void)state;
    memra__pool_t *pool = NULL;
    assert_int_equal(memra__pool_create(N_THREADS, &pool), MEMRA_OK);
    enum { N = 1 << 14 };
    pool_caller pc[2];
    pthread_t th[2];
    for (int t = 0; t < 2; t++) {
        pc[t] = (pool_caller){pool, calloc(N, sizeof(int32_t)), N, t + 1, 3000, 0};
        assert_int_equal(pthread_create(&th[t], NULL, pool_loop, &pc[t]), 0);
    }
    for (int t = 0; t < 2; t++) {
        pthread_join(th[t], NULL);
        assert_int_equal(pc[t].bad_rounds, 0);
        free(pc[t].buf);
    }
    memra__pool_destroy(pool);
}

/* ---- deferred steps of one cache while the caller works on another -------------------- */

/* Steps in flight on cache A while the caller clears cache B and
 * creates and frees cache C, all on the engine the pipeline worker uses:
 * every deferred row must equal the synchronous reference bit for bit. */
static void test_deferred_with_cache_work(void **state)
{
    (void)state;
    NEED_SYNTH(path);
    memra_engine_t *e = cpu_engine();
    memra_model_t *m = load_on(path, e, 1);
    const int32_t N = 8;
    float *ref = reference(m, N);
    int32_t V = memra_model_n_vocab(m);
    memra_cache_t *a = NULL, *b = NULL;
    assert_int_equal(memra_cache_create(m, N, &a), MEMRA_OK);
    assert_int_equal(memra_cache_create(m, N, &b), MEMRA_OK);
    memra_pending_t *q[8];
    for (int32_t i = 0; i < N; i++)
        assert_int_equal(memra_decode_step_deferred(m, a, tok_at(i, V), &q[i]), MEMRA_OK);
    int cache_ops = 0;
    while (memra_pending_poll(q[N - 1]) == MEMRA_E_AGAIN || cache_ops < 4) {
        assert_int_equal(memra_cache_clear(b), MEMRA_OK);
        memra_cache_t *c = NULL;
        assert_int_equal(memra_cache_create(m, 4, &c), MEMRA_OK);
        assert_int_equal(memra_cache_free(c), MEMRA_OK);
        cache_ops++;
    }
    float *row = malloc((size_t)V * sizeof *row);
    for (int32_t i = 0; i < N; i++) {
        assert_int_equal(memra_pending_wait(q[i], row), MEMRA_OK);
        if (memcmp(row, ref + (size_t)i * V, (size_t)V * sizeof *row) != 0)
            fail_msg("deferred step %d differs from synchronous decode after %d cache clears", i, cache_ops);
    }
    free(row);
    free(ref);
    assert_int_equal(memra_cache_free(a), MEMRA_OK);
    assert_int_equal(memra_cache_free(b), MEMRA_OK);
    assert_int_equal(memra_model_free(m), MEMRA_OK);
    assert_int_equal(memra_engine_destroy(e), MEMRA_OK);
}

/* ---- two models on one engine --------------------------------------------------------- */

typedef struct decoder {
    memra_model_t *m;
    const float *ref;
    int32_t n;
    int mismatches;
    memra_status_t st;
} decoder;

static void *decode_all(void *arg)
{
    decoder *d = arg;
    int32_t V = memra_model_n_vocab(d->m);
    memra_cache_t *c = NULL;
    d->st = memra_cache_create(d->m, d->n, &c);
    float *row = malloc((size_t)V * sizeof *row);
    for (int32_t i = 0; i < d->n && !d->st; i++) {
        d->st = memra_decode_step(d->m, c, tok_at(i, V), row);
        if (!d->st && memcmp(row, d->ref + (size_t)i * V, (size_t)V * sizeof *row) != 0)
            d->mismatches++;
    }
    free(row);
    if (c && memra_cache_free(c) != MEMRA_OK && !d->st)
        d->st = MEMRA_E_INTERNAL;
    return NULL;
}

/* Distinct models are independent, also when they share the caller's
 * engine: one thread each, both decode exactly as alone. */
static void test_two_models_one_engine(void **state)
{
    (void)state;
    NEED_SYNTH(path);
    memra_engine_t *e = cpu_engine();
    memra_model_t *m[2] = {load_on(path, e, 0), load_on(path, e, 0)};
    const int32_t N = 6;
    float *ref = reference(m[0], N);
    for (int round = 0; round < 3; round++) {
        decoder d[2];
        pthread_t th[2];
        for (int t = 0; t < 2; t++) {
            d[t] = (decoder){m[t], ref, N, 0, MEMRA_OK};
            assert_int_equal(pthread_create(&th[t], NULL, decode_all, &d[t]), 0);
        }
        for (int t = 0; t < 2; t++) {
            pthread_join(th[t], NULL);
            assert_int_equal(d[t].st, MEMRA_OK);
            assert_int_equal(d[t].mismatches, 0);
        }
    }
    free(ref);
    for (int t = 0; t < 2; t++)
        assert_int_equal(memra_model_free(m[t]), MEMRA_OK);
    assert_int_equal(memra_engine_destroy(e), MEMRA_OK);
}

/* ---- one model, two threads ---------------------------------------------------------- */

/* A matmul slot that holds the first call made while armed until the test
 * releases it, so the other thread's calls land while a forward is inside. */
static memra_status_t (*g_real_matmul)(memra__backend_t *, const memra_weight_t *, const float *, int64_t, float *,
                                        int64_t, int64_t);
static atomic_int g_armed, g_entered, g_released;

static void wait_flag(atomic_int *flag)
{
    for (int i = 0; i < 30000 && !atomic_load(flag); i++) /* 30 s at most */
        usleep(1000);
}

static memra_status_t holding_matmul(memra__backend_t *be, const memra_weight_t *w, const float *x, int64_t ldx,
                                     float *y, int64_t ldy, int64_t n)
{
    if (atomic_exchange(&g_armed, 0)) {
        atomic_store(&g_entered, 1);
        wait_flag(&g_released);
    }
    return g_real_matmul(be, w, x, ldx, y, ldy, n);
}

typedef struct one_step {
    memra_model_t *m;
    memra_cache_t *c;
    float *row;
    memra_status_t st;
} one_step;

static void *step_thread(void *arg)
{
    one_step *o = arg;
    o->st = memra_decode_step(o->m, o->c, tok_at(0, memra_model_n_vocab(o->m)), o->row);
    return NULL;
}

/* A call on a model while another thread is inside a call on it gets
 * MEMRA_E_BUSY (documented: one thread at a time per model) instead of
 * racing on the model's buffers; the call inside completes correctly. */
static void test_one_model_two_threads(void **state)
{
    (void)state;
    NEED_SYNTH(path);
    memra_engine_t *e = cpu_engine();
    memra_model_t *m = load_on(path, e, 1);
    float *ref = reference(m, 1);
    int32_t V = memra_model_n_vocab(m);
    memra_cache_t *c1 = NULL, *c2 = NULL;
    assert_int_equal(memra_cache_create(m, 4, &c1), MEMRA_OK);
    assert_int_equal(memra_cache_create(m, 4, &c2), MEMRA_OK);
    memra_cache_snapshot_t *snap = NULL;
    assert_int_equal(memra_cache_snapshot(c2, &snap), MEMRA_OK);

    memra__backend_t *be = m->stages[0].be;
    const memra__backend_i *real = be->iface;
    memra__backend_i holding = *real;
    g_real_matmul = real->matmul;
    holding.matmul = holding_matmul;
    be->iface = &holding;
    atomic_store(&g_entered, 0);
    atomic_store(&g_released, 0);
    atomic_store(&g_armed, 1);

    one_step o = {m, c1, malloc((size_t)V * sizeof(float)), MEMRA_E_INTERNAL};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, step_thread, &o), 0);
    wait_flag(&g_entered);
    /* statuses first, asserts after the release: a failing check must not
     * leave the other thread held */
    float *row = malloc((size_t)V * sizeof *row);
    memra_cache_t *c3 = NULL, *c4 = NULL;
    memra_pending_t *pend = NULL;
    int32_t tok = 1;
    memra_cache_snapshot_t *snap2 = NULL;
    memra_status_t got[10];
    int n_got = 0; /* one statement each: an initializer list's order is unspecified */
    got[n_got++] = memra_decode_step(m, c2, 1, row);
    got[n_got++] = memra_forward(m, c2, &tok, 1, 0, row);
    got[n_got++] = memra_decode_step_deferred(m, c2, 1, &pend);
    got[n_got++] = memra_cache_create(m, 4, &c3);
    got[n_got++] = memra_cache_fork(c2, 0, &c4);
    got[n_got++] = memra_cache_clear(c2);
    got[n_got++] = memra_cache_snapshot(c2, &snap2);
    got[n_got++] = memra_cache_restore(c2, snap);
    got[n_got++] = memra_cache_free(c2);
    got[n_got++] = memra_model_free(m);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", memra_last_error());
    int32_t pos2 = memra_cache_pos(c2);
    atomic_store(&g_released, 1);
    pthread_join(th, NULL);
    be->iface = real;

    assert_int_equal(atomic_load(&g_entered), 1);
    for (int k = 0; k < n_got; k++)
        if (got[k] != MEMRA_E_BUSY)
            fail_msg("call %d on a model in use by another thread: %s, want E_BUSY", k, memra_status_name(got[k]));
    assert_non_null(strstr(msg, "another thread"));
    assert_null(c3);
    assert_null(c4);
    assert_null(pend);
    assert_null(snap2);
    assert_int_equal(pos2, 0);
    assert_int_equal(o.st, MEMRA_OK);
    assert_memory_equal(o.row, ref, (size_t)V * sizeof(float));
    /* once the call is out, everything works again */
    assert_int_equal(memra_decode_step(m, c2, 1, row), MEMRA_OK);
    memra_cache_snapshot_free(snap);
    free(row);
    free(o.row);
    free(ref);
    assert_int_equal(memra_cache_free(c1), MEMRA_OK);
    assert_int_equal(memra_cache_free(c2), MEMRA_OK);
    assert_int_equal(memra_model_free(m), MEMRA_OK);
    assert_int_equal(memra_engine_destroy(e), MEMRA_OK);
}

static void on_watchdog(int sig)
{
    (void)sig;
    static const char msg[] = "test_concurrency: watchdog expired (deadlock?)\n";
    if (g_synth[0])
        unlink(g_synth);
    if (write(2, msg, sizeof msg - 1) < 0)
        _exit(3);
    _exit(2);
}

int main(int argc, char **argv)
{
    (void)k_archs;
    if (argc > 1)
        cmocka_set_test_filter(argv[1]); /* e.g. "*two_models*" */
    signal(SIGALRM, on_watchdog);
    alarm(WATCHDOG_S);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_two_callers),
        cmocka_unit_test(test_deferred_with_cache_work),
        cmocka_unit_test(test_two_models_one_engine),
        cmocka_unit_test(test_one_model_two_threads),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    if (g_synth[0])
        unlink(g_synth);
    return rc;
}

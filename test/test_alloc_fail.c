/* Allocation failure injection: the N-th heap allocation fails, for every N
 * until the operation succeeds. Each failed run must return an error status
 * with a message and leave exactly as many live heap blocks as before (no
 * leak), and the engine/model must stay usable. The test replaces malloc
 * and friends for the whole process (glibc's __libc_* are the real ones),
 * so it is skipped under sanitizers, which own the allocator. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "memra/memra.h"
#include "testutil.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZED 1
#endif
#endif

#ifndef SANITIZED
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

static volatile long g_fail_at = -1; /* index of the allocation to fail, -1 = none */
static volatile long g_calls;
static volatile long g_live;          /* live blocks (process-wide; the test is single-threaded while counting) */

static int should_fail(void)
{
    return g_fail_at >= 0 && __atomic_fetch_add(&g_calls, 1, __ATOMIC_RELAXED) == g_fail_at;
}

static void *counted(void *p)
{
    if (p)
        __atomic_fetch_add(&g_live, 1, __ATOMIC_RELAXED);
    return p;
}

void *malloc(size_t n)
{
    return should_fail() ? NULL : counted(__libc_malloc(n));
}

void *calloc(size_t a, size_t b)
{
    return should_fail() ? NULL : counted(__libc_calloc(a, b));
}

void free(void *p)
{
    if (p)
        __atomic_fetch_sub(&g_live, 1, __ATOMIC_RELAXED);
    __libc_free(p);
}

void *realloc(void *p, size_t n)
{
    if (!p)
        return malloc(n);
    if (n == 0) {
        free(p);
        return NULL;
    }
    return should_fail() ? NULL : __libc_realloc(p, n);
}

int posix_memalign(void **out, size_t align, size_t n)
{
    if (should_fail())
        return 12; /* ENOMEM */
    void *p = counted(__libc_memalign(align, n));
    if (!p)
        return 12;
    *out = p;
    return 0;
}

void *aligned_alloc(size_t align, size_t n)
{
    return should_fail() ? NULL : counted(__libc_memalign(align, n));
}

typedef memra_status_t (*op_fn)(void *ctx);   /* the operation under test */
typedef void (*undo_fn)(void *ctx);           /* frees what a successful op made */

/* Runs OP with the N-th allocation failing, N = 0, 1, ... until it
 * succeeds; returns how many failure points were exercised. STRICT: every
 * failed run leaves the heap as it found it; otherwise the op may keep
 * buffers it grew (the model's activation buffers) and the caller checks
 * the heap once the owner is freed. */
static long sweep(const char *what, op_fn op, undo_fn undo, void *ctx, long limit, int strict)
{
    for (long n = 0; n < limit; n++) {
        long live0 = g_live;
        g_calls = 0;
        g_fail_at = n;
        memra_status_t st = op(ctx);
        g_fail_at = -1;
        if (st == MEMRA_OK) {
            undo(ctx);
            if (g_calls <= n) /* no allocation failed: the sweep is complete */
                return n;
            /* a failed allocation was absorbed (a fallback path): still no leak */
            if (strict && g_live != live0)
                fail_msg("%s: allocation %ld failed but the op succeeded and left %ld extra blocks", what, n,
                         g_live - live0);
            continue;
        }
        if (strlen(memra_last_error()) == 0)
            fail_msg("%s: allocation %ld failed with %s and no message", what, n, memra_status_name(st));
        if (strict && g_live != live0)
            fail_msg("%s: allocation %ld failed (%s: %s) and leaked %ld block(s)", what, n, memra_status_name(st),
                     memra_last_error(), g_live - live0);
    }
    fail_msg("%s: still failing after %ld allocations", what, limit);
    return limit;
}

typedef struct load_ctx {
    const char *path;
    memra_engine_t *engine;
    memra_model_t *model;
    memra_cache_t *cache, *fork;
    int32_t tokens[6];
} load_ctx;

static memra_status_t op_load(void *p)
{
    load_ctx *c = p;
    memra_model_params_t mp;
    memra_model_default_params(&mp);
    mp.engine = c->engine;
    return memra_model_load(c->path, &mp, &c->model);
}

static void undo_load(void *p)
{
    load_ctx *c = p;
    assert_int_equal(memra_model_free(c->model), MEMRA_OK);
    c->model = NULL;
}

static memra_status_t op_cache_forward(void *p)
{
    load_ctx *c = p;
    memra_status_t st = memra_cache_create(c->model, 16, &c->cache);
    if (st)
        return st;
    st = memra_forward(c->model, c->cache, c->tokens, 6, 0, NULL);
    if (st) {
        memra_cache_free(c->cache);
        c->cache = NULL;
    }
    return st;
}

static void undo_cache(void *p)
{
    load_ctx *c = p;
    assert_int_equal(memra_cache_pos(c->cache), 6);
    assert_int_equal(memra_cache_free(c->cache), MEMRA_OK);
    c->cache = NULL;
}

static memra_status_t op_fork(void *p)
{
    load_ctx *c = p;
    return memra_cache_fork(c->cache, 0, &c->fork);
}

static void undo_fork(void *p)
{
    load_ctx *c = p;
    assert_int_equal(memra_cache_pos(c->fork), 6);
    assert_int_equal(memra_cache_free(c->fork), MEMRA_OK);
    c->fork = NULL;
}

static void run_sweeps(const char *rel)
{
    /* valgrind replaces malloc too, and then our counts see only part */
    const char *pre = getenv("LD_PRELOAD");
    if (pre && strstr(pre, "vgpreload")) {
        TU_SKIP("allocation failure injection replaces malloc; not under valgrind");
        return;
    }
    const char *path = tu_fixture_path(rel);
    if (!path && strstr(rel, "qwen3-dense"))
        path = tu_data_path("default.gguf");
    if (!path || access(path, R_OK) != 0) {
        TU_SKIP("%s not found (set MEMRA_FIXTURES)", rel);
        return;
    }
    load_ctx c = {.path = path, .tokens = {1, 2, 3, 4, 5, 6}};
    memra_engine_params_t ep;
    memra_engine_default_params(&ep);
    ep.n_threads = 1; /* no worker threads allocating while we count */
    assert_int_equal(memra_engine_create(&ep, &c.engine), MEMRA_OK);
    /* warm-up: anything the C library allocates once (stdio, locale) */
    assert_int_equal(op_load(&c), MEMRA_OK);
    assert_int_equal(op_cache_forward(&c), MEMRA_OK);
    undo_cache(&c);
    undo_load(&c);

    long n_load = sweep("model load", op_load, undo_load, &c, 200000, 1);
    long live0 = g_live;
    assert_int_equal(op_load(&c), MEMRA_OK);
    long n_fwd = sweep("cache + forward", op_cache_forward, undo_cache, &c, 200000, 0);
    /* the model is still usable after all those failures */
    assert_int_equal(op_cache_forward(&c), MEMRA_OK);
    /* a failed fork frees all it took and leaves the parent as it was */
    long n_fork = sweep("cache fork", op_fork, undo_fork, &c, 200000, 1);
    assert_int_equal(memra_cache_pos(c.cache), 6);
    assert_int_equal(memra_forward(c.model, c.cache, c.tokens, 6, 0, NULL), MEMRA_OK);
    assert_int_equal(memra_cache_pos(c.cache), 12);
    assert_int_equal(memra_cache_clear(c.cache), MEMRA_OK);
    assert_int_equal(memra_forward(c.model, c.cache, c.tokens, 6, 0, NULL), MEMRA_OK);
    undo_cache(&c);
    undo_load(&c);
    if (g_live != live0)
        fail_msg("cache + forward: %ld block(s) left after the model was freed", g_live - live0);
    printf("%s: %ld allocation failure points in load, %ld in cache+forward, %ld in fork, none leaked\n", rel,
           n_load, n_fwd, n_fork);
    assert_true(n_load > 10);
    assert_true(n_fork > 0);
    assert_int_equal(memra_engine_destroy(c.engine), MEMRA_OK);
}

static void test_qwen3(void **state)
{
    (void)state;
    run_sweeps("models/qwen3-dense.f32.gguf");
}

static void test_gemma4_ple(void **state)
{
    (void)state;
    run_sweeps("models/g4-e.f32.gguf");
}

static void test_qwen35_moe(void **state)
{
    (void)state;
    run_sweeps("models/q35-moe.f32.gguf");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen3),
        cmocka_unit_test(test_gemma4_ple),
        cmocka_unit_test(test_qwen35_moe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#else /* sanitized build */

static void test_skipped(void **state)
{
    (void)state;
    TU_SKIP("allocation failure injection replaces malloc; not under a sanitizer");
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_skipped)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
#endif

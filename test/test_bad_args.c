/* Every exported function with bad arguments: NULL for each pointer in turn,
 * and out-of-range counts, indices, token ids and sizes, with otherwise
 * valid handles (a CPU engine, the bundled default model, a cache, a
 * sampler, the model's tokenizer, a gguf handle, a gguf writer). A status
 * call must fail (not MEMRA_OK) and leave a new, non-empty
 * memra_last_error(); a value call must give its failure value; a
 * documented no-op (free of NULL) must not crash. After the sweep the
 * handles still work and are freed without leaks. Then the lifecycle
 * misuses that other tests do not cover.
 *
 * Exported functions that take no argument a caller could get wrong, called
 * here only to show they answer (or not at all):
 *   memra_last_error, memra_version, memra_version_number,
 *   memra_cuda_device_count (no arguments). */
#include <float.h>
#include <math.h>
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

static int g_calls, g_bad;
static char g_sentinel[512];

/* A failing call whose message is known: each checked call must replace it. */
static void arm(void)
{
    memra_engine_params_t p;
    memra_engine_default_params(&p);
    if (memra_engine_params_set_device(&p, "no-such-device-sentinel") == MEMRA_OK)
        fail_msg("the sentinel call succeeded");
    snprintf(g_sentinel, sizeof g_sentinel, "%s", memra_last_error());
    if (!g_sentinel[0])
        fail_msg("the sentinel call left no message");
}

static void bad(int line, const char *expr, const char *why)
{
    fprintf(stderr, "test_bad_args.c:%d: %s: %s\n", line, expr, why);
    g_bad++;
}

/* A status call that must fail with a fresh message. */
#define ERR(expr)                                                                              \
    do {                                                                                       \
        arm();                                                                                 \
        memra_status_t st_ = (expr);                                                           \
        g_calls++;                                                                             \
        const char *m_ = memra_last_error();                                                   \
        if (st_ == MEMRA_OK)                                                                   \
            bad(__LINE__, #expr, "returned MEMRA_OK");                                         \
        else if (!m_[0] || !strcmp(m_, g_sentinel))                                            \
            bad(__LINE__, #expr, "no new message in memra_last_error()");                      \
    } while (0)

/* The same with one given status. */
#define ERR_IS(expr, want)                                                                     \
    do {                                                                                       \
        arm();                                                                                 \
        memra_status_t st_ = (expr);                                                           \
        g_calls++;                                                                             \
        const char *m_ = memra_last_error();                                                   \
        if (st_ != (want)) {                                                                   \
            char w_[96];                                                                       \
            snprintf(w_, sizeof w_, "returned %s, not %s", memra_status_name(st_),             \
                     memra_status_name(want));                                                 \
            bad(__LINE__, #expr, w_);                                                          \
        } else if (!m_[0] || !strcmp(m_, g_sentinel))                                         \
            bad(__LINE__, #expr, "no new message in memra_last_error()");                      \
    } while (0)

/* A documented no-op (NULL handle to a free function, a void setter). */
#define NOOP(stmt)                                                                             \
    do {                                                                                       \
        stmt;                                                                                  \
        g_calls++;                                                                             \
    } while (0)

/* A no-op that returns a status: MEMRA_OK. */
#define NOOP_OK(expr)                                                                          \
    do {                                                                                       \
        memra_status_t st_ = (expr);                                                           \
        g_calls++;                                                                             \
        if (st_ != MEMRA_OK)                                                                   \
            bad(__LINE__, #expr, "a no-op did not return MEMRA_OK");                           \
    } while (0)

/* A value call that must give its failure value. */
#define VAL(expr, want)                                                                        \
    do {                                                                                       \
        long long got_ = (long long)(expr);                                                    \
        g_calls++;                                                                             \
        if (got_ != (long long)(want)) {                                                       \
            char w_[96];                                                                       \
            snprintf(w_, sizeof w_, "gave %lld, not %lld", got_, (long long)(want));           \
            bad(__LINE__, #expr, w_);                                                          \
        }                                                                                      \
    } while (0)

#define VAL_NULL(expr)                                                                         \
    do {                                                                                       \
        const void *got_ = (expr);                                                             \
        g_calls++;                                                                             \
        if (got_)                                                                              \
            bad(__LINE__, #expr, "did not give NULL");                                         \
    } while (0)

#define VAL_STR(expr, want)                                                                    \
    do {                                                                                       \
        const char *got_ = (expr);                                                             \
        g_calls++;                                                                             \
        if (!got_ || strcmp(got_, (want)))                                                     \
            bad(__LINE__, #expr, "did not give \"" want "\"");                                 \
    } while (0)

#define SWEEP_END() assert_int_equal(g_bad, 0)

static const char *model_path(void)
{
    const char *p = tu_fixture_path("models/qwen3-dense.f32.gguf");
    if (p)
        return p;
    p = tu_data_path("default.gguf");
    return access(p, R_OK) == 0 ? p : NULL;
}

#define NEED_MODEL(path)                                                    \
    const char *path = model_path();                                        \
    if (!path) {                                                            \
        TU_SKIP("no qwen3 fixture and no bundled test/data/default.gguf"); \
        return;                                                             \
    }

static memra_engine_t *cpu_engine(void)
{
    memra_engine_params_t p;
    memra_engine_default_params(&p);
    p.n_threads = 2;
    memra_engine_t *e = NULL;
    assert_int_equal(memra_engine_create(&p, &e), MEMRA_OK);
    return e;
}

static memra_model_t *load_on(const char *path, memra_engine_t *e)
{
    memra_model_params_t p;
    memra_model_default_params(&p);
    p.engine = e;
    memra_model_t *m = NULL;
    memra_status_t st = memra_model_load(path, &p, &m);
    if (st)
        fail_msg("load %s: %s (%s)", path, memra_strerror(st), memra_last_error());
    return m;
}

/* ---- common.h ----------------------------------------------------------- */

static void test_common(void **state)
{
    (void)state;
    VAL_STR(memra_strerror((memra_status_t)12345), "unknown status");
    VAL_STR(memra_strerror((memra_status_t)INT32_MIN), "unknown status");
    VAL_STR(memra_status_name((memra_status_t)12345), "UNKNOWN");
    VAL_STR(memra_status_name((memra_status_t)1), "UNKNOWN");
    NOOP(memra_log_set(NULL, NULL, (memra_log_level_t)99));
    NOOP(memra_log_set(NULL, NULL, (memra_log_level_t)-1));
    NOOP(memra_log_stderr((memra_log_level_t)99, "bad-args: level out of range", NULL));
    NOOP(memra_log_stderr(MEMRA_LOG_DEBUG, NULL, NULL));
    /* no arguments: they answer */
    assert_non_null(memra_last_error());
    assert_non_null(memra_version());
    assert_true(memra_version_number() > 0);
    assert_true(memra_cuda_device_count() >= 0);
    SWEEP_END();
}

/* ---- engine.h ----------------------------------------------------------- */

static void test_engine(void **state)
{
    (void)state;
    memra_engine_params_t p;
    NOOP(memra_engine_params_init(NULL, sizeof p));
    memra_engine_default_params(&p);
    NOOP(memra_engine_params_init(&p, 0));
    assert_int_equal(p.size, sizeof p); /* size 0 writes nothing */

    ERR(memra_engine_params_set_device(NULL, "cpu"));
    ERR(memra_engine_params_set_device(&p, NULL));
    ERR(memra_engine_params_set_device(&p, ""));
    ERR(memra_engine_params_set_device(&p, "cuda:-1"));
    ERR(memra_engine_params_set_device(&p, "cuda:2147483648"));
    ERR(memra_engine_params_set_device(&p, "cuda:99999999999999999999"));
    ERR(memra_engine_params_set_device(&p, "cuda:"));

    memra_engine_t *e = (memra_engine_t *)(uintptr_t)1;
    memra_engine_default_params(&p);
    ERR(memra_engine_create(&p, NULL));
    p.size = 0;
    ERR(memra_engine_create(&p, &e));
    assert_null(e);
    memra_engine_default_params(&p);
    p.backend = -1;
    ERR(memra_engine_create(&p, &e));
    p.backend = INT32_MAX;
    ERR(memra_engine_create(&p, &e));
    memra_engine_default_params(&p);
    p.n_threads = -1;
    ERR(memra_engine_create(&p, &e));
    p.n_threads = INT32_MAX;
    ERR(memra_engine_create(&p, &e));
    memra_engine_default_params(&p);
    p.backend = MEMRA_BACKEND_CUDA;
    p.device = -1;
    ERR(memra_engine_create(&p, &e));
    p.device = INT32_MAX;
    ERR(memra_engine_create(&p, &e));
    assert_null(e);

    NOOP_OK(memra_engine_destroy(NULL));

    e = cpu_engine();
    memra_engine_info_t info;
    info.size = sizeof info;
    ERR(memra_engine_get_info(NULL, &info));
    ERR(memra_engine_get_info(e, NULL));
    info.size = 0;
    ERR(memra_engine_get_info(e, &info));
    info.size = 2;
    ERR(memra_engine_get_info(e, &info));

    double bw = 0;
    ERR(memra_engine_copy_bandwidth(NULL, 4096, 1, &bw));
    ERR(memra_engine_copy_bandwidth(e, 4096, 1, NULL));
    ERR(memra_engine_copy_bandwidth(e, 0, 1, &bw));
    ERR(memra_engine_copy_bandwidth(e, 4096, 0, &bw));
    ERR(memra_engine_copy_bandwidth(e, 4096, -1, &bw));
    ERR(memra_engine_copy_bandwidth(e, 4096, INT32_MIN, &bw));
    ERR_IS(memra_engine_copy_bandwidth(e, SIZE_MAX, 1, &bw), MEMRA_E_RANGE);
    ERR_IS(memra_engine_copy_bandwidth(e, SIZE_MAX / 2 + 1, 1, &bw), MEMRA_E_RANGE);

    VAL_NULL(memra_engine_host_alloc(NULL, 64));
    VAL_NULL(memra_engine_host_alloc(e, 0));
    VAL_NULL(memra_engine_host_alloc(e, SIZE_MAX));
    VAL_NULL(memra_engine_host_alloc(e, SIZE_MAX - 8));
    NOOP(memra_host_free(NULL));
    VAL_STR(memra_engine_last_error(NULL), "");

    /* the engine still works */
    info.size = sizeof info;
    assert_int_equal(memra_engine_get_info(e, &info), MEMRA_OK);
    assert_int_equal(memra_engine_copy_bandwidth(e, 1 << 16, 2, &bw), MEMRA_OK);
    assert_true(bw > 0);
    void *h = memra_engine_host_alloc(e, 64);
    assert_non_null(h);
    memra_host_free(h);
    assert_int_equal(memra_engine_destroy(e), MEMRA_OK);
    SWEEP_END();
}

/* ---- model.h, pipeline.h ---------------------------------------------------- */

static void test_model(void **state)
{
    (void)state;
    NEED_MODEL(path);
    memra_model_params_t mp;
    NOOP(memra_model_params_init(NULL, sizeof mp));
    memra_model_default_params(&mp);
    NOOP(memra_model_params_init(&mp, 0));
    assert_int_equal(mp.size, sizeof mp);

    memra_model_t *bm = (memra_model_t *)(uintptr_t)1;
    ERR(memra_model_load(NULL, NULL, &bm));
    assert_null(bm);
    ERR(memra_model_load(path, NULL, NULL));
    ERR(memra_model_load("", NULL, &bm));
    ERR(memra_model_load("/", NULL, &bm));
    mp.size = 0;
    ERR(memra_model_load(path, &mp, &bm));
    memra_model_default_params(&mp);
    mp.n_layers = -1;
    ERR(memra_model_load(path, &mp, &bm));
    mp.n_layers = INT32_MAX;
    ERR(memra_model_load(path, &mp, &bm));
    memra_model_default_params(&mp);
    mp.prefill_chunk = -1;
    ERR(memra_model_load(path, &mp, &bm));
    mp.prefill_chunk = INT32_MAX;
    ERR(memra_model_load(path, &mp, &bm));
    memra_model_default_params(&mp);
    mp.n_stages = -1;
    ERR(memra_model_load(path, &mp, &bm));
    mp.n_stages = INT32_MAX;
    ERR(memra_model_load(path, &mp, &bm));
    mp.n_stages = MEMRA_MAX_PP_STAGES + 1;
    ERR(memra_model_load(path, &mp, &bm));
    memra_model_default_params(&mp);
    mp.shard = 7;
    ERR(memra_model_load(path, &mp, &bm));
    memra_model_default_params(&mp);
    mp.streams = INT32_MAX;
    ERR(memra_model_load(path, &mp, &bm));
    memra_model_default_params(&mp);
    mp.overlap = -2;
    ERR(memra_model_load(path, &mp, &bm));
    memra_model_default_params(&mp);
    mp.share_device = INT32_MIN;
    ERR(memra_model_load(path, &mp, &bm));
    memra_model_default_params(&mp);
    mp.n_stages = 2;
    mp.splits[0] = -1;
    ERR(memra_model_load(path, &mp, &bm));
    mp.splits[0] = INT32_MAX;
    ERR(memra_model_load(path, &mp, &bm));
    memra_model_default_params(&mp);
    mp.n_stages = 2;
    mp.devices = "cpu,,cpu";
    ERR(memra_model_load(path, &mp, &bm));
    assert_null(bm);
    NOOP_OK(memra_model_free(NULL));

    memra_engine_t *e = cpu_engine();
    memra_model_t *m = load_on(path, e);
    const int32_t nv = memra_model_n_vocab(m), nl = memra_model_n_layers(m);

    VAL_NULL(memra_model_arch(NULL));
    VAL(memra_model_n_layers(NULL), 0);
    VAL(memra_model_n_vocab(NULL), 0);
    VAL(memra_model_n_embd(NULL), 0);
    VAL(memra_model_n_ctx_train(NULL), 0);
    VAL(memra_model_n_mtp_layers(NULL), 0);
    VAL(memra_model_weight_bytes(NULL), 0);
    VAL(memra_model_layer_kind(NULL, 0), -1);
    VAL(memra_model_layer_kind(m, -1), -1);
    VAL(memra_model_layer_kind(m, nl), -1);
    VAL(memra_model_layer_kind(m, INT32_MAX), -1);
    VAL(memra_model_layer_kind(m, INT32_MIN), -1);
    VAL_NULL(memra_model_gguf(NULL));
    VAL_NULL(memra_model_tokenizer(NULL));
    VAL_STR(memra_model_last_error(NULL), "");

    memra_cache_t *c = (memra_cache_t *)(uintptr_t)1;
    ERR(memra_cache_create(NULL, 8, &c));
    assert_null(c);
    ERR(memra_cache_create(m, 8, NULL));
    ERR(memra_cache_create(m, -1, &c));
    ERR(memra_cache_create(m, INT32_MIN, &c));
    ERR(memra_cache_create(m, INT32_MAX, &c));
    assert_null(c);
    NOOP_OK(memra_cache_free(NULL));
    VAL(memra_cache_pos(NULL), 0);
    VAL(memra_cache_capacity(NULL), 0);
    VAL(memra_cache_type_k(NULL), MEMRA_TYPE_COUNT);
    VAL(memra_cache_type_v(NULL), MEMRA_TYPE_COUNT);
    VAL(memra_cache_kv_bytes_per_token(NULL), 0);
    ERR(memra_cache_clear(NULL));

    /* memra_cache_create_ex: NULLs, an unsized struct, sizes and types out
     * of range; *out NULL after each, the model still usable */
    memra_cache_params_t cp;
    memra_cache_default_params(&cp);
    c = (memra_cache_t *)(uintptr_t)1;
    ERR_IS(memra_cache_create_ex(m, NULL, &c), MEMRA_E_INVALID);
    assert_null(c);
    ERR_IS(memra_cache_create_ex(NULL, &cp, &c), MEMRA_E_INVALID);
    ERR_IS(memra_cache_create_ex(m, &cp, NULL), MEMRA_E_INVALID);
    memra_cache_params_t unsized = cp;
    unsized.size = 0;
    ERR_IS(memra_cache_create_ex(m, &unsized, &c), MEMRA_E_INVALID);
    memra_cache_params_t badp = cp;
    badp.n_ctx = -1;
    ERR_IS(memra_cache_create_ex(m, &badp, &c), MEMRA_E_INVALID);
    badp.n_ctx = INT32_MAX;
    ERR_IS(memra_cache_create_ex(m, &badp, &c), MEMRA_E_NOMEM);
    const memra_type_t not_kv[] = {MEMRA_TYPE_Q4_0, MEMRA_TYPE_Q4_K, MEMRA_TYPE_I32, MEMRA_TYPE_COUNT, (memra_type_t)-1,
                                   (memra_type_t)INT32_MAX};
    for (size_t i = 0; i < sizeof not_kv / sizeof *not_kv; i++) {
        badp = cp;
        badp.type_k = not_kv[i];
        ERR_IS(memra_cache_create_ex(m, &badp, &c), MEMRA_E_UNSUPPORTED);
        if (not_kv[i] == MEMRA_TYPE_Q4_0) /* V rows only (below) */
            continue;
        badp = cp;
        badp.type_v = not_kv[i];
        ERR_IS(memra_cache_create_ex(m, &badp, &c), MEMRA_E_UNSUPPORTED);
    }
    assert_null(c);
    /* q4_0 V rows: taken where the KV heads are whole blocks of 32 */
    badp = cp;
    badp.n_ctx = 8;
    badp.type_k = MEMRA_TYPE_Q8_0;
    badp.type_v = MEMRA_TYPE_Q4_0;
    memra_status_t q4 = memra_cache_create_ex(m, &badp, &c);
    if (q4 == MEMRA_OK) {
        assert_int_equal(memra_cache_type_v(c), MEMRA_TYPE_Q4_0);
        assert_int_equal(memra_cache_free(c), MEMRA_OK);
        c = NULL;
    } else {
        assert_int_equal(q4, MEMRA_E_UNSUPPORTED);
        assert_non_null(strstr(memra_last_error(), "multiple of 32"));
        assert_null(c);
    }
    /* an older caller's struct of just size and n_ctx: default types */
    struct {
        uint32_t size;
        int32_t n_ctx;
    } old_p = {sizeof old_p, 8};
    assert_int_equal(memra_cache_create_ex(m, (const memra_cache_params_t *)&old_p, &c), MEMRA_OK);
    assert_int_equal(memra_cache_type_k(c), MEMRA_TYPE_F16);
    assert_int_equal(memra_cache_type_v(c), MEMRA_TYPE_F16);
    assert_int_equal(memra_cache_capacity(c), 8);
    assert_true(memra_cache_kv_bytes_per_token(c) > 0);
    assert_int_equal(memra_cache_free(c), MEMRA_OK);

    assert_int_equal(memra_cache_create(m, 16, &c), MEMRA_OK);
    memra_cache_snapshot_t *snap = (memra_cache_snapshot_t *)(uintptr_t)1;
    ERR(memra_cache_snapshot(NULL, &snap));
    assert_null(snap);
    ERR(memra_cache_snapshot(c, NULL));
    assert_int_equal(memra_cache_snapshot(c, &snap), MEMRA_OK);
    ERR(memra_cache_restore(NULL, snap));
    ERR(memra_cache_restore(c, NULL));
    NOOP(memra_cache_snapshot_free(NULL));

    float *logits = malloc((size_t)nv * sizeof *logits);
    assert_non_null(logits);
    int32_t toks[4] = {1, 2, 3, 4};
    int32_t neg[2] = {1, -1}, big[2] = {1, INT32_MAX}, low[2] = {INT32_MIN, 1}, over[2] = {1, 0};
    over[1] = nv;
    ERR(memra_forward(NULL, c, toks, 2, 0, logits));
    ERR(memra_forward(m, NULL, toks, 2, 0, logits));
    ERR(memra_forward(m, c, NULL, 2, 0, logits));
    ERR(memra_forward(m, c, toks, 0, 0, logits));
    ERR(memra_forward(m, c, toks, -1, 0, logits));
    ERR(memra_forward(m, c, toks, INT32_MIN, 0, logits));
    ERR(memra_forward(m, c, toks, INT32_MAX, 0, logits)); /* beyond the capacity: refused before reading */
    ERR(memra_forward(m, c, toks, 2, 0xffffffffu, logits));
    ERR(memra_forward(m, c, neg, 2, 0, logits));
    ERR(memra_forward(m, c, big, 2, 0, logits));
    ERR(memra_forward(m, c, low, 2, 0, logits));
    ERR(memra_forward(m, c, over, 2, 0, logits));
    ERR(memra_forward(m, c, over, 2, MEMRA_FORWARD_ALL_ROWS, logits));

    ERR(memra_decode_step(NULL, c, 1, logits));
    ERR(memra_decode_step(m, NULL, 1, logits));
    ERR(memra_decode_step(m, c, -1, logits));
    ERR(memra_decode_step(m, c, nv, logits));
    ERR(memra_decode_step(m, c, INT32_MAX, logits));
    ERR(memra_decode_step(m, c, INT32_MIN, logits));
    assert_int_equal(memra_cache_pos(c), 0);

    VAL(memra_model_n_stages(NULL), 0);
    memra_stage_info_t si;
    si.size = sizeof si;
    ERR(memra_model_stage_info(NULL, 0, &si));
    ERR(memra_model_stage_info(m, 0, NULL));
    ERR(memra_model_stage_info(m, -1, &si));
    ERR(memra_model_stage_info(m, 1, &si));
    ERR(memra_model_stage_info(m, INT32_MAX, &si));
    ERR(memra_model_stage_info(m, INT32_MIN, &si));
    si.size = 0;
    ERR(memra_model_stage_info(m, 0, &si));
    si.size = 3;
    ERR(memra_model_stage_info(m, 0, &si));
    memra_pipeline_info_t pi;
    pi.size = sizeof pi;
    ERR(memra_model_pipeline_info(NULL, &pi));
    ERR(memra_model_pipeline_info(m, NULL));
    pi.size = 0;
    ERR(memra_model_pipeline_info(m, &pi));
    pi.size = 3;
    ERR(memra_model_pipeline_info(m, &pi));

    memra_pending_t *pend = (memra_pending_t *)(uintptr_t)1;
    ERR(memra_decode_step_deferred(NULL, c, 1, &pend));
    assert_null(pend);
    ERR(memra_decode_step_deferred(m, NULL, 1, &pend));
    ERR(memra_decode_step_deferred(m, c, 1, NULL));
    ERR(memra_decode_step_deferred(m, c, -1, &pend));
    ERR(memra_decode_step_deferred(m, c, nv, &pend));
    ERR(memra_decode_step_deferred(m, c, INT32_MAX, &pend));
    ERR(memra_decode_step_deferred(m, c, INT32_MIN, &pend));
    assert_null(pend);
    memra_pending_t *bp[2] = {pend, pend};
    const int32_t one = 1, bad_tok = -1;
    memra_batch_item_t bi[2] = {{.cache = c, .tokens = &one, .n_tokens = 1},
                                {.cache = c, .tokens = &one, .n_tokens = 1}};
    ERR(memra_forward_batch_deferred(NULL, bi, 1, 0, bp));
    ERR(memra_forward_batch_deferred(m, NULL, 1, 0, bp));
    ERR(memra_forward_batch_deferred(m, bi, 1, 0, NULL));
    ERR(memra_forward_batch_deferred(m, bi, 0, 0, bp));
    ERR(memra_forward_batch_deferred(m, bi, -1, 0, bp));
    ERR(memra_forward_batch_deferred(m, bi, INT32_MAX, 0, bp));
    ERR(memra_forward_batch_deferred(m, bi, 1, 1, bp));
    ERR(memra_forward_batch_deferred(m, bi, 2, 0, bp)); /* one cache twice */
    bi[0].tokens = &bad_tok;
    ERR(memra_forward_batch_deferred(m, bi, 1, 0, bp));
    bi[0].tokens = NULL;
    ERR(memra_forward_batch_deferred(m, bi, 1, 0, bp));
    bi[0] = (memra_batch_item_t){.cache = c, .tokens = &one, .n_tokens = 0};
    ERR(memra_forward_batch_deferred(m, bi, 1, 0, bp));
    bi[0].n_tokens = INT32_MAX;
    ERR(memra_forward_batch_deferred(m, bi, 1, 0, bp));
    bi[0] = (memra_batch_item_t){.cache = c, .tokens = &one, .n_tokens = 1, .logits = logits};
    ERR(memra_forward_batch_deferred(m, bi, 1, 0, bp));
    assert_null(bp[0]);
    assert_null(bp[1]);
    ERR(memra_pending_poll(NULL));
    ERR(memra_pending_wait(NULL, logits));
    NOOP_OK(memra_pending_free(NULL));
    assert_int_equal(memra_cache_pos(c), 0);

    /* everything still works: the snapshot restores, a forward and a
     * deferred step succeed and agree with a plain step */
    assert_int_equal(memra_forward(m, c, toks, 3, 0, NULL), MEMRA_OK);
    assert_int_equal(memra_cache_restore(c, snap), MEMRA_OK);
    assert_int_equal(memra_cache_pos(c), 0);
    assert_int_equal(memra_forward(m, c, toks, 3, 0, logits), MEMRA_OK);
    float *row = malloc((size_t)nv * sizeof *row);
    assert_non_null(row);
    assert_int_equal(memra_cache_clear(c), MEMRA_OK);
    assert_int_equal(memra_forward(m, c, toks, 2, 0, NULL), MEMRA_OK);
    assert_int_equal(memra_decode_step_deferred(m, c, toks[2], &pend), MEMRA_OK);
    assert_int_equal(memra_pending_wait(pend, row), MEMRA_OK);
    assert_memory_equal(logits, row, (size_t)nv * sizeof *row);
    assert_int_equal(memra_model_stage_info(m, 0, &(memra_stage_info_t){.size = sizeof si}), MEMRA_OK);
    assert_int_equal(memra_model_pipeline_info(m, &(memra_pipeline_info_t){.size = sizeof pi}), MEMRA_OK);
    free(row);
    free(logits);
    memra_cache_snapshot_free(snap);
    assert_int_equal(memra_cache_free(c), MEMRA_OK);
    assert_int_equal(memra_model_free(m), MEMRA_OK);
    assert_int_equal(memra_engine_destroy(e), MEMRA_OK);
    SWEEP_END();
}

/* ---- gguf.h: types and reader ------------------------------------------------ */

static void test_gguf_reader(void **state)
{
    (void)state;
    NEED_MODEL(path);
    VAL_NULL(memra_type_name((memra_type_t)-1));
    VAL_NULL(memra_type_name((memra_type_t)4)); /* a gap in the ids */
    VAL_NULL(memra_type_name(MEMRA_TYPE_COUNT));
    VAL_NULL(memra_type_name((memra_type_t)INT32_MAX));
    VAL(memra_type_block_size((memra_type_t)-1), 0);
    VAL(memra_type_block_size((memra_type_t)4), 0);
    VAL(memra_type_block_size(MEMRA_TYPE_COUNT), 0);
    VAL(memra_type_block_size((memra_type_t)INT32_MAX), 0);
    VAL(memra_type_block_bytes((memra_type_t)-1), 0);
    VAL(memra_type_block_bytes((memra_type_t)4), 0);
    VAL(memra_type_block_bytes(MEMRA_TYPE_COUNT), 0);
    VAL(memra_type_block_bytes((memra_type_t)INT32_MAX), 0);
    VAL_NULL(memra_gguf_type_name((memra_gguf_type_t)-1));
    VAL_NULL(memra_gguf_type_name(MEMRA_GGUF_TYPE_COUNT));
    VAL_NULL(memra_gguf_type_name((memra_gguf_type_t)INT32_MAX));

    memra_gguf_t *g = (memra_gguf_t *)(uintptr_t)1;
    ERR(memra_gguf_open(NULL, &g));
    assert_null(g);
    ERR(memra_gguf_open(path, NULL));
    ERR(memra_gguf_open("", &g));
    ERR(memra_gguf_open("/", &g)); /* a directory */
    size_t size = 0;
    void *bytes = tu_read_file(path, &size);
    assert_non_null(bytes);
    ERR(memra_gguf_open_memory(NULL, size, &g));
    ERR(memra_gguf_open_memory(NULL, 0, &g));
    ERR(memra_gguf_open_memory(bytes, 0, &g));
    ERR(memra_gguf_open_memory(bytes, 3, &g));
    ERR(memra_gguf_open_memory(bytes, size, NULL));
    assert_null(g);
    NOOP(memra_gguf_close(NULL));

    assert_int_equal(memra_gguf_open_memory(bytes, size, &g), MEMRA_OK);
    const int64_t nkv = memra_gguf_n_kv(g), nt = memra_gguf_n_tensors(g);
    const int64_t k_str = memra_gguf_find_kv(g, "general.architecture");
    const int64_t k_arr = memra_gguf_find_kv(g, "tokenizer.ggml.tokens"); /* string array */
    const int64_t k_num = memra_gguf_find_kv(g, "tokenizer.ggml.token_type"); /* int32 array */
    assert_true(k_str >= 0 && k_arr >= 0 && k_num >= 0);
    const uint64_t n_arr = memra_gguf_arr_n(g, k_arr);

    VAL(memra_gguf_version(NULL), 0);
    VAL(memra_gguf_alignment(NULL), 0);
    VAL(memra_gguf_n_shards(NULL), 0);
    VAL(memra_gguf_n_kv(NULL), 0);
    VAL(memra_gguf_find_kv(NULL, "general.architecture"), -1);
    VAL(memra_gguf_find_kv(g, NULL), -1);
    VAL(memra_gguf_find_kv(g, ""), -1);
    const int64_t bad_i[] = {-1, INT64_MIN, INT64_MAX, 0};
    for (int k = 0; k < 4; k++) {
        const int64_t i = k == 3 ? nkv : bad_i[k];
        VAL_NULL(memra_gguf_kv_key(g, i));
        VAL(memra_gguf_kv_type(g, i), MEMRA_GGUF_TYPE_COUNT);
        VAL(memra_gguf_arr_type(g, i), MEMRA_GGUF_TYPE_COUNT);
        VAL(memra_gguf_arr_n(g, i), 0);
        VAL_NULL(memra_gguf_arr_data(g, i));
        uint64_t u;
        int64_t s;
        double d;
        int b;
        const char *str;
        size_t len;
        ERR(memra_gguf_kv_u64(g, i, &u));
        ERR(memra_gguf_kv_i64(g, i, &s));
        ERR(memra_gguf_kv_f64(g, i, &d));
        ERR(memra_gguf_kv_bool(g, i, &b));
        ERR(memra_gguf_kv_str(g, i, &str, &len));
        ERR(memra_gguf_arr_u64(g, i, 0, &u));
        ERR(memra_gguf_arr_i64(g, i, 0, &s));
        ERR(memra_gguf_arr_f64(g, i, 0, &d));
        ERR(memra_gguf_arr_str(g, i, 0, &str, &len));
    }
    VAL_NULL(memra_gguf_kv_key(NULL, 0));
    VAL(memra_gguf_kv_type(NULL, 0), MEMRA_GGUF_TYPE_COUNT);
    VAL(memra_gguf_arr_type(NULL, k_arr), MEMRA_GGUF_TYPE_COUNT);
    VAL(memra_gguf_arr_type(g, k_str), MEMRA_GGUF_TYPE_COUNT); /* not an array */
    VAL(memra_gguf_arr_n(NULL, k_arr), 0);
    VAL(memra_gguf_arr_n(g, k_str), 0);
    VAL_NULL(memra_gguf_arr_data(NULL, k_num));
    VAL_NULL(memra_gguf_arr_data(g, k_arr)); /* strings */
    VAL_NULL(memra_gguf_arr_data(g, k_str));

    uint64_t u;
    int64_t s;
    double d;
    int b;
    const char *str;
    size_t len;
    ERR(memra_gguf_kv_u64(NULL, k_str, &u));
    ERR(memra_gguf_kv_u64(g, k_str, NULL));
    ERR(memra_gguf_kv_u64(g, k_str, &u)); /* a string */
    ERR(memra_gguf_kv_i64(NULL, k_str, &s));
    ERR(memra_gguf_kv_i64(g, k_str, NULL));
    ERR(memra_gguf_kv_i64(g, k_str, &s));
    ERR(memra_gguf_kv_f64(NULL, k_str, &d));
    ERR(memra_gguf_kv_f64(g, k_str, NULL));
    ERR(memra_gguf_kv_f64(g, k_str, &d));
    ERR(memra_gguf_kv_bool(NULL, k_str, &b));
    ERR(memra_gguf_kv_bool(g, k_str, NULL));
    ERR(memra_gguf_kv_bool(g, k_str, &b));
    ERR(memra_gguf_kv_str(NULL, k_str, &str, &len));
    ERR(memra_gguf_kv_str(g, k_str, NULL, &len));
    ERR(memra_gguf_kv_str(g, k_arr, &str, &len)); /* an array */
    ERR(memra_gguf_kv_u64(g, k_arr, &u));
    const uint64_t bad_j[] = {n_arr, UINT64_MAX, (uint64_t)INT64_MAX + 1};
    for (int k = 0; k < 3; k++) {
        ERR(memra_gguf_arr_str(g, k_arr, bad_j[k], &str, &len));
        ERR(memra_gguf_arr_u64(g, k_num, bad_j[k], &u));
        ERR(memra_gguf_arr_i64(g, k_num, bad_j[k], &s));
        ERR(memra_gguf_arr_f64(g, k_num, bad_j[k], &d));
    }
    ERR(memra_gguf_arr_u64(NULL, k_num, 0, &u));
    ERR(memra_gguf_arr_u64(g, k_num, 0, NULL));
    ERR(memra_gguf_arr_u64(g, k_arr, 0, &u)); /* string elements */
    ERR(memra_gguf_arr_u64(g, k_str, 0, &u)); /* not an array */
    ERR(memra_gguf_arr_i64(NULL, k_num, 0, &s));
    ERR(memra_gguf_arr_i64(g, k_num, 0, NULL));
    ERR(memra_gguf_arr_i64(g, k_arr, 0, &s));
    ERR(memra_gguf_arr_f64(NULL, k_num, 0, &d));
    ERR(memra_gguf_arr_f64(g, k_num, 0, NULL));
    ERR(memra_gguf_arr_f64(g, k_num, 0, &d)); /* integers are not floats */
    ERR(memra_gguf_arr_str(NULL, k_arr, 0, &str, &len));
    ERR(memra_gguf_arr_str(g, k_arr, 0, NULL, &len));
    ERR(memra_gguf_arr_str(g, k_num, 0, &str, &len));

    VAL(memra_gguf_n_tensors(NULL), 0);
    VAL(memra_gguf_find_tensor(NULL, "token_embd.weight"), -1);
    VAL(memra_gguf_find_tensor(g, NULL), -1);
    VAL(memra_gguf_find_tensor(g, ""), -1);
    int64_t ne[4];
    for (int k = 0; k < 5; k++) {
        const memra_gguf_t *gh = k == 4 ? NULL : g;
        const int64_t i = k == 3 ? nt : k == 4 ? 0 : bad_i[k];
        VAL_NULL(memra_gguf_tensor_name(gh, i));
        VAL(memra_gguf_tensor_type(gh, i), MEMRA_TYPE_COUNT);
        VAL(memra_gguf_tensor_shape(gh, i, ne), 0);
        VAL(memra_gguf_tensor_offset(gh, i), 0);
        VAL(memra_gguf_tensor_nbytes(gh, i), 0);
        VAL(memra_gguf_tensor_shard(gh, i), 0);
        VAL_NULL(memra_gguf_tensor_data(gh, i));
    }
    VAL(memra_gguf_tensor_shape(g, -1, NULL), 0);

    /* the handle still reads */
    assert_int_equal(memra_gguf_kv_str(g, k_str, &str, &len), MEMRA_OK);
    assert_string_equal(str, "qwen3");
    assert_int_equal(memra_gguf_kv_str(g, k_str, &str, NULL), MEMRA_OK);
    assert_int_equal(memra_gguf_arr_str(g, k_arr, n_arr - 1, &str, &len), MEMRA_OK);
    assert_int_equal(memra_gguf_arr_i64(g, k_num, 0, &s), MEMRA_OK);
    assert_true(memra_gguf_tensor_shape(g, 0, NULL) >= 1);
    assert_non_null(memra_gguf_tensor_data(g, nt - 1));
    memra_gguf_close(g);
    free(bytes);
    SWEEP_END();
}

/* ---- gguf.h: writer ------------------------------------------------------------ */

static memra_status_t fill_fails(void *user, int64_t index, const char *name, void *dst, size_t nbytes)
{
    (void)user, (void)index, (void)name, (void)dst, (void)nbytes;
    return MEMRA_E_IO;
}

static memra_status_t fill_positive(void *user, int64_t index, const char *name, void *dst, size_t nbytes)
{
    (void)user, (void)index, (void)name, (void)dst, (void)nbytes;
    return (memra_status_t)7;
}

static void test_gguf_writer(void **state)
{
    (void)state;
    memra_gguf_writer_t *w = NULL;
    ERR(memra_gguf_writer_create(NULL));
    NOOP(memra_gguf_writer_destroy(NULL));
    ERR(memra_gguf_writer_set_version(NULL, 3));
    ERR(memra_gguf_writer_set_alignment(NULL, 32));
    NOOP(memra_gguf_writer_set_fill(NULL, fill_fails, NULL));
    assert_int_equal(memra_gguf_writer_create(&w), MEMRA_OK);
    ERR(memra_gguf_writer_set_alignment(w, 0));
    ERR(memra_gguf_writer_set_alignment(w, 3));
    ERR(memra_gguf_writer_set_alignment(w, 48));
    ERR(memra_gguf_writer_set_alignment(w, UINT32_MAX));

    const uint32_t v32 = 7;
    ERR(memra_gguf_writer_add_scalar(NULL, "k", MEMRA_GGUF_UINT32, &v32));
    ERR(memra_gguf_writer_add_scalar(w, NULL, MEMRA_GGUF_UINT32, &v32));
    ERR(memra_gguf_writer_add_scalar(w, "k", MEMRA_GGUF_UINT32, NULL));
    ERR(memra_gguf_writer_add_scalar(w, "k", (memra_gguf_type_t)-1, &v32));
    ERR(memra_gguf_writer_add_scalar(w, "k", MEMRA_GGUF_TYPE_COUNT, &v32));
    ERR(memra_gguf_writer_add_scalar(w, "k", (memra_gguf_type_t)INT32_MAX, &v32));
    ERR(memra_gguf_writer_add_scalar(w, "k", MEMRA_GGUF_ARRAY, &v32));
    ERR(memra_gguf_writer_add_scalar(w, "k", MEMRA_GGUF_STRING, &v32));
    ERR(memra_gguf_writer_add_u32(NULL, "k", 1));
    ERR(memra_gguf_writer_add_u32(w, NULL, 1));
    ERR(memra_gguf_writer_add_i32(NULL, "k", 1));
    ERR(memra_gguf_writer_add_i32(w, NULL, 1));
    ERR(memra_gguf_writer_add_f32(NULL, "k", 1));
    ERR(memra_gguf_writer_add_f32(w, NULL, 1));
    ERR(memra_gguf_writer_add_bool(NULL, "k", 1));
    ERR(memra_gguf_writer_add_bool(w, NULL, 1));
    ERR(memra_gguf_writer_add_str(NULL, "k", "v"));
    ERR(memra_gguf_writer_add_str(w, NULL, "v"));
    ERR(memra_gguf_writer_add_str(w, "k", NULL));

    const uint8_t arr[4] = {1, 2, 3, 4};
    ERR(memra_gguf_writer_add_array(NULL, "a", MEMRA_GGUF_UINT8, arr, 4));
    ERR(memra_gguf_writer_add_array(w, NULL, MEMRA_GGUF_UINT8, arr, 4));
    ERR(memra_gguf_writer_add_array(w, "a", MEMRA_GGUF_UINT8, NULL, 4));
    ERR(memra_gguf_writer_add_array(w, "a", (memra_gguf_type_t)-1, arr, 4));
    ERR(memra_gguf_writer_add_array(w, "a", MEMRA_GGUF_TYPE_COUNT, arr, 4));
    ERR(memra_gguf_writer_add_array(w, "a", MEMRA_GGUF_ARRAY, arr, 1));
    ERR(memra_gguf_writer_add_array(w, "a", MEMRA_GGUF_STRING, arr, 1));
    ERR(memra_gguf_writer_add_array(w, "a", MEMRA_GGUF_UINT8, arr, UINT64_MAX));
    ERR(memra_gguf_writer_add_array(w, "a", MEMRA_GGUF_UINT64, arr, (uint64_t)1 << 61));
    ERR(memra_gguf_writer_add_array(w, "a", MEMRA_GGUF_UINT8, arr, ((uint64_t)1 << 48) + 1));

    const char *strs[3] = {"x", NULL, "z"};
    const size_t lens[3] = {1, 1, 1};
    ERR(memra_gguf_writer_add_str_array(NULL, "s", strs, NULL, 1));
    ERR(memra_gguf_writer_add_str_array(w, NULL, strs, NULL, 1));
    ERR(memra_gguf_writer_add_str_array(w, "s", NULL, NULL, 1));
    ERR(memra_gguf_writer_add_str_array(w, "s", NULL, lens, 3));
    ERR(memra_gguf_writer_add_str_array(w, "s", strs, NULL, 3));
    ERR(memra_gguf_writer_add_str_array(w, "s", strs, lens, 3));

    const int64_t ne[4] = {4, 2, 1, 1};
    const float data[8] = {0};
    const int64_t ne_neg[2] = {4, -1}, ne_zero[2] = {4, 0}, ne_huge[4] = {INT64_MAX, INT64_MAX, 2, 2};
    const int64_t ne_q[1] = {31}; /* not a whole Q8_0 block */
    ERR(memra_gguf_writer_add_tensor(NULL, "t", MEMRA_TYPE_F32, 2, ne, data));
    ERR(memra_gguf_writer_add_tensor(w, NULL, MEMRA_TYPE_F32, 2, ne, data));
    ERR(memra_gguf_writer_add_tensor(w, "t", MEMRA_TYPE_F32, 2, NULL, data));
    ERR(memra_gguf_writer_add_tensor(w, "t", (memra_type_t)-1, 2, ne, data));
    ERR(memra_gguf_writer_add_tensor(w, "t", (memra_type_t)4, 2, ne, data));
    ERR(memra_gguf_writer_add_tensor(w, "t", MEMRA_TYPE_COUNT, 2, ne, data));
    ERR(memra_gguf_writer_add_tensor(w, "t", (memra_type_t)INT32_MAX, 2, ne, data));
    ERR(memra_gguf_writer_add_tensor(w, "t", MEMRA_TYPE_F32, 0, ne, data));
    ERR(memra_gguf_writer_add_tensor(w, "t", MEMRA_TYPE_F32, 5, ne, data));
    ERR(memra_gguf_writer_add_tensor(w, "t", MEMRA_TYPE_F32, UINT32_MAX, ne, data));
    ERR(memra_gguf_writer_add_tensor(w, "t", MEMRA_TYPE_F32, 2, ne_neg, data));
    ERR(memra_gguf_writer_add_tensor(w, "t", MEMRA_TYPE_F32, 4, ne_huge, data));
    ERR(memra_gguf_writer_add_tensor(w, "t", MEMRA_TYPE_Q8_0, 1, ne_q, data));
    (void)ne_zero;

    ERR(memra_gguf_writer_write(NULL, "/tmp/never-written.gguf"));
    ERR(memra_gguf_writer_write(w, NULL));
    ERR(memra_gguf_writer_write(w, ""));
    ERR(memra_gguf_writer_write(w, "/"));
    void *out = NULL;
    size_t out_size = 0;
    ERR(memra_gguf_writer_write_memory(NULL, &out, &out_size));
    ERR(memra_gguf_writer_write_memory(w, NULL, &out_size));
    ERR(memra_gguf_writer_write_memory(w, &out, NULL));
    assert_null(out);
    NOOP(memra_free(NULL));

    /* a fill callback's failure fails the write with a message */
    memra_gguf_writer_t *wf = NULL;
    assert_int_equal(memra_gguf_writer_create(&wf), MEMRA_OK);
    assert_int_equal(memra_gguf_writer_add_tensor(wf, "t", MEMRA_TYPE_F32, 2, ne, NULL), MEMRA_OK);
    memra_gguf_writer_set_fill(wf, fill_fails, NULL);
    ERR_IS(memra_gguf_writer_write_memory(wf, &out, &out_size), MEMRA_E_IO);
    memra_gguf_writer_set_fill(wf, fill_positive, NULL);
    ERR_IS(memra_gguf_writer_write_memory(wf, &out, &out_size), MEMRA_E_INVALID);
    memra_gguf_writer_set_fill(wf, NULL, NULL);
    ERR(memra_gguf_writer_write_memory(wf, &out, &out_size)); /* no data and no callback */
    assert_null(out);
    memra_gguf_writer_destroy(wf);

    /* the writer still works: what it wrote reads back */
    assert_int_equal(memra_gguf_writer_add_u32(w, "k.u32", 5), MEMRA_OK);
    assert_int_equal(memra_gguf_writer_add_str_array(w, "k.s", strs, lens, 1), MEMRA_OK);
    assert_int_equal(memra_gguf_writer_add_array(w, "k.a", MEMRA_GGUF_UINT8, arr, 4), MEMRA_OK);
    assert_int_equal(memra_gguf_writer_add_tensor(w, "t", MEMRA_TYPE_F32, 2, ne, data), MEMRA_OK);
    assert_int_equal(memra_gguf_writer_write_memory(w, &out, &out_size), MEMRA_OK);
    memra_gguf_t *g = NULL;
    assert_int_equal(memra_gguf_open_memory(out, out_size, &g), MEMRA_OK);
    assert_int_equal(memra_gguf_n_kv(g), 3);
    assert_int_equal(memra_gguf_n_tensors(g), 1);
    memra_gguf_close(g);
    memra_free(out);
    memra_gguf_writer_destroy(w);
    SWEEP_END();
}

/* ---- tokenizer.h ---------------------------------------------------------------- */

static void test_tokenizer(void **state)
{
    (void)state;
    NEED_MODEL(path);
    memra_tokenizer_t *t = (memra_tokenizer_t *)(uintptr_t)1;
    ERR(memra_tokenizer_load(NULL, &t));
    assert_null(t);
    ERR(memra_tokenizer_load(path, NULL));
    ERR(memra_tokenizer_load("", &t));
    ERR(memra_tokenizer_load("/", &t));
    memra_gguf_t *g = NULL;
    assert_int_equal(memra_gguf_open(path, &g), MEMRA_OK);
    ERR(memra_tokenizer_from_gguf(NULL, &t));
    ERR(memra_tokenizer_from_gguf(g, NULL));
    assert_null(t);
    NOOP(memra_tokenizer_free(NULL));
    assert_int_equal(memra_tokenizer_from_gguf(g, &t), MEMRA_OK);
    memra_gguf_close(g); /* the tokenizer copied what it needs */
    const int32_t nv = memra_tokenizer_n_vocab(t);

    int32_t ids[16], n = 0;
    ERR(memra_tokenize(NULL, "hello", 5, ids, 16, 0, &n));
    ERR(memra_tokenize(t, NULL, 5, ids, 16, 0, &n));
    ERR(memra_tokenize(t, "hello", 5, NULL, 16, 0, &n));
    ERR(memra_tokenize(t, "hello", 5, ids, -1, 0, &n));
    ERR(memra_tokenize(t, "hello", 5, ids, INT32_MIN, 0, &n));
    ERR(memra_tokenize(t, "hello", 5, ids, 16, 0, NULL));
    ERR(memra_tokenize(t, "hello", 5, ids, 0, 0, &n)); /* too small: E_RANGE with the count */
    ERR(memra_tokenize(t, "\xff\xfe", 2, ids, 16, 0, &n));
    ERR(memra_tokenize(t, "hello", 5, ids, 16, 0x80000000u, &n));

    char buf[64];
    size_t nb = 0;
    const int32_t good[2] = {1, 2}, neg[2] = {1, -1}, big[2] = {1, INT32_MAX}, over[2] = {1, nv};
    ERR(memra_detokenize(NULL, good, 2, buf, sizeof buf, 0, &nb));
    ERR(memra_detokenize(t, NULL, 2, buf, sizeof buf, 0, &nb));
    ERR(memra_detokenize(t, good, -1, buf, sizeof buf, 0, &nb));
    ERR(memra_detokenize(t, good, INT32_MIN, buf, sizeof buf, 0, &nb));
    ERR(memra_detokenize(t, good, 2, NULL, sizeof buf, 0, &nb));
    ERR(memra_detokenize(t, good, 2, buf, sizeof buf, 0, NULL));
    ERR(memra_detokenize(t, neg, 2, buf, sizeof buf, 0, &nb));
    ERR(memra_detokenize(t, big, 2, buf, sizeof buf, 0, &nb));
    ERR(memra_detokenize(t, over, 2, buf, sizeof buf, 0, &nb));
    ERR(memra_detokenize(t, good, 2, buf, sizeof buf, 0x80000000u, &nb));

    ERR(memra_token_to_piece(NULL, 1, buf, sizeof buf, 0, &nb));
    ERR(memra_token_to_piece(t, -1, buf, sizeof buf, 0, &nb));
    ERR(memra_token_to_piece(t, nv, buf, sizeof buf, 0, &nb));
    ERR(memra_token_to_piece(t, INT32_MAX, buf, sizeof buf, 0, &nb));
    ERR(memra_token_to_piece(t, INT32_MIN, buf, sizeof buf, 0, &nb));
    ERR(memra_token_to_piece(t, 1, NULL, sizeof buf, 0, &nb));
    ERR(memra_token_to_piece(t, 1, buf, sizeof buf, 0, NULL));
    ERR(memra_token_to_piece(t, 1, buf, sizeof buf, 0x80000000u, &nb));

    VAL(memra_tokenizer_n_vocab(NULL), 0);
    VAL_NULL(memra_tokenizer_model(NULL));
    VAL_NULL(memra_tokenizer_pre(NULL));
    VAL(memra_tokenizer_special(NULL, MEMRA_SPECIAL_EOS), -1);
    VAL(memra_tokenizer_special(t, (memra_special_token_t)-1), -1);
    VAL(memra_tokenizer_special(t, MEMRA_SPECIAL_COUNT), -1);
    VAL(memra_tokenizer_special(t, (memra_special_token_t)INT32_MAX), -1);
    VAL(memra_tokenizer_bos(NULL), -1);
    VAL(memra_tokenizer_eos(NULL), -1);
    VAL(memra_tokenizer_eot(NULL), -1);
    VAL(memra_tokenizer_add_bos(NULL), 0);
    VAL(memra_tokenizer_add_eos(NULL), 0);
    VAL(memra_tokenizer_is_eog(NULL, memra_tokenizer_eos(t)), 0);
    VAL(memra_tokenizer_is_eog(t, -1), 0);
    VAL(memra_tokenizer_is_eog(t, nv), 0);
    VAL(memra_tokenizer_is_eog(t, INT32_MAX), 0);
    VAL(memra_tokenizer_is_eog(t, INT32_MIN), 0);
    ERR(memra_tokenizer_eog_ids(NULL, ids, 16, &n));
    ERR(memra_tokenizer_eog_ids(t, NULL, 16, &n));
    ERR(memra_tokenizer_eog_ids(t, ids, -1, &n));
    ERR(memra_tokenizer_eog_ids(t, ids, INT32_MIN, &n));
    ERR(memra_tokenizer_eog_ids(t, ids, 16, NULL));
    ERR(memra_tokenizer_eog_ids(t, ids, 0, &n)); /* too small */
    VAL_NULL(memra_tokenizer_chat_template(NULL));
    VAL_NULL(memra_tokenizer_token_text(NULL, 1));
    VAL_NULL(memra_tokenizer_token_text(t, -1));
    VAL_NULL(memra_tokenizer_token_text(t, nv));
    VAL_NULL(memra_tokenizer_token_text(t, INT32_MAX));
    VAL_NULL(memra_tokenizer_token_text(t, INT32_MIN));
    VAL(memra_tokenizer_token_score(NULL, 1), 0);
    VAL(memra_tokenizer_token_score(t, -1), 0);
    VAL(memra_tokenizer_token_score(t, nv), 0);
    VAL(memra_tokenizer_token_score(t, INT32_MAX), 0);
    VAL(memra_tokenizer_token_attr(NULL, 1), 0);
    VAL(memra_tokenizer_token_attr(t, -1), 0);
    VAL(memra_tokenizer_token_attr(t, nv), 0);
    VAL(memra_tokenizer_token_attr(t, INT32_MAX), 0);
    VAL(memra_tokenizer_token_id(NULL, "a", 1), -1);
    VAL(memra_tokenizer_token_id(t, NULL, 1), -1);
    VAL(memra_tokenizer_token_id(t, NULL, SIZE_MAX), -1);
    VAL(memra_tokenizer_token_id(t, "", 0), -1);
    VAL_STR(memra_tokenizer_last_error(NULL), "");

    /* still works */
    assert_int_equal(memra_tokenize(t, "hello", 5, ids, 16, 0, &n), MEMRA_OK);
    assert_true(n > 0);
    assert_int_equal(memra_detokenize(t, ids, n, buf, sizeof buf, 0, &nb), MEMRA_OK);
    assert_int_equal(nb, 5);
    assert_memory_equal(buf, "hello", 5);
    assert_int_equal(memra_tokenize(t, "hello", 5, NULL, 0, 0, &n), MEMRA_E_RANGE); /* size query */
    assert_true(n > 0);
    memra_tokenizer_free(t);
    SWEEP_END();
}

/* ---- sampler.h --------------------------------------------------------------------- */

static void test_sampler(void **state)
{
    (void)state;
    memra_sampler_params_t p;
    NOOP(memra_sampler_params_init(NULL, sizeof p));
    memra_sampler_default_params(&p);
    NOOP(memra_sampler_params_init(&p, 0));
    assert_int_equal(p.size, sizeof p);
    memra_sampler_t *s = (memra_sampler_t *)(uintptr_t)1;
    ERR(memra_sampler_create(&p, NULL));
    ERR(memra_sampler_create(NULL, NULL));
    p.size = 0;
    ERR(memra_sampler_create(&p, &s));
    assert_null(s);
#define BAD_PARAM(field, value)                        \
    do {                                               \
        memra_sampler_default_params(&p);              \
        p.field = (value);                             \
        ERR(memra_sampler_create(&p, &s));             \
    } while (0)
    BAD_PARAM(temperature, NAN);
    BAD_PARAM(temperature, INFINITY);
    BAD_PARAM(temperature, -INFINITY);
    BAD_PARAM(top_k, -1);
    BAD_PARAM(top_k, INT32_MIN);
    BAD_PARAM(top_p, 0.0f);
    BAD_PARAM(top_p, -0.5f);
    BAD_PARAM(top_p, 1.5f);
    BAD_PARAM(top_p, NAN);
    BAD_PARAM(min_p, -0.1f);
    BAD_PARAM(min_p, 1.0f);
    BAD_PARAM(min_p, NAN);
    BAD_PARAM(repeat_penalty, 0.0f);
    BAD_PARAM(repeat_penalty, -1.0f);
    BAD_PARAM(repeat_penalty, 1e-38f);
    BAD_PARAM(repeat_penalty, 1e5f);
    BAD_PARAM(repeat_penalty, INFINITY);
    BAD_PARAM(repeat_penalty, NAN);
    BAD_PARAM(repeat_last_n, -1);
    BAD_PARAM(repeat_last_n, INT32_MIN);
#undef BAD_PARAM
    assert_null(s);
    NOOP(memra_sampler_free(NULL));
    NOOP(memra_sampler_reset(NULL));

    memra_sampler_default_params(&p);
    p.temperature = 0.7f;
    p.repeat_penalty = 1.3f;
    assert_int_equal(memra_sampler_create(&p, &s), MEMRA_OK);
    ERR(memra_sampler_accept(NULL, 1));
    ERR(memra_sampler_accept(s, -1));
    ERR(memra_sampler_accept(s, INT32_MIN));
    enum { NV = 64 };
    float logits[NV], nan_row[NV], inf_row[NV];
    for (int i = 0; i < NV; i++)
        logits[i] = nan_row[i] = inf_row[i] = (float)(i % 7) * 0.25f;
    nan_row[5] = NAN;
    inf_row[9] = INFINITY;
    int32_t tok = -7;
    ERR(memra_sampler_sample(NULL, logits, NV, &tok));
    ERR(memra_sampler_sample(s, NULL, NV, &tok));
    ERR(memra_sampler_sample(s, logits, NV, NULL));
    ERR(memra_sampler_sample(s, logits, 0, &tok));
    ERR(memra_sampler_sample(s, logits, -1, &tok));
    ERR(memra_sampler_sample(s, logits, INT32_MIN, &tok));
    ERR(memra_sampler_sample(s, nan_row, NV, &tok));
    ERR(memra_sampler_sample(s, inf_row, NV, &tok));
    VAL_STR(memra_sampler_last_error(NULL), "");

    /* still works, and the same after a reset */
    int32_t a[4], b[4];
    for (int r = 0; r < 2; r++) {
        memra_sampler_reset(s);
        for (int i = 0; i < 4; i++) {
            int32_t *o = r ? &b[i] : &a[i];
            assert_int_equal(memra_sampler_sample(s, logits, NV, o), MEMRA_OK);
            assert_true(*o >= 0 && *o < NV);
            assert_int_equal(memra_sampler_accept(s, *o), MEMRA_OK);
        }
    }
    assert_memory_equal(a, b, sizeof a);
    memra_sampler_free(s);
    SWEEP_END();
}

/* ---- check.h ------------------------------------------------------------------------- */

static void test_checks(void **state)
{
    (void)state;
    NEED_MODEL(path);
    memra_kernel_check_params_t kp;
    NOOP(memra_kernel_check_params_init(NULL, sizeof kp));
    memra_kernel_check_default_params(&kp);
    NOOP(memra_kernel_check_params_init(&kp, 0));
    assert_int_equal(kp.size, sizeof kp);
    memra_kernel_check_report_t *kr = calloc(1, sizeof *kr);
    assert_non_null(kr);
    kr->size = sizeof *kr;
    ERR(memra_check_kernels(NULL, kr));
    ERR(memra_check_kernels(&kp, NULL));
    kr->size = 0;
    ERR(memra_check_kernels(&kp, kr));
    kr->size = sizeof *kr;
    kp.size = 0;
    ERR(memra_check_kernels(&kp, kr));
    memra_kernel_check_default_params(&kp);
    kp.device = -1;
    ERR(memra_check_kernels(&kp, kr));
    kp.device = INT32_MAX;
    ERR(memra_check_kernels(&kp, kr));
    free(kr);

    memra_pp_parity_params_t pp;
    NOOP(memra_pp_parity_params_init(NULL, sizeof pp));
    memra_pp_parity_default_params(&pp);
    NOOP(memra_pp_parity_params_init(&pp, 0));
    assert_int_equal(pp.size, sizeof pp);
    memra_pp_parity_report_t *pr = calloc(1, sizeof *pr);
    assert_non_null(pr);
    pr->size = sizeof *pr;
    ERR(memra_check_pipeline_parity(NULL, &pp, pr));
    ERR(memra_check_pipeline_parity(path, &pp, NULL));
    ERR(memra_check_pipeline_parity("", &pp, pr));
    pr->size = 0;
    ERR(memra_check_pipeline_parity(path, &pp, pr));
    pr->size = sizeof *pr;
#define BAD_PP(field, value)                              \
    do {                                                  \
        memra_pp_parity_default_params(&pp);              \
        pp.field = (value);                               \
        ERR(memra_check_pipeline_parity(path, &pp, pr)); \
    } while (0)
    BAD_PP(size, 0);
    BAD_PP(n_stages, 0);
    BAD_PP(n_stages, -1);
    BAD_PP(n_stages, INT32_MAX);
    BAD_PP(n_prompt, 0);
    BAD_PP(n_prompt, -1);
    BAD_PP(n_prompt, INT32_MAX);
    BAD_PP(n_steps, 0);
    BAD_PP(n_steps, -1);
    BAD_PP(n_steps, INT32_MAX);
    BAD_PP(window, -1);
    BAD_PP(window, INT32_MIN);
#undef BAD_PP
    memra_pp_parity_default_params(&pp);
    const int32_t bad_prompt[16] = {1, 2, -1};
    pp.prompt = bad_prompt;
    ERR(memra_check_pipeline_parity(path, &pp, pr));
    free(pr);

    memra_margin_params_t mp;
    NOOP(memra_margin_params_init(NULL, sizeof mp));
    memra_margin_default_params(&mp);
    NOOP(memra_margin_params_init(&mp, 0));
    assert_int_equal(mp.size, sizeof mp);
    VAL_STR(memra_margin_verdict_name(-1), "?");
    VAL_STR(memra_margin_verdict_name(5), "?");
    VAL_STR(memra_margin_verdict_name(INT32_MAX), "?");
    VAL_STR(memra_margin_verdict_name(INT32_MIN), "?");
    memra_margin_report_t *mr = calloc(1, sizeof *mr);
    assert_non_null(mr);
    mr->size = sizeof *mr;
    const int32_t prompt[4] = {1, 2, 3, 4}, neg[4] = {1, 2, -1, 4}, big[4] = {1, INT32_MAX, 3, 4};
    ERR(memra_check_argmax_margin(NULL, prompt, 4, 2, &mp, mr));
    ERR(memra_check_argmax_margin("", prompt, 4, 2, &mp, mr));
    ERR(memra_check_argmax_margin(path, NULL, 4, 2, &mp, mr));
    ERR(memra_check_argmax_margin(path, prompt, 0, 2, &mp, mr));
    ERR(memra_check_argmax_margin(path, prompt, -1, 2, &mp, mr));
    ERR(memra_check_argmax_margin(path, prompt, INT32_MIN, 2, &mp, mr));
    ERR(memra_check_argmax_margin(path, neg, 4, 2, &mp, mr));
    ERR(memra_check_argmax_margin(path, big, 4, 2, &mp, mr));
    ERR(memra_check_argmax_margin(path, prompt, 4, 2, &mp, NULL));
    mr->size = 0;
    ERR(memra_check_argmax_margin(path, prompt, 4, 2, &mp, mr));
    mr->size = sizeof *mr;
    mp.size = 0;
    ERR(memra_check_argmax_margin(path, prompt, 4, 2, &mp, mr));
    memra_margin_default_params(&mp);
    mp.device = "no-such-device";
    ERR(memra_check_argmax_margin(path, prompt, 4, 2, &mp, mr));
    memra_margin_default_params(&mp);
    mp.budget = -1.0f;
    ERR(memra_check_argmax_margin(path, prompt, 4, 2, &mp, mr));
    mp.budget = NAN;
    ERR(memra_check_argmax_margin(path, prompt, 4, 2, &mp, mr));
    mp.budget = INFINITY;
    ERR(memra_check_argmax_margin(path, prompt, 4, 2, &mp, mr));
    memra_margin_default_params(&mp);
    mp.prefill_chunk = -1;
    ERR(memra_check_argmax_margin(path, prompt, 4, 2, &mp, mr));
    mp.prefill_chunk = INT32_MAX;
    ERR(memra_check_argmax_margin(path, prompt, 4, 2, &mp, mr));

    /* the checks still run: the margin check on this prompt, NULL params = defaults */
    assert_int_equal(memra_check_argmax_margin(path, prompt, 4, 2, NULL, mr), MEMRA_OK);
    assert_int_equal(mr->window, 2);
    free(mr);
    SWEEP_END();
}

/* ---- lifecycle misuses not covered elsewhere ----------------------------------------- */

static void test_lifecycle(void **state)
{
    (void)state;
    NEED_MODEL(path);
    memra_engine_t *e = cpu_engine();
    memra_model_t *a = load_on(path, e), *b = load_on(path, e);
    const int32_t nv = memra_model_n_vocab(a);
    float *ref = malloc((size_t)nv * sizeof *ref), *got = malloc((size_t)nv * sizeof *got);
    assert_non_null(ref);
    assert_non_null(got);
    memra_cache_t *ca = NULL, *cb = NULL;
    assert_int_equal(memra_cache_create(a, 8, &ca), MEMRA_OK);
    assert_int_equal(memra_cache_create(b, 8, &cb), MEMRA_OK);
    int32_t toks[3] = {5, 6, 7};

    /* an engine with models on it is not destroyed */
    ERR_IS(memra_engine_destroy(e), MEMRA_E_BUSY);
    /* a model with caches is not freed */
    ERR_IS(memra_model_free(a), MEMRA_E_BUSY);
    /* a cache of another model: decode steps, deferred steps, snapshots */
    ERR_IS(memra_decode_step(a, cb, 1, got), MEMRA_E_MISUSE);
    memra_pending_t *p = NULL;
    ERR_IS(memra_decode_step_deferred(a, cb, 1, &p), MEMRA_E_MISUSE);
    assert_null(p);
    assert_int_equal(memra_cache_pos(cb), 0);
    assert_int_equal(memra_forward(b, cb, toks, 2, 0, NULL), MEMRA_OK);
    memra_cache_snapshot_t *sb = NULL;
    assert_int_equal(memra_cache_snapshot(cb, &sb), MEMRA_OK);
    ERR_IS(memra_cache_restore(ca, sb), MEMRA_E_MISUSE); /* a snapshot of another model */
    assert_int_equal(memra_cache_pos(ca), 0);
    /* a snapshot outlives its cache and keeps its model busy */
    assert_int_equal(memra_cache_free(cb), MEMRA_OK);
    ERR_IS(memra_model_free(b), MEMRA_E_BUSY);
    memra_cache_snapshot_free(sb);

    /* a pending is consumed once: wait, then wait/poll/free again are refused */
    assert_int_equal(memra_forward(a, ca, toks, 2, 0, NULL), MEMRA_OK);
    assert_int_equal(memra_decode_step_deferred(a, ca, toks[2], &p), MEMRA_OK);
    ERR_IS(memra_cache_free(ca), MEMRA_E_BUSY);
    ERR_IS(memra_model_free(a), MEMRA_E_BUSY);
    assert_int_equal(memra_pending_wait(p, got), MEMRA_OK);
    ERR_IS(memra_pending_wait(p, got), MEMRA_E_MISUSE);
    ERR_IS(memra_pending_poll(p), MEMRA_E_MISUSE);
    ERR_IS(memra_pending_free(p), MEMRA_E_MISUSE);
    /* ... and after a free too */
    memra_pending_t *q = NULL;
    assert_int_equal(memra_decode_step_deferred(a, ca, toks[0], &q), MEMRA_OK);
    assert_int_equal(memra_pending_free(q), MEMRA_OK);
    ERR_IS(memra_pending_wait(q, got), MEMRA_E_MISUSE);
    ERR_IS(memra_pending_free(q), MEMRA_E_MISUSE);

    /* the deferred step gave the logits of a plain forward */
    assert_int_equal(memra_cache_clear(ca), MEMRA_OK);
    assert_int_equal(memra_forward(a, ca, toks, 3, 0, ref), MEMRA_OK);
    assert_memory_equal(ref, got, (size_t)nv * sizeof *got);

    /* model b freed, then a fresh one: a's cache still belongs to a only */
    assert_int_equal(memra_model_free(b), MEMRA_OK);
    memra_model_t *b2 = load_on(path, e);
    ERR_IS(memra_decode_step(b2, ca, 1, got), MEMRA_E_MISUSE);
    /* a snapshot of a restores into a cache created after it only if it is the same cache */
    memra_cache_snapshot_t *sa = NULL;
    assert_int_equal(memra_cache_snapshot(ca, &sa), MEMRA_OK);
    memra_cache_t *cb2 = NULL;
    assert_int_equal(memra_cache_create(b2, 8, &cb2), MEMRA_OK);
    ERR_IS(memra_cache_restore(cb2, sa), MEMRA_E_MISUSE);
    assert_int_equal(memra_cache_restore(ca, sa), MEMRA_OK);
    memra_cache_snapshot_free(sa);

    /* host memory outlives its engine */
    void *h = memra_engine_host_alloc(e, 256);
    assert_non_null(h);

    assert_int_equal(memra_cache_free(cb2), MEMRA_OK);
    assert_int_equal(memra_cache_free(ca), MEMRA_OK);
    assert_int_equal(memra_model_free(a), MEMRA_OK);
    ERR_IS(memra_engine_destroy(e), MEMRA_E_BUSY); /* b2 still on it */
    assert_int_equal(memra_model_free(b2), MEMRA_OK);
    assert_int_equal(memra_engine_destroy(e), MEMRA_OK);
    memset(h, 0, 256);
    memra_host_free(h);
    free(ref);
    free(got);
    SWEEP_END();
}

static int reset_bad(void **state)
{
    (void)state;
    g_bad = 0;
    return 0;
}

static int print_count(void **state)
{
    (void)state;
    printf("bad-argument calls: %d\n", g_calls);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_common, reset_bad),       cmocka_unit_test_setup(test_engine, reset_bad),
        cmocka_unit_test_setup(test_model, reset_bad),        cmocka_unit_test_setup(test_gguf_reader, reset_bad),
        cmocka_unit_test_setup(test_gguf_writer, reset_bad),  cmocka_unit_test_setup(test_tokenizer, reset_bad),
        cmocka_unit_test_setup(test_sampler, reset_bad),      cmocka_unit_test_setup(test_checks, reset_bad),
        cmocka_unit_test_setup(test_lifecycle, reset_bad),
    };
    return cmocka_run_group_tests(tests, NULL, print_count);
}

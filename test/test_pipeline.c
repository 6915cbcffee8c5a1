/* Pipeline stages on CPU engines: stage spec parsing and planning, bad
 * specs refused at load, introspection, deferred decode steps (bit-identical
 * to synchronous decode, in order, with back-pressure) and misuse of pending
 * handles, device failures inside the pipeline, and the transport paths a
 * GPU backend takes (events, copy_peer, host bounce) driven through a CPU
 * backend with swapped slots. Fixture-based tests skip without fixtures. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "memra/memra.h"
#include "pipeline_impl.h"
#include "testutil.h"

/* The static archive only yields an arch object when something references
 * it strongly (model.c's references are weak). */
static const memra__arch_t *const k_archs[] = {&memra__arch_llama, &memra__arch_qwen3, &memra__arch_qwen35,
                                               &memra__arch_qwen35moe, &memra__arch_gemma4};

#define LLAMA "models/llama-dense.f32.gguf" /* 4 layers */
#define Q35 "models/q35-dense.f32.gguf"     /* 8 layers, recurrent + attention */

static const char *fixture_or_skip(const char *rel)
{
    const char *p = tu_fixture_path(rel);
    if (!p)
        TU_SKIP("%s not found (set MEMRA_FIXTURES)", rel);
    return p;
}

static void clear_env(void)
{
    static const char *vars[] = {"MEMRA_PP_STAGES", "MEMRA_PP_DEVICES", "MEMRA_PP_SPLITS", "MEMRA_PP_SHARD",
                                 "MEMRA_PP_STREAMS", "MEMRA_PP_OVERLAP", "MEMRA_PP_SHARE_DEVICE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
}

static memra_model_t *load_split(const char *path, int32_t n_stages, int32_t streams, int32_t overlap)
{
    memra_model_params_t p;
    memra_model_default_params(&p);
    p.n_stages = n_stages;
    p.streams = streams;
    p.overlap = overlap;
    memra_model_t *m = NULL;
    memra_status_t st = memra_model_load(path, &p, &m);
    if (st)
        fail_msg("load %s with %d stages: %s (%s)", path, n_stages, memra_status_name(st), memra_last_error());
    return m;
}

/* ---- spec parsing and planning ---------------------------------------------- */

static void test_parse_devices(void **state)
{
    (void)state;
    memra_engine_params_t e[4];
    assert_int_equal(memra__pp_parse_devices("t", "cpu", 3, e), MEMRA_OK);
    assert_int_equal(e[2].backend, MEMRA_BACKEND_CPU);
    assert_int_equal(memra__pp_parse_devices("t", "cpu, cuda:1", 2, e), MEMRA_OK);
    assert_int_equal(e[0].backend, MEMRA_BACKEND_CPU);
    assert_int_equal(e[1].backend, MEMRA_BACKEND_CUDA);
    assert_int_equal(e[1].device, 1);
    assert_int_equal(memra__pp_parse_devices("t", "cuda", 2, e), MEMRA_OK);
    assert_int_equal(e[1].device, 0);

    assert_int_equal(memra__pp_parse_devices("t", "cpu,cpu,cpu", 2, e), MEMRA_E_INVALID);
    assert_non_null(strstr(memra_last_error(), "3 devices for 2 stages"));
    assert_int_equal(memra__pp_parse_devices("t", "gpu", 2, e), MEMRA_E_INVALID);
    assert_non_null(strstr(memra_last_error(), "'gpu'"));
    assert_int_equal(memra__pp_parse_devices("t", "cpu,", 2, e), MEMRA_E_INVALID);
    assert_int_equal(memra__pp_parse_devices("t", "cuda:x", 1, e), MEMRA_E_INVALID);
    assert_int_equal(memra__pp_parse_devices("t", "", 1, e), MEMRA_E_INVALID);
}

static void test_parse_splits(void **state)
{
    (void)state;
    int32_t c[4];
    assert_int_equal(memra__pp_parse_splits("t", "2, 5", 3, c), MEMRA_OK);
    assert_int_equal(c[0], 2);
    assert_int_equal(c[1], 5);
    assert_int_equal(memra__pp_check_cuts("t", c, 3, 8, NULL), MEMRA_OK);

    assert_int_equal(memra__pp_parse_splits("t", "2", 3, c), MEMRA_E_INVALID);
    assert_non_null(strstr(memra_last_error(), "3 stages need 2"));
    assert_int_equal(memra__pp_parse_splits("t", "2,x", 3, c), MEMRA_E_INVALID);
    assert_int_equal(memra__pp_parse_splits("t", "", 2, c), MEMRA_E_INVALID);

    int32_t bad1[] = {3, 3}, bad2[] = {0, 4}, bad3[] = {2, 8}, ok[] = {2, 4};
    assert_int_equal(memra__pp_check_cuts("t", bad1, 3, 8, NULL), MEMRA_E_INVALID);
    assert_int_equal(memra__pp_check_cuts("t", bad2, 3, 8, NULL), MEMRA_E_INVALID);
    assert_int_equal(memra__pp_check_cuts("t", bad3, 3, 8, NULL), MEMRA_E_INVALID);
    bool allowed[8] = {false, true, true, true, false, true, true, true};
    assert_int_equal(memra__pp_check_cuts("t", ok, 3, 8, allowed), MEMRA_E_INVALID);
    assert_non_null(strstr(memra_last_error(), "layer 4"));
}

static void test_even_cuts(void **state)
{
    (void)state;
    uint64_t eq[8] = {10, 10, 10, 10, 10, 10, 10, 10};
    int32_t c[4];
    assert_int_equal(memra__pp_even_cuts(eq, 8, 0, 0, 2, NULL, c), MEMRA_OK);
    assert_int_equal(c[0], 4);
    assert_int_equal(memra__pp_even_cuts(eq, 8, 0, 0, 4, NULL, c), MEMRA_OK);
    assert_int_equal(c[0], 2);
    assert_int_equal(c[1], 4);
    assert_int_equal(c[2], 6);
    /* heavy embeddings on the first stage push its cut down */
    assert_int_equal(memra__pp_even_cuts(eq, 8, 40, 0, 2, NULL, c), MEMRA_OK);
    assert_int_equal(c[0], 2);
    /* uneven layers: the largest stage is as small as it can be */
    uint64_t un[4] = {50, 10, 10, 30};
    assert_int_equal(memra__pp_even_cuts(un, 4, 0, 0, 2, NULL, c), MEMRA_OK);
    assert_int_equal(c[0], 1);
    /* forbidden cut points are skipped, impossible plans refused */
    bool ok[8] = {false, true, true, true, false, true, true, true};
    assert_int_equal(memra__pp_even_cuts(eq, 8, 0, 0, 2, ok, c), MEMRA_OK);
    assert_true(c[0] == 3 || c[0] == 5);
    bool none[4] = {false, false, false, false};
    assert_int_equal(memra__pp_even_cuts(un, 4, 0, 0, 2, none, c), MEMRA_E_INVALID);
    assert_int_equal(memra__pp_even_cuts(un, 4, 0, 0, 5, NULL, c), MEMRA_E_INVALID);
}

/* ---- bad stage specs at load ----------------------------------------------------- */

static void expect_load_fails(const char *path, const memra_model_params_t *p, memra_status_t want,
                              const char *needle)
{
    memra_model_t *m = (memra_model_t *)(uintptr_t)1;
    memra_status_t st = memra_model_load(path, p, &m);
    if (st != want)
        fail_msg("expected %s, got %s (%s)", memra_status_name(want), memra_status_name(st), memra_last_error());
    assert_null(m);
    if (needle && !strstr(memra_last_error(), needle))
        fail_msg("message '%s' lacks '%s'", memra_last_error(), needle);
}

static void test_bad_stage_specs(void **state)
{
    (void)state;
    const char *path = fixture_or_skip(LLAMA);
    if (!path)
        return;
    clear_env();
    memra_model_params_t p;
#define RESET() memra_model_default_params(&p)
    RESET();
    p.n_stages = MEMRA_MAX_PP_STAGES + 1;
    expect_load_fails(path, &p, MEMRA_E_INVALID, "n_stages");
    RESET();
    p.n_stages = 5;
    expect_load_fails(path, &p, MEMRA_E_INVALID, "only 4 layer");
    RESET();
    p.n_stages = 3;
    p.splits[0] = 2;
    expect_load_fails(path, &p, MEMRA_E_INVALID, "exactly 2 cut");
    RESET();
    p.n_stages = 2;
    p.splits[0] = 4;
    expect_load_fails(path, &p, MEMRA_E_INVALID, "layer 4");
    RESET();
    p.n_stages = 3;
    p.splits[0] = 2;
    p.splits[1] = 2;
    expect_load_fails(path, &p, MEMRA_E_INVALID, "strictly");
    RESET();
    p.n_stages = 2;
    p.devices = "cpu,cpu,cpu";
    expect_load_fails(path, &p, MEMRA_E_INVALID, "3 devices for 2 stages");
    RESET();
    p.n_stages = 2;
    p.devices = "tpu:0";
    expect_load_fails(path, &p, MEMRA_E_INVALID, "tpu:0");
    /* two pipelined stages on one GPU: refused before any device is touched */
    RESET();
    p.n_stages = 2;
    p.devices = "cuda:0,cuda:0";
    expect_load_fails(path, &p, MEMRA_E_INVALID, "both on cuda:0");
    RESET();
    p.n_stages = 2;
    p.devices = "cuda:3";
    expect_load_fails(path, &p, MEMRA_E_INVALID, "distinct GPUs");
    if (memra_cuda_device_count() == 0) {
        /* allowed when asked for, then the missing GPU is the error */
        p.share_device = 1;
        expect_load_fails(path, &p, MEMRA_E_NO_DEVICE, "stage 0");
    }
    RESET();
    p.shard = 2;
    expect_load_fails(path, &p, MEMRA_E_INVALID, "params.shard");
    RESET();
    p.n_stages = -1;
    expect_load_fails(path, &p, MEMRA_E_INVALID, "n_stages");

    /* env */
    RESET();
    setenv("MEMRA_PP_STAGES", "two", 1);
    expect_load_fails(path, &p, MEMRA_E_INVALID, "MEMRA_PP_STAGES='two'");
    setenv("MEMRA_PP_STAGES", "17", 1);
    expect_load_fails(path, &p, MEMRA_E_INVALID, "MEMRA_PP_STAGES");
    setenv("MEMRA_PP_STAGES", "2", 1);
    setenv("MEMRA_PP_SPLITS", "1,2", 1);
    expect_load_fails(path, &p, MEMRA_E_INVALID, "MEMRA_PP_SPLITS='1,2' lists 2 cut(s)");
    setenv("MEMRA_PP_SPLITS", "9", 1);
    expect_load_fails(path, &p, MEMRA_E_INVALID, "layer 9");
    unsetenv("MEMRA_PP_SPLITS");
    setenv("MEMRA_PP_DEVICES", "cpu;cpu", 1);
    expect_load_fails(path, &p, MEMRA_E_INVALID, "MEMRA_PP_DEVICES");
    unsetenv("MEMRA_PP_DEVICES");
    setenv("MEMRA_PP_SHARD", "yes", 1);
    expect_load_fails(path, &p, MEMRA_E_INVALID, "MEMRA_PP_SHARD");
    clear_env();

    /* explicit params win over the env */
    setenv("MEMRA_PP_STAGES", "3", 1);
    setenv("MEMRA_PP_SPLITS", "bogus", 1);
    RESET();
    p.n_stages = 1;
    memra_model_t *m = NULL;
    assert_int_equal(memra_model_load(path, &p, &m), MEMRA_OK);
    assert_int_equal(memra_model_n_stages(m), 1);
    assert_int_equal(memra_model_free(m), MEMRA_OK);
    unsetenv("MEMRA_PP_SPLITS");
    RESET();
    assert_int_equal(memra_model_load(path, &p, &m), MEMRA_OK); /* n_stages 0: the env's 3 */
    assert_int_equal(memra_model_n_stages(m), 3);
    assert_int_equal(memra_model_free(m), MEMRA_OK);
    /* stage devices from the env do not move an unsplit model */
    clear_env();
    setenv("MEMRA_PP_DEVICES", "cuda:7", 1);
    RESET();
    assert_int_equal(memra_model_load(path, &p, &m), MEMRA_OK);
    memra_stage_info_t si = {.size = sizeof si};
    assert_int_equal(memra_model_stage_info(m, 0, &si), MEMRA_OK);
    assert_int_equal(si.backend, MEMRA_BACKEND_CPU);
    assert_int_equal(memra_model_free(m), MEMRA_OK);
    clear_env();
#undef RESET
}

/* ---- introspection ---------------------------------------------------------------- */

static void test_introspection(void **state)
{
    (void)state;
    const char *path = fixture_or_skip(Q35);
    if (!path)
        return;
    clear_env();
    memra_model_t *one = load_split(path, 1, -1, -1);
    memra_model_t *m = load_split(path, 3, -1, -1);
    assert_int_equal(memra_model_n_stages(m), 3);
    assert_int_equal(memra_model_n_stages(NULL), 0);
    memra_pipeline_info_t pi = {.size = sizeof pi};
    assert_int_equal(memra_model_pipeline_info(m, &pi), MEMRA_OK);
    assert_int_equal(pi.n_stages, 3);
    assert_int_equal(pi.shard, 1);
    assert_int_equal(pi.streams, 1);
    assert_int_equal(pi.overlap, 1);
    assert_int_equal(pi.fence[0], 0);
    assert_int_equal(pi.fence[3], memra_model_n_layers(m));
    uint64_t sum = 0;
    for (int32_t s = 0; s < 3; s++) {
        memra_stage_info_t si = {.size = sizeof si};
        assert_int_equal(memra_model_stage_info(m, s, &si), MEMRA_OK);
        assert_int_equal(si.layer0, pi.fence[s]);
        assert_int_equal(si.layer1, pi.fence[s + 1]);
        assert_true(si.layer1 > si.layer0);
        assert_int_equal(si.backend, MEMRA_BACKEND_CPU);
        assert_int_equal(si.engine_index, s); /* each stage its own engine */
        assert_true(si.weight_bytes > 0);
        sum += si.weight_bytes;
    }
    assert_int_equal(sum, memra_model_weight_bytes(m));
    /* the tied or separate head is the only thing that may be stored twice */
    assert_true(sum >= memra_model_weight_bytes(one));

    memra_stage_info_t si = {.size = sizeof si};
    assert_int_equal(memra_model_stage_info(m, 3, &si), MEMRA_E_RANGE);
    assert_int_equal(memra_model_stage_info(m, -1, &si), MEMRA_E_RANGE);
    si.size = 0;
    assert_int_equal(memra_model_stage_info(m, 0, &si), MEMRA_E_INVALID);
    /* an older caller's shorter struct: only its bytes are written */
    memra_stage_info_t small;
    memset(&small, 0xab, sizeof small);
    small.size = (uint32_t)offsetof(memra_stage_info_t, backend);
    assert_int_equal(memra_model_stage_info(m, 1, &small), MEMRA_OK);
    assert_int_equal(small.layer0, pi.fence[1]);
    assert_int_equal((uint32_t)small.backend, 0xababababu);

    /* an older caller's params (no stage fields) load unsplit */
    memra_model_params_t old;
    memra_model_default_params(&old);
    old.size = (uint32_t)offsetof(memra_model_params_t, n_stages);
    memra_model_t *mo = NULL;
    assert_int_equal(memra_model_load(path, &old, &mo), MEMRA_OK);
    assert_int_equal(memra_model_n_stages(mo), 1);
    assert_int_equal(memra_model_free(mo), MEMRA_OK);

    /* unsharded: every stage on stage 0's engine */
    memra_model_params_t p;
    memra_model_default_params(&p);
    p.n_stages = 2;
    p.shard = 0;
    assert_int_equal(memra_model_load(path, &p, &mo), MEMRA_OK);
    assert_int_equal(memra_model_stage_info(mo, 1, &si), MEMRA_E_INVALID); /* si.size is still 0 */
    si.size = sizeof si;
    assert_int_equal(memra_model_stage_info(mo, 1, &si), MEMRA_OK);
    assert_int_equal(si.engine_index, 0);
    assert_int_equal(memra_model_free(mo), MEMRA_OK);

    assert_int_equal(memra_model_free(m), MEMRA_OK);
    assert_int_equal(memra_model_free(one), MEMRA_OK);
}

/* ---- deferred decode ----------------------------------------------------------------- */

static int32_t tok_at(int32_t i, int32_t vocab) { return (int32_t)((i * 977u + 13u) % (uint32_t)vocab); }

/* Logits of N decode steps on an unsplit model: the reference. */
static float *reference(const char *path, int32_t n)
{
    memra_model_t *m = load_split(path, 1, -1, -1);
    int32_t V = memra_model_n_vocab(m);
    memra_cache_t *c = NULL;
    assert_int_equal(memra_cache_create(m, n, &c), MEMRA_OK);
    float *out = malloc((size_t)n * (size_t)V * sizeof *out);
    for (int32_t i = 0; i < n; i++)
        assert_int_equal(memra_decode_step(m, c, tok_at(i, V), out + (size_t)i * V), MEMRA_OK);
    memra_cache_free(c);
    memra_model_free(m);
    return out;
}

/* N deferred steps with W in flight; every row must match REF bit for bit. */
static void deferred_run(memra_model_t *m, const float *ref, int32_t n, int32_t W)
{
    int32_t V = memra_model_n_vocab(m);
    memra_cache_t *c = NULL;
    assert_int_equal(memra_cache_create(m, n, &c), MEMRA_OK);
    memra_pending_t **pend = calloc((size_t)n, sizeof *pend);
    float *row = malloc((size_t)V * sizeof *row);
    int32_t queued = 0, done = 0;
    while (done < n) {
        if (queued < n && queued - done < W) {
            assert_int_equal(memra_decode_step_deferred(m, c, tok_at(queued, V), &pend[queued]), MEMRA_OK);
            assert_int_equal(memra_cache_pos(c), queued + 1);
            queued++;
            continue;
        }
        assert_int_equal(memra_pending_wait(pend[done], row), MEMRA_OK);
        if (memcmp(row, ref + (size_t)done * V, (size_t)V * sizeof *row) != 0)
            fail_msg("deferred step %d (window %d) differs from unsplit decode", done, W);
        done++;
    }
    free(row);
    free(pend);
    assert_int_equal(memra_cache_free(c), MEMRA_OK);
}

static void test_deferred_bit_identical(void **state)
{
    (void)state;
    const char *path = fixture_or_skip(Q35);
    if (!path)
        return;
    clear_env();
    const int32_t N = 24;
    float *ref = reference(path, N);
    static const struct { int32_t stages, streams, overlap; } cfg[] = {
        {1, 1, 1}, {2, 1, 1}, {3, 1, 0}, {4, 1, 1}, {4, 0, 1}, {8, 1, 1},
    };
    static const int32_t windows[] = {1, 2, 3, 8, 24};
    for (size_t k = 0; k < sizeof cfg / sizeof cfg[0]; k++) {
        memra_model_t *m = load_split(path, cfg[k].stages, cfg[k].streams, cfg[k].overlap);
        for (size_t w = 0; w < sizeof windows / sizeof windows[0]; w++)
            deferred_run(m, ref, N, windows[w]);
        assert_int_equal(memra_model_free(m), MEMRA_OK);
    }
    free(ref);
}

/* More steps in flight than the ring holds: queueing waits, nothing fails. */
static void test_deferred_backpressure(void **state)
{
    (void)state;
    const char *path = fixture_or_skip(LLAMA);
    if (!path)
        return;
    clear_env();
    const int32_t N = MEMRA__PP_RING + 16;
    float *ref = reference(path, N);
    memra_model_t *m = load_split(path, 2, 1, 1);
    deferred_run(m, ref, N, N);
    assert_int_equal(memra_model_free(m), MEMRA_OK);
    free(ref);
}

/* Two caches of one model interleaved in one queue stay independent. */
static void test_deferred_two_caches(void **state)
{
    (void)state;
    const char *path = fixture_or_skip(LLAMA);
    if (!path)
        return;
    clear_env();
    const int32_t N = 12;
    float *ref = reference(path, N);
    memra_model_t *m = load_split(path, 4, 1, 1);
    int32_t V = memra_model_n_vocab(m);
    memra_cache_t *a = NULL, *b = NULL;
    assert_int_equal(memra_cache_create(m, N, &a), MEMRA_OK);
    assert_int_equal(memra_cache_create(m, N, &b), MEMRA_OK);
    memra_pending_t *pa[12], *pb[12];
    for (int32_t i = 0; i < N; i++) {
        assert_int_equal(memra_decode_step_deferred(m, a, tok_at(i, V), &pa[i]), MEMRA_OK);
        assert_int_equal(memra_decode_step_deferred(m, b, tok_at(i, V), &pb[i]), MEMRA_OK);
    }
    float *row = malloc((size_t)V * sizeof *row);
    for (int32_t i = N - 1; i >= 0; i--) { /* waiting newest first is fine too */
        assert_int_equal(memra_pending_wait(pb[i], row), MEMRA_OK);
        assert_memory_equal(row, ref + (size_t)i * V, (size_t)V * sizeof *row);
        assert_int_equal(memra_pending_wait(pa[i], row), MEMRA_OK);
        assert_memory_equal(row, ref + (size_t)i * V, (size_t)V * sizeof *row);
    }
    free(row);
    assert_int_equal(memra_cache_free(a), MEMRA_OK);
    assert_int_equal(memra_cache_free(b), MEMRA_OK);
    assert_int_equal(memra_model_free(m), MEMRA_OK);
    free(ref);
}

/* ---- misuse ---------------------------------------------------------------------------- */

static void test_pending_misuse(void **state)
{
    (void)state;
    const char *path = fixture_or_skip(LLAMA);
    if (!path)
        return;
    clear_env();
    memra_model_t *m = load_split(path, 2, 1, 1), *other = load_split(path, 1, -1, -1);
    int32_t V = memra_model_n_vocab(m);
    memra_cache_t *c = NULL, *c2 = NULL, *oc = NULL;
    assert_int_equal(memra_cache_create(m, 4, &c), MEMRA_OK);
    assert_int_equal(memra_cache_create(m, 4, &c2), MEMRA_OK);
    assert_int_equal(memra_cache_create(other, 4, &oc), MEMRA_OK);
    memra_pending_t *p = (memra_pending_t *)(uintptr_t)1;

    /* bad arguments: *out NULL, the cache untouched */
    assert_int_equal(memra_decode_step_deferred(m, c, 0, NULL), MEMRA_E_INVALID);
    assert_int_equal(memra_decode_step_deferred(NULL, c, 0, &p), MEMRA_E_INVALID);
    assert_null(p);
    assert_int_equal(memra_decode_step_deferred(m, NULL, 0, &p), MEMRA_E_INVALID);
    assert_int_equal(memra_decode_step_deferred(m, oc, 0, &p), MEMRA_E_MISUSE);
    assert_int_equal(memra_decode_step_deferred(m, c, V, &p), MEMRA_E_RANGE);
    assert_int_equal(memra_decode_step_deferred(m, c, -1, &p), MEMRA_E_RANGE);
    assert_null(p);
    assert_int_equal(memra_cache_pos(c), 0);
    assert_int_equal(memra_pending_poll(NULL), MEMRA_E_INVALID);
    assert_int_equal(memra_pending_wait(NULL, NULL), MEMRA_E_INVALID);
    assert_int_equal(memra_pending_free(NULL), MEMRA_OK);

    /* with steps in flight the model, the cache and the other cache are busy */
    memra_pending_t *q[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(memra_decode_step_deferred(m, c, tok_at(i, V), &q[i]), MEMRA_OK);
    assert_int_equal(memra_decode_step_deferred(m, c, 0, &p), MEMRA_E_FULL);
    assert_null(p);
    float *row = malloc((size_t)V * sizeof *row);
    assert_int_equal(memra_decode_step(m, c, 0, row), MEMRA_E_BUSY);
    assert_int_equal(memra_decode_step(m, c2, 0, row), MEMRA_E_BUSY);
    assert_non_null(strstr(memra_model_last_error(m), "in flight"));
    assert_int_equal(memra_cache_free(c), MEMRA_E_BUSY);
    assert_int_equal(memra_cache_clear(c), MEMRA_E_BUSY);
    memra_cache_snapshot_t *snap = NULL;
    assert_int_equal(memra_cache_snapshot(c, &snap), MEMRA_E_BUSY);
    assert_int_equal(memra_model_free(m), MEMRA_E_BUSY);
    /* the unrelated model is not affected */
    assert_int_equal(memra_decode_step(other, oc, 0, row), MEMRA_OK);

    /* poll: ready or not, never consumes */
    memra_status_t ps;
    while ((ps = memra_pending_poll(q[3])) == MEMRA_E_AGAIN)
        ;
    assert_int_equal(ps, MEMRA_OK);
    assert_int_equal(memra_pending_poll(q[0]), MEMRA_OK); /* in order: the first is done too */
    assert_int_equal(memra_pending_wait(q[0], row), MEMRA_OK);
    /* a consumed handle is refused, not dereferenced */
    assert_int_equal(memra_pending_wait(q[0], row), MEMRA_E_MISUSE);
    assert_non_null(strstr(memra_last_error(), "not a live pending"));
    assert_int_equal(memra_pending_poll(q[0]), MEMRA_E_MISUSE);
    assert_int_equal(memra_pending_free(q[0]), MEMRA_E_MISUSE);
    /* free drains; wait with NULL logits discards */
    assert_int_equal(memra_pending_free(q[1]), MEMRA_OK);
    assert_int_equal(memra_pending_free(q[1]), MEMRA_E_MISUSE);
    assert_int_equal(memra_pending_wait(q[2], NULL), MEMRA_OK);
    assert_int_equal(memra_cache_free(c), MEMRA_E_BUSY); /* q[3] still unconsumed */
    assert_int_equal(memra_pending_wait(q[3], row), MEMRA_OK);

    /* all consumed: everything works again */
    assert_int_equal(memra_cache_clear(c), MEMRA_OK);
    assert_int_equal(memra_decode_step(m, c2, 0, row), MEMRA_OK);
    free(row);
    assert_int_equal(memra_cache_free(c), MEMRA_OK);
    assert_int_equal(memra_cache_free(c2), MEMRA_OK);
    assert_int_equal(memra_cache_free(oc), MEMRA_OK);
    assert_int_equal(memra_model_free(m), MEMRA_OK);
    assert_int_equal(memra_model_free(other), MEMRA_OK);
}

/* Freeing a cache with steps in flight is an error, then works after. */
static void test_free_with_steps_in_flight(void **state)
{
    (void)state;
    const char *path = fixture_or_skip(LLAMA);
    if (!path)
        return;
    clear_env();
    memra_model_t *m = load_split(path, 3, 1, 1);
    memra_cache_t *c = NULL;
    assert_int_equal(memra_cache_create(m, 8, &c), MEMRA_OK);
    memra_pending_t *q[8];
    for (int i = 0; i < 8; i++)
        assert_int_equal(memra_decode_step_deferred(m, c, i, &q[i]), MEMRA_OK);
    assert_int_equal(memra_model_free(m), MEMRA_E_BUSY);
    assert_int_equal(memra_cache_free(c), MEMRA_E_BUSY);
    for (int i = 0; i < 8; i++)
        assert_int_equal(memra_pending_free(q[i]), MEMRA_OK);
    assert_int_equal(memra_cache_free(c), MEMRA_OK);
    assert_int_equal(memra_model_free(m), MEMRA_OK);
}

/* ---- swapped backend slots ------------------------------------------------------------------ */

static memra_status_t (*g_real_matmul)(memra__backend_t *, const memra_weight_t *, const float *, int64_t, float *,
                                        int64_t, int64_t);
static int g_fail_after = -1; /* set while no step is in flight */
static atomic_int g_calls;

static memra_status_t flaky_matmul(memra__backend_t *be, const memra_weight_t *w, const float *x, int64_t ldx,
                                   float *y, int64_t ldy, int64_t n)
{
    if (g_fail_after >= 0 && atomic_fetch_add(&g_calls, 1) >= g_fail_after)
        return memra__fail(be->err, MEMRA_E_DEVICE, "injected device failure");
    return g_real_matmul(be, w, x, ldx, y, ldy, n);
}

/* A device failure on a later stage fails that step and the later steps of
 * the same cache; another cache and the model keep working. */
static void test_stage_failure(void **state)
{
    (void)state;
    const char *path = fixture_or_skip(LLAMA);
    if (!path)
        return;
    clear_env();
    memra_model_t *m = load_split(path, 2, 1, 1);
    memra__backend_t *be = m->stages[1].be;
    const memra__backend_i *real = be->iface;
    memra__backend_i flaky = *real;
    g_real_matmul = real->matmul;
    flaky.matmul = flaky_matmul;
    be->iface = &flaky;

    memra_cache_t *c = NULL;
    assert_int_equal(memra_cache_create(m, 8, &c), MEMRA_OK);
    float *row = malloc((size_t)memra_model_n_vocab(m) * sizeof *row);
    g_calls = 0;
    g_fail_after = 0;
    memra_pending_t *q[3];
    /* hold stage 0's engine so that all three steps are queued before the
     * first one can fail */
    memra_pending_t *warm = NULL;
    assert_int_equal(memra_decode_step_deferred(m, c, 1, &warm), MEMRA_OK); /* starts the workers */
    assert_int_equal(memra_pending_wait(warm, NULL), MEMRA_E_DEVICE);
    assert_int_equal(memra_cache_clear(c), MEMRA_OK);
    pthread_mutex_lock(&m->pp->eng_mu[m->pp->group[0]]);
    for (int i = 0; i < 3; i++)
        assert_int_equal(memra_decode_step_deferred(m, c, i + 1, &q[i]), MEMRA_OK);
    pthread_mutex_unlock(&m->pp->eng_mu[m->pp->group[0]]);
    assert_int_equal(memra_pending_wait(q[0], row), MEMRA_E_DEVICE);
    assert_non_null(strstr(memra_last_error(), "injected device failure"));
    assert_non_null(strstr(memra_last_error(), "stage 1"));
    assert_int_equal(memra_pending_wait(q[1], row), MEMRA_E_DEVICE);
    assert_non_null(strstr(memra_last_error(), "earlier deferred step"));
    assert_int_equal(memra_pending_wait(q[2], NULL), MEMRA_E_DEVICE);

    g_fail_after = -1;
    be->iface = real;
    assert_int_equal(memra_cache_clear(c), MEMRA_OK);
    memra_pending_t *ok = NULL;
    assert_int_equal(memra_decode_step_deferred(m, c, 1, &ok), MEMRA_OK);
    assert_int_equal(memra_pending_wait(ok, row), MEMRA_OK);
    free(row);
    assert_int_equal(memra_cache_free(c), MEMRA_OK);
    assert_int_equal(memra_model_free(m), MEMRA_OK);
}

/* Fake device transport on the CPU backend: events that count, a peer copy
 * that counts, and "device" memory (host_memory off) so the boundary goes
 * through copy_peer or the host bounce as it would between GPUs. */
static atomic_int g_ev_live, g_ev_record, g_ev_wait, g_peer; /* bumped by stage workers */

static void *ev_create(memra__backend_t *be)
{
    (void)be;
    atomic_fetch_add(&g_ev_live, 1);
    return malloc(1);
}
static void ev_destroy(memra__backend_t *be, void *ev)
{
    (void)be;
    atomic_fetch_sub(&g_ev_live, 1);
    free(ev);
}
static memra_status_t ev_record(memra__backend_t *be, void *ev)
{
    (void)be;
    (void)ev;
    atomic_fetch_add(&g_ev_record, 1);
    return MEMRA_OK;
}
static memra_status_t ev_wait(memra__backend_t *be, void *ev)
{
    (void)be;
    (void)ev;
    atomic_fetch_add(&g_ev_wait, 1);
    return MEMRA_OK;
}
static memra_status_t peer(memra__backend_t *src_be, void *dst, memra__backend_t *dst_be, const void *src, size_t n)
{
    (void)src_be;
    (void)dst_be;
    atomic_fetch_add(&g_peer, 1);
    memcpy(dst, src, n);
    return MEMRA_OK;
}

static void transport_case(const char *path, const float *ref, int32_t N, bool events, bool copy_peer)
{
    memra__backend_i iface[3];
    memra_engine_t *e[3];
    memra_model_params_t p;
    memra_model_default_params(&p);
    p.n_stages = 3;
    for (int s = 0; s < 3; s++) {
        memra_engine_params_t ep;
        memra_engine_default_params(&ep);
        ep.n_threads = 1;
        assert_int_equal(memra_engine_create(&ep, &e[s]), MEMRA_OK);
        iface[s] = *e[s]->be->iface;
        iface[s].host_memory = false;
        if (events) {
            iface[s].event_create = ev_create;
            iface[s].event_destroy = ev_destroy;
            iface[s].event_record = ev_record;
            iface[s].event_wait = ev_wait;
        }
        if (copy_peer)
            iface[s].copy_peer = peer;
        e[s]->be->iface = &iface[s];
        p.stage_engines[s] = e[s];
    }
    g_ev_record = g_ev_wait = g_peer = 0;
    memra_model_t *m = NULL;
    assert_int_equal(memra_model_load(path, &p, &m), MEMRA_OK);
    deferred_run(m, ref, N, 3);
    assert_int_equal(memra_model_free(m), MEMRA_OK);
    assert_int_equal(g_ev_live, 0);
    if (events) {
        assert_true(g_ev_record >= 2 * N);
        assert_true(g_ev_wait >= 2 * N);
    } else {
        assert_int_equal(g_ev_record + g_ev_wait, 0);
    }
    if (copy_peer)
        assert_true(g_peer >= 2 * N);
    else
        assert_int_equal(g_peer, 0);
    for (int s = 0; s < 3; s++)
        assert_int_equal(memra_engine_destroy(e[s]), MEMRA_OK);
}

static void test_transport_paths(void **state)
{
    (void)state;
    const char *path = fixture_or_skip(Q35);
    if (!path)
        return;
    clear_env();
    const int32_t N = 12;
    float *ref = reference(path, N);
    transport_case(path, ref, N, true, true);
    transport_case(path, ref, N, false, true);
    transport_case(path, ref, N, true, false);  /* host bounce with events */
    transport_case(path, ref, N, false, false); /* host bounce, synchronize */
    free(ref);
}

/* The caller's engines: reused per stage, and one engine shared by two
 * stages (serialized, same results). */
static void test_caller_engines(void **state)
{
    (void)state;
    const char *path = fixture_or_skip(LLAMA);
    if (!path)
        return;
    clear_env();
    const int32_t N = 8;
    float *ref = reference(path, N);
    memra_engine_params_t ep;
    memra_engine_default_params(&ep);
    ep.n_threads = 2;
    memra_engine_t *e = NULL;
    assert_int_equal(memra_engine_create(&ep, &e), MEMRA_OK);
    memra_model_params_t p;
    memra_model_default_params(&p);
    p.n_stages = 3;
    p.stage_engines[0] = e;
    p.stage_engines[2] = e;
    memra_model_t *m = NULL;
    assert_int_equal(memra_model_load(path, &p, &m), MEMRA_OK);
    memra_stage_info_t si = {.size = sizeof si};
    assert_int_equal(memra_model_stage_info(m, 2, &si), MEMRA_OK);
    assert_int_equal(si.engine_index, 0);
    assert_int_equal(memra_model_stage_info(m, 1, &si), MEMRA_OK);
    assert_int_equal(si.engine_index, 1);
    assert_int_equal(memra_engine_destroy(e), MEMRA_E_BUSY); /* the model uses it */
    deferred_run(m, ref, N, 4);
    assert_int_equal(memra_model_free(m), MEMRA_OK);

    /* params.engine serves stage 0; later stages get private CPU engines */
    memra_model_default_params(&p);
    p.engine = e;
    p.n_stages = 2;
    assert_int_equal(memra_model_load(path, &p, &m), MEMRA_OK);
    assert_int_equal(memra_model_stage_info(m, 1, &si), MEMRA_OK);
    assert_int_equal(si.engine_index, 1);
    deferred_run(m, ref, N, 2);
    assert_int_equal(memra_model_free(m), MEMRA_OK);
    assert_int_equal(memra_engine_destroy(e), MEMRA_OK);
    free(ref);
}

/* ---- gemma4 KV sharing across stages ---------------------------------------------- */

#define G4E "models/g4-e.f32.gguf" /* S S F S S F, 2 KV-shared layers: 4 reads 3, 5 reads 2 */

/* g4-e with shared_kv_layers 3: layers 3 and 4 both read layer 1's KV, layer
 * 5 reads layer 2's. The key is a UINT32 scalar, patched in place (same
 * size, so the tensor offsets stay). NULL (after a skip) without the
 * fixture. */
static const char *g4e_kv3_path(void)
{
    const char *src = fixture_or_skip(G4E);
    if (!src)
        return NULL;
    size_t size = 0;
    uint8_t *d = tu_read_file(src, &size);
    assert_non_null(d);
    static const char key[] = "gemma4.attention.shared_kv_layers";
    uint8_t *k = NULL;
    for (size_t i = 0; i + sizeof key + 8 <= size && !k; i++)
        if (memcmp(d + i, key, sizeof key - 1) == 0)
            k = d + i + sizeof key - 1;
    assert_non_null(k);
    uint32_t type, value;
    memcpy(&type, k, 4);
    memcpy(&value, k + 4, 4);
    assert_int_equal(type, MEMRA_GGUF_UINT32);
    assert_int_equal(value, 2);
    value = 3;
    memcpy(k + 4, &value, 4);
    const char *path = tu_write_temp(d, size, 1);
    free(d);
    assert_non_null(path);
    return path;
}

static memra_model_t *load_cuts(const char *path, int32_t n_stages, const int32_t *cuts)
{
    memra_model_params_t p;
    memra_model_default_params(&p);
    p.n_stages = n_stages;
    for (int32_t i = 0; i < n_stages - 1; i++)
        p.splits[i] = cuts[i];
    memra_model_t *m = NULL;
    memra_status_t st = memra_model_load(path, &p, &m);
    if (st)
        fail_msg("load %s with %d stages: %s (%s)", path, n_stages, memra_status_name(st), memra_last_error());
    return m;
}

/* Layers holding K/V rows (HOLDS: 'k' per layer that has them, '-' per
 * layer that reads another's) and the carry: the unsplit width plus one
 * K|V row per layer listed in SENDS. */
static void expect_kv_layout(const char *path, int32_t n_stages, const int32_t *cuts, const char *holds,
                             const char *sends)
{
    memra_model_t *one = load_split(path, 1, -1, -1);
    memra_model_t *m = load_cuts(path, n_stages, cuts);
    memra_cache_t *c = NULL;
    assert_int_equal(memra_cache_create(m, 16, &c), MEMRA_OK);
    char got[MEMRA_MAX_LAYERS + 1] = "";
    for (int32_t il = 0; il < m->n_layer; il++) {
        assert_true(!c->k[il] == !c->v[il]);
        got[il] = c->k[il] ? 'k' : '-';
    }
    if (strcmp(got, holds) != 0)
        fail_msg("%d stages (first cut %d): KV held by '%s', want '%s'", n_stages, cuts[0], got, holds);
    int64_t want = one->carry_floats;
    for (const char *s = sends; *s; s++)
        want += m->layer_cache[*s - '0'].k_floats + m->layer_cache[*s - '0'].v_floats;
    assert_int_equal(m->carry_floats, want);
    assert_int_equal(memra_cache_free(c), MEMRA_OK);
    assert_int_equal(memra_model_free(m), MEMRA_OK);
    assert_int_equal(memra_model_free(one), MEMRA_OK);
}

/* A shared layer on another stage than its source gets the source's rows
 * through the carry into a mirror, one per source and stage; on the
 * source's stage it reads the source's cache (no mirror, no carry slot). */
static void test_g4_shared_kv_layout(void **state)
{
    (void)state;
    const char *path = fixture_or_skip(G4E);
    if (!path)
        return;
    clear_env();
    expect_kv_layout(path, 1, NULL, "kkkk--", "");
    expect_kv_layout(path, 2, (int32_t[]){1}, "kkkk--", "");
    expect_kv_layout(path, 2, (int32_t[]){3}, "kkkk-k", "2");
    expect_kv_layout(path, 2, (int32_t[]){4}, "kkkkkk", "32");
    expect_kv_layout(path, 4, (int32_t[]){3, 4, 5}, "kkkkkk", "32");
    expect_kv_layout(path, 4, (int32_t[]){1, 3, 5}, "kkkk-k", "2");

    const char *kv3 = g4e_kv3_path();
    expect_kv_layout(kv3, 1, NULL, "kkk---", "");
    expect_kv_layout(kv3, 2, (int32_t[]){1}, "kkk---", "");
    /* 3 mirrors layer 1, 4 reads that mirror; 5 mirrors layer 2 */
    expect_kv_layout(kv3, 2, (int32_t[]){3}, "kkkk-k", "12");
    /* layer 1's rows feed a mirror on each of two later stages */
    expect_kv_layout(kv3, 3, (int32_t[]){2, 4}, "kkkkkk", "12");
    remove(kv3);
}

/* Bit-identical logits when the mirrors serve two readers of one source
 * (the fixture's own cuts are in test_checks.c), and across a chunked
 * prefill (mirror rows appended n > 1 at a time at pos0 > 0). */
static void test_g4_shared_kv_parity(void **state)
{
    (void)state;
    const char *kv3 = g4e_kv3_path();
    if (!kv3)
        return;
    clear_env();
    static const struct {
        int32_t n;
        int32_t cuts[3];
    } k_cases[] = {{2, {3}}, {3, {2, 4}}, {4, {3, 4, 5}}, {4, {1, 3, 4}}};
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) {
        memra_pp_parity_params_t p;
        memra_pp_parity_default_params(&p);
        p.n_stages = k_cases[i].n;
        p.devices = "cpu";
        p.extra_arms = 1;
        for (int32_t s = 0; s < k_cases[i].n - 1; s++)
            p.splits[s] = k_cases[i].cuts[s];
        memra_pp_parity_report_t r = {.size = sizeof r};
        memra_status_t st = memra_check_pipeline_parity(kv3, &p, &r);
        if (st || !r.pass)
            fail_msg("g4-e kv3, %d stages, first cut %d: %s (%s)", k_cases[i].n, k_cases[i].cuts[0],
                     memra_status_name(st), memra_last_error());
        assert_int_equal(r.n_arms, 4);
        for (int32_t a = 0; a < r.n_arms; a++)
            assert_int_equal(r.arms[a].steps_mismatched, 0);
    }

    /* 20 prompt tokens in chunks of 7, every row's logits, unsplit vs split */
    enum { N = 20 };
    float *ref = NULL;
    for (int32_t pass = 0; pass < 2; pass++) {
        memra_model_params_t mp;
        memra_model_default_params(&mp);
        mp.prefill_chunk = 7;
        mp.n_stages = pass ? 4 : 1;
        mp.splits[0] = pass ? 3 : 0;
        mp.splits[1] = pass ? 4 : 0;
        mp.splits[2] = pass ? 5 : 0;
        memra_model_t *m = NULL;
        assert_int_equal(memra_model_load(kv3, &mp, &m), MEMRA_OK);
        const int32_t V = memra_model_n_vocab(m);
        int32_t tok[N];
        for (int32_t i = 0; i < N; i++)
            tok[i] = tok_at(i, V);
        memra_cache_t *c = NULL;
        assert_int_equal(memra_cache_create(m, N + 1, &c), MEMRA_OK);
        float *out = malloc((size_t)N * (size_t)V * sizeof *out);
        assert_int_equal(memra_forward(m, c, tok, N, MEMRA_FORWARD_ALL_ROWS, out), MEMRA_OK);
        if (!pass)
            ref = out;
        else {
            assert_memory_equal(out, ref, (size_t)N * (size_t)V * sizeof *out);
            free(out);
        }
        assert_int_equal(memra_cache_free(c), MEMRA_OK);
        assert_int_equal(memra_model_free(m), MEMRA_OK);
    }
    free(ref);
    remove(kv3);
}

int main(void)
{
    for (size_t i = 0; i < sizeof k_archs / sizeof k_archs[0]; i++)
        if (!k_archs[i]->bind)
            return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_devices),
        cmocka_unit_test(test_parse_splits),
        cmocka_unit_test(test_even_cuts),
        cmocka_unit_test(test_bad_stage_specs),
        cmocka_unit_test(test_introspection),
        cmocka_unit_test(test_deferred_bit_identical),
        cmocka_unit_test(test_deferred_backpressure),
        cmocka_unit_test(test_deferred_two_caches),
        cmocka_unit_test(test_pending_misuse),
        cmocka_unit_test(test_free_with_steps_in_flight),
        cmocka_unit_test(test_stage_failure),
        cmocka_unit_test(test_transport_paths),
        cmocka_unit_test(test_caller_engines),
        cmocka_unit_test(test_g4_shared_kv_layout),
        cmocka_unit_test(test_g4_shared_kv_parity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

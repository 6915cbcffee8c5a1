/* Model, cache and forward API: misuse, bad files, state after errors,
 * snapshots. Uses the qwen3 fixture, or the bundled default model (the
 * same file) when the fixtures are absent. */
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

#include "gguf_edit.h"
#include "memra/memra.h"
#include "testutil.h"

static const char *model_path(void)
{
    const char *p = tu_fixture_path("models/qwen3-dense.f32.gguf");
    if (p)
        return p;
    p = tu_data_path("default.gguf");
    return access(p, R_OK) == 0 ? p : NULL;
}

#define NEED_MODEL(path)                                                        \
    const char *path = model_path();                                            \
    if (!path) {                                                                \
        TU_SKIP("no qwen3 fixture and no bundled test/data/default.gguf");     \
        return;                                                                 \
    }

static memra_model_t *load(const char *path)
{
    memra_model_t *m = NULL;
    memra_status_t st = memra_model_load(path, NULL, &m);
    if (st)
        fail_msg("load %s: %s (%s)", path, memra_strerror(st), memra_last_error());
    return m;
}

static void test_introspection(void **state)
{
    (void)state;
    NEED_MODEL(path);
    memra_model_t *m = load(path);
    assert_string_equal(memra_model_arch(m), "qwen3");
    assert_int_equal(memra_model_n_layers(m), 4);
    assert_int_equal(memra_model_n_embd(m), 64);
    assert_int_equal(memra_model_n_vocab(m), 3026);
    assert_int_equal(memra_model_layer_kind(m, 0), MEMRA_LAYER_ATTENTION);
    assert_int_equal(memra_model_layer_kind(m, 4), -1);
    assert_true(memra_model_weight_bytes(m) > 0);
    assert_non_null(memra_model_gguf(m));
    assert_int_equal(memra_model_free(m), MEMRA_OK);
    assert_int_equal(memra_model_free(NULL), MEMRA_OK);
}

static void test_load_misuse(void **state)
{
    (void)state;
    memra_model_t *m = (memra_model_t *)0x1;
    assert_int_equal(memra_model_load(NULL, NULL, &m), MEMRA_E_INVALID);
    assert_int_equal(memra_model_load("x", NULL, NULL), MEMRA_E_INVALID);
    assert_int_equal(memra_model_load("/nonexistent.gguf", NULL, &m), MEMRA_E_IO);
    assert_null(m);
    memra_model_params_t p;
    memra_model_default_params(&p);
    p.size = 1;
    assert_int_equal(memra_model_load("x", &p, &m), MEMRA_E_INVALID);
}

/* The model with one edit must fail with STATUS and a message naming NEEDLE. */
static void expect_bad(const tu_gguf_edit *e, memra_status_t status, const char *needle)
{
    NEED_MODEL(path);
    tu_expect_bad_model(path, e, status, needle);
}

static void test_bad_files(void **state)
{
    (void)state;
    expect_bad(&(tu_gguf_edit){.set_arch = "mamba9"}, MEMRA_E_UNSUPPORTED, "mamba9");
    expect_bad(&(tu_gguf_edit){.drop_key = "general.architecture"}, MEMRA_E_FORMAT, "general.architecture");
    expect_bad(&(tu_gguf_edit){.drop_tensor = "blk.2.attn_k.weight"}, MEMRA_E_FORMAT, "blk.2.attn_k.weight");
    expect_bad(&(tu_gguf_edit){.retype_key_i32 = "qwen3.block_count"}, MEMRA_E_FORMAT, "qwen3.block_count");
    expect_bad(&(tu_gguf_edit){.drop_key = "qwen3.embedding_length"}, MEMRA_E_FORMAT, "qwen3.embedding_length");
    expect_bad(&(tu_gguf_edit){.extra_tensor = "blk.0.surprise.weight"}, MEMRA_E_FORMAT, "blk.0.surprise.weight");
    expect_bad(&(tu_gguf_edit){.reshape_tensor = "blk.1.ffn_up.weight"}, MEMRA_E_FORMAT, "blk.1.ffn_up.weight");
}

/* How often NEEDLE occurs in HAY. */
static int count_of(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + strlen(needle), needle))
        n++;
    return n;
}

/* A message names the path, the function or the layer once: a prefix an
 * inner message already carries is not added again on the way out. */
static void test_messages_name_things_once(void **state)
{
    (void)state;
    memra_model_t *m = NULL;
    assert_int_equal(memra_model_load("/nonexistent.gguf", NULL, &m), MEMRA_E_IO);
    assert_int_equal(strncmp(memra_last_error(), "/nonexistent.gguf: ", 19), 0);
    assert_int_equal(count_of(memra_last_error(), "nonexistent.gguf"), 1);

    char bad[256];
    const char *tmp = getenv("TMPDIR");
    snprintf(bad, sizeof bad, "%s/memra-not-gguf-%d.gguf", tmp && *tmp ? tmp : "/tmp", (int)getpid());
    FILE *f = fopen(bad, "wb");
    assert_non_null(f);
    fputs("this is not a GGUF file at all", f);
    fclose(f);
    assert_int_equal(memra_model_load(bad, NULL, &m), MEMRA_E_FORMAT);
    assert_int_equal(count_of(memra_last_error(), bad), 1);
    memra_tokenizer_t *t = NULL;
    assert_int_equal(memra_tokenizer_load(bad, &t), MEMRA_E_FORMAT);
    assert_int_equal(count_of(memra_last_error(), bad), 1);
    remove(bad);

    NEED_MODEL(path);
    /* a tokenizer that fails to build inside a model load */
    tu_expect_bad_model(path, &(tu_gguf_edit){.drop_key = "tokenizer.ggml.tokens"}, MEMRA_E_FORMAT, "tokenizer: ");
    assert_int_equal(count_of(memra_last_error(), "tokenizer: "), 1);

    m = load(path);
    memra_cache_t *c = NULL;
    assert_int_equal(memra_cache_create(m, 4, &c), MEMRA_OK);
    int32_t tok = -1;
    assert_int_equal(memra_forward(m, c, &tok, 1, 0, NULL), MEMRA_E_RANGE);
    assert_int_equal(strncmp(memra_last_error(), "memra_forward: ", 15), 0);
    assert_int_equal(count_of(memra_last_error(), "memra_forward"), 1);
    assert_int_equal(count_of(memra_model_last_error(m), "memra_forward"), 1);
    assert_int_equal(memra_cache_free(c), MEMRA_OK);
    assert_int_equal(memra_model_free(m), MEMRA_OK);
}

/* Hyperparameters that load but give NaN logits or fail every forward
 * (infinite softcap, rope base <= 0 or NaN, epsilon <= 0 or infinite) are
 * refused at load with MEMRA_E_FORMAT naming the key. */
static void test_bad_hyperparameters(void **state)
{
    (void)state;
    static const struct {
        const char *fixture, *key;
        float v;
    } cases[] = {
        {"models/qwen3-dense.f32.gguf", "qwen3.rope.freq_base", 0.0f},
        {"models/qwen3-dense.f32.gguf", "qwen3.rope.freq_base", NAN},
        {"models/qwen3-dense.f32.gguf", "qwen3.attention.layer_norm_rms_epsilon", -1e-6f},
        {"models/qwen3-dense.f32.gguf", "qwen3.attention.layer_norm_rms_epsilon", INFINITY},
        {"models/llama-dense.f32.gguf", "llama.rope.freq_base", -10000.0f},
        {"models/llama-dense.f32.gguf", "llama.rope.scaling.factor", NAN},
        {"models/q35-dense.f32.gguf", "qwen35.rope.freq_base", -1.0f},
        {"models/q35-dense.f32.gguf", "qwen35.attention.layer_norm_rms_epsilon", 0.0f},
        {"models/g4-dense.f32.gguf", "gemma4.final_logit_softcapping", INFINITY},
        {"models/g4-dense.f32.gguf", "gemma4.final_logit_softcapping", -30.0f},
        {"models/g4-dense.f32.gguf", "gemma4.rope.freq_base_swa", 0.0f},
        {"models/g4-dense.f32.gguf", "gemma4.attention.layer_norm_rms_epsilon", NAN},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const char *path = tu_fixture_path(cases[k].fixture);
        if (!path) {
            TU_SKIP("%s not found (set MEMRA_FIXTURES)", cases[k].fixture);
            return;
        }
        tu_expect_bad_model(path, &(tu_gguf_edit){.set_f32_key = cases[k].key, .set_f32 = cases[k].v},
                            MEMRA_E_FORMAT, cases[k].key);
    }
}

static void test_forward_errors_leave_cache(void **state)
{
    (void)state;
    NEED_MODEL(path);
    memra_model_t *m = load(path);
    memra_cache_t *c = NULL;
    assert_int_equal(memra_cache_create(m, 8, &c), MEMRA_OK);
    assert_int_equal(memra_cache_capacity(c), 8);
    int32_t n_vocab = memra_model_n_vocab(m);
    float *logits = malloc((size_t)n_vocab * sizeof *logits);
    int32_t toks[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    assert_int_equal(memra_forward(m, c, toks, 3, 0, logits), MEMRA_OK);
    assert_int_equal(memra_cache_pos(c), 3);

    int32_t bad[2] = {5, n_vocab};
    assert_int_equal(memra_forward(m, c, bad, 2, 0, logits), MEMRA_E_RANGE);
    assert_int_equal(memra_cache_pos(c), 3);
    assert_int_equal(memra_decode_step(m, c, -1, logits), MEMRA_E_RANGE);
    assert_int_equal(memra_forward(m, c, toks, 6, 0, logits), MEMRA_E_FULL);
    assert_int_equal(memra_cache_pos(c), 3);
    assert_non_null(strstr(memra_model_last_error(m), "capacity"));
    assert_int_equal(memra_forward(m, c, toks, 0, 0, logits), MEMRA_E_INVALID);
    assert_int_equal(memra_forward(m, c, NULL, 2, 0, logits), MEMRA_E_INVALID);
    assert_int_equal(memra_forward(m, c, toks, 1, 0x80, logits), MEMRA_E_INVALID);
    assert_int_equal(memra_forward(NULL, c, toks, 1, 0, logits), MEMRA_E_INVALID);

    /* the cache still works after the errors: fill it exactly */
    assert_int_equal(memra_forward(m, c, toks, 5, 0, logits), MEMRA_OK);
    assert_int_equal(memra_cache_pos(c), 8);
    assert_int_equal(memra_decode_step(m, c, 1, logits), MEMRA_E_FULL);

    /* a model with live caches cannot be freed */
    assert_int_equal(memra_model_free(m), MEMRA_E_BUSY);
    assert_int_equal(memra_cache_clear(c), MEMRA_OK);
    assert_int_equal(memra_cache_pos(c), 0);
    assert_int_equal(memra_cache_free(c), MEMRA_OK);
    assert_int_equal(memra_cache_free(NULL), MEMRA_OK);
    free(logits);
    assert_int_equal(memra_model_free(m), MEMRA_OK);
}

static void test_cache_of_other_model(void **state)
{
    (void)state;
    NEED_MODEL(path);
    memra_model_t *a = load(path), *b = load(path);
    memra_cache_t *cb = NULL;
    assert_int_equal(memra_cache_create(b, 4, &cb), MEMRA_OK);
    int32_t t = 1;
    assert_int_equal(memra_forward(a, cb, &t, 1, 0, NULL), MEMRA_E_MISUSE);
    memra_cache_t *bad = NULL;
    assert_int_equal(memra_cache_create(a, -1, &bad), MEMRA_E_INVALID);
    assert_null(bad);
    assert_int_equal(memra_cache_free(cb), MEMRA_OK);
    assert_int_equal(memra_model_free(a), MEMRA_OK);
    assert_int_equal(memra_model_free(b), MEMRA_OK);
}

static void test_clear_and_snapshot_reproduce(void **state)
{
    (void)state;
    NEED_MODEL(path);
    memra_model_t *m = load(path);
    int32_t nv = memra_model_n_vocab(m);
    memra_cache_t *c = NULL;
    assert_int_equal(memra_cache_create(m, 32, &c), MEMRA_OK);
    float *a = malloc((size_t)nv * sizeof *a), *b = malloc((size_t)nv * sizeof *b);
    int32_t toks[6] = {10, 20, 30, 40, 50, 60};
    assert_int_equal(memra_forward(m, c, toks, 4, 0, NULL), MEMRA_OK);
    memra_cache_snapshot_t *snap = NULL;
    assert_int_equal(memra_cache_snapshot(c, &snap), MEMRA_OK);
    assert_int_equal(memra_forward(m, c, toks + 4, 2, 0, a), MEMRA_OK);
    assert_int_equal(memra_cache_restore(c, snap), MEMRA_OK);
    assert_int_equal(memra_cache_pos(c), 4);
    assert_int_equal(memra_forward(m, c, toks + 4, 2, 0, b), MEMRA_OK);
    assert_memory_equal(a, b, (size_t)nv * sizeof *a);
    /* clear then replay from scratch gives the same logits again */
    assert_int_equal(memra_cache_clear(c), MEMRA_OK);
    assert_int_equal(memra_forward(m, c, toks, 6, 0, b), MEMRA_OK);
    assert_memory_equal(a, b, (size_t)nv * sizeof *a);
    memra_cache_snapshot_free(snap);
    memra_cache_snapshot_free(NULL);
    memra_cache_free(c);
    free(a);
    free(b);
    memra_model_free(m);
}

/* A live snapshot keeps its model busy like a cache does: the model cannot
 * be freed under it, and freeing the snapshot first works. */
static void test_model_free_with_snapshot(void **state)
{
    (void)state;
    NEED_MODEL(path);
    memra_model_t *m = load(path);
    memra_cache_t *c = NULL;
    assert_int_equal(memra_cache_create(m, 8, &c), MEMRA_OK);
    memra_cache_snapshot_t *snap = NULL;
    assert_int_equal(memra_cache_snapshot(c, &snap), MEMRA_OK);
    assert_int_equal(memra_cache_free(c), MEMRA_OK);
    assert_int_equal(memra_model_free(m), MEMRA_E_BUSY);
    assert_non_null(strstr(memra_model_last_error(m), "snapshot"));
    memra_cache_snapshot_free(snap);
    assert_int_equal(memra_model_free(m), MEMRA_OK);
}

/* A snapshot restores only into the cache it was taken from: another cache
 * of the same model and capacity holds other KV rows, so the next logits
 * would be wrong. */
static void test_restore_into_other_cache(void **state)
{
    (void)state;
    NEED_MODEL(path);
    memra_model_t *m = load(path);
    memra_cache_t *a = NULL, *b = NULL;
    assert_int_equal(memra_cache_create(m, 16, &a), MEMRA_OK);
    assert_int_equal(memra_cache_create(m, 16, &b), MEMRA_OK);
    int32_t toks[4] = {10, 20, 30, 40};
    assert_int_equal(memra_forward(m, a, toks, 4, 0, NULL), MEMRA_OK);
    memra_cache_snapshot_t *snap = NULL;
    assert_int_equal(memra_cache_snapshot(a, &snap), MEMRA_OK);
    assert_int_equal(memra_cache_restore(b, snap), MEMRA_E_MISUSE);
    assert_non_null(strstr(memra_last_error(), "another cache"));
    assert_int_equal(memra_cache_pos(b), 0);
    /* a cache created at the freed one's address is still another cache */
    assert_int_equal(memra_cache_free(a), MEMRA_OK);
    memra_cache_t *a2 = NULL;
    assert_int_equal(memra_cache_create(m, 16, &a2), MEMRA_OK);
    assert_int_equal(memra_cache_restore(a2, snap), MEMRA_E_MISUSE);
    memra_cache_snapshot_free(snap);
    assert_int_equal(memra_cache_free(a2), MEMRA_OK);
    assert_int_equal(memra_cache_free(b), MEMRA_OK);
    assert_int_equal(memra_model_free(m), MEMRA_OK);
}

/* Every env knob parses the same way: unset or empty = the default, a whole
 * number in range = that, anything else fails the call with
 * MEMRA_E_INVALID naming the variable (MEMRA_PRIME_CHUNK=2abc once ran
 * with chunks of 2; the MEMRA_PP_* knobs already refused garbage). */
static void test_env_knobs_strict(void **state)
{
    (void)state;
    NEED_MODEL(path);
    static const struct {
        const char *var, *value;
    } bad[] = {
        {"MEMRA_PRIME_CHUNK", "2abc"}, {"MEMRA_PRIME_CHUNK", "0"},      {"MEMRA_PRIME_CHUNK", "-4"},
        {"MEMRA_PRIME_CHUNK", "99999999999999999999"}, {"MEMRA_PRIME_CHUNK", " "}, {"MEMRA_PRIME_CHUNK", "4 4"},
        {"MEMRA_PP_STREAMS", "1x"},    {"MEMRA_PP_STAGES", "2abc"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        setenv(bad[k].var, bad[k].value, 1);
        memra_model_t *m = (memra_model_t *)0x1;
        memra_status_t st = memra_model_load(path, NULL, &m);
        unsetenv(bad[k].var);
        if (st != MEMRA_E_INVALID || !strstr(memra_last_error(), bad[k].var))
            fail_msg("%s='%s': got %s '%s', want E_INVALID naming the variable", bad[k].var, bad[k].value,
                     memra_status_name(st), memra_last_error());
        assert_null(m);
    }
    /* empty is unset; a good value is used: chunks of 3 give the same logits */
    int32_t toks[7] = {10, 20, 30, 40, 50, 60, 70};
    memra_model_t *m = load(path);
    int32_t nv = memra_model_n_vocab(m);
    float *a = malloc((size_t)nv * sizeof *a), *b = malloc((size_t)nv * sizeof *b);
    memra_cache_t *c = NULL;
    assert_int_equal(memra_cache_create(m, 8, &c), MEMRA_OK);
    assert_int_equal(memra_forward(m, c, toks, 7, 0, a), MEMRA_OK);
    memra_cache_free(c);
    memra_model_free(m);
    static const char *const good[] = {"", "3", " 3"};
    for (size_t k = 0; k < sizeof good / sizeof good[0]; k++) {
        setenv("MEMRA_PRIME_CHUNK", good[k], 1);
        m = load(path);
        unsetenv("MEMRA_PRIME_CHUNK");
        assert_int_equal(memra_cache_create(m, 8, &c), MEMRA_OK);
        assert_int_equal(memra_forward(m, c, toks, 7, 0, b), MEMRA_OK);
        assert_memory_equal(a, b, (size_t)nv * sizeof *a);
        memra_cache_free(c);
        memra_model_free(m);
    }
    free(a);
    free(b);
}

static int cancel_at_start(float progress, void *user)
{
    (void)user;
    return progress == 0.0f;
}

static void test_progress_cancel(void **state)
{
    (void)state;
    NEED_MODEL(path);
    memra_model_params_t p;
    memra_model_default_params(&p);
    p.progress = cancel_at_start;
    memra_model_t *m = NULL;
    assert_int_equal(memra_model_load(path, &p, &m), MEMRA_E_AGAIN);
    assert_null(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_introspection),
        cmocka_unit_test(test_load_misuse),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_messages_name_things_once),
        cmocka_unit_test(test_bad_hyperparameters),
        cmocka_unit_test(test_forward_errors_leave_cache),
        cmocka_unit_test(test_cache_of_other_model),
        cmocka_unit_test(test_clear_and_snapshot_reproduce),
        cmocka_unit_test(test_progress_cancel),
        cmocka_unit_test(test_model_free_with_snapshot),
        cmocka_unit_test(test_restore_into_other_cache),
        cmocka_unit_test(test_env_knobs_strict),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

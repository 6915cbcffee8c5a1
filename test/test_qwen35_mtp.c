/* qwen35 MTP (NextN) recognition: a copy of the q35-dense fixture with
 * nextn_predict_layers = 1 and an extra blk.8 block holding the NextN
 * tensors must load, run the unchanged 8-layer trunk (bit-identical logits)
 * and skip the block unless params.load_mtp asks for it. Also: broken
 * qwen35/qwen35moe files fail with an error naming the tensor or key. */
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
#include "gguf_edit.h"
#include "model_impl.h"
#include "testutil.h"

#define FIXTURE "models/q35-dense.f32.gguf"
#define N_TRUNK 8

static const int32_t prompt[] = {785, 922, 865, 293, 651, 77, 282, 78};
#define N_PROMPT ((int32_t)(sizeof prompt / sizeof prompt[0]))

/* The fixture's path; skips the calling test when it is absent. */
static const char *fixture_or_skip(void)
{
    const char *p = tu_fixture_path(FIXTURE);
    if (!p)
        TU_SKIP("fixture %s not found (set MEMRA_FIXTURES)", FIXTURE);
    return p;
}

/* ---- building the synthetic file ------------------------------------------ */

typedef struct mtp_opts {
    uint32_t nextn;          /* nextn_predict_layers written */
    const char *omit;        /* an MTP tensor name (after "blk.8.") left out, or NULL */
} mtp_opts_t;

/* Adds blk.8.NAME with the type, shape and bytes of the fixture's tensor SRC. */
static void add_copy(memra_gguf_writer_t *w, const memra_gguf_t *g, const mtp_opts_t *o, const char *name,
                     const char *src)
{
    if (o->omit && strcmp(o->omit, name) == 0)
        return;
    int64_t i = memra_gguf_find_tensor(g, src);
    assert_true(i >= 0);
    int64_t ne[4];
    uint32_t nd = memra_gguf_tensor_shape(g, i, ne);
    char full[128];
    snprintf(full, sizeof full, "blk.%d.%s", N_TRUNK, name);
    assert_int_equal(memra_gguf_writer_add_tensor(w, full, memra_gguf_tensor_type(g, i), nd, ne,
                                                  memra_gguf_tensor_data(g, i)),
                     MEMRA_OK);
}

/* Writes the fixture plus one MTP block to a temp file; returns its path. */
static const char *build(const char *src, const mtp_opts_t *o, int slot)
{
    memra_gguf_t *g = NULL;
    assert_int_equal(memra_gguf_open(src, &g), MEMRA_OK);
    memra_gguf_writer_t *w = NULL;
    assert_int_equal(memra_gguf_writer_create(&w), MEMRA_OK);

    /* block_count counts the MTP block too (model-spec §5.1) */
    const tu_gguf_edit e = {.drop_key = "qwen35.block_count"};
    assert_int_equal(tu_gguf_copy_kvs(g, w, &e), MEMRA_OK);
    assert_int_equal(memra_gguf_writer_add_u32(w, "qwen35.block_count", N_TRUNK + 1), MEMRA_OK);
    assert_int_equal(memra_gguf_writer_add_u32(w, "qwen35.nextn_predict_layers", o->nextn), MEMRA_OK);
    void *owned = NULL;
    assert_int_equal(tu_gguf_copy_tensors(g, w, NULL, &owned), MEMRA_OK);

    /* the MTP block is a full-attention layer (weights borrowed from layer 3,
     * which is one) plus the NextN projections */
    static const char *const layer_tensors[] = {
        "attn_norm.weight", "post_attention_norm.weight", "attn_q.weight", "attn_k.weight",
        "attn_v.weight", "attn_output.weight", "attn_q_norm.weight", "attn_k_norm.weight",
        "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight",
    };
    for (size_t k = 0; k < sizeof layer_tensors / sizeof layer_tensors[0]; k++) {
        char src_name[128];
        snprintf(src_name, sizeof src_name, "blk.3.%s", layer_tensors[k]);
        add_copy(w, g, o, layer_tensors[k], src_name);
    }
    add_copy(w, g, o, "nextn.enorm.weight", "output_norm.weight");
    add_copy(w, g, o, "nextn.hnorm.weight", "output_norm.weight");
    add_copy(w, g, o, "nextn.shared_head_norm.weight", "output_norm.weight");

    int64_t n_embd = 64;
    float *eh = malloc(sizeof(float) * 2 * n_embd * n_embd);
    assert_non_null(eh);
    for (int64_t j = 0; j < 2 * n_embd * n_embd; j++)
        eh[j] = (float)((j * 37) % 101 - 50) / 512.0f;
    if (!o->omit || strcmp(o->omit, "nextn.eh_proj.weight") != 0) {
        char full[64];
        snprintf(full, sizeof full, "blk.%d.nextn.eh_proj.weight", N_TRUNK);
        assert_int_equal(memra_gguf_writer_add_tensor(w, full, MEMRA_TYPE_F32, 2, (int64_t[]){2 * n_embd, n_embd}, eh),
                         MEMRA_OK);
    }

    void *data = NULL;
    size_t size = 0;
    assert_int_equal(memra_gguf_writer_write_memory(w, &data, &size), MEMRA_OK);
    memra_gguf_writer_destroy(w);
    memra_gguf_close(g);
    free(owned);
    free(eh);
    const char *path = tu_write_temp(data, size, slot);
    memra_free(data);
    assert_non_null(path);
    return path;
}

/* ---- helpers -------------------------------------------------------------- */

static memra_status_t load(const char *path, int load_mtp, memra_model_t **m)
{
    memra_model_params_t p;
    memra_model_default_params(&p);
    p.load_mtp = load_mtp;
    return memra_model_load(path, &p, m);
}

/* Logits of every prompt position (malloc'ed). */
static float *run_prompt(memra_model_t *m)
{
    int32_t V = memra_model_n_vocab(m);
    float *logits = malloc(sizeof(float) * (size_t)V * N_PROMPT);
    assert_non_null(logits);
    memra_cache_t *c = NULL;
    assert_int_equal(memra_cache_create(m, 64, &c), MEMRA_OK);
    memra_status_t st = memra_forward(m, c, prompt, N_PROMPT, MEMRA_FORWARD_ALL_ROWS, logits);
    if (st != MEMRA_OK)
        fail_msg("forward: %s", memra_last_error());
    assert_int_equal(memra_cache_free(c), MEMRA_OK);
    return logits;
}

static float *base_logits(const char *src, int32_t *n_vocab)
{
    memra_model_t *m = NULL;
    if (load(src, 0, &m) != MEMRA_OK)
        fail_msg("load %s: %s", src, memra_last_error());
    *n_vocab = memra_model_n_vocab(m);
    float *l = run_prompt(m);
    assert_int_equal(memra_model_free(m), MEMRA_OK);
    return l;
}

/* ---- tests ---------------------------------------------------------------- */

static void check_trunk(const char *src, const char *path, int load_mtp)
{
    int32_t V;
    float *want = base_logits(src, &V);
    memra_model_t *m = NULL;
    if (load(path, load_mtp, &m) != MEMRA_OK)
        fail_msg("load with MTP block (load_mtp=%d): %s", load_mtp, memra_last_error());
    assert_string_equal(memra_model_arch(m), "qwen35");
    assert_int_equal(memra_model_n_layers(m), N_TRUNK);
    assert_int_equal(memra_model_n_mtp_layers(m), 1);
    assert_int_equal(memra_model_n_vocab(m), V);
    for (int32_t il = 0; il < N_TRUNK; il++)
        assert_int_equal(memra_model_layer_kind(m, il),
                         (il + 1) % 4 == 0 ? MEMRA_LAYER_ATTENTION : MEMRA_LAYER_RECURRENT);
    assert_int_equal(memra_model_layer_kind(m, N_TRUNK), -1);
    float *got = run_prompt(m);
    assert_memory_equal(got, want, sizeof(float) * (size_t)V * N_PROMPT);
    free(got);
    free(want);
    assert_int_equal(memra_model_free(m), MEMRA_OK);
}

static void test_mtp_skipped(void **state)
{
    (void)state;
    const char *src = fixture_or_skip();
    mtp_opts_t o = {.nextn = 1};
    const char *path = build(src, &o, 0);
    check_trunk(src, path, 0);
    remove(path);
}

static void test_mtp_loaded(void **state)
{
    (void)state;
    const char *src = fixture_or_skip();
    mtp_opts_t o = {.nextn = 1};
    const char *path = build(src, &o, 0);
    check_trunk(src, path, 1);
    remove(path);
}

/* A missing NextN tensor matters only when the block is loaded. */
static void test_mtp_missing_tensor(void **state)
{
    (void)state;
    const char *src = fixture_or_skip();
    mtp_opts_t o = {.nextn = 1, .omit = "nextn.eh_proj.weight"};
    const char *path = build(src, &o, 1);
    memra_model_t *m = NULL;
    assert_int_equal(load(path, 0, &m), MEMRA_OK);
    assert_int_equal(memra_model_free(m), MEMRA_OK);
    m = NULL;
    assert_int_equal(load(path, 1, &m), MEMRA_E_FORMAT);
    assert_null(m);
    if (!strstr(memra_last_error(), "blk.8.nextn.eh_proj.weight"))
        fail_msg("error does not name the tensor: %s", memra_last_error());

    o.omit = "attn_q.weight";
    path = build(src, &o, 1);
    assert_int_equal(load(path, 1, &m), MEMRA_E_FORMAT);
    if (!strstr(memra_last_error(), "blk.8.attn_q.weight"))
        fail_msg("error does not name the tensor: %s", memra_last_error());
    remove(path);
}

/* nextn_predict_layers must leave at least one trunk layer. */
static void test_mtp_bad_count(void **state)
{
    (void)state;
    const char *src = fixture_or_skip();
    mtp_opts_t o = {.nextn = N_TRUNK + 1};
    const char *path = build(src, &o, 2);
    memra_model_t *m = NULL;
    assert_int_equal(load(path, 0, &m), MEMRA_E_FORMAT);
    assert_null(m);
    if (!strstr(memra_last_error(), "nextn_predict_layers"))
        fail_msg("error does not name the key: %s", memra_last_error());
    remove(path);
}

/* Broken variants of the fixtures fail to load with the name of the culprit. */
static void expect_bad(const char *fixture, const tu_gguf_edit *e, memra_status_t status, const char *needle)
{
    const char *src = tu_fixture_path(fixture);
    if (!src) {
        fprintf(stderr, "[  SKIPPED ] fixture %s not found\n", fixture);
        return;
    }
    tu_expect_bad_model(src, e, status, needle);
}

static void test_bad_files(void **state)
{
    (void)state;
    const char *d = "models/q35-dense.f32.gguf", *x = "models/q35-moe.f32.gguf";
    expect_bad(d, &(tu_gguf_edit){.drop_tensor = "blk.0.ssm_a"}, MEMRA_E_FORMAT, "blk.0.ssm_a");
    expect_bad(d, &(tu_gguf_edit){.drop_tensor = "blk.3.attn_q_norm.weight"}, MEMRA_E_FORMAT,
               "blk.3.attn_q_norm.weight");
    expect_bad(d, &(tu_gguf_edit){.reshape_tensor = "blk.1.attn_qkv.weight"}, MEMRA_E_FORMAT,
               "blk.1.attn_qkv.weight");
    expect_bad(d, &(tu_gguf_edit){.reshape_tensor = "blk.7.attn_q.weight"}, MEMRA_E_FORMAT, "blk.7.attn_q.weight");
    expect_bad(d, &(tu_gguf_edit){.retype_key_i32 = "qwen35.ssm.conv_kernel"}, MEMRA_E_FORMAT,
               "qwen35.ssm.conv_kernel");
    expect_bad(d, &(tu_gguf_edit){.drop_key = "qwen35.rope.dimension_sections"}, MEMRA_E_FORMAT,
               "qwen35.rope.dimension_sections");
    expect_bad(d, &(tu_gguf_edit){.extra_tensor = "blk.2.attn_q.weight"}, MEMRA_E_FORMAT, "blk.2.attn_q.weight");
    expect_bad(x, &(tu_gguf_edit){.drop_tensor = "blk.1.ffn_gate_inp_shexp.weight"}, MEMRA_E_FORMAT,
               "blk.1.ffn_gate_inp_shexp.weight");
    expect_bad(x, &(tu_gguf_edit){.reshape_tensor = "blk.2.ffn_up_exps.weight"}, MEMRA_E_FORMAT,
               "blk.2.ffn_up_exps.weight");
    expect_bad(x, &(tu_gguf_edit){.retype_key_i32 = "qwen35moe.expert_used_count"}, MEMRA_E_FORMAT,
               "qwen35moe.expert_used_count");
}

int main(void)
{
    /* lib/model.c refers to the archs weakly, which does not pull an arch
     * object out of the static archive this test links; this does. */
    if (!memra__arch_qwen35.bind)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mtp_skipped),
        cmocka_unit_test(test_mtp_loaded),
        cmocka_unit_test(test_mtp_missing_tensor),
        cmocka_unit_test(test_mtp_bad_count),
        cmocka_unit_test(test_bad_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

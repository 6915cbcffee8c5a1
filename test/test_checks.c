/* The exported checks: pipeline parity (every fixture model, 2, 3 and 4
 * stages, serial and pipelined arms plus the single-slot and unsharded ones,
 * every logit bit identical to the unsplit model on the CPU backend) and
 * argmax margin (verdict rules on synthetic logits, then every fixture with
 * its reference prompt), plus their params and report structs. A missing
 * fixture is a skip. MEMRA_TEST_FIXTURE=NAME runs one fixture. */
#include <math.h>
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
#include "json.h"
#include "testutil.h"

/* Strong references pull the arch objects out of the static archive. */
static const memra__arch_t *const k_archs[] = {&memra__arch_llama, &memra__arch_qwen3, &memra__arch_qwen35,
                                               &memra__arch_qwen35moe, &memra__arch_gemma4};

typedef struct fixture {
    const char *name; /* file stem */
    const char *ref;  /* ref.json stem */
} fixture;

static const fixture k_fixtures[] = {
    {"llama-dense.f32", "llama-dense"}, {"qwen3-dense.f32", "qwen3-dense"}, {"q35-dense.f32", "q35-dense"},
    {"q35-dense.q8_0", "q35-dense.q8_0"}, {"q35-moe.f32", "q35-moe"},   {"g4-dense.f32", "g4-dense"},
    {"g4-dense.q8_0", "g4-dense.q8_0"}, {"g4-e.f32", "g4-e"},           {"g4-keqv.f32", "g4-keqv"},
    {"g4-moe.f32", "g4-moe"},
};
#define N_FIXTURES (sizeof k_fixtures / sizeof k_fixtures[0])

static bool selected(const fixture *f)
{
    const char *only = getenv("MEMRA_TEST_FIXTURE");
    return !only || !*only || strcmp(only, f->name) == 0 || strcmp(only, f->ref) == 0;
}

static const char *model_path(const fixture *f)
{
    char rel[256];
    snprintf(rel, sizeof rel, "models/%s.gguf", f->name);
    return tu_fixture_path(rel);
}

static void clear_env(void)
{
    static const char *vars[] = {"MEMRA_PP_STAGES", "MEMRA_PP_DEVICES", "MEMRA_PP_SPLITS", "MEMRA_PP_SHARD",
                                 "MEMRA_PP_STREAMS", "MEMRA_PP_OVERLAP", "MEMRA_PP_SHARE_DEVICE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
}

/* ---- pipeline parity ----------------------------------------------------------- */

static void test_parity_params(void **state)
{
    (void)state;
    memra_pp_parity_params_t p;
    memra_pp_parity_default_params(&p);
    assert_int_equal(p.size, sizeof p);
    assert_int_equal(p.n_stages, 2);
    assert_int_equal(p.n_prompt, 16);
    assert_int_equal(p.n_steps, 32);
    assert_int_equal(p.window, 3);
    assert_null(p.devices);
    assert_null(p.prompt);
    assert_int_equal(p.extra_arms, 0);
    /* an older, shorter struct is filled only as far as its size */
    memra_pp_parity_params_t small;
    memset(&small, 0x5a, sizeof small);
    memra_pp_parity_params_init(&small, (uint32_t)offsetof(memra_pp_parity_params_t, window));
    assert_int_equal(small.n_steps, 32);
    assert_int_equal((uint32_t)small.window, 0x5a5a5a5au);

    memra_pp_parity_report_t r = {.size = sizeof r};
    assert_int_equal(memra_check_pipeline_parity(NULL, &p, &r), MEMRA_E_INVALID);
    r.size = 0;
    assert_int_equal(memra_check_pipeline_parity("x.gguf", &p, &r), MEMRA_E_INVALID);
    r.size = sizeof r;
    p.n_stages = 1;
    assert_int_equal(memra_check_pipeline_parity("x.gguf", &p, &r), MEMRA_E_INVALID);
    assert_non_null(strstr(memra_last_error(), "stages 1"));
    memra_pp_parity_default_params(&p);
    p.window = 0;
    assert_int_equal(memra_check_pipeline_parity("x.gguf", &p, &r), MEMRA_E_INVALID);
    memra_pp_parity_default_params(&p);
    p.devices = "cpu,cpu,cpu";
    assert_int_equal(memra_check_pipeline_parity("x.gguf", &p, &r), MEMRA_E_INVALID);
    memra_pp_parity_default_params(&p);
    assert_int_equal(memra_check_pipeline_parity("/nonexistent/model.gguf", &p, &r), MEMRA_E_IO);
    assert_non_null(strstr(memra_last_error(), "unsplit load"));
}

/* n_prompt + n_steps beyond int32 overflowed (UBSan) and ended as
 * E_NOMEM: it is refused before anything is loaded, naming both. */
static void test_parity_huge_lengths(void **state)
{
    (void)state;
    memra_pp_parity_params_t p;
    memra_pp_parity_report_t r = {.size = sizeof r};
    static const int32_t cases[][2] = {{INT32_MAX, 1}, {1, INT32_MAX}, {1 << 30, 1 << 30}, {INT32_MAX, INT32_MAX}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        memra_pp_parity_default_params(&p);
        p.n_prompt = cases[k][0];
        p.n_steps = cases[k][1];
        assert_int_equal(memra_check_pipeline_parity("/nonexistent/model.gguf", &p, &r), MEMRA_E_INVALID);
        assert_non_null(strstr(memra_last_error(), "n_prompt + n_steps"));
    }
}

/* Report written only as far as the caller's size says. */
static void test_parity_report_size(void **state)
{
    (void)state;
    const fixture *f = &k_fixtures[0];
    const char *path = model_path(f);
    if (!path) {
        TU_SKIP("%s not found (set MEMRA_FIXTURES)", f->name);
        return;
    }
    clear_env();
    memra_pp_parity_params_t p;
    memra_pp_parity_default_params(&p);
    p.n_prompt = 4;
    p.n_steps = 4;
    memra_pp_parity_report_t r;
    memset(&r, 0x77, sizeof r);
    r.size = (uint32_t)offsetof(memra_pp_parity_report_t, n_arms);
    assert_int_equal(memra_check_pipeline_parity(path, &p, &r), MEMRA_OK);
    assert_int_equal(r.size, offsetof(memra_pp_parity_report_t, n_arms));
    assert_int_equal(r.n_stages, 2);
    assert_string_equal(r.arch, "llama");
    assert_string_equal(r.devices, "cpu,cpu");
    assert_int_equal((uint32_t)r.n_arms, 0x77777777u);
    assert_int_equal((uint32_t)r.pass, 0x77777777u);

    /* a caller prompt, explicit cuts */
    int32_t prompt[4] = {1, 2, 3, 4};
    p.prompt = prompt;
    p.splits[0] = 3;
    memra_pp_parity_report_t full = {.size = sizeof full};
    assert_int_equal(memra_check_pipeline_parity(path, &p, &full), MEMRA_OK);
    assert_int_equal(full.fence[1], 3);
    assert_int_equal(full.n_arms, 2);
    assert_string_equal(full.arms[0].name, "serial");
    assert_string_equal(full.arms[1].name, "pipelined");
    assert_int_equal(full.arms[1].window, 3);
    assert_int_equal(full.arms[1].streams, 1);
    assert_int_equal(full.arms[0].streams, 0);
    assert_int_equal(full.arms[0].steps_compared, 8);
    assert_int_equal(full.arms[0].first_step, -1);
    assert_int_equal(full.pass, 1);
    prompt[2] = 1 << 30; /* outside the vocabulary */
    assert_int_equal(memra_check_pipeline_parity(path, &p, &full), MEMRA_E_RANGE);
}

typedef struct parity_case {
    const fixture *f;
    int32_t stages;
    int32_t splits[3]; /* explicit cuts; all 0: the default split */
} parity_case;

/* g4-e (S S F S S F, 2 KV-shared layers) has layer 4 read layer 3's KV and
 * layer 5 layer 2's. These cuts put a shared layer on another stage than its
 * source (the rows travel in the carry to a mirror cache), also past a stage
 * in between (layer 2 -> 5 across [3,5) in 1,3,5), and two remote readers on
 * one stage (cut 3 and 4). */
static const parity_case k_g4e_splits[] = {
    {NULL, 2, {3}},    {NULL, 2, {4}},    {NULL, 2, {5}},       {NULL, 3, {3, 5}},
    {NULL, 3, {2, 4}}, {NULL, 3, {1, 4}}, {NULL, 4, {3, 4, 5}}, {NULL, 4, {1, 3, 5}},
};
#define N_G4E_SPLITS (sizeof k_g4e_splits / sizeof k_g4e_splits[0])

static parity_case g_cases[N_FIXTURES * 3 + N_G4E_SPLITS];

/* memra_check_kernels fills as many lines as report->size holds: a report
 * of 3 lines (a program built with a smaller MEMRA_KERNEL_CHECK_MAX_LINES)
 * gets 3 and the rest counted in truncated, nothing written past it; a
 * size without room for one line is refused. Runs the harness on the CPU
 * (MEMRA_KERNEL_CHECK_CPU=1: both sides CPU engines). */
static void test_kernel_check_report_size(void **state)
{
    (void)state;
    const size_t head = offsetof(memra_kernel_check_report_t, lines), line = sizeof(memra_kernel_check_line_t);
    memra_kernel_check_report_t *r = malloc(sizeof *r); /* this header's size; the call is told 3 lines */
    assert_non_null(r);
    unsigned char *buf = (unsigned char *)r;
    const size_t bytes = sizeof *r;
    memset(buf, 0xA5, bytes);
    r->size = (uint32_t)(head + 3 * line);
    memra_kernel_check_params_t kp;
    memra_kernel_check_default_params(&kp);
    kp.big = 0;
    kp.test = "norm.";
    setenv("MEMRA_KERNEL_CHECK_CPU", "1", 1);
    memra_status_t st = memra_check_kernels(&kp, r);
    assert_int_equal(st, MEMRA_OK);
    assert_int_equal(r->n_lines, 3);
    assert_true(r->truncated > 0);
    assert_int_equal(r->n_failed, 0);
    for (size_t i = head + 3 * line; i < bytes; i++)
        assert_int_equal(buf[i], 0xA5);
    r->size = (uint32_t)(head + line - 1);
    assert_int_equal(memra_check_kernels(&kp, r), MEMRA_E_INVALID);
    unsetenv("MEMRA_KERNEL_CHECK_CPU");
    free(r);
}

static void test_parity(void **state)
{
    const parity_case *pc = *state;
    const fixture *f = pc->f;
    if (!selected(f)) {
        TU_SKIP("%s: not selected by MEMRA_TEST_FIXTURE", f->name);
        return;
    }
    const char *path = model_path(f);
    if (!path) {
        TU_SKIP("%s not found (set MEMRA_FIXTURES)", f->name);
        return;
    }
    clear_env();
    memra_pp_parity_params_t p;
    memra_pp_parity_default_params(&p);
    p.n_stages = pc->stages;
    p.extra_arms = 1;
    p.devices = "cpu";
    const bool explicit_cuts = pc->splits[0] != 0;
    for (int32_t i = 0; explicit_cuts && i < pc->stages - 1; i++)
        p.splits[i] = pc->splits[i];
    memra_pp_parity_report_t r = {.size = sizeof r};
    memra_status_t st = memra_check_pipeline_parity(path, &p, &r);
    if (st && st != MEMRA_E_MISMATCH)
        fail_msg("%s, %d stages: %s (%s)", f->name, pc->stages, memra_status_name(st), memra_last_error());
    char fence[128] = "";
    for (int32_t s = 0, o = 0; s < r.n_stages; s++)
        o += snprintf(fence + o, sizeof fence - (size_t)o, " [%d,%d)", r.fence[s], r.fence[s + 1]);
    printf("PARITY %-16s stages %d %-8s fence%s:", f->name, pc->stages, explicit_cuts ? "explicit" : "default",
           fence);
    for (int32_t i = 0; i < r.n_arms; i++)
        printf(" %s %d/%d", r.arms[i].name, r.arms[i].steps_compared - r.arms[i].steps_mismatched,
               r.arms[i].steps_compared);
    printf(" -> %s\n", r.pass ? "PASS" : "FAIL");
    assert_int_equal(r.n_stages, pc->stages);
    assert_int_equal(r.fence[0], 0);
    assert_int_equal(r.fence[pc->stages], r.n_layers);
    for (int32_t i = 0; explicit_cuts && i < pc->stages - 1; i++)
        assert_int_equal(r.fence[i + 1], pc->splits[i]);
    assert_int_equal(r.n_arms, 4);
    for (int32_t i = 0; i < r.n_arms; i++) {
        const memra_pp_parity_arm_t *a = &r.arms[i];
        assert_int_equal(a->steps_compared, p.n_prompt + p.n_steps);
        if (a->steps_mismatched)
            fail_msg("%s, %d stages, %s arm: %d of %d rows differ; first at row %d index %d: %.9g vs %.9g",
                     f->name, pc->stages, a->name, a->steps_mismatched, a->steps_compared, a->first_step,
                     a->first_index, (double)a->first_ref, (double)a->first_got);
        assert_int_equal(a->first_step, -1);
    }
    assert_int_equal(r.pass, 1);
    assert_int_equal(st, MEMRA_OK);
}

/* ---- argmax margin ----------------------------------------------------------------- */

static void test_margin_params(void **state)
{
    (void)state;
    memra_margin_params_t p;
    memra_margin_default_params(&p);
    assert_int_equal(p.size, sizeof p);
    assert_null(p.device);
    assert_true(p.budget == 0.0f);
    assert_string_equal(memra_margin_verdict_name(MEMRA_MARGIN_STABLE), "stable");
    assert_string_equal(memra_margin_verdict_name(MEMRA_MARGIN_NEAR_TIE_FLIPS), "near-tie flips within budget");
    assert_string_equal(memra_margin_verdict_name(99), "?");
    int32_t t[2] = {1, 2};
    memra_margin_report_t *r = calloc(1, sizeof *r);
    r->size = sizeof *r;
    assert_int_equal(memra_check_argmax_margin("x", NULL, 2, 1, &p, r), MEMRA_E_INVALID);
    assert_int_equal(memra_check_argmax_margin("x", t, 0, 1, &p, r), MEMRA_E_INVALID);
    p.budget = -1;
    assert_int_equal(memra_check_argmax_margin("x", t, 2, 1, &p, r), MEMRA_E_INVALID);
    p.budget = NAN;
    assert_int_equal(memra_check_argmax_margin("x", t, 2, 1, &p, r), MEMRA_E_INVALID);
    r->size = 0;
    assert_int_equal(memra_check_argmax_margin("x", t, 2, 1, NULL, r), MEMRA_E_INVALID);
    free(r);
}

/* Synthetic window rows through the same code as the check. */
#define SV 6
static memra_margin_report_t *synth(int32_t W, const float (*dec)[SV], const float (*pre)[SV], float budget)
{
    memra_margin_report_t *r = calloc(1, sizeof *r);
    r->size = sizeof *r;
    r->n_tokens = 10;
    r->n_vocab = SV;
    r->window = W;
    r->budget = budget;
    memra__margin_fill(r, &dec[0][0], &pre[0][0]);
    return r;
}

static void test_margin_verdicts(void **state)
{
    (void)state;
    const float b = 1e-3f;
    {   /* identical configs, wide margins */
        const float d[3][SV] = {{0, 1, 0, 0, 0, 0}, {0, 0, 5, 1, 0, 0}, {3, 0, 0, 0, 0, 2}};
        memra_margin_report_t *r = synth(3, d, d, b);
        assert_int_equal(r->verdict, MEMRA_MARGIN_STABLE);
        assert_int_equal(r->n_agree, 3);
        assert_true(r->max_spread == 0.0f);
        assert_int_equal(r->rows[1].top1_decode, 2);
        assert_int_equal(r->rows[1].top2_decode, 3);
        assert_true(fabsf(r->rows[1].margin_decode - 4.0f) < 1e-6f);
        assert_int_equal(r->rows[0].pos, 7);
        assert_int_equal(r->decision_pos, 9);
        assert_int_equal(r->decision_rank, 1); /* margins 1, 4, 1: none smaller than the last */
        assert_true(r->decision_percentile == 0.0f);
        free(r);
    }
    {   /* a near tie that did not flip */
        const float d[2][SV] = {{0, 1, 0.9995f, 0, 0, 0}, {0, 0, 5, 1, 0, 0}};
        memra_margin_report_t *r = synth(2, d, d, b);
        assert_int_equal(r->verdict, MEMRA_MARGIN_NEAR_TIE_EXPOSED);
        assert_int_equal(r->decision_rank, 2);
        assert_true(r->decision_percentile == 50.0f);
        free(r);
    }
    {   /* a flip inside the budget */
        const float d[2][SV] = {{0, 1.0002f, 1.0000f, 0, 0, 0}, {0, 0, 5, 1, 0, 0}};
        const float p[2][SV] = {{0, 1.0000f, 1.0003f, 0, 0, 0}, {0, 0, 5, 1, 0, 0}};
        memra_margin_report_t *r = synth(2, d, p, b);
        assert_int_equal(r->verdict, MEMRA_MARGIN_NEAR_TIE_FLIPS);
        assert_int_equal(r->n_flips, 1);
        assert_int_equal(r->rows[0].agree, 0);
        assert_int_equal(r->rows[0].top1_decode, 1);
        assert_int_equal(r->rows[0].top1_prefill, 2);
        free(r);
    }
    {   /* the configs disagree far beyond the budget */
        const float d[2][SV] = {{0, 1, 0, 0, 0, 0}, {0, 0, 5, 1, 0, 0}};
        const float p[2][SV] = {{0, 1.5f, 0, 0, 0, 0}, {0, 0, 5, 1, 0, 0}};
        memra_margin_report_t *r = synth(2, d, p, b);
        assert_int_equal(r->verdict, MEMRA_MARGIN_SYSTEMATIC);
        assert_true(fabsf(r->max_spread - 0.5f) < 1e-6f);
        free(r);
    }
    {   /* non-finite logits explain nothing */
        const float d[1][SV] = {{0, 1, 0, 0, 0, 0}};
        const float p[1][SV] = {{0, 1, NAN, 0, 0, 0}};
        memra_margin_report_t *r = synth(1, d, p, b);
        assert_int_equal(r->verdict, MEMRA_MARGIN_UNEXPLAINED);
        free(r);
    }
}

static void test_margin_fixture(void **state)
{
    const fixture *f = *state;
    if (!selected(f)) {
        TU_SKIP("%s: not selected by MEMRA_TEST_FIXTURE", f->name);
        return;
    }
    char rel[256];
    snprintf(rel, sizeof rel, "models/%s.ref.json", f->ref);
    const char *jp = tu_fixture_path(rel);
    const char *path = model_path(f);
    if (!jp || !path) {
        TU_SKIP("%s not found (set MEMRA_FIXTURES)", f->name);
        return;
    }
    char err[128];
    tj_value_t *doc = tj_parse_file(jp, err, sizeof err);
    if (!doc)
        fail_msg("%s: %s", jp, err);
    int32_t n = 0;
    int32_t *tok = tj_int_array(doc, "tokens", &n);
    tj_free(doc);
    assert_true(n > 24);
    memra_margin_report_t *r = calloc(1, sizeof *r);
    r->size = sizeof *r;
    memra_status_t st = memra_check_argmax_margin(path, tok, n, 24, NULL, r);
    if (st)
        fail_msg("%s: %s (%s)", f->name, memra_status_name(st), memra_last_error());
    printf("MARGIN %-16s window %d agree %d/%d max|d| %.3g min margin %.4g decision %.4g rank %d/%d -> %s\n",
           f->name, r->window, r->n_agree, r->window, (double)r->max_abs_diff, (double)r->min_margin,
           (double)r->decision_margin, r->decision_rank, r->window, memra_margin_verdict_name(r->verdict));
    assert_int_equal(r->window, 24);
    assert_int_equal(r->n_tokens, n);
    assert_int_equal(r->decision_pos, n - 1);
    assert_true(r->decision_rank >= 1 && r->decision_rank <= 24);
    /* the CPU reference is batch-invariant: decode and prefill agree bit for bit */
    assert_true(r->max_abs_diff == 0.0f);
    assert_int_equal(r->n_flips, 0);
    assert_true(r->verdict == MEMRA_MARGIN_STABLE || r->verdict == MEMRA_MARGIN_NEAR_TIE_EXPOSED);

    /* the window is clamped to the prompt and to the report */
    st = memra_check_argmax_margin(path, tok, 5, 1000, NULL, r);
    assert_int_equal(st, MEMRA_OK);
    assert_int_equal(r->window, 5);
    tok[3] = -7;
    assert_int_equal(memra_check_argmax_margin(path, tok, 5, 2, NULL, r), MEMRA_E_RANGE);
    free(tok);
    free(r);
}

int main(void)
{
    for (size_t i = 0; i < sizeof k_archs / sizeof k_archs[0]; i++)
        if (!k_archs[i]->bind)
            return 1;
    struct CMUnitTest tests[4 + N_FIXTURES * 3 + N_G4E_SPLITS + N_FIXTURES] = {
        cmocka_unit_test(test_parity_params),
        cmocka_unit_test(test_parity_huge_lengths),
        cmocka_unit_test(test_parity_report_size),
        cmocka_unit_test(test_kernel_check_report_size),
        cmocka_unit_test(test_margin_params),
        cmocka_unit_test(test_margin_verdicts),
    };
    size_t k = 4;
    static char names[N_FIXTURES * 4 + N_G4E_SPLITS][64];
    for (size_t i = 0; i < N_FIXTURES; i++) {
        for (int32_t s = 2; s <= 4; s++) {
            parity_case *pc = &g_cases[i * 3 + (size_t)(s - 2)];
            pc->f = &k_fixtures[i];
            pc->stages = s;
            char *nm = names[k - 4];
            snprintf(nm, 64, "parity %s x%d", k_fixtures[i].name, s);
            tests[k++] = (struct CMUnitTest){nm, test_parity, NULL, NULL, pc};
        }
    }
    const fixture *g4e = NULL;
    for (size_t i = 0; i < N_FIXTURES; i++)
        if (strcmp(k_fixtures[i].ref, "g4-e") == 0)
            g4e = &k_fixtures[i];
    for (size_t i = 0; i < N_G4E_SPLITS; i++) {
        parity_case *pc = &g_cases[N_FIXTURES * 3 + i];
        *pc = k_g4e_splits[i];
        pc->f = g4e;
        char *nm = names[k - 4];
        int o = snprintf(nm, 64, "parity %s x%d splits", g4e->name, pc->stages);
        for (int32_t c = 0; c < pc->stages - 1; c++)
            o += snprintf(nm + o, 64 - (size_t)o, "%s%d", c ? "," : " ", pc->splits[c]);
        tests[k++] = (struct CMUnitTest){nm, test_parity, NULL, NULL, pc};
    }
    for (size_t i = 0; i < N_FIXTURES; i++) {
        char *nm = names[k - 4];
        snprintf(nm, 64, "margin %s", k_fixtures[i].name);
        tests[k++] = (struct CMUnitTest){nm, test_margin_fixture, NULL, NULL, (void *)&k_fixtures[i]};
    }
    return _cmocka_run_group_tests("checks", tests, k, NULL, NULL);
}

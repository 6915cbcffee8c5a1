/* Tokenizer: llama.cpp's own vocab suites, Hugging Face tokcases, the model
 * fixture prompts, decoding, the buffer convention, errors and threads. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "memra/memra.h"
#include "json.h"
#include "testutil.h"
#include "tokenizer/tok_impl.h"

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* ---- helpers ------------------------------------------------------------- */

static memra_tokenizer_t *load_or_null(const char *path)
{
    memra_tokenizer_t *tok = NULL;
    memra_status_t st = memra_tokenizer_load(path, &tok);
    if (st != MEMRA_OK)
        fail_msg("load %s: %s (%s)", path, memra_status_name(st), memra_last_error());
    return tok;
}

/* The tokenizer of fixture REL; skips the calling test when it is absent. */
static memra_tokenizer_t *load_fixture(const char *rel)
{
    const char *p = tu_fixture_path(rel);
    if (!p)
        TU_SKIP("%s missing", rel);
    return load_or_null(p);
}

/* The JSON document at PATH (fails the test when unreadable or malformed). */
static tj_value_t *load_json(const char *path)
{
    char err[256];
    tj_value_t *doc = tj_parse_file(path, err, sizeof err);
    if (!doc)
        fail_msg("%s: %s", path, err);
    return doc;
}

/* Tokenizes with the size query first; returns malloc'ed ids. */
static int32_t *encode(const memra_tokenizer_t *tok, const char *text, size_t len, uint32_t flags, int32_t *n)
{
    int32_t need = -1;
    memra_status_t st = memra_tokenize(tok, text, len, NULL, 0, flags, &need);
    if (st != MEMRA_OK && st != MEMRA_E_RANGE)
        fail_msg("tokenize: %s (%s)", memra_status_name(st), memra_last_error());
    int32_t *ids = malloc(((size_t)need + 1) * sizeof *ids);
    assert_non_null(ids);
    st = memra_tokenize(tok, text, len, ids, need, flags, n);
    if (st != MEMRA_OK)
        fail_msg("tokenize: %s (%s)", memra_status_name(st), memra_last_error());
    assert_int_equal(*n, need);
    return ids;
}

static char *decode(const memra_tokenizer_t *tok, const int32_t *ids, int32_t n, uint32_t flags, size_t *len)
{
    size_t need = 0;
    memra_status_t st = memra_detokenize(tok, ids, n, NULL, 0, flags, &need);
    if (st != MEMRA_OK && st != MEMRA_E_RANGE)
        fail_msg("detokenize: %s (%s)", memra_status_name(st), memra_last_error());
    char *buf = malloc(need + 1);
    assert_non_null(buf);
    st = memra_detokenize(tok, ids, n, buf, need, flags, len);
    if (st != MEMRA_OK)
        fail_msg("detokenize: %s (%s)", memra_status_name(st), memra_last_error());
    buf[*len] = '\0';
    return buf;
}

static void print_ids(const char *label, const int32_t *v, size_t n)
{
    fprintf(stderr, "    %s:", label);
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, " %d", (int)v[i]);
    fprintf(stderr, "\n");
}

static bool same_ids(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
    return na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0);
}

/* ---- llama.cpp vocab suites (ggml-vocab-*.gguf + .inp/.out) -------------- */

/* Runs one suite; returns the number of failing cases (printed). */
static int run_vocab_suite(const char *gguf, const char *inp, const char *outp, int *n_cases)
{
    size_t ni = 0, no = 0;
    char *in = tu_read_file(inp, &ni);
    char *out = tu_read_file(outp, &no);
    assert_non_null(in);
    assert_non_null(out);
    memra_tokenizer_t *tok = load_or_null(gguf);
    static const char sep[] = "\n__ggml_vocab_test__\n";
    size_t pi = 0, po = 0;
    int cases = 0, bad = 0;
    while (pi < ni) {
        char *hit = memmem(in + pi, ni - pi, sep, sizeof sep - 1);
        if (!hit)
            break;
        size_t len = (size_t)(hit - (in + pi));
        /* the matching .out line */
        size_t le = po;
        while (le < no && out[le] != '\n')
            le++;
        int32_t want[4096];
        size_t nw = 0;
        char *q = out + po;
        while (q < out + le) {
            char *end;
            long v = strtol(q, &end, 10);
            if (end == q)
                break;
            assert_true(nw < N_OF(want));
            want[nw++] = (int32_t)v;
            q = end;
        }
        int32_t n = 0;
        int32_t *got = encode(tok, in + pi, len, 0, &n);
        cases++;
        if (!same_ids(got, (size_t)n, want, nw)) {
            bad++;
            fprintf(stderr, "  %s case %d mismatch: \"%.*s\"\n", gguf, cases, (int)(len > 80 ? 80 : len), in + pi);
            print_ids("want", want, nw);
            print_ids("got ", got, (size_t)n);
        }
        /* Decoding the ids gives the input back for these inputs. */
        size_t dl = 0;
        char *dec = decode(tok, got, n, 0, &dl);
        if (dl != len || memcmp(dec, in + pi, len) != 0) {
            /* SentencePiece drops a leading space: " Hello" and "Hello" both decode to "Hello" */
            bool spm = strcmp(memra_tokenizer_model(tok), "llama") == 0;
            if (!(spm && len && in[pi] == ' ' && dl + 1 == len && memcmp(dec, in + pi + 1, dl) == 0)) {
                bad++;
                fprintf(stderr, "  %s case %d does not round-trip: \"%s\"\n", gguf, cases, dec);
            }
        }
        free(dec);
        free(got);
        pi = (size_t)(hit - in) + sizeof sep - 1;
        po = le < no ? le + 1 : le;
    }
    memra_tokenizer_free(tok);
    free(in);
    free(out);
    *n_cases = cases;
    return bad;
}

static void test_bundled_suite(void **state)
{
    (void)state;
    char g[4096], i[4096], o[4096];
    snprintf(g, sizeof g, "%s", tu_data_path("ggml-vocab-llama-spm.gguf"));
    snprintf(i, sizeof i, "%s", tu_data_path("ggml-vocab-llama-spm.gguf.inp"));
    snprintf(o, sizeof o, "%s", tu_data_path("ggml-vocab-llama-spm.gguf.out"));
    int n = 0;
    int bad = run_vocab_suite(g, i, o, &n);
    print_message("bundled llama-spm suite: %d/%d cases exact\n", n - bad, n);
    assert_int_equal(n, 46);
    assert_int_equal(bad, 0);
}

static void test_vocab_suites(void **state)
{
    (void)state;
    static const char *const names[] = {"gpt-2", "starcoder", "falcon", "deepseek-coder", "llama-spm", "phi-3"};
    int total_bad = 0, ran = 0;
    for (size_t k = 0; k < N_OF(names); k++) {
        char rel[256], g[4000], i[4096], o[4096];
        snprintf(rel, sizeof rel, "tokenizer/ggml-vocab-%s.gguf", names[k]);
        const char *p = tu_fixture_path(rel);
        if (!p) {
            fprintf(stderr, "  missing fixture %s\n", rel);
            continue;
        }
        snprintf(g, sizeof g, "%s", p);
        snprintf(i, sizeof i, "%s.inp", g);
        snprintf(o, sizeof o, "%s.out", g);
        int n = 0;
        int bad = run_vocab_suite(g, i, o, &n);
        print_message("ggml-vocab-%s: %d/%d cases exact\n", names[k], n - bad, n);
        assert_int_equal(n, 46);
        total_bad += bad;
        ran++;
    }
    if (!ran)
        TU_SKIP("no ggml-vocab-* fixtures under %s", tu_fixtures() ? tu_fixtures() : "(none)");
    assert_int_equal(total_bad, 0);
}

/* ---- Hugging Face tokcases ----------------------------------------------- */

static bool json_ids(const tj_value_t *arr, int32_t *out, size_t cap, size_t *n)
{
    if (!arr || arr->type != TJ_ARR || arr->n > cap)
        return false;
    for (size_t i = 0; i < arr->n; i++)
        out[i] = (int32_t)arr->items[i].num;
    *n = arr->n;
    return true;
}

static void run_tokcases(const char *name, int *ok_ids, int *ok_special, int *ok_dec, int *total)
{
    char rel[256];
    snprintf(rel, sizeof rel, "tokenizer/vocab-%s.tokcases.json", name);
    const char *jp = tu_fixture_path(rel);
    snprintf(rel, sizeof rel, "tokenizer/vocab-%s.gguf", name);
    const char *gp = tu_fixture_path(rel);
    *ok_ids = *ok_special = *ok_dec = *total = -1;
    if (!jp || !gp)
        return;
    tj_value_t *doc = load_json(jp);
    memra_tokenizer_t *tok = load_or_null(gp);
    const tj_value_t *cases = tj_get(doc, "cases");
    assert_non_null(cases);
    *ok_ids = *ok_special = *ok_dec = 0;
    *total = (int)cases->n;
    static int32_t want[65536];
    for (size_t c = 0; c < cases->n; c++) {
        const tj_value_t *cs = &cases->items[c];
        const tj_value_t *text = tj_get(cs, "text");
        const tj_value_t *dec = tj_get(cs, "decoded");
        assert_non_null(text);
        size_t nw = 0;
        int32_t n = 0;

        assert_true(json_ids(tj_get(cs, "ids"), want, N_OF(want), &nw));
        int32_t *got = encode(tok, text->str, text->len, MEMRA_TOKENIZE_PARSE_SPECIAL, &n);
        if (same_ids(got, (size_t)n, want, nw)) {
            (*ok_ids)++;
        } else {
            fprintf(stderr, "  %s case %zu ids mismatch: \"%.80s\"\n", name, c, text->str);
            print_ids("want", want, nw);
            print_ids("got ", got, (size_t)n);
        }
        /* decoded = detokenize(ids) of the reference ids, specials written out */
        if (dec && dec->type == TJ_STR) {
            size_t dl = 0;
            char *d = decode(tok, want, (int32_t)nw, MEMRA_DETOKENIZE_UNPARSE_SPECIAL, &dl);
            if (dl == dec->len && memcmp(d, dec->str, dl) == 0)
                (*ok_dec)++;
            else
                fprintf(stderr, "  %s case %zu decode mismatch: want \"%.80s\" got \"%.80s\"\n", name, c, dec->str, d);
            free(d);
        }
        free(got);

        assert_true(json_ids(tj_get(cs, "ids_with_special"), want, N_OF(want), &nw));
        got = encode(tok, text->str, text->len, MEMRA_TOKENIZE_PARSE_SPECIAL | MEMRA_TOKENIZE_ADD_SPECIAL, &n);
        if (same_ids(got, (size_t)n, want, nw)) {
            (*ok_special)++;
        } else {
            fprintf(stderr, "  %s case %zu ids_with_special mismatch: \"%.80s\"\n", name, c, text->str);
            print_ids("want", want, nw);
            print_ids("got ", got, (size_t)n);
        }
        free(got);
    }
    memra_tokenizer_free(tok);
    tj_free(doc);
}

static void test_tokcases(void **state)
{
    (void)state;
    static const char *const names[] = {"qwen3", "llama3", "gemma4"};
    int ran = 0, bad = 0;
    for (size_t k = 0; k < N_OF(names); k++) {
        int a, b, d, t;
        run_tokcases(names[k], &a, &b, &d, &t);
        if (t < 0) {
            fprintf(stderr, "  missing fixture vocab-%s\n", names[k]);
            continue;
        }
        ran++;
        print_message("vocab-%s tokcases: ids %d/%d, ids_with_special %d/%d, decoded %d/%d\n", names[k], a, t, b, t,
                      d, t);
        bad += (t - a) + (t - b) + (t - d);
    }
    if (!ran)
        TU_SKIP("no vocab-*.tokcases.json fixtures");
    assert_int_equal(bad, 0);
}

/* ---- model fixture prompts ----------------------------------------------- */

static void test_model_prompts(void **state)
{
    (void)state;
    static const char *const models[] = {"q35-dense", "q35-moe", "qwen3-dense", "llama-dense",
                                         "g4-dense",  "g4-e",    "g4-keqv",     "g4-moe"};
    int ran = 0;
    for (size_t k = 0; k < N_OF(models); k++) {
        char rel[256], gp[4096];
        snprintf(rel, sizeof rel, "models/%s.ref.json", models[k]);
        const char *jp = tu_fixture_path(rel);
        snprintf(rel, sizeof rel, "models/%s.f32.gguf", models[k]);
        const char *p = tu_fixture_path(rel);
        if (!jp || !p) {
            fprintf(stderr, "  missing fixture %s\n", models[k]);
            continue;
        }
        snprintf(gp, sizeof gp, "%s", p);
        tj_value_t *doc = load_json(jp);
        const tj_value_t *prompt = tj_get(doc, "prompt");
        static int32_t want[4096];
        size_t nw = 0;
        assert_non_null(prompt);
        assert_true(json_ids(tj_get(doc, "tokens"), want, N_OF(want), &nw));

        memra_tokenizer_t *tok = load_or_null(gp);
        int32_t n = 0;
        int32_t *got = encode(tok, prompt->str, prompt->len, MEMRA_TOKENIZE_ADD_SPECIAL, &n);
        /* llama-dense's reference was tokenized without the BOS llama-bpe adds. */
        size_t skip = strcmp(models[k], "llama-dense") == 0 ? 1 : 0;
        if (skip)
            assert_int_equal(got[0], memra_tokenizer_bos(tok));
        bool ok = (size_t)n >= nw + skip && memcmp(got + skip, want, nw * sizeof *want) == 0;
        if (!ok) {
            print_ids("want", want, nw);
            print_ids("got ", got, (size_t)n);
        }
        print_message("%s: prompt -> %d tokens, first %zu %s the reference\n", models[k], n, nw,
                      ok ? "match" : "DO NOT match");
        assert_true(ok);
        ran++;
        free(got);
        memra_tokenizer_free(tok);
        tj_free(doc);
    }
    if (!ran)
        TU_SKIP("no model fixtures");
}

/* ---- API behaviour on the bundled vocabulary ----------------------------- */

static memra_tokenizer_t *bundled(void)
{
    return load_or_null(tu_data_path("ggml-vocab-llama-spm.gguf"));
}

static void test_buffer_convention(void **state)
{
    (void)state;
    memra_tokenizer_t *tok = bundled();
    const char *text = "Hello world, this is a test.";
    int32_t n = -1, ids[64];
    assert_int_equal(memra_tokenize(tok, text, strlen(text), NULL, 0, MEMRA_TOKENIZE_ADD_SPECIAL, &n), MEMRA_E_RANGE);
    assert_true(n > 2);
    int32_t need = n;
    assert_int_equal(memra_tokenize(tok, text, strlen(text), ids, need - 1, MEMRA_TOKENIZE_ADD_SPECIAL, &n),
                     MEMRA_E_RANGE);
    assert_int_equal(n, need);
    assert_int_equal(memra_tokenize(tok, text, strlen(text), ids, need, MEMRA_TOKENIZE_ADD_SPECIAL, &n), MEMRA_OK);
    assert_int_equal(n, need);
    assert_int_equal(ids[0], 1); /* <s> */

    size_t len = 0;
    char buf[256];
    assert_int_equal(memra_detokenize(tok, ids, n, NULL, 0, MEMRA_DETOKENIZE_REMOVE_SPECIAL, &len), MEMRA_E_RANGE);
    /* BOS removed: llama.cpp keeps the first piece's space then */
    assert_int_equal(len, strlen(text) + 1);
    assert_int_equal(memra_detokenize(tok, ids, n, buf, len - 1, MEMRA_DETOKENIZE_REMOVE_SPECIAL, &len), MEMRA_E_RANGE);
    assert_int_equal(memra_detokenize(tok, ids, n, buf, sizeof buf, MEMRA_DETOKENIZE_REMOVE_SPECIAL, &len), MEMRA_OK);
    assert_memory_equal(buf, " Hello world, this is a test.", len);
    /* Without removal the control token is silent unless unparsed. */
    assert_int_equal(memra_detokenize(tok, ids, n, buf, sizeof buf, 0, &len), MEMRA_OK);
    assert_memory_equal(buf, " Hello world, this is a test.", len);
    assert_int_equal(memra_detokenize(tok, ids, n, buf, sizeof buf, MEMRA_DETOKENIZE_UNPARSE_SPECIAL, &len), MEMRA_OK);
    assert_int_equal(len, strlen("<s> Hello world, this is a test."));
    assert_memory_equal(buf, "<s> Hello world, this is a test.", len);
    /* Without BOS the SentencePiece prefix space goes away. */
    assert_int_equal(memra_detokenize(tok, ids + 1, n - 1, buf, sizeof buf, 0, &len), MEMRA_OK);
    assert_int_equal(len, strlen(text));
    assert_memory_equal(buf, text, len);

    /* token_to_piece */
    assert_int_equal(memra_token_to_piece(tok, 1, buf, sizeof buf, 0, &len), MEMRA_OK);
    assert_int_equal(len, 0);
    assert_int_equal(memra_token_to_piece(tok, 1, buf, sizeof buf, MEMRA_PIECE_SPECIAL, &len), MEMRA_OK);
    assert_int_equal(len, 3);
    assert_memory_equal(buf, "<s>", 3);
    int32_t hello = memra_tokenizer_token_id(tok, "\xE2\x96\x81Hello", 8);
    assert_true(hello > 0);
    assert_int_equal(memra_token_to_piece(tok, hello, NULL, 0, 0, &len), MEMRA_E_RANGE);
    assert_int_equal(len, 6);
    assert_int_equal(memra_token_to_piece(tok, hello, buf, sizeof buf, MEMRA_PIECE_LSTRIP, &len), MEMRA_OK);
    assert_int_equal(len, 5);
    assert_memory_equal(buf, "Hello", 5);
    int32_t b0a = memra_tokenizer_token_id(tok, "<0x0A>", 6);
    assert_int_equal(memra_tokenizer_token_attr(tok, b0a), MEMRA_TOKEN_ATTR_BYTE);
    assert_int_equal(memra_token_to_piece(tok, b0a, buf, sizeof buf, 0, &len), MEMRA_OK);
    assert_int_equal(len, 1);
    assert_int_equal(buf[0], '\n');
    assert_int_equal(memra_tokenizer_special(tok, MEMRA_SPECIAL_NL), b0a);
    memra_tokenizer_free(tok);
}

static void test_errors(void **state)
{
    (void)state;
    memra_tokenizer_t *tok = bundled();
    int32_t ids[16], n = 99;
    /* invalid UTF-8: lone continuation, overlong, surrogate, truncated */
    static const char *const bad[] = {"ab\x80", "\xC0\xAF", "\xED\xA0\x80", "x\xE2\x96", "\xF5\x80\x80\x80"};
    for (size_t i = 0; i < N_OF(bad); i++) {
        assert_int_equal(memra_tokenize(tok, bad[i], strlen(bad[i]), ids, 16, 0, &n), MEMRA_E_INVALID);
        assert_int_equal(n, 0);
        assert_non_null(strstr(memra_last_error(), "invalid UTF-8"));
        assert_non_null(strstr(memra_tokenizer_last_error(tok), "invalid UTF-8 at byte"));
    }
    /* NUL bytes are text */
    assert_int_equal(memra_tokenize(tok, "a\0b", 3, ids, 16, 0, &n), MEMRA_OK);
    assert_true(n >= 2);
    assert_int_equal(memra_tokenize(tok, NULL, 0, ids, 16, MEMRA_TOKENIZE_ADD_SPECIAL, &n), MEMRA_OK);
    assert_int_equal(n, 1);
    assert_int_equal(memra_tokenize(tok, "", 0, ids, 16, 0, &n), MEMRA_OK);
    assert_int_equal(n, 0);
    assert_int_equal(memra_tokenize(tok, "x", 1, ids, 16, 0x80, &n), MEMRA_E_INVALID);
    assert_int_equal(memra_tokenize(tok, "x", 1, NULL, 4, 0, &n), MEMRA_E_INVALID);
    assert_int_equal(memra_tokenize(tok, "x", 1, ids, 4, 0, NULL), MEMRA_E_INVALID);
    assert_int_equal(memra_tokenize(NULL, "x", 1, ids, 4, 0, &n), MEMRA_E_INVALID);

    char buf[64];
    size_t len = 7;
    int32_t out_of_range[] = {5, 32000};
    assert_int_equal(memra_detokenize(tok, out_of_range, 2, buf, sizeof buf, 0, &len), MEMRA_E_RANGE);
    assert_int_equal(len, 0);
    assert_non_null(strstr(memra_tokenizer_last_error(tok), "ids[1] = 32000"));
    int32_t neg[] = {-1};
    assert_int_equal(memra_detokenize(tok, neg, 1, buf, sizeof buf, 0, &len), MEMRA_E_RANGE);
    assert_int_equal(memra_token_to_piece(tok, 32000, buf, sizeof buf, 0, &len), MEMRA_E_RANGE);
    assert_int_equal(memra_token_to_piece(tok, -5, buf, sizeof buf, 0, &len), MEMRA_E_RANGE);
    assert_null(memra_tokenizer_token_text(tok, 32000));
    assert_null(memra_tokenizer_token_text(tok, -1));
    assert_int_equal(memra_tokenizer_token_attr(tok, 1 << 30), 0);
    assert_int_equal(memra_tokenizer_is_eog(tok, -1), 0);
    assert_int_equal(memra_tokenizer_special(tok, MEMRA_SPECIAL_COUNT), -1);
    memra_tokenizer_free(tok);
    memra_tokenizer_free(NULL);

    memra_tokenizer_t *t2 = (memra_tokenizer_t *)1;
    assert_int_equal(memra_tokenizer_load("/nonexistent/vocab.gguf", &t2), MEMRA_E_IO);
    assert_null(t2);
}

/* Builds a vocab-only GGUF in memory with the given model/pre. */
static memra_status_t tiny_vocab(const char *model, const char *pre, bool with_merges, memra_tokenizer_t **out)
{
    memra_gguf_writer_t *w = NULL;
    assert_int_equal(memra_gguf_writer_create(&w), MEMRA_OK);
    static const char *const toks[] = {"a", "b", "ab", "<|end|>", "\xC4\xA0"};
    static const char *const merges[] = {"a b"};
    int32_t types[] = {1, 1, 1, 3, 1};
    assert_int_equal(memra_gguf_writer_add_str(w, "general.architecture", "llama"), MEMRA_OK);
    assert_int_equal(memra_gguf_writer_add_str(w, "tokenizer.ggml.model", model), MEMRA_OK);
    if (pre)
        assert_int_equal(memra_gguf_writer_add_str(w, "tokenizer.ggml.pre", pre), MEMRA_OK);
    assert_int_equal(memra_gguf_writer_add_str_array(w, "tokenizer.ggml.tokens", toks, NULL, N_OF(toks)), MEMRA_OK);
    assert_int_equal(memra_gguf_writer_add_array(w, "tokenizer.ggml.token_type", MEMRA_GGUF_INT32, types, N_OF(types)),
                     MEMRA_OK);
    if (with_merges)
        assert_int_equal(memra_gguf_writer_add_str_array(w, "tokenizer.ggml.merges", merges, NULL, 1), MEMRA_OK);
    void *data = NULL;
    size_t size = 0;
    assert_int_equal(memra_gguf_writer_write_memory(w, &data, &size), MEMRA_OK);
    memra_gguf_writer_destroy(w);
    memra_gguf_t *g = NULL;
    assert_int_equal(memra_gguf_open_memory(data, size, &g), MEMRA_OK);
    memra_status_t st = memra_tokenizer_from_gguf(g, out);
    memra_gguf_close(g); /* the tokenizer must not need it any more */
    memra_free(data);
    return st;
}

static void test_load_errors(void **state)
{
    (void)state;
    memra_tokenizer_t *tok = NULL;
    assert_int_equal(tiny_vocab("gpt2", "no-such-pre", true, &tok), MEMRA_E_UNSUPPORTED);
    assert_null(tok);
    assert_non_null(strstr(memra_last_error(), "unknown pre-tokenizer type 'no-such-pre'"));
    assert_non_null(strstr(memra_last_error(), "qwen35"));
    assert_int_equal(tiny_vocab("wordpiece9", NULL, true, &tok), MEMRA_E_UNSUPPORTED);
    assert_non_null(strstr(memra_last_error(), "unsupported tokenizer model 'wordpiece9'"));
    assert_int_equal(tiny_vocab("gpt2", "qwen2", false, &tok), MEMRA_E_FORMAT);
    assert_non_null(strstr(memra_last_error(), "merges"));

    /* A tiny gpt2 vocabulary works after the GGUF is gone. */
    assert_int_equal(tiny_vocab("gpt2", "qwen2", true, &tok), MEMRA_OK);
    int32_t ids[8], n = 0;
    assert_int_equal(memra_tokenize(tok, "ab ab", 5, ids, 8, 0, &n), MEMRA_OK);
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], 2);
    assert_int_equal(ids[1], 4); /* " " (GPT-2 alphabet) */
    assert_int_equal(ids[2], 2);
    /* A char with no token falls back to its one-byte tokens, or to nothing. */
    assert_int_equal(memra_tokenize(tok, "abc", 3, ids, 8, 0, &n), MEMRA_OK);
    assert_int_equal(n, 1);
    /* "<|end|>" is control: split only when asked; it is end-of-generation */
    assert_int_equal(memra_tokenize(tok, "<|end|>", 7, ids, 8, MEMRA_TOKENIZE_PARSE_SPECIAL, &n), MEMRA_OK);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 3);
    assert_true(memra_tokenizer_is_eog(tok, 3));
    assert_int_equal(memra_tokenizer_eot(tok), 3);
    int32_t eog[4];
    assert_int_equal(memra_tokenizer_eog_ids(tok, eog, 4, &n), MEMRA_OK);
    assert_int_equal(n, 1);
    assert_int_equal(memra_tokenizer_eog_ids(tok, NULL, 0, &n), MEMRA_E_RANGE);
    assert_int_equal(n, 1);
    /* gpt2 default BOS = EOS = 11 is out of this vocabulary's range */
    assert_int_equal(memra_tokenizer_bos(tok), -1);
    assert_null(memra_tokenizer_chat_template(tok));
    assert_string_equal(memra_tokenizer_pre(tok), "qwen2");
    assert_string_equal(memra_tokenizer_model(tok), "gpt2");
    memra_tokenizer_free(tok);
}

static void test_qwen_vocab(void **state)
{
    (void)state;
    memra_tokenizer_t *tok = load_fixture("tokenizer/vocab-qwen3.gguf");
    assert_int_equal(memra_tokenizer_n_vocab(tok), 151936);
    assert_int_equal(memra_tokenizer_eos(tok), 151645);
    assert_int_equal(memra_tokenizer_special(tok, MEMRA_SPECIAL_PAD), 151643);
    assert_int_equal(memra_tokenizer_eot(tok), 151645); /* <|im_end|> */
    assert_int_equal(memra_tokenizer_add_bos(tok), 0);
    assert_true(memra_tokenizer_is_eog(tok, 151645));
    assert_true(memra_tokenizer_is_eog(tok, 151643)); /* <|endoftext|> */
    assert_false(memra_tokenizer_is_eog(tok, 151644)); /* <|im_start|> */
    const char *tmpl = memra_tokenizer_chat_template(tok);
    assert_non_null(tmpl);
    assert_int_equal(strlen(tmpl), 4116);
    assert_string_equal(memra_tokenizer_token_text(tok, 151644), "<|im_start|>");
    assert_int_equal(memra_tokenizer_special(tok, MEMRA_SPECIAL_NL), 198);

    /* the two encode switches are independent */
    const char *text = "<|im_start|>user\nhi<|im_end|>";
    int32_t a[64], n = 0;
    assert_int_equal(memra_tokenize(tok, text, strlen(text), a, 64, MEMRA_TOKENIZE_PARSE_SPECIAL, &n), MEMRA_OK);
    assert_int_equal(a[0], 151644);
    assert_int_equal(a[n - 1], 151645);
    int32_t m = 0;
    assert_int_equal(memra_tokenize(tok, text, strlen(text), a, 64, 0, &m), MEMRA_OK);
    assert_true(m > n);
    assert_int_not_equal(a[0], 151644);
    /* ADD_SPECIAL adds nothing for Qwen (no BOS, no EOS) */
    assert_int_equal(memra_tokenize(tok, text, strlen(text), a, 64, MEMRA_TOKENIZE_ADD_SPECIAL, &m), MEMRA_OK);
    assert_int_not_equal(a[0], memra_tokenizer_bos(tok));
    /* CLEAN_SPACES does nothing for qwen2 (clean_spaces off) */
    int32_t ids[16];
    assert_int_equal(memra_tokenize(tok, "a , b", 5, ids, 16, 0, &n), MEMRA_OK);
    char buf[32];
    size_t len = 0;
    assert_int_equal(memra_detokenize(tok, ids, n, buf, sizeof buf, MEMRA_DETOKENIZE_CLEAN_SPACES, &len), MEMRA_OK);
    assert_int_equal(len, 5);
    memra_tokenizer_free(tok);
}

static void test_clean_spaces(void **state)
{
    (void)state;
    memra_tokenizer_t *tok = load_fixture("tokenizer/ggml-vocab-gpt-2.gguf");
    const char *text = "Hello , world ! It 's a ' b ' c 't";
    int32_t n = 0;
    int32_t *ids = encode(tok, text, strlen(text), 0, &n);
    size_t len = 0;
    char *d = decode(tok, ids, n, 0, &len);
    assert_string_equal(d, text);
    free(d);
    d = decode(tok, ids, n, MEMRA_DETOKENIZE_CLEAN_SPACES, &len);
    assert_string_equal(d, "Hello, world! It's a'b'c 't");
    free(d);
    free(ids);
    memra_tokenizer_free(tok);
}

/* ---- threads ------------------------------------------------------------- */

typedef struct job {
    const memra_tokenizer_t *tok;
    const char *text;
    size_t len;
    const int32_t *want;
    int32_t n_want;
    int ok;
} job_t;

static void *worker(void *arg)
{
    job_t *j = arg;
    int32_t *ids = malloc(((size_t)j->n_want + 16) * sizeof *ids);
    j->ok = 1;
    for (int rep = 0; rep < 8 && ids; rep++) {
        int32_t n = 0;
        if (memra_tokenize(j->tok, j->text, j->len, ids, j->n_want + 16, MEMRA_TOKENIZE_PARSE_SPECIAL, &n) != MEMRA_OK ||
            n != j->n_want || memcmp(ids, j->want, (size_t)n * sizeof *ids) != 0)
            j->ok = 0;
        char bad[] = "x\xFF";
        /* failures on the shared handle at the same time */
        if (memra_tokenize(j->tok, bad, 2, ids, 4, 0, &n) != MEMRA_E_INVALID)
            j->ok = 0;
    }
    free(ids);
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    const char *p = tu_fixture_path("tokenizer/vocab-qwen3.gguf");
    memra_tokenizer_t *tok = p ? load_or_null(p) : bundled();
    /* ~200 KB of varied text, big enough to use the word cache */
    size_t cap = 220000, len = 0;
    char *text = malloc(cap);
    static const char *const parts[] = {"Hello world. ", "naïve café ", "数字 12345 ", "<|im_start|>", "  \n\t",
                                        "I'll've 're ", "🦙🚀 ", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa "};
    for (unsigned i = 0; len + 80 < cap; i = i * 1103515245u + 12345u) {
        const char *s = parts[(i >> 16) % N_OF(parts)];
        memcpy(text + len, s, strlen(s));
        len += strlen(s);
    }
    int32_t n = 0;
    int32_t *want = encode(tok, text, len, MEMRA_TOKENIZE_PARSE_SPECIAL, &n);
    /* Same result as encoding the text in small pieces (no cache). */
    job_t jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (job_t){tok, text, len, want, n, 0};
        assert_int_equal(pthread_create(&th[i], NULL, worker, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_true(jobs[i].ok);
    }
    free(want);
    free(text);
    memra_tokenizer_free(tok);
}

/* The per-call word cache (inputs of 4 KiB and more) must not change
 * results: a big text of units separated by a special token equals the units
 * encoded one by one (each too short for the cache). */
static void test_cache_consistency(void **state)
{
    (void)state;
    memra_tokenizer_t *tok = load_fixture("tokenizer/vocab-llama3.gguf");
    static const char *const words[] = {"the", " quick", " brown", " fox", "!", " 1234567", " été", "\n", " 's",
                                        "  ", "Ünïcödé", " x", " AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "\n\n "};
    const char sep[] = "<|eot_id|>";
    int32_t sep_id = memra_tokenizer_token_id(tok, sep, strlen(sep));
    assert_true(sep_id >= 0);
    size_t cap = 64000, len = 0;
    char *text = malloc(cap);
    int32_t *cat = malloc(cap * sizeof *cat);
    int32_t nc = 0;
    unsigned r = 7;
    while (len + 400 < cap) {
        size_t start = len;
        for (int w = 0; w < 20; w++) {
            r = r * 1664525u + 1013904223u;
            const char *s = words[(r >> 20) % N_OF(words)];
            memcpy(text + len, s, strlen(s));
            len += strlen(s);
        }
        int32_t m = 0;
        int32_t *part = encode(tok, text + start, len - start, 0, &m);
        memcpy(cat + nc, part, (size_t)m * sizeof *cat);
        nc += m;
        free(part);
        memcpy(text + len, sep, strlen(sep));
        len += strlen(sep);
        cat[nc++] = sep_id;
    }
    int32_t n = 0;
    int32_t *big = encode(tok, text, len, MEMRA_TOKENIZE_PARSE_SPECIAL, &n);
    assert_int_equal(nc, n);
    assert_memory_equal(cat, big, (size_t)n * sizeof *cat);
    free(cat);
    free(big);
    free(text);
    memra_tokenizer_free(tok);
}

/* ---- internal equivalences ----------------------------------------------- */

/* Pieces chosen to hit every branch of the pre-tokenizer regexes: letters,
 * marks (Mn, Mc, Me), digits (Nd, Nl, No), each whitespace kind llama.cpp
 * knows, contractions in both cases, punctuation, symbols, controls. All were
 * assigned by Unicode 13, so utf8proc and PCRE2 classify them alike. */
static const char *const PIECES[] = {
    "a", "Z", "word", "\xC3\xA9", "\xC3\x9F", "\xD0\x96", "\xE4\xB8\xAD", "3", "42", "12345",
    "\xD9\xA3", "\xC2\xBD", "\xE2\x85\xAB", " ", "  ", "   ", "\t", "\n", "\r", "\r\n", "\v", "\f",
    "\xC2\xA0", "\xE2\x80\xA8", "\xE3\x80\x80", "\xC2\x85", "\xE1\xA0\x8E", "'", "'s", "'S", "'ll",
    "'Re", "'vE", "'d", "'m", "'t", "!", ".", ",", "...", "\xF0\x9F\x98\x80", "\xCC\x81", "\xE0\xA4\x83",
    "\xE2\x83\x9D", "\xE2\x80\x8D", "\x01", "\x1F", "_", "-", "$", "~", "<", "|", "`", "^", "+", "=",
    "\xE2\x80\x9C", "\xEF\xBC\x81", "\xE2\x96\x81", ">", "</", "\xE2\x80\x94"};

static size_t random_text(char *buf, size_t cap, unsigned *seed, int n_pieces)
{
    size_t len = 0;
    for (int i = 0; i < n_pieces; i++) {
        *seed = *seed * 1103515245u + 12345u;
        const char *p = PIECES[(*seed >> 8) % N_OF(PIECES)];
        size_t l = strlen(p);
        if (len + l >= cap)
            break;
        memcpy(buf + len, p, l);
        len += l;
    }
    return len;
}

static void test_splitters_match_pcre2(void **state)
{
    (void)state;
    static const char *const pres[] = {"gpt-2", "llama-bpe", "qwen2", "qwen35", "starcoder", "falcon", "default",
                                       "gemma4"};
    memra__spans_t a = {0}, b = {0};
    for (size_t k = 0; k < N_OF(pres); k++) {
        memra__pretok_t *p = NULL;
        memra__pretok_scratch_t *s = NULL;
        assert_int_equal(memra__pretok_create(pres[k], &p), MEMRA_OK);
        unsigned seed = 1234u + (unsigned)k;
        for (int t = 0; t < 3000; t++) {
            char text[512];
            size_t n = random_text(text, sizeof text, &seed, 1 + t % 40);
            assert_int_equal(memra__pretok_split(p, &s, text, n, false, &a), MEMRA_OK);
            assert_int_equal(memra__pretok_split(p, &s, text, n, true, &b), MEMRA_OK);
            if (a.n != b.n || memcmp(a.v, b.v, a.n * sizeof *a.v) != 0) {
                fprintf(stderr, "  %s: hand-written and PCRE2 splits differ on \"%.*s\"\n", pres[k], (int)n, text);
                for (size_t i = 0; i < a.n; i++)
                    fprintf(stderr, "    hand [%.*s]\n", (int)a.v[i].len, text + a.v[i].off);
                for (size_t i = 0; i < b.n; i++)
                    fprintf(stderr, "    pcre [%.*s]\n", (int)b.v[i].len, text + b.v[i].off);
                fail();
            }
        }
        memra__pretok_scratch_free(s);
        memra__pretok_free(p);
    }
    free(a.v);
    free(b.v);
}

/* Word-by-word merging (ws_cut) gives what merging whole pieces gives. Whole
 * lines are long, so this also pits the heap merge against the scan merge. */
static void check_ws_cut(const char *path)
{
    memra_tokenizer_t *tok = load_or_null(path);
    assert_true(tok->ws_cut);
    unsigned seed = 99;
    for (int t = 0; t < 300; t++) {
        char text[2048];
        size_t n = random_text(text, sizeof text, &seed, 20 + t % 150);
        int32_t n1 = 0, n2 = 0;
        int32_t *x = encode(tok, text, n, MEMRA_TOKENIZE_PARSE_SPECIAL, &n1);
        tok->ws_cut = false;
        int32_t *y = encode(tok, text, n, MEMRA_TOKENIZE_PARSE_SPECIAL, &n2);
        tok->ws_cut = true;
        if (!same_ids(x, (size_t)n1, y, (size_t)n2)) {
            fprintf(stderr, "  %s: word-by-word merge differs on \"%.*s\"\n", path, (int)n, text);
            print_ids("words", x, (size_t)n1);
            print_ids("whole", y, (size_t)n2);
            fail();
        }
        free(x);
        free(y);
    }
    memra_tokenizer_free(tok);
}

static void test_ws_cut_exact(void **state)
{
    (void)state;
    check_ws_cut(tu_data_path("ggml-vocab-llama-spm.gguf"));
    const char *p = tu_fixture_path("tokenizer/vocab-gemma4.gguf");
    if (!p)
        TU_SKIP("tokenizer/vocab-gemma4.gguf missing (SentencePiece part passed)");
    char path[4096];
    snprintf(path, sizeof path, "%s", p);
    check_ws_cut(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bundled_suite),
        cmocka_unit_test(test_buffer_convention),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_vocab_suites),
        cmocka_unit_test(test_tokcases),
        cmocka_unit_test(test_model_prompts),
        cmocka_unit_test(test_qwen_vocab),
        cmocka_unit_test(test_clean_spaces),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_cache_consistency),
        cmocka_unit_test(test_splitters_match_pcre2),
        cmocka_unit_test(test_ws_cut_exact),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

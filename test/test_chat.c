/* Chat templates: every case of every golden file under fixtures/chat/
 * (jinja2's renderings with Hugging Face's settings) byte for byte, or the
 * recorded error; then the interpreter's pieces on small templates, its
 * limits and the API's buffer convention. */
#include <dirent.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "memra/memra.h"
#include "json.h"
#include "testutil.h"

/* Cases this interpreter is known not to render yet, with the missing
 * feature; only these are skipped (and each is printed). Empty: every golden
 * case passes. */
static const struct {
    const char *file, *name, *reason;
} known_unsupported[] = {
    {NULL, NULL, NULL},
};

static const char *unsupported_reason(const char *file, const char *name)
{
    for (size_t i = 0; known_unsupported[i].file; i++)
        if (!strcmp(known_unsupported[i].file, file) && !strcmp(known_unsupported[i].name, name))
            return known_unsupported[i].reason;
    return NULL;
}

/* ---- raw JSON spans: each case's context goes to the library as the very
 * text of the file (test/json.c reads numbers as doubles, which would blur
 * 1 and 1.0) ---- */

static const char *skip_ws(const char *p)
{
    while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')
        p++;
    return p;
}

/* the end of the JSON value at P (P itself on malformed text) */
static const char *skip_value(const char *p)
{
    p = skip_ws(p);
    if (*p == '"') {
        for (p++; *p && *p != '"'; p++)
            if (*p == '\\' && p[1])
                p++;
        return *p ? p + 1 : p;
    }
    if (*p == '{' || *p == '[') {
        int depth = 0;
        for (; *p; p++) {
            if (*p == '"') {
                p = skip_value(p) - 1;
                continue;
            }
            if (*p == '{' || *p == '[')
                depth++;
            else if ((*p == '}' || *p == ']') && --depth == 0)
                return p + 1;
        }
        return p;
    }
    while (*p && !strchr(",}] \n\r\t", *p))
        p++;
    return p;
}

/* the member KEY of the object at P: its value's start, or NULL */
static const char *member(const char *p, const char *key)
{
    p = skip_ws(p);
    if (*p != '{')
        return NULL;
    p = skip_ws(p + 1);
    size_t kl = strlen(key);
    while (*p == '"') {
        const char *k = p + 1, *ke = skip_value(p) - 1;
        p = skip_ws(ke + 1);
        if (*p != ':')
            return NULL;
        p = skip_ws(p + 1);
        if ((size_t)(ke - k) == kl && !memcmp(k, key, kl))
            return p;
        p = skip_ws(skip_value(p));
        if (*p == ',')
            p = skip_ws(p + 1);
    }
    return NULL;
}

static char *span_dup(const char *b, const char *e)
{
    char *s = malloc((size_t)(e - b) + 1);
    assert_non_null(s);
    memcpy(s, b, (size_t)(e - b));
    s[e - b] = 0;
    return s;
}

static int run_file(const char *dir, const char *file, int *n_cases, int *n_skipped)
{
    char path[8192], tpath[8192];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    char err[256];
    tj_value_t *doc = tj_parse_file(path, err, sizeof err);
    if (!doc)
        fail_msg("%s: %s", path, err);
    const tj_value_t *tname = tj_get(doc, "template"), *now = tj_get(doc, "strftime_now"), *cases = tj_get(doc, "cases");
    assert_non_null(tname);
    assert_non_null(cases);
    snprintf(tpath, sizeof tpath, "%s/%s", dir, tname->str);
    size_t tlen = 0;
    char *tmpl = tu_read_file(tpath, &tlen);
    assert_non_null(tmpl);
    size_t rlen;
    char *raw = tu_read_file(path, &rlen);
    assert_non_null(raw);
    const char *rc = member(raw, "cases");
    assert_non_null(rc);
    rc = skip_ws(rc);
    assert_int_equal(*rc, '[');
    rc = skip_ws(rc + 1);

    memra_chat_params_t params;
    memra_chat_default_params(&params);
    params.now = now ? now->str : NULL;
    int bad = 0, skipped = 0;
    for (size_t i = 0; i < cases->n; i++) {
        const tj_value_t *cs = &cases->items[i];
        const char *name = tj_get(cs, "name")->str;
        const char *cb = member(rc, "context");
        assert_non_null(cb);
        char *ctx = span_dup(cb, skip_value(cb));
        rc = skip_ws(skip_value(rc));
        if (*rc == ',')
            rc = skip_ws(rc + 1);
        const char *why = unsupported_reason(tname->str, name);
        if (why) {
            print_message("SKIP %s / %s: known unsupported: %s\n", tname->str, name, why);
            skipped++;
            free(ctx);
            continue;
        }
        char *out = NULL;
        size_t n = 0;
        memra_status_t st = memra_chat_render_alloc(tmpl, ctx, &params, &out, &n);
        const tj_value_t *exp = tj_get(cs, "expected"), *experr = tj_get(cs, "error");
        if (exp) {
            if (st != MEMRA_OK) {
                print_message("FAIL %s / %s: %s\n", tname->str, name, memra_last_error());
                bad++;
            } else if (n != exp->len || memcmp(out, exp->str, n) != 0) {
                size_t k = 0;
                while (k < n && k < exp->len && out[k] == exp->str[k])
                    k++;
                print_message("FAIL %s / %s: differs at byte %zu:\n  got      %.60s\n  expected %.60s\n", tname->str,
                              name, k, out + k, exp->str + k);
                bad++;
            }
        } else {
            assert_non_null(experr);
            const tj_value_t *kind = tj_get(cs, "error_kind");
            bool must_match = kind && !strcmp(kind->str, "raise_exception");
            if (st == MEMRA_OK) {
                print_message("FAIL %s / %s: rendered, expected the error \"%s\"\n", tname->str, name, experr->str);
                bad++;
            } else if (must_match && strcmp(memra_last_error(), experr->str) != 0) {
                print_message("FAIL %s / %s: error \"%s\", expected \"%s\"\n", tname->str, name, memra_last_error(),
                              experr->str);
                bad++;
            }
        }
        memra_free(out);
        free(ctx);
    }
    print_message("%s: %zu of %zu cases pass%s\n", tname->str, cases->n - (size_t)bad - (size_t)skipped, cases->n,
                  skipped ? " (some skipped as known unsupported)" : "");
    *n_cases += (int)cases->n;
    *n_skipped += skipped;
    free(raw);
    free(tmpl);
    tj_free(doc);
    return bad;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void test_golden(void **state)
{
    (void)state;
    const char *dir = tu_fixture_path("chat");
    if (!dir) {
        print_message("fixtures/chat not found (set MEMRA_FIXTURES): skipping the golden chat-template cases\n");
        skip();
    }
    DIR *d = opendir(dir);
    assert_non_null(d);
    char *names[256];
    int nf = 0;
    struct dirent *e;
    while ((e = readdir(d)) && nf < 256) {
        size_t l = strlen(e->d_name);
        if (l > 11 && !strcmp(e->d_name + l - 11, ".cases.json"))
            names[nf++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)nf, sizeof *names, cmp_str);
    char dirbuf[4096];
    snprintf(dirbuf, sizeof dirbuf, "%s", dir);
    int bad = 0, total = 0, skipped = 0;
    for (int i = 0; i < nf; i++) {
        bad += run_file(dirbuf, names[i], &total, &skipped);
        free(names[i]);
    }
    print_message("chat templates: %d files, %d of %d cases pass, %d known unsupported\n", nf, total - bad - skipped,
                  total, skipped);
    assert_true(nf > 0);
    assert_int_equal(bad, 0);
}

/* ---- the interpreter on small templates ---- */

static char *render(const char *tmpl, const char *ctx, memra_status_t want)
{
    memra_chat_params_t p;
    memra_chat_default_params(&p);
    p.now = "2026-01-15T09:30:00";
    char *out = NULL;
    memra_status_t st = memra_chat_render_alloc(tmpl, ctx, &p, &out, NULL);
    if (st != want)
        fail_msg("%s: status %s, expected %s (%s)", tmpl, memra_status_name(st), memra_status_name(want),
                 memra_last_error());
    return out;
}

static void expect(const char *tmpl, const char *ctx, const char *want)
{
    char *out = render(tmpl, ctx, MEMRA_OK);
    if (strcmp(out, want) != 0)
        fail_msg("%s:\n  got      [%s]\n  expected [%s]", tmpl, out, want);
    memra_free(out);
}

static void expect_err(const char *tmpl, const char *ctx, memra_status_t st, const char *msg)
{
    char *out = render(tmpl, ctx, st);
    assert_null(out);
    if (msg && strcmp(memra_last_error(), msg) != 0)
        fail_msg("%s: message [%s], expected [%s]", tmpl, memra_last_error(), msg);
}

static void test_whitespace(void **state)
{
    (void)state;
    /* trim_blocks eats the newline after a block tag, lstrip_blocks the indent before it */
    expect("a\n  {% if true %}\n  b\n  {% endif %}\nc", "{}", "a\n  b\nc");
    expect("{{ 'x' }}\n{{- ' y' -}}\n  z", "{}", "x yz");
    expect("a {#- c -#} b", "{}", "ab");
    expect("  {%+ if true %}x{% endif %}", "{}", "  x");
    expect("a{% if true +%}\nb{% endif %}", "{}", "a\nb");
    expect("x\n", "{}", "x"); /* one trailing newline goes */
    expect("x\n\n", "{}", "x\n");
    expect("a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc\r\n", "{}", "a\nb\nc"); /* CRLF reads as LF */
    expect("{% if false %}x{% endif %}", "{}", "");
}

static void test_expressions(void **state)
{
    (void)state;
    expect("{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }}", "{}", "7 3 -4 2 3.5 1024");
    expect("{{ 'a' ~ 1 ~ none ~ true }} {{ 'ab' * 2 }}", "{}", "a1NoneTrue abab");
    expect("{{ [1, 2, 3, 4][1:3] }} {{ 'hello'[::-1] }} {{ [1,2,3][-1] }} {{ 'héllo'[1] }}", "{}", "[2, 3] olleh 3 é");
    expect("{{ {'a': 1, 'b': [true, none, 'x\\'y']} }}", "{}", "{'a': 1, 'b': [True, None, \"x'y\"]}");
    expect("{{ 1 if false }}|{{ 'y' if 1 < 2 < 3 else 'n' }}|{{ none or 0 or 'z' }}|{{ 1 and 2 }}", "{}", "|y|z|2");
    expect("{{ 'b' in 'abc' }} {{ 2 not in [1, 2] }} {{ 'k' in {'k': 1} }}", "{}", "True False True");
    expect("{{ x is defined }} {{ x is undefined }} {{ none is none }} {{ 'a' is string }} {{ {} is mapping }}", "{}",
           "False True True True True");
    expect("{{ [] is sequence }} {{ 3 is number }} {{ true is boolean }} {{ false is false }} {{ 3 is odd }}", "{}",
           "True True True True True");
    expect("{{ 0.1 + 0.2 }} {{ 1e20 * 1.0 }} {{ 1.5e-7 * 1 }} {{ 2.0 }}", "{}", "0.30000000000000004 1e+20 1.5e-07 2.0");
}

static void test_filters_methods(void **state)
{
    (void)state;
    expect("{{ 'héllo wörld ß'.upper() }}|{{ 'ΩΜΈΓΑ Привет' | lower }}|{{ 'éa éb' | title }}", "{}",
           "HÉLLO WÖRLD SS|ωμέγα привет|Éa Éb");
    expect("{{ 5[1:] }}|{{ none[:1] is defined }}", "{}", "|False");
    expect("{{ '  a b  ' | trim }}|{{ 'abc' | upper }}|{{ 'ABC' | lower }}|{{ 'hello world' | title }}", "{}",
           "a b|ABC|abc|Hello World");
    expect("{{ [3, 1, 2] | length }} {{ 'héllo' | length }} {{ x | length }} {{ x | default('d') }}", "{}", "3 5 0 d");
    expect("{{ {'b': 1, 'A': 2} | dictsort }} {{ {'k': 'v'} | items | list }}", "{}",
           "[('A', 2), ('b', 1)] [('k', 'v')]");
    expect("{{ ['a', 'b'] | join(', ') }} {{ ['a', 'b'] | map('upper') | join }} {{ [1, 2] | first }}", "{}",
           "a, b AB 1");
    expect("{{ ms | selectattr('r', 'equalto', 'u') | map(attribute='c') | join }}"
           "{{ ms | rejectattr('r', 'equalto', 'u') | list | length }}",
           "{\"ms\": [{\"r\": \"u\", \"c\": \"1\"}, {\"r\": \"a\", \"c\": \"2\"}, {\"r\": \"u\", \"c\": \"3\"}]}", "131");
    expect("{{ {'a': 'é\\n', 'b': [1, 2.5, none]} | tojson }}", "{}", "{\"a\": \"é\\n\", \"b\": [1, 2.5, null]}");
    expect("{{ {'a': [1]} | tojson(indent=2) }}", "{}", "{\n  \"a\": [\n    1\n  ]\n}");
    expect("{{ {'b': 'é', 'a': [1, 2]} | tojson(ensure_ascii=true, sort_keys=true, separators=(',', ':')) }}", "{}",
           "{\"a\":[1,2],\"b\":\"\\u00e9\"}");
    expect("{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'xxhixx'.strip('x') }} {{ 'ab'.startswith('a') }}",
           "{}", "['a', 'b', '', 'c'] ['a', 'b'] hi True");
    expect("{{ 'aaa'.replace('a', 'b', 2) }} {{ d.get('k') }} {{ d.get('z', 'def') }} {{ d.items() | list }}",
           "{\"d\": {\"k\": 1}}", "bba 1 def [('k', 1)]");
    expect("{% filter upper %}ab{% endfilter %}{% set x %}q{{ 1 }}{% endset %}{{ x }}", "{}", "ABq1");
    expect("{{ strftime_now('%Y-%m-%d %H:%M') }}", "{}", "2026-01-15 09:30");
}

static void test_statements(void **state)
{
    (void)state;
    expect("{% for x in [1, 2, 3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}"
           "{{ loop.last }}{{ loop.length }};{% endfor %}",
           "{}", "103TrueFalse3;212FalseFalse3;321FalseTrue3;");
    expect("{% for x in [] %}a{% else %}empty{% endfor %}", "{}", "empty");
    expect("{% for x in range(10) if x is even %}{% if x > 6 %}{% break %}{% endif %}{% if x == 2 %}{% continue %}"
           "{% endif %}{{ x }}{% endfor %}",
           "{}", "046");
    expect("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }}{{ ',' if not loop.last }}{% endfor %}", "{}",
           "a=1,b=2");
    expect("{% for x in [1, 2] %}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}", "{}", "-2;1-;");
    /* a set inside a loop stays there; a namespace carries it out */
    expect("{% set x = 1 %}{% set ns = namespace(y=1) %}{% for i in [1] %}{% set x = 2 %}{% set ns.y = 2 %}"
           "{% endfor %}{{ x }}{{ ns.y }}",
           "{}", "12");
    expect("a{% raw %}{{ x }}{% if %}{% endraw %}b{% for i in range(3) %}{{ loop.cycle('o', 'e') }}{% endfor %}", "{}",
           "a{{ x }}{% if %}boeo");
    expect("{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = x + 1 %}{{ x }}{% endfor %}{{ x }}", "{}", "12121");
    expect("{% macro m() %}{{ y }}{% endmacro %}{% set y = 1 %}{{ m() }}{{ '%s-%03d' % ('a', 7) }}"
           "{{ '{} {n}'.format(1, n='b') }}{{ '%s!' | format('x') }}",
           "{}", "1a-0071 bx!");
    expect("{% macro m(a, b='B', c=none) %}[{{ a }}{{ b }}{{ c }}]{% endmacro %}{{ m(1) }}{{ m(1, c=3) }}{{ m(1, 2) }}",
           "{}", "[1BNone][1B3][12None]");
    expect("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) | trim }}", "{}", "321");
    expect("{% macro w() %}<{{ caller() }}>{% endmacro %}{% call w() %}in{% endcall %}", "{}", "<in>");
    expect("{% if a %}1{% elif b %}2{% else %}3{% endif %}", "{\"b\": true}", "2");
}

static void test_errors(void **state)
{
    (void)state;
    expect_err("{{ raise_exception('bad input: ' ~ x) }}", "{\"x\": 5}", MEMRA_E_INVALID, "bad input: 5");
    expect_err("{{ messages[0].role }}", "{\"messages\": []}", MEMRA_E_TYPE, "list object has no element 0");
    expect_err("{{ m.a.b }}", "{\"m\": {}}", MEMRA_E_TYPE, "'dict object' has no attribute 'a'");
    expect_err("{{ x.strip() }}", "{}", MEMRA_E_TYPE, "'x' is undefined");
    expect_err("{{ 'a' + 1 }}", "{}", MEMRA_E_TYPE, NULL);
    expect_err("{% if x %}", "{}", MEMRA_E_FORMAT, NULL);
    expect_err("a\n{{ x + }}", "{}", MEMRA_E_FORMAT, NULL);
    assert_non_null(strstr(memra_last_error(), "line 2"));
    expect_err("{% for %}", "{}", MEMRA_E_FORMAT, NULL);
    expect_err("{{ x | nosuchfilter }}", "{}", MEMRA_E_UNSUPPORTED, NULL);
    expect_err("{{ [].append(1) }}", "{}", MEMRA_E_UNSUPPORTED, NULL);
    expect_err("x", "[1]", MEMRA_E_INVALID, NULL);
    expect_err("x", "{\"a\": }", MEMRA_E_INVALID, NULL);
    expect_err("x", "{} x", MEMRA_E_INVALID, NULL);
}

static void test_limits(void **state)
{
    (void)state;
    /* loops, recursion, output and ranges are bounded */
    expect_err("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "{}", MEMRA_E_RANGE,
               NULL);
    expect_err("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "{}", MEMRA_E_RANGE, NULL);
    expect_err("{{ range(1000000) | length }}", "{}", MEMRA_E_RANGE, NULL);
    expect_err("{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}"
               "{% endfor %}",
               "{}", MEMRA_E_RANGE, NULL);
    /* deep nesting in the template or the JSON fails cleanly */
    char deep[4096];
    size_t k = 0;
    k += (size_t)snprintf(deep + k, sizeof deep - k, "{{ ");
    for (int i = 0; i < 1000; i++)
        deep[k++] = '(';
    deep[k] = 0;
    expect_err(deep, "{}", MEMRA_E_FORMAT, NULL);
    char djson[2100];
    for (int i = 0; i < 1000; i++)
        djson[i] = '[';
    djson[1000] = 0;
    char obj[2200];
    snprintf(obj, sizeof obj, "{\"a\": %s}", djson);
    expect_err("x", obj, MEMRA_E_INVALID, NULL);
    char nest[8192];
    k = 0;
    for (int i = 0; i < 500; i++) /* 13 bytes each */
        k += (size_t)snprintf(nest + k, sizeof nest - k, "{%% if true %%}");
    expect_err(nest, "{}", MEMRA_E_FORMAT, NULL);
    expect_err("{% if true %}x", "{}", MEMRA_E_FORMAT, "chat template: line 1: missing 'endif' (at end of template)");
    /* a long left-leaning chain parses in a loop but would recurse when evaluated */
    size_t cl = 0;
    char *chain = malloc(4 * 5000 + 16);
    assert_non_null(chain);
    cl += (size_t)sprintf(chain, "{{ 1");
    for (int i = 0; i < 5000; i++)
        cl += (size_t)sprintf(chain + cl, " + 0");
    sprintf(chain + cl, " }}");
    expect_err(chain, "{}", MEMRA_E_RANGE, NULL);
    free(chain);
    /* values a template nests without bound */
    expect_err("{% set ns = namespace(x=[]) %}{% for i in range(1000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}",
               "{}", MEMRA_E_RANGE, NULL);
    expect_err("{% set ns = namespace(x=[]) %}{% for i in range(1000) %}{% set ns.x = [ns.x] %}{% endfor %}"
               "{{ ns.x | tojson }}",
               "{}", MEMRA_E_RANGE, NULL);

    memra_chat_params_t p;
    memra_chat_default_params(&p);
    p.max_output = 10;
    char *out = NULL;
    assert_int_equal(memra_chat_render_alloc("{{ 'x' * 11 }}", "{}", &p, &out, NULL), MEMRA_E_RANGE);
    p.max_output = 0;
    p.max_steps = 5;
    assert_int_equal(memra_chat_render_alloc("{% for i in range(6) %}{% endfor %}", "{}", &p, &out, NULL),
                     MEMRA_E_RANGE);
    p.max_steps = 0;
    p.now = "yesterday";
    assert_int_equal(memra_chat_render_alloc("x", "{}", &p, &out, NULL), MEMRA_E_INVALID);
    assert_null(out);
}

static void test_buffer_api(void **state)
{
    (void)state;
    size_t n = 0;
    char buf[8];
    assert_int_equal(memra_chat_render("{{ 'hello' }}", "{}", NULL, NULL, 0, &n), MEMRA_E_RANGE);
    assert_int_equal(n, 5);
    assert_int_equal(memra_chat_render("{{ 'hello' }}", "{}", NULL, buf, 5, &n), MEMRA_E_RANGE);
    assert_int_equal(memra_chat_render("{{ 'hello' }}", "{}", NULL, buf, sizeof buf, &n), MEMRA_OK);
    assert_int_equal(n, 5);
    assert_string_equal(buf, "hello");
    assert_int_equal(memra_chat_render(NULL, "{}", NULL, buf, sizeof buf, &n), MEMRA_E_INVALID);
    assert_int_equal(memra_chat_render("x", NULL, NULL, buf, sizeof buf, &n), MEMRA_E_INVALID);
    assert_int_equal(memra_chat_render("x", "{}", NULL, buf, sizeof buf, NULL), MEMRA_E_INVALID);
    memra_chat_params_t p = {0};
    assert_int_equal(memra_chat_render("x", "{}", &p, buf, sizeof buf, &n), MEMRA_E_INVALID);
    /* an older, shorter params struct: fields past its size are defaults */
    p.size = (uint32_t)offsetof(memra_chat_params_t, now);
    assert_int_equal(memra_chat_render("x", "{}", &p, buf, sizeof buf, &n), MEMRA_OK);
    assert_int_equal(memra_chat_render_tokenizer(NULL, "{}", NULL, NULL, NULL), MEMRA_E_INVALID);
}

/* the template and special tokens of a real GGUF */
static void test_tokenizer_template(void **state)
{
    (void)state;
    const char *path = tu_data_path("default.gguf");
    assert_non_null(path);
    memra_tokenizer_t *tok = NULL;
    assert_int_equal(memra_tokenizer_load(path, &tok), MEMRA_OK);
    char *out = NULL;
    memra_status_t st = memra_chat_render_tokenizer(
        tok, "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"add_generation_prompt\": true}", NULL, &out,
        NULL);
    assert_non_null(memra_tokenizer_chat_template(tok));
    assert_int_equal(st, MEMRA_OK);
    assert_non_null(strstr(out, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"));
    memra_free(out);
    memra_tokenizer_free(tok);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden),           cmocka_unit_test(test_whitespace),
        cmocka_unit_test(test_expressions),      cmocka_unit_test(test_filters_methods),
        cmocka_unit_test(test_statements),       cmocka_unit_test(test_errors),
        cmocka_unit_test(test_limits),           cmocka_unit_test(test_buffer_api),
        cmocka_unit_test(test_tokenizer_template),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

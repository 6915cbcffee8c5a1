/* Recursive-descent JSON reader for the test suites (see json.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "json.h"

typedef struct parser {
    const char *s;
    size_t n, i;
    char *err;
    size_t err_len;
    int depth;
} parser_t;

static int fail(parser_t *p, const char *what)
{
    if (p->err && p->err_len)
        snprintf(p->err, p->err_len, "%s at byte %zu", what, p->i);
    return -1;
}

static void skip_ws(parser_t *p)
{
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r'))
        p->i++;
}

static int hex4(parser_t *p, unsigned *v)
{
    if (p->n - p->i < 4)
        return fail(p, "short \\u escape");
    *v = 0;
    for (int k = 0; k < 4; k++) {
        char c = p->s[p->i++];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return fail(p, "bad \\u escape");
        *v = *v * 16 + (unsigned)d;
    }
    return 0;
}

/* Parses a string at p->i (opening quote); mallocs the decoded text. */
static int parse_string(parser_t *p, char **out, size_t *len)
{
    p->i++;
    /* Decoded text is never longer than the source. */
    size_t start = p->i;
    char *buf = malloc(p->n - start + 1);
    size_t o = 0;
    if (!buf)
        return fail(p, "out of memory");
    while (p->i < p->n && p->s[p->i] != '"') {
        char c = p->s[p->i++];
        if (c != '\\') {
            buf[o++] = c;
            continue;
        }
        if (p->i >= p->n)
            break;
        c = p->s[p->i++];
        switch (c) {
        case '"': buf[o++] = '"'; break;
        case '\\': buf[o++] = '\\'; break;
        case '/': buf[o++] = '/'; break;
        case 'b': buf[o++] = '\b'; break;
        case 'f': buf[o++] = '\f'; break;
        case 'n': buf[o++] = '\n'; break;
        case 'r': buf[o++] = '\r'; break;
        case 't': buf[o++] = '\t'; break;
        case 'u': {
            unsigned cp, lo;
            if (hex4(p, &cp)) {
                free(buf);
                return -1;
            }
            if (cp >= 0xD800 && cp < 0xDC00 && p->n - p->i >= 6 && p->s[p->i] == '\\' && p->s[p->i + 1] == 'u') {
                p->i += 2;
                if (hex4(p, &lo)) {
                    free(buf);
                    return -1;
                }
                if (lo >= 0xDC00 && lo < 0xE000)
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                else
                    p->i -= 6; /* lone high surrogate: keep it, re-read the next escape */
            }
            o += memra__utf8_put(buf + o, cp);
            break;
        }
        default:
            free(buf);
            return fail(p, "bad escape");
        }
    }
    if (p->i >= p->n) {
        free(buf);
        return fail(p, "unterminated string");
    }
    p->i++;
    buf[o] = '\0';
    *out = buf;
    *len = o;
    return 0;
}

static int parse_value(parser_t *p, tj_value_t *v);

static int push(tj_value_t *v, size_t *cap)
{
    if (v->n < *cap)
        return 0;
    *cap = *cap ? *cap * 2 : 8;
    tj_value_t *items = realloc(v->items, *cap * sizeof *items);
    if (!items)
        return -1;
    v->items = items;
    if (v->type == TJ_OBJ) {
        char **keys = realloc(v->keys, *cap * sizeof *keys);
        if (!keys)
            return -1;
        v->keys = keys;
    }
    return 0;
}

static int parse_container(parser_t *p, tj_value_t *v, char close)
{
    size_t cap = 0;
    p->i++;
    skip_ws(p);
    if (p->i < p->n && p->s[p->i] == close) {
        p->i++;
        return 0;
    }
    for (;;) {
        if (push(v, &cap))
            return fail(p, "out of memory");
        tj_value_t *item = &v->items[v->n];
        memset(item, 0, sizeof *item);
        if (v->type == TJ_OBJ) {
            size_t klen;
            skip_ws(p);
            if (p->i >= p->n || p->s[p->i] != '"')
                return fail(p, "expected a key");
            if (parse_string(p, &v->keys[v->n], &klen))
                return -1;
            skip_ws(p);
            if (p->i >= p->n || p->s[p->i] != ':') {
                free(v->keys[v->n]);
                return fail(p, "expected ':'");
            }
            p->i++;
        }
        v->n++;
        if (parse_value(p, item))
            return -1;
        skip_ws(p);
        if (p->i < p->n && p->s[p->i] == ',') {
            p->i++;
            continue;
        }
        if (p->i < p->n && p->s[p->i] == close) {
            p->i++;
            return 0;
        }
        return fail(p, "expected ',' or a closing bracket");
    }
}

static int parse_value(parser_t *p, tj_value_t *v)
{
    skip_ws(p);
    if (p->i >= p->n)
        return fail(p, "unexpected end");
    if (++p->depth > 200)
        return fail(p, "nesting too deep");
    int rc = 0;
    char c = p->s[p->i];
    if (c == '{' || c == '[') {
        v->type = c == '{' ? TJ_OBJ : TJ_ARR;
        rc = parse_container(p, v, c == '{' ? '}' : ']');
    } else if (c == '"') {
        v->type = TJ_STR;
        rc = parse_string(p, &v->str, &v->len);
    } else if (p->n - p->i >= 4 && memcmp(p->s + p->i, "true", 4) == 0) {
        v->type = TJ_BOOL;
        v->boolean = 1;
        p->i += 4;
    } else if (p->n - p->i >= 5 && memcmp(p->s + p->i, "false", 5) == 0) {
        v->type = TJ_BOOL;
        p->i += 5;
    } else if (p->n - p->i >= 4 && memcmp(p->s + p->i, "null", 4) == 0) {
        v->type = TJ_NULL;
        p->i += 4;
    } else {
        char tmp[64];
        size_t k = 0;
        while (p->i + k < p->n && k < sizeof tmp - 1 && strchr("+-0123456789.eE", p->s[p->i + k]))
            k++;
        if (!k)
            return fail(p, "unexpected character");
        memcpy(tmp, p->s + p->i, k);
        tmp[k] = '\0';
        char *end;
        v->type = TJ_NUM;
        v->num = strtod(tmp, &end);
        if (*end)
            return fail(p, "bad number");
        p->i += k;
    }
    p->depth--;
    return rc;
}

static void free_inner(tj_value_t *v)
{
    free(v->str);
    for (size_t i = 0; i < v->n; i++) {
        free_inner(&v->items[i]);
        if (v->keys)
            free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
}

void tj_free(tj_value_t *v)
{
    if (!v)
        return;
    free_inner(v);
    free(v);
}

tj_value_t *tj_parse(const char *text, size_t n, char *err, size_t err_len)
{
    parser_t p = {text, n, 0, err, err_len, 0};
    tj_value_t *v = calloc(1, sizeof *v);
    if (!v)
        return NULL;
    if (parse_value(&p, v) == 0) {
        skip_ws(&p);
        if (p.i == p.n)
            return v;
        fail(&p, "trailing data");
    }
    tj_free(v);
    return NULL;
}

tj_value_t *tj_parse_file(const char *path, char *err, size_t err_len)
{
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    long n = -1;
    if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (text = malloc((size_t)n + 1)) && fread(text, 1, (size_t)n, f) != (size_t)n) {
        free(text);
        text = NULL;
    }
    if (f)
        fclose(f);
    if (!text) {
        if (err && err_len)
            snprintf(err, err_len, "cannot read %s", path);
        return NULL;
    }
    tj_value_t *v = tj_parse(text, (size_t)n, err, err_len);
    free(text);
    return v;
}

const tj_value_t *tj_get(const tj_value_t *obj, const char *key)
{
    if (!obj || obj->type != TJ_OBJ)
        return NULL;
    for (size_t i = 0; i < obj->n; i++)
        if (strcmp(obj->keys[i], key) == 0)
            return &obj->items[i];
    return NULL;
}

int32_t *tj_int_array(const tj_value_t *doc, const char *key, int32_t *n)
{
    const tj_value_t *a = tj_get(doc, key);
    *n = 0;
    if (!a || a->type != TJ_ARR)
        return NULL;
    int32_t *v = malloc((a->n ? a->n : 1) * sizeof *v);
    if (!v)
        return NULL;
    for (size_t i = 0; i < a->n; i++) {
        if (a->items[i].type != TJ_NUM) {
            free(v);
            return NULL;
        }
        v[i] = (int32_t)a->items[i].num;
    }
    *n = (int32_t)a->n;
    return v;
}

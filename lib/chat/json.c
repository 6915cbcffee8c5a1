/* JSON text -> interpreter values, for the render context.
 *
 * A small reader of its own rather than a JSON library: the context must
 * become interpreter values anyway (with Python's distinction of int and
 * float, and objects in their key order, as json.loads gives them), and
 * the library keeps no runtime dependency beyond libc and libm for it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "chat_impl.h"

typedef struct jr {
    cj_ctx_t *c;
    const char *p, *end, *start;
    int depth;
} jr_t;

_Noreturn static void jfail(jr_t *r, const char *what)
{
    cj_fail(r->c, MEMRA_E_INVALID, "context JSON: %s at byte %zu", what, (size_t)(r->p - r->start));
}

static void ws(jr_t *r)
{
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
        r->p++;
}

static uint32_t hex4(jr_t *r)
{
    if (r->end - r->p < 4)
        jfail(r, "short \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char h = *r->p++;
        v <<= 4;
        if (h >= '0' && h <= '9')
            v |= (uint32_t)(h - '0');
        else if (h >= 'a' && h <= 'f')
            v |= (uint32_t)(h - 'a' + 10);
        else if (h >= 'A' && h <= 'F')
            v |= (uint32_t)(h - 'A' + 10);
        else
            jfail(r, "bad \\u escape");
    }
    return v;
}

static cj_val_t jstring(jr_t *r)
{
    r->p++; /* the opening quote */
    cj_buf_t b = {0};
    const char *run = r->p;
    for (;;) {
        if (r->p >= r->end)
            jfail(r, "unterminated string");
        unsigned char ch = (unsigned char)*r->p;
        if (ch == '"')
            break;
        if (ch < 0x20)
            jfail(r, "control character in string");
        if (ch != '\\') {
            r->p++;
            continue;
        }
        cj_buf_put(r->c, &b, run, (size_t)(r->p - run));
        r->p++;
        if (r->p >= r->end)
            jfail(r, "unterminated string");
        char e = *r->p++;
        switch (e) {
        case '"': cj_buf_puts(r->c, &b, "\""); break;
        case '\\': cj_buf_puts(r->c, &b, "\\"); break;
        case '/': cj_buf_puts(r->c, &b, "/"); break;
        case 'b': cj_buf_puts(r->c, &b, "\b"); break;
        case 'f': cj_buf_puts(r->c, &b, "\f"); break;
        case 'n': cj_buf_puts(r->c, &b, "\n"); break;
        case 'r': cj_buf_puts(r->c, &b, "\r"); break;
        case 't': cj_buf_puts(r->c, &b, "\t"); break;
        case 'u': {
            uint32_t cp = hex4(r);
            if (cp >= 0xD800 && cp < 0xDC00 && r->end - r->p >= 6 && r->p[0] == '\\' && r->p[1] == 'u') {
                const char *save = r->p;
                r->p += 2;
                uint32_t lo = hex4(r);
                if (lo >= 0xDC00 && lo < 0xE000)
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                else
                    r->p = save;
            }
            cj_buf_put_cp(r->c, &b, cp);
            break;
        }
        default: jfail(r, "bad escape");
        }
        run = r->p;
    }
    cj_buf_put(r->c, &b, run, (size_t)(r->p - run));
    r->p++;
    return b.p ? cj_str(b.p, b.n) : cj_str("", 0);
}

static cj_val_t jvalue(jr_t *r)
{
    ws(r);
    if (r->p >= r->end)
        jfail(r, "unexpected end");
    if (++r->depth > 200)
        jfail(r, "nesting deeper than 200");
    cj_val_t v;
    char ch = *r->p;
    if (ch == '{') {
        v = cj_dict_new(r->c);
        r->p++;
        ws(r);
        if (r->p < r->end && *r->p == '}') {
            r->p++;
        } else {
            for (;;) {
                ws(r);
                if (r->p >= r->end || *r->p != '"')
                    jfail(r, "expected a key");
                cj_val_t k = jstring(r);
                ws(r);
                if (r->p >= r->end || *r->p != ':')
                    jfail(r, "expected ':'");
                r->p++;
                cj_val_t x = jvalue(r);
                cj_dict_set(r->c, v.u.d, k, x);
                ws(r);
                if (r->p < r->end && *r->p == ',') {
                    r->p++;
                    continue;
                }
                if (r->p < r->end && *r->p == '}') {
                    r->p++;
                    break;
                }
                jfail(r, "expected ',' or '}'");
            }
        }
    } else if (ch == '[') {
        v = cj_list_new(r->c);
        r->p++;
        ws(r);
        if (r->p < r->end && *r->p == ']') {
            r->p++;
        } else {
            for (;;) {
                cj_list_push(r->c, v.u.l, jvalue(r));
                ws(r);
                if (r->p < r->end && *r->p == ',') {
                    r->p++;
                    continue;
                }
                if (r->p < r->end && *r->p == ']') {
                    r->p++;
                    break;
                }
                jfail(r, "expected ',' or ']'");
            }
        }
    } else if (ch == '"') {
        v = jstring(r);
    } else if (r->end - r->p >= 4 && memcmp(r->p, "true", 4) == 0) {
        r->p += 4;
        v = cj_bool(true);
    } else if (r->end - r->p >= 5 && memcmp(r->p, "false", 5) == 0) {
        r->p += 5;
        v = cj_bool(false);
    } else if (r->end - r->p >= 4 && memcmp(r->p, "null", 4) == 0) {
        r->p += 4;
        v = cj_none();
    } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
        const char *s = r->p;
        bool fl = false;
        if (*r->p == '-')
            r->p++;
        while (r->p < r->end && strchr("0123456789.eE+-", *r->p)) {
            if (*r->p == '.' || *r->p == 'e' || *r->p == 'E')
                fl = true;
            r->p++;
        }
        char tmp[64];
        size_t n = (size_t)(r->p - s);
        if (n >= sizeof tmp)
            jfail(r, "number too long");
        memcpy(tmp, s, n);
        tmp[n] = 0;
        char *e;
        errno = 0;
        if (!fl) {
            long long i = strtoll(tmp, &e, 10);
            if (*e || errno)
                fl = true; /* out of int64 range: Python would keep it exact; a float is close */
            else
                v = cj_int(i);
        }
        if (fl) {
            double f = strtod(tmp, &e);
            if (*e)
                jfail(r, "bad number");
            v = cj_float(f);
        }
    } else {
        jfail(r, "unexpected character");
    }
    r->depth--;
    return v;
}

cj_val_t cj_json_parse(cj_ctx_t *c, const char *text, size_t n)
{
    jr_t r = {.c = c, .p = text, .end = text + n, .start = text};
    cj_val_t v = jvalue(&r);
    ws(&r);
    if (r.p != r.end)
        jfail(&r, "trailing characters");
    return v;
}

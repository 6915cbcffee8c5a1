/* Values of the chat-template interpreter: the arena, constructors,
 * Python's str()/repr() and json.dumps() of them. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../internal.h"
#include "chat_impl.h"

_Noreturn void cj_fail(cj_ctx_t *c, memra_status_t st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg, sizeof c->msg, fmt, ap);
    va_end(ap);
    c->status = st;
    longjmp(c->fail, 1);
}

void *cj_alloc(cj_ctx_t *c, size_t n)
{
    cj_arena_t *a = &c->arena;
    n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    if (n == 0)
        n = sizeof(max_align_t);
    cj_chunk_t *h = a->head;
    if (!h || h->cap - h->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        if (a->total + cap > a->limit)
            cj_fail(c, MEMRA_E_RANGE, "chat template: memory limit of %zu bytes reached", a->limit);
        h = malloc(sizeof *h + cap);
        if (!h)
            cj_fail(c, MEMRA_E_NOMEM, "chat template: out of memory");
        h->cap = cap;
        h->used = 0;
        a->total += cap;
        /* a large block goes behind the head, so the head keeps its free room */
        if (a->head && n > 32768) {
            h->next = a->head->next;
            a->head->next = h;
        } else {
            h->next = a->head;
            a->head = h;
        }
    }
    void *p = (char *)h->data + h->used;
    h->used += n;
    memset(p, 0, n);
    return p;
}

void cj_arena_free(cj_arena_t *a)
{
    cj_chunk_t *h = a->head;
    while (h) {
        cj_chunk_t *nx = h->next;
        free(h);
        h = nx;
    }
    a->head = NULL;
    a->total = 0;
}

char *cj_strndup(cj_ctx_t *c, const char *s, size_t n)
{
    char *p = cj_alloc(c, n + 1);
    if (n)
        memcpy(p, s, n);
    p[n] = 0;
    return p;
}

cj_val_t cj_undef(const char *why)
{
    cj_val_t v = {.t = CJ_UNDEF};
    v.u.s.p = why;
    return v;
}
cj_val_t cj_none(void) { return (cj_val_t){.t = CJ_NONE}; }
cj_val_t cj_bool(bool b) { return (cj_val_t){.t = CJ_BOOL, .u.b = b}; }
cj_val_t cj_int(int64_t i) { return (cj_val_t){.t = CJ_INT, .u.i = i}; }
cj_val_t cj_float(double f) { return (cj_val_t){.t = CJ_FLOAT, .u.f = f}; }
cj_val_t cj_str(const char *p, size_t n)
{
    cj_val_t v = {.t = CJ_STR};
    v.u.s.p = p;
    v.u.s.n = n;
    return v;
}
cj_val_t cj_cstr(const char *p) { return cj_str(p, strlen(p)); }
cj_val_t cj_str_copy(cj_ctx_t *c, const char *p, size_t n) { return cj_str(cj_strndup(c, p, n), n); }

cj_val_t cj_list_new(cj_ctx_t *c)
{
    cj_val_t v = {.t = CJ_LIST};
    v.u.l = cj_alloc(c, sizeof *v.u.l);
    return v;
}

cj_val_t cj_tuple_new(cj_ctx_t *c)
{
    cj_val_t v = cj_list_new(c);
    v.u.l->tuple = true;
    return v;
}

cj_val_t cj_dict_new(cj_ctx_t *c)
{
    cj_val_t v = {.t = CJ_DICT};
    v.u.d = cj_alloc(c, sizeof *v.u.d);
    return v;
}

void cj_list_push(cj_ctx_t *c, cj_list_t *l, cj_val_t v)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        cj_val_t *nv = cj_alloc(c, cap * sizeof *nv);
        if (l->n)
            memcpy(nv, l->v, l->n * sizeof *nv);
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
}

cj_val_t *cj_dict_findv(const cj_dict_t *d, cj_val_t k)
{
    for (size_t i = 0; i < d->n; i++)
        if (cj_equal(d->e[i].k, k))
            return &d->e[i].v;
    return NULL;
}

cj_val_t *cj_dict_find(const cj_dict_t *d, const char *k, size_t n)
{
    for (size_t i = 0; i < d->n; i++) {
        const cj_val_t *kk = &d->e[i].k;
        if (kk->t == CJ_STR && kk->u.s.n == n && memcmp(kk->u.s.p, k, n) == 0)
            return &d->e[i].v;
    }
    return NULL;
}

void cj_dict_set(cj_ctx_t *c, cj_dict_t *d, cj_val_t k, cj_val_t v)
{
    cj_val_t *old = cj_dict_findv(d, k);
    if (old) {
        *old = v;
        return;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 8;
        cj_entry_t *ne = cj_alloc(c, cap * sizeof *ne);
        if (d->n)
            memcpy(ne, d->e, d->n * sizeof *ne);
        d->e = ne;
        d->cap = cap;
    }
    d->e[d->n].k = k;
    d->e[d->n].v = v;
    d->n++;
}

bool cj_truthy(cj_val_t v)
{
    switch (v.t) {
    case CJ_UNDEF:
    case CJ_NONE: return false;
    case CJ_BOOL: return v.u.b;
    case CJ_INT: return v.u.i != 0;
    case CJ_FLOAT: return v.u.f != 0;
    case CJ_STR: return v.u.s.n != 0;
    case CJ_LIST: return v.u.l->n != 0;
    case CJ_DICT: return v.u.d->n != 0;
    default: return true;
    }
}

static bool is_num(cj_val_t v) { return v.t == CJ_INT || v.t == CJ_FLOAT || v.t == CJ_BOOL; }
static double num_f(cj_val_t v) { return v.t == CJ_FLOAT ? v.u.f : v.t == CJ_INT ? (double)v.u.i : (double)v.u.b; }

/* values built by a template can nest without bound ({% set ns.x = [ns.x] %}
 * in a loop): the recursive walks below stop at this depth */
#define MAX_NEST 256

static bool equal_at(cj_val_t a, cj_val_t b, int depth);

bool cj_equal(cj_val_t a, cj_val_t b) { return equal_at(a, b, 0); }

static bool equal_at(cj_val_t a, cj_val_t b, int depth)
{
    if (depth > MAX_NEST)
        return false;
    if (is_num(a) && is_num(b)) {
        if (a.t != CJ_FLOAT && b.t != CJ_FLOAT) {
            int64_t x = a.t == CJ_INT ? a.u.i : a.u.b, y = b.t == CJ_INT ? b.u.i : b.u.b;
            return x == y;
        }
        return num_f(a) == num_f(b);
    }
    if (a.t != b.t)
        return false;
    switch (a.t) {
    case CJ_UNDEF:
    case CJ_NONE: return true;
    case CJ_STR: return a.u.s.n == b.u.s.n && memcmp(a.u.s.p, b.u.s.p, a.u.s.n) == 0;
    case CJ_LIST:
        if (a.u.l->n != b.u.l->n || a.u.l->tuple != b.u.l->tuple)
            return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!equal_at(a.u.l->v[i], b.u.l->v[i], depth + 1))
                return false;
        return true;
    case CJ_DICT:
        if (a.u.d->n != b.u.d->n)
            return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            cj_val_t *o = cj_dict_findv(b.u.d, a.u.d->e[i].k);
            if (!o || !equal_at(a.u.d->e[i].v, *o, depth + 1))
                return false;
        }
        return true;
    case CJ_NS: return a.u.d == b.u.d;
    case CJ_MACRO: return a.u.m == b.u.m;
    case CJ_FUNC: return a.u.fn == b.u.fn;
    default: return false;
    }
}

const char *cj_type_repr(cj_val_t v)
{
    switch (v.t) {
    case CJ_NONE: return "None";
    case CJ_BOOL: return "bool object";
    case CJ_INT: return "int object";
    case CJ_FLOAT: return "float object";
    case CJ_STR: return "str object";
    case CJ_LIST: return "list object";
    case CJ_DICT: return "dict object";
    case CJ_NS: return "jinja2.utils.Namespace object";
    case CJ_MACRO: return "jinja2.runtime.Macro object";
    default: return "object";
    }
}

void cj_buf_put(cj_ctx_t *c, cj_buf_t *b, const char *p, size_t n)
{
    if (n == 0 && b->p)
        return; /* an empty put still gives an empty buffer its NUL */
    if (b->n + n > c->max_output)
        cj_fail(c, MEMRA_E_RANGE, "chat template: output longer than %zu bytes", c->max_output);
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *np = cj_alloc(c, cap);
        if (b->n)
            memcpy(np, b->p, b->n);
        b->p = np;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = 0;
}

void cj_buf_puts(cj_ctx_t *c, cj_buf_t *b, const char *s) { cj_buf_put(c, b, s, strlen(s)); }

void cj_buf_put_cp(cj_ctx_t *c, cj_buf_t *b, uint32_t cp)
{
    char o[4];
    cj_buf_put(c, b, o, memra__utf8_put(o, cp));
}

/* Python's float repr: the shortest digits that read back the same, in
 * exponent form below 1e-4 and from 1e16 on. */
void cj_fmt_float(char *buf, size_t cap, double f)
{
    if (isnan(f)) {
        snprintf(buf, cap, "nan");
        return;
    }
    if (isinf(f)) {
        snprintf(buf, cap, f < 0 ? "-inf" : "inf");
        return;
    }
    char tmp[64];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f)
            break;
    }
    /* tmp = "d.ddde[+-]XX": digits and exponent */
    char digits[32];
    int nd = 0;
    const char *q = tmp;
    bool neg = false;
    if (*q == '-') {
        neg = true;
        q++;
    }
    for (; *q && *q != 'e'; q++)
        if (*q != '.')
            digits[nd++] = *q;
    int exp = atoi(q + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = 0;
    char *o = buf;
    size_t left = cap;
#define PUT(...)                                                                                   \
    do {                                                                                           \
        int w_ = snprintf(o, left, __VA_ARGS__);                                                   \
        if (w_ > 0 && (size_t)w_ < left) {                                                         \
            o += w_;                                                                               \
            left -= (size_t)w_;                                                                    \
        }                                                                                          \
    } while (0)
    if (neg)
        PUT("-");
    if (exp < -4 || exp >= 16) {
        PUT("%c", digits[0]);
        if (nd > 1)
            PUT(".%s", digits + 1);
        PUT("e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    } else if (exp < 0) {
        PUT("0.");
        for (int i = 0; i < -exp - 1; i++)
            PUT("0");
        PUT("%s", digits);
    } else {
        for (int i = 0; i <= exp; i++)
            PUT("%c", i < nd ? digits[i] : '0');
        PUT(".");
        if (nd > exp + 1)
            PUT("%s", digits + exp + 1);
        else
            PUT("0");
    }
#undef PUT
}

size_t cj_utf8_len(const char *p, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)p[i] & 0xC0) != 0x80)
            k++;
    return k;
}

static void repr_str(cj_ctx_t *c, cj_buf_t *b, const char *p, size_t n)
{
    bool sq = memchr(p, '\'', n) != NULL, dq = memchr(p, '"', n) != NULL;
    char q = (sq && !dq) ? '"' : '\'';
    cj_buf_put(c, b, &q, 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        char esc[8];
        if (ch == (unsigned char)q || ch == '\\') {
            esc[0] = '\\';
            esc[1] = (char)ch;
            cj_buf_put(c, b, esc, 2);
        } else if (ch == '\n')
            cj_buf_puts(c, b, "\\n");
        else if (ch == '\r')
            cj_buf_puts(c, b, "\\r");
        else if (ch == '\t')
            cj_buf_puts(c, b, "\\t");
        else if (ch < 0x20 || ch == 0x7f) {
            snprintf(esc, sizeof esc, "\\x%02x", ch);
            cj_buf_puts(c, b, esc);
        } else
            cj_buf_put(c, b, (const char *)&p[i], 1);
    }
    cj_buf_put(c, b, &q, 1);
}

static void scalar_str(cj_ctx_t *c, cj_buf_t *b, cj_val_t v)
{
    char tmp[64];
    switch (v.t) {
    case CJ_NONE: cj_buf_puts(c, b, "None"); break;
    case CJ_BOOL: cj_buf_puts(c, b, v.u.b ? "True" : "False"); break;
    case CJ_INT:
        snprintf(tmp, sizeof tmp, "%lld", (long long)v.u.i);
        cj_buf_puts(c, b, tmp);
        break;
    case CJ_FLOAT:
        cj_fmt_float(tmp, sizeof tmp, v.u.f);
        cj_buf_puts(c, b, tmp);
        break;
    case CJ_NS: cj_buf_puts(c, b, "<Namespace>"); break;
    case CJ_MACRO: cj_buf_puts(c, b, "<Macro>"); break;
    case CJ_FUNC: cj_buf_puts(c, b, "<function>"); break;
    default: break;
    }
}

static void repr_at(cj_ctx_t *c, cj_buf_t *b, cj_val_t v, int depth);

void cj_repr_of(cj_ctx_t *c, cj_buf_t *b, cj_val_t v) { repr_at(c, b, v, 0); }

static void repr_at(cj_ctx_t *c, cj_buf_t *b, cj_val_t v, int depth)
{
    if (depth > MAX_NEST)
        cj_fail(c, MEMRA_E_RANGE, "chat template: value nested deeper than %d", MAX_NEST);
    if (v.t == CJ_STR) {
        repr_str(c, b, v.u.s.p, v.u.s.n);
    } else if (v.t == CJ_LIST) {
        bool t = v.u.l->tuple;
        cj_buf_puts(c, b, t ? "(" : "[");
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i)
                cj_buf_puts(c, b, ", ");
            repr_at(c, b, v.u.l->v[i], depth + 1);
        }
        cj_buf_puts(c, b, t ? (v.u.l->n == 1 ? ",)" : ")") : "]");
    } else if (v.t == CJ_DICT) {
        cj_buf_puts(c, b, "{");
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i)
                cj_buf_puts(c, b, ", ");
            repr_at(c, b, v.u.d->e[i].k, depth + 1);
            cj_buf_puts(c, b, ": ");
            repr_at(c, b, v.u.d->e[i].v, depth + 1);
        }
        cj_buf_puts(c, b, "}");
    } else if (v.t == CJ_UNDEF) {
        cj_buf_puts(c, b, "Undefined");
    } else {
        scalar_str(c, b, v);
    }
}

void cj_str_of(cj_ctx_t *c, cj_buf_t *b, cj_val_t v)
{
    if (v.t == CJ_STR)
        cj_buf_put(c, b, v.u.s.p, v.u.s.n);
    else if (v.t == CJ_UNDEF)
        return;
    else
        cj_repr_of(c, b, v);
}

cj_val_t cj_to_str(cj_ctx_t *c, cj_val_t v)
{
    if (v.t == CJ_STR)
        return v;
    cj_buf_t b = {0};
    cj_str_of(c, &b, v);
    return cj_str(b.p ? b.p : "", b.n);
}

static void json_str(cj_ctx_t *c, cj_buf_t *b, const char *p, size_t n, bool ascii)
{
    cj_buf_puts(c, b, "\"");
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        const char *esc = NULL;
        char tmp[8];
        switch (ch) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (ch < 0x20) {
                snprintf(tmp, sizeof tmp, "\\u%04x", ch);
                esc = tmp;
            }
        }
        if (!esc && ascii && ch >= 0x80) {
            /* one code point as \uXXXX, or a surrogate pair past U+FFFF */
            size_t l = ch < 0xE0 ? 2 : ch < 0xF0 ? 3 : 4;
            if (i + l > n)
                l = n - i;
            uint32_t cp = l == 2 ? (ch & 0x1Fu) : l == 3 ? (ch & 0x0Fu) : (ch & 0x07u);
            for (size_t k = 1; k < l; k++)
                cp = (cp << 6) | ((unsigned char)p[i + k] & 0x3Fu);
            cj_buf_put(c, b, p + run, i - run);
            char u[16];
            if (cp >= 0x10000)
                snprintf(u, sizeof u, "\\u%04x\\u%04x", 0xD800 + ((cp - 0x10000) >> 10), 0xDC00 + ((cp - 0x10000) & 0x3FF));
            else
                snprintf(u, sizeof u, "\\u%04x", cp);
            cj_buf_puts(c, b, u);
            i += l - 1;
            run = i + 1;
            continue;
        }
        if (esc) {
            cj_buf_put(c, b, p + run, i - run);
            cj_buf_puts(c, b, esc);
            run = i + 1;
        }
    }
    cj_buf_put(c, b, p + run, n - run);
    cj_buf_puts(c, b, "\"");
}

static void json_nl(cj_ctx_t *c, cj_buf_t *b, int indent, int level)
{
    cj_buf_puts(c, b, "\n");
    for (int i = 0; i < indent * level; i++)
        cj_buf_puts(c, b, " ");
}

static int key_cmp(const cj_entry_t *a, const cj_entry_t *b)
{
    cj_val_t x = a->k, y = b->k;
    if (x.t != CJ_STR || y.t != CJ_STR)
        return (x.t == CJ_STR) - (y.t == CJ_STR);
    size_t n = x.u.s.n < y.u.s.n ? x.u.s.n : y.u.s.n;
    int r = memcmp(x.u.s.p, y.u.s.p, n);
    return r ? r : (x.u.s.n > y.u.s.n) - (x.u.s.n < y.u.s.n);
}

void cj_tojson(cj_ctx_t *c, cj_buf_t *b, cj_val_t v, const cj_json_opts_t *o, int level)
{
    char tmp[64];
    int indent = o->indent;
    if (level > MAX_NEST)
        cj_fail(c, MEMRA_E_RANGE, "tojson: value nested deeper than %d", MAX_NEST);
    switch (v.t) {
    case CJ_NONE: cj_buf_puts(c, b, "null"); break;
    case CJ_BOOL: cj_buf_puts(c, b, v.u.b ? "true" : "false"); break;
    case CJ_INT:
        snprintf(tmp, sizeof tmp, "%lld", (long long)v.u.i);
        cj_buf_puts(c, b, tmp);
        break;
    case CJ_FLOAT:
        if (isnan(v.u.f))
            cj_buf_puts(c, b, "NaN");
        else if (isinf(v.u.f))
            cj_buf_puts(c, b, v.u.f < 0 ? "-Infinity" : "Infinity");
        else {
            cj_fmt_float(tmp, sizeof tmp, v.u.f);
            cj_buf_puts(c, b, tmp);
        }
        break;
    case CJ_STR: json_str(c, b, v.u.s.p, v.u.s.n, o->ascii); break;
    case CJ_LIST:
        if (v.u.l->n == 0) {
            cj_buf_puts(c, b, "[]");
            break;
        }
        cj_buf_puts(c, b, "[");
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i)
                cj_buf_puts(c, b, o->item_sep);
            if (indent >= 0)
                json_nl(c, b, indent, level + 1);
            cj_tojson(c, b, v.u.l->v[i], o, level + 1);
        }
        if (indent >= 0)
            json_nl(c, b, indent, level);
        cj_buf_puts(c, b, "]");
        break;
    case CJ_DICT:
    case CJ_NS: {
        size_t n = v.u.d->n;
        if (n == 0) {
            cj_buf_puts(c, b, "{}");
            break;
        }
        const cj_entry_t *e = v.u.d->e;
        if (o->sort) {
            cj_entry_t *s = cj_alloc(c, n * sizeof *s);
            memcpy(s, e, n * sizeof *s);
            for (size_t i = 1; i < n; i++) /* stable insertion sort */
                for (size_t j = i; j > 0 && key_cmp(&s[j - 1], &s[j]) > 0; j--) {
                    cj_entry_t t = s[j];
                    s[j] = s[j - 1];
                    s[j - 1] = t;
                }
            e = s;
        }
        cj_buf_puts(c, b, "{");
        for (size_t i = 0; i < n; i++) {
            if (i)
                cj_buf_puts(c, b, o->item_sep);
            if (indent >= 0)
                json_nl(c, b, indent, level + 1);
            cj_val_t k = e[i].k;
            if (k.t == CJ_STR)
                json_str(c, b, k.u.s.p, k.u.s.n, o->ascii);
            else {
                cj_buf_t kb = {0};
                if (k.t == CJ_NONE)
                    cj_buf_puts(c, &kb, "null");
                else if (k.t == CJ_BOOL)
                    cj_buf_puts(c, &kb, k.u.b ? "true" : "false");
                else if (k.t == CJ_INT || k.t == CJ_FLOAT)
                    cj_str_of(c, &kb, k);
                else
                    cj_fail(c, MEMRA_E_TYPE, "keys must be str, int, float, bool or None, not %s",
                            cj_type_repr(k));
                json_str(c, b, kb.p, kb.n, o->ascii);
            }
            cj_buf_puts(c, b, o->key_sep);
            cj_tojson(c, b, e[i].v, o, level + 1);
        }
        if (indent >= 0)
            json_nl(c, b, indent, level);
        cj_buf_puts(c, b, "}");
        break;
    }
    case CJ_UNDEF: cj_fail(c, MEMRA_E_TYPE, "Object of type Undefined is not JSON serializable");
    default: cj_fail(c, MEMRA_E_TYPE, "Object of type %s is not JSON serializable", cj_type_repr(v));
    }
}

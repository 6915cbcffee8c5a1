/* Filters, tests, methods and global functions of the chat-template
 * interpreter: the ones real chat templates use, with jinja2's and
 * Python's behaviour. Nothing here reaches beyond the data: there is no
 * attribute of a Python object to walk, and lists and dicts cannot be
 * changed (jinja2's ImmutableSandboxedEnvironment, which Hugging Face
 * uses, refuses list.append too). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat_impl.h"

enum { FN_RANGE, FN_NAMESPACE, FN_RAISE, FN_STRFTIME, FN_DICT, FN_COUNT };
static const char *const fn_names[FN_COUNT] = {"range", "namespace", "raise_exception", "strftime_now", "dict"};

int cj_func_id(const char *name)
{
    for (int i = 0; i < FN_COUNT; i++)
        if (!strcmp(fn_names[i], name))
            return i;
    return -1;
}

/* argument I by position or NAME, or NULL */
static const cj_val_t *arg(const cj_args_t *a, size_t i, const char *name)
{
    if (name)
        for (size_t k = 0; k < a->nkw; k++)
            if (!strcmp(a->kwn[k], name))
                return &a->kw[k];
    return i < a->n ? &a->v[i] : NULL;
}

static int64_t int_arg(cj_ctx_t *c, const cj_val_t *v, const char *what)
{
    if (v->t == CJ_INT)
        return v->u.i;
    if (v->t == CJ_BOOL)
        return v->u.b;
    cj_fail(c, MEMRA_E_TYPE, "%s: expected an integer, got %s", what, cj_type_repr(*v));
}

static cj_val_t need_str(cj_ctx_t *c, cj_val_t v, const char *what)
{
    if (v.t == CJ_UNDEF)
        cj_undef_fail(c, v);
    if (v.t != CJ_STR)
        cj_fail(c, MEMRA_E_TYPE, "%s: expected a string, got %s", what, cj_type_repr(v));
    return v;
}

static cj_val_t buf_val(cj_buf_t *b) { return b->p ? cj_str(b->p, b->n) : cj_str("", 0); }

/* ---- UTF-8 helpers ---- */

static uint32_t dec(const char *p, size_t n, size_t *len)
{
    unsigned char b0 = (unsigned char)p[0];
    size_t l = b0 < 0x80 ? 1 : b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4;
    if (l > n)
        l = n;
    uint32_t cp = l == 1 ? b0 : l == 2 ? (b0 & 0x1Fu) : l == 3 ? (b0 & 0x0Fu) : (b0 & 0x07u);
    for (size_t i = 1; i < l; i++)
        cp = (cp << 6) | ((unsigned char)p[i] & 0x3Fu);
    *len = l;
    return cp;
}

/* the start of the code point that ends at P[N-1] */
static size_t prev_start(const char *p, size_t n)
{
    size_t i = n - 1;
    while (i > 0 && ((unsigned char)p[i] & 0xC0) == 0x80)
        i--;
    return i;
}

static bool py_space(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

static bool in_set(uint32_t cp, cj_val_t chars)
{
    if (chars.t != CJ_STR)
        return py_space(cp);
    for (size_t i = 0; i < chars.u.s.n;) {
        size_t l;
        if (dec(chars.u.s.p + i, chars.u.s.n - i, &l) == cp)
            return true;
        i += l;
    }
    return false;
}

/* str.strip family: which = 1 left, 2 right, 3 both; CHARS not a string = whitespace */
static cj_val_t strip(cj_val_t s, cj_val_t chars, int which)
{
    const char *p = s.u.s.p;
    size_t b = 0, e = s.u.s.n, l;
    if (which & 1)
        while (b < e && in_set(dec(p + b, e - b, &l), chars))
            b += l;
    if (which & 2)
        while (e > b) {
            size_t st = prev_start(p, e);
            if (st < b || !in_set(dec(p + st, e - st, &l), chars))
                break;
            e = st;
        }
    return cj_str(p + b, e - b);
}

/* Simple case mappings of Latin-1, Latin Extended-A, Greek and Cyrillic
 * besides ASCII (what Python's str.upper/lower do there, one code point to
 * one; ß and the like, which Python expands, stay as they are). */
static uint32_t to_upper(uint32_t cp)
{
    if (cp >= 'a' && cp <= 'z')
        return cp - 32;
    if ((cp >= 0xE0 && cp <= 0xFE && cp != 0xF7))
        return cp - 32;
    if (cp == 0xFF)
        return 0x178;
    if (cp >= 0x100 && cp <= 0x17F && cp != 0x130 && cp != 0x131 && cp != 0x138 && cp != 0x149 && cp != 0x17F) {
        bool odd_lower = (cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E);
        if (odd_lower ? (cp & 1) == 0 : (cp & 1) == 1)
            return cp - 1;
        return cp;
    }
    if (cp >= 0x3B1 && cp <= 0x3C9 && cp != 0x3C2)
        return cp - 32;
    if (cp == 0x3C2)
        return 0x3A3;
    if (cp == 0x3AC)
        return 0x386;
    if (cp >= 0x3AD && cp <= 0x3AF)
        return cp - 37;
    if (cp == 0x3CC)
        return 0x38C;
    if (cp == 0x3CD || cp == 0x3CE)
        return cp - 63;
    if (cp >= 0x430 && cp <= 0x44F)
        return cp - 32;
    if (cp >= 0x450 && cp <= 0x45F)
        return cp - 80;
    return cp;
}

static uint32_t to_lower(uint32_t cp)
{
    if (cp >= 'A' && cp <= 'Z')
        return cp + 32;
    if (cp >= 0xC0 && cp <= 0xDE && cp != 0xD7)
        return cp + 32;
    if (cp == 0x178)
        return 0xFF;
    if (cp >= 0x100 && cp <= 0x17F && cp != 0x130 && cp != 0x131 && cp != 0x138 && cp != 0x149 && cp != 0x17F) {
        bool odd_lower = (cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E);
        if (odd_lower ? (cp & 1) == 1 : (cp & 1) == 0)
            return cp + 1;
        return cp;
    }
    if (cp >= 0x391 && cp <= 0x3A9 && cp != 0x3A2)
        return cp + 32;
    if (cp == 0x386)
        return 0x3AC;
    if (cp >= 0x388 && cp <= 0x38A)
        return cp + 37;
    if (cp == 0x38C)
        return 0x3CC;
    if (cp == 0x38E || cp == 0x38F)
        return cp + 63;
    if (cp >= 0x410 && cp <= 0x42F)
        return cp + 32;
    if (cp >= 0x400 && cp <= 0x40F)
        return cp + 80;
    return cp;
}

static bool cased(uint32_t cp) { return cp == 0xDF || to_upper(cp) != cp || to_lower(cp) != cp; }

static cj_val_t case_map(cj_ctx_t *c, cj_val_t s, int mode /* 0 lower 1 upper 2 capitalize 3 title */)
{
    cj_buf_t b = {0};
    cj_buf_put(c, &b, "", 0);
    bool start = true, first = true;
    for (size_t i = 0; i < s.u.s.n;) {
        size_t l;
        uint32_t cp = dec(s.u.s.p + i, s.u.s.n - i, &l);
        if (cp < 0x80 || l > 1) {
            bool up = mode == 1 || (mode == 2 && first) || (mode == 3 && start);
            uint32_t m = up ? to_upper(cp) : to_lower(cp);
            /* title: a word starts after any uncased character */
            start = !cased(cp);
            if (cp == 0xDF && up) /* ß: "SS", or "Ss" starting a title-cased word */
                cj_buf_puts(c, &b, mode == 1 ? "SS" : "Ss");
            else
                cj_buf_put_cp(c, &b, m);
        } else {
            cj_buf_put(c, &b, s.u.s.p + i, l);
            start = true;
        }
        first = false;
        i += l;
    }
    return buf_val(&b);
}

static cj_val_t replace(cj_ctx_t *c, cj_val_t s, cj_val_t old, cj_val_t neu, int64_t count)
{
    cj_buf_t b = {0};
    cj_buf_put(c, &b, "", 0);
    size_t i = 0, n = s.u.s.n, on = old.u.s.n;
    int64_t done = 0;
    if (on == 0) {
        /* Python inserts NEW between every character and at both ends */
        for (size_t k = 0; k <= n;) {
            if (count < 0 || done < count) {
                cj_buf_put(c, &b, neu.u.s.p, neu.u.s.n);
                done++;
            }
            if (k == n)
                break;
            size_t l;
            dec(s.u.s.p + k, n - k, &l);
            cj_buf_put(c, &b, s.u.s.p + k, l);
            k += l;
        }
        return buf_val(&b);
    }
    while (i < n) {
        if ((count < 0 || done < count) && i + on <= n && memcmp(s.u.s.p + i, old.u.s.p, on) == 0) {
            cj_buf_put(c, &b, neu.u.s.p, neu.u.s.n);
            i += on;
            done++;
        } else {
            cj_buf_put(c, &b, s.u.s.p + i, 1);
            i++;
        }
    }
    return buf_val(&b);
}

static cj_val_t split(cj_ctx_t *c, cj_val_t s, const cj_val_t *sep, int64_t maxsplit)
{
    cj_val_t out = cj_list_new(c);
    const char *p = s.u.s.p;
    size_t n = s.u.s.n, i = 0;
    if (!sep || sep->t == CJ_NONE) {
        int64_t done = 0;
        for (;;) {
            size_t l;
            while (i < n && py_space(dec(p + i, n - i, &l)))
                i += l;
            if (i >= n)
                break;
            if (maxsplit >= 0 && done >= maxsplit) {
                cj_val_t rest = strip(cj_str(p + i, n - i), cj_none(), 2);
                cj_list_push(c, out.u.l, rest);
                break;
            }
            size_t st = i;
            while (i < n && !py_space(dec(p + i, n - i, &l)))
                i += l;
            cj_list_push(c, out.u.l, cj_str(p + st, i - st));
            done++;
        }
        return out;
    }
    cj_val_t sp = need_str(c, *sep, "split");
    if (sp.u.s.n == 0)
        cj_fail(c, MEMRA_E_INVALID, "empty separator");
    size_t st = 0;
    int64_t done = 0;
    while (i + sp.u.s.n <= n) {
        if ((maxsplit < 0 || done < maxsplit) && memcmp(p + i, sp.u.s.p, sp.u.s.n) == 0) {
            cj_list_push(c, out.u.l, cj_str(p + st, i - st));
            i += sp.u.s.n;
            st = i;
            done++;
        } else {
            i++;
        }
    }
    cj_list_push(c, out.u.l, cj_str(p + st, n - st));
    return out;
}

static bool starts(cj_val_t s, cj_val_t x, bool end)
{
    if (x.t != CJ_STR || x.u.s.n > s.u.s.n)
        return false;
    return memcmp(s.u.s.p + (end ? s.u.s.n - x.u.s.n : 0), x.u.s.p, x.u.s.n) == 0;
}


/* Python's printf-style formatting (FMT % ARGS and the format filter):
 * %s %r %d %i %f %x %% with an optional width and precision; ARGS is one
 * value or a tuple/list of them, or a dict for %(name)s. */
static cj_val_t percent_format(cj_ctx_t *c, cj_val_t fmt, cj_val_t args)
{
    cj_buf_t b = {0};
    cj_buf_put(c, &b, "", 0);
    size_t ai = 0;
    bool many = args.t == CJ_LIST;
    for (size_t i = 0; i < fmt.u.s.n; i++) {
        char ch = fmt.u.s.p[i];
        if (ch != '%') {
            cj_buf_put(c, &b, &ch, 1);
            continue;
        }
        if (++i >= fmt.u.s.n)
            cj_fail(c, MEMRA_E_INVALID, "incomplete format");
        cj_val_t v;
        bool named = false;
        if (fmt.u.s.p[i] == '(') {
            size_t e = i + 1;
            while (e < fmt.u.s.n && fmt.u.s.p[e] != ')')
                e++;
            if (e >= fmt.u.s.n || args.t != CJ_DICT)
                cj_fail(c, MEMRA_E_TYPE, "format requires a mapping");
            cj_val_t *f = cj_dict_find(args.u.d, fmt.u.s.p + i + 1, e - i - 1);
            if (!f)
                cj_fail(c, MEMRA_E_TYPE, "format: missing key");
            v = *f;
            named = true;
            i = e + 1;
        }
        char spec[32] = "%";
        size_t sl = 1;
        while (i < fmt.u.s.n && strchr("-+ #0123456789.", fmt.u.s.p[i]) && sl < 20)
            spec[sl++] = fmt.u.s.p[i++];
        if (i >= fmt.u.s.n)
            cj_fail(c, MEMRA_E_INVALID, "incomplete format");
        char conv = fmt.u.s.p[i];
        if (conv == '%') {
            cj_buf_puts(c, &b, "%");
            continue;
        }
        if (!named) {
            if (many) {
                if (ai >= args.u.l->n)
                    cj_fail(c, MEMRA_E_TYPE, "not enough arguments for format string");
                v = args.u.l->v[ai++];
            } else {
                if (ai++)
                    cj_fail(c, MEMRA_E_TYPE, "not enough arguments for format string");
                v = args;
            }
        }
        char out[512];
        if (conv == 's' || conv == 'r') {
            cj_buf_t t = {0};
            cj_buf_put(c, &t, "", 0);
            if (conv == 's')
                cj_str_of(c, &t, v);
            else
                cj_repr_of(c, &t, v);
            if (sl == 1) {
                cj_buf_put(c, &b, t.p, t.n);
                continue;
            }
            spec[sl++] = 's';
            spec[sl] = 0;
            snprintf(out, sizeof out, spec, t.p);
        } else if (strchr("dixXoeEfFgG", conv)) {
            bool isf = strchr("eEfFgG", conv) != NULL;
            if (v.t != CJ_INT && v.t != CJ_FLOAT && v.t != CJ_BOOL)
                cj_fail(c, MEMRA_E_TYPE, "%%%c format: a real number is required, not %s", conv, cj_type_repr(v));
            double f = v.t == CJ_FLOAT ? v.u.f : v.t == CJ_INT ? (double)v.u.i : v.u.b;
            long long k = v.t == CJ_FLOAT ? (long long)v.u.f : v.t == CJ_INT ? v.u.i : v.u.b;
            if (isf) {
                spec[sl++] = conv;
                spec[sl] = 0;
                snprintf(out, sizeof out, spec, f);
            } else {
                spec[sl++] = 'l';
                spec[sl++] = 'l';
                spec[sl++] = conv == 'i' ? 'd' : conv;
                spec[sl] = 0;
                snprintf(out, sizeof out, spec, k);
            }
        } else {
            cj_fail(c, MEMRA_E_UNSUPPORTED, "unsupported format character '%c'", conv);
        }
        cj_buf_puts(c, &b, out);
    }
    if (many && ai < args.u.l->n)
        cj_fail(c, MEMRA_E_TYPE, "not all arguments converted during string formatting");
    return buf_val(&b);
}

cj_val_t cj_percent(cj_ctx_t *c, cj_val_t fmt, cj_val_t args) { return percent_format(c, fmt, args); }

/* str.format: {} {0} {name} with !s/!r conversions and no format specs */
static cj_val_t brace_format(cj_ctx_t *c, cj_val_t fmt, const cj_args_t *a)
{
    cj_buf_t b = {0};
    cj_buf_put(c, &b, "", 0);
    size_t auto_i = 0;
    const char *p = fmt.u.s.p;
    size_t n = fmt.u.s.n;
    for (size_t i = 0; i < n; i++) {
        if ((p[i] == '{' || p[i] == '}') && i + 1 < n && p[i + 1] == p[i]) {
            cj_buf_put(c, &b, p + i, 1);
            i++;
            continue;
        }
        if (p[i] != '{') {
            cj_buf_put(c, &b, p + i, 1);
            continue;
        }
        size_t e = i + 1;
        while (e < n && p[e] != '}')
            e++;
        if (e >= n)
            cj_fail(c, MEMRA_E_INVALID, "Single '{' encountered in format string");
        const char *f = p + i + 1;
        size_t fl = e - i - 1, conv_at = fl;
        for (size_t k = 0; k < fl; k++)
            if (f[k] == '!' || f[k] == ':') {
                conv_at = k;
                break;
            }
        bool repr = conv_at + 1 < fl && f[conv_at] == '!' && f[conv_at + 1] == 'r';
        cj_val_t v;
        if (conv_at == 0) {
            if (auto_i >= a->n)
                cj_fail(c, MEMRA_E_RANGE, "Replacement index %zu out of range for positional args tuple", auto_i);
            v = a->v[auto_i++];
        } else if (f[0] >= '0' && f[0] <= '9') {
            size_t k = (size_t)strtoul(cj_strndup(c, f, conv_at), NULL, 10);
            if (k >= a->n)
                cj_fail(c, MEMRA_E_RANGE, "Replacement index %zu out of range for positional args tuple", k);
            v = a->v[k];
        } else {
            const char *name = cj_strndup(c, f, conv_at);
            const cj_val_t *kv = arg(a, SIZE_MAX, name);
            if (!kv)
                cj_fail(c, MEMRA_E_TYPE, "format: no argument named '%s'", name);
            v = *kv;
        }
        if (repr)
            cj_repr_of(c, &b, v);
        else
            cj_str_of(c, &b, v);
        i = e;
    }
    return buf_val(&b);
}

bool cj_method(cj_ctx_t *c, cj_val_t self, const char *name, const cj_args_t *a, cj_val_t *out)
{
    const cj_val_t *a0 = arg(a, 0, NULL), *a1 = arg(a, 1, NULL);
    if (self.t == CJ_STR) {
        if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) {
            if (!a0)
                cj_fail(c, MEMRA_E_TYPE, "%s() takes at least 1 argument (0 given)", name);
            bool end = name[0] == 'e', r = false;
            if (a0->t == CJ_LIST && !a0->u.l->tuple)
                cj_fail(c, MEMRA_E_TYPE, "%s first arg must be str or a tuple of str, not list", name);
            if (a0->t == CJ_LIST) {
                for (size_t i = 0; i < a0->u.l->n; i++)
                    r |= starts(self, a0->u.l->v[i], end);
            } else {
                r = starts(self, need_str(c, *a0, name), end);
            }
            *out = cj_bool(r);
            return true;
        }
        if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip")) {
            int which = name[0] == 'l' ? 1 : name[0] == 'r' ? 2 : 3;
            *out = strip(self, a0 ? *a0 : cj_none(), which);
            return true;
        }
        if (!strcmp(name, "split")) {
            const cj_val_t *m = arg(a, 1, "maxsplit");
            *out = split(c, self, arg(a, 0, "sep"), m ? int_arg(c, m, "split") : -1);
            return true;
        }
        if (!strcmp(name, "replace")) {
            if (!a0 || !a1)
                cj_fail(c, MEMRA_E_TYPE, "replace() takes at least 2 arguments");
            const cj_val_t *k = arg(a, 2, "count");
            *out = replace(c, self, need_str(c, *a0, name), need_str(c, *a1, name), k ? int_arg(c, k, name) : -1);
            return true;
        }
        int mode = !strcmp(name, "lower") ? 0 : !strcmp(name, "upper") ? 1 : !strcmp(name, "capitalize") ? 2
                 : !strcmp(name, "title") ? 3 : -1;
        if (mode >= 0) {
            *out = case_map(c, self, mode);
            return true;
        }
        if (!strcmp(name, "find") || !strcmp(name, "count") || !strcmp(name, "index")) {
            cj_val_t x = need_str(c, a0 ? *a0 : cj_undef(NULL), name);
            int64_t found = -1, cnt = 0;
            for (size_t i = 0; i + x.u.s.n <= self.u.s.n;) {
                if (memcmp(self.u.s.p + i, x.u.s.p, x.u.s.n) == 0) {
                    if (found < 0)
                        found = (int64_t)cj_utf8_len(self.u.s.p, i);
                    cnt++;
                    i += x.u.s.n ? x.u.s.n : 1;
                } else {
                    i++;
                }
            }
            if (!strcmp(name, "index") && found < 0)
                cj_fail(c, MEMRA_E_INVALID, "substring not found");
            *out = cj_int(name[0] == 'c' ? cnt : found);
            return true;
        }
        if (!strcmp(name, "join")) {
            cj_list_t *l = cj_iter(c, a0 ? *a0 : cj_undef(NULL));
            cj_buf_t b = {0};
            cj_buf_put(c, &b, "", 0);
            for (size_t i = 0; i < l->n; i++) {
                if (i)
                    cj_buf_put(c, &b, self.u.s.p, self.u.s.n);
                cj_buf_put(c, &b, need_str(c, l->v[i], "join").u.s.p, l->v[i].u.s.n);
            }
            *out = buf_val(&b);
            return true;
        }
        if (!strcmp(name, "format")) {
            *out = brace_format(c, self, a);
            return true;
        }
        if (!strcmp(name, "splitlines")) {
            cj_val_t l = cj_list_new(c);
            size_t st = 0;
            for (size_t i = 0; i < self.u.s.n; i++)
                if (self.u.s.p[i] == '\n') {
                    size_t e = i > st && self.u.s.p[i - 1] == '\r' ? i - 1 : i;
                    cj_list_push(c, l.u.l, cj_str(self.u.s.p + st, e - st));
                    st = i + 1;
                }
            if (st < self.u.s.n)
                cj_list_push(c, l.u.l, cj_str(self.u.s.p + st, self.u.s.n - st));
            *out = l;
            return true;
        }
        return false;
    }
    if (self.t == CJ_DICT) {
        cj_val_t *i0 = cj_dict_find(self.u.d, "index0", 6);
        if (!strcmp(name, "cycle") && i0 && i0->t == CJ_INT && cj_dict_find(self.u.d, "revindex0", 9)) {
            /* loop.cycle(a, b, ...) */
            if (!a->n)
                cj_fail(c, MEMRA_E_TYPE, "no items for cycling given");
            *out = a->v[(size_t)i0->u.i % a->n];
            return true;
        }
        if (!strcmp(name, "get")) {
            if (!a0)
                cj_fail(c, MEMRA_E_TYPE, "get expected at least 1 argument, got 0");
            cj_val_t *v = cj_dict_findv(self.u.d, *a0);
            *out = v ? *v : a1 ? *a1 : cj_none();
            return true;
        }
        if (!strcmp(name, "items") || !strcmp(name, "keys") || !strcmp(name, "values")) {
            cj_val_t l = cj_list_new(c);
            for (size_t i = 0; i < self.u.d->n; i++) {
                cj_val_t v;
                if (name[0] == 'i') {
                    v = cj_tuple_new(c);
                    cj_list_push(c, v.u.l, self.u.d->e[i].k);
                    cj_list_push(c, v.u.l, self.u.d->e[i].v);
                } else {
                    v = name[0] == 'k' ? self.u.d->e[i].k : self.u.d->e[i].v;
                }
                cj_list_push(c, l.u.l, v);
            }
            *out = l;
            return true;
        }
        return false;
    }
    if (self.t == CJ_LIST && (!strcmp(name, "append") || !strcmp(name, "pop") || !strcmp(name, "insert") ||
                              !strcmp(name, "extend") || !strcmp(name, "remove") || !strcmp(name, "clear")))
        cj_fail(c, MEMRA_E_UNSUPPORTED, "access to attribute '%s' of 'list' object is unsafe.", name);
    return false;
}

/* ---- filters ---- */

static cj_val_t attr_path(cj_ctx_t *c, cj_val_t v, cj_val_t path)
{
    if (path.t == CJ_INT)
        return cj_getitem(c, v, path);
    cj_val_t p = need_str(c, path, "attribute");
    size_t st = 0;
    for (size_t i = 0; i <= p.u.s.n; i++)
        if (i == p.u.s.n || p.u.s.p[i] == '.') {
            const char *seg = cj_strndup(c, p.u.s.p + st, i - st);
            char *end;
            long long k = strtoll(seg, &end, 10);
            if (*seg && !*end)
                v = cj_getitem(c, v, cj_int(k));
            else {
                cj_val_t *f = (v.t == CJ_DICT || v.t == CJ_NS) ? cj_dict_find(v.u.d, seg, i - st) : NULL;
                v = f ? *f : v.t == CJ_UNDEF ? v : cj_getattr(c, v, seg);
            }
            st = i + 1;
        }
    return v;
}

static cj_args_t rest_args(const cj_args_t *a, size_t from)
{
    cj_args_t r = *a;
    r.v = a->n > from ? a->v + from : NULL;
    r.n = a->n > from ? a->n - from : 0;
    return r;
}

static int lower_cmp(cj_val_t a, cj_val_t b, bool cs)
{
    if (a.t == CJ_STR && b.t == CJ_STR) {
        size_t n = a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n;
        for (size_t i = 0; i < n; i++) {
            unsigned char x = (unsigned char)a.u.s.p[i], y = (unsigned char)b.u.s.p[i];
            if (!cs) {
                if (x >= 'A' && x <= 'Z')
                    x += 32;
                if (y >= 'A' && y <= 'Z')
                    y += 32;
            }
            if (x != y)
                return x < y ? -1 : 1;
        }
        return a.u.s.n < b.u.s.n ? -1 : a.u.s.n > b.u.s.n;
    }
    double x = a.t == CJ_FLOAT ? a.u.f : a.t == CJ_INT ? (double)a.u.i : a.t == CJ_BOOL ? a.u.b : 0;
    double y = b.t == CJ_FLOAT ? b.u.f : b.t == CJ_INT ? (double)b.u.i : b.t == CJ_BOOL ? b.u.b : 0;
    return x < y ? -1 : x > y;
}

/* stable insertion sort of V by KEYS */
static void sort_by(cj_val_t *v, cj_val_t *keys, size_t n, bool cs, bool rev)
{
    for (size_t i = 1; i < n; i++) {
        cj_val_t x = v[i], k = keys[i];
        size_t j = i;
        while (j > 0) {
            int r = lower_cmp(keys[j - 1], k, cs);
            if (rev ? r >= 0 : r <= 0)
                break;
            v[j] = v[j - 1];
            keys[j] = keys[j - 1];
            j--;
        }
        v[j] = x;
        keys[j] = k;
    }
}

static bool kw_true(const cj_args_t *a, size_t i, const char *name)
{
    const cj_val_t *v = arg(a, i, name);
    return v && cj_truthy(*v);
}

cj_val_t cj_filter(cj_ctx_t *c, cj_scope_t *s, const char *name, cj_val_t x, const cj_args_t *a)
{
    const cj_val_t *a0 = arg(a, 0, NULL);
    if (!strcmp(name, "default") || !strcmp(name, "d")) {
        const cj_val_t *dv = arg(a, 0, "default_value");
        if (x.t == CJ_UNDEF || (kw_true(a, 1, "boolean") && !cj_truthy(x)))
            return dv ? *dv : cj_str("", 0);
        return x;
    }
    if (!strcmp(name, "length") || !strcmp(name, "count")) {
        switch (x.t) {
        case CJ_UNDEF: return cj_int(0);
        case CJ_STR: return cj_int((int64_t)cj_utf8_len(x.u.s.p, x.u.s.n));
        case CJ_LIST: return cj_int((int64_t)x.u.l->n);
        case CJ_DICT:
        case CJ_NS: return cj_int((int64_t)x.u.d->n);
        default: cj_fail(c, MEMRA_E_TYPE, "object of type '%s' has no len()", cj_type_repr(x));
        }
    }
    if (!strcmp(name, "tojson")) {
        /* the keywords of Hugging Face's tojson: json.dumps's own */
        const cj_val_t *ind = arg(a, SIZE_MAX, "indent"), *asc = arg(a, SIZE_MAX, "ensure_ascii");
        const cj_val_t *sep = arg(a, SIZE_MAX, "separators"), *sk = arg(a, SIZE_MAX, "sort_keys");
        if (!ind && a->n)
            ind = &a->v[0];
        cj_json_opts_t o = {.indent = ind && ind->t != CJ_NONE ? (int)int_arg(c, ind, "tojson") : -1,
                            .ascii = asc && cj_truthy(*asc), .sort = sk && cj_truthy(*sk)};
        if (o.indent > 64)
            o.indent = 64;
        o.item_sep = o.indent >= 0 ? "," : ", ";
        o.key_sep = ": ";
        if (sep && sep->t == CJ_LIST && sep->u.l->n == 2 && sep->u.l->v[0].t == CJ_STR && sep->u.l->v[1].t == CJ_STR) {
            o.item_sep = cj_strndup(c, sep->u.l->v[0].u.s.p, sep->u.l->v[0].u.s.n);
            o.key_sep = cj_strndup(c, sep->u.l->v[1].u.s.p, sep->u.l->v[1].u.s.n);
        } else if (sep && sep->t != CJ_NONE) {
            cj_fail(c, MEMRA_E_TYPE, "tojson: separators must be a pair of strings");
        }
        cj_buf_t b = {0};
        cj_buf_put(c, &b, "", 0);
        cj_tojson(c, &b, x, &o, 0);
        return buf_val(&b);
    }
    if (!strcmp(name, "safe") || !strcmp(name, "string"))
        return cj_to_str(c, x);
    if (!strcmp(name, "trim")) {
        const cj_val_t *ch = arg(a, 0, "chars");
        return strip(cj_to_str(c, x), ch ? *ch : cj_none(), 3);
    }
    if (!strcmp(name, "upper") || !strcmp(name, "lower") || !strcmp(name, "capitalize") || !strcmp(name, "title")) {
        int mode = name[0] == 'l' ? 0 : name[0] == 'u' ? 1 : name[0] == 'c' ? 2 : 3;
        return case_map(c, cj_to_str(c, x), mode);
    }
    if (!strcmp(name, "replace")) {
        if (!a0 || a->n < 2)
            cj_fail(c, MEMRA_E_TYPE, "replace filter needs 2 arguments");
        const cj_val_t *k = arg(a, 2, "count");
        return replace(c, cj_to_str(c, x), cj_to_str(c, *a0), cj_to_str(c, a->v[1]), k ? int_arg(c, k, name) : -1);
    }
    if (!strcmp(name, "items")) {
        if (x.t == CJ_UNDEF)
            return cj_list_new(c);
        if (x.t != CJ_DICT && x.t != CJ_NS)
            cj_fail(c, MEMRA_E_TYPE, "Can only get item pairs from a mapping.");
        cj_val_t r;
        x.t = CJ_DICT;
        cj_method(c, x, "items", a, &r);
        return r;
    }
    if (!strcmp(name, "dictsort")) {
        if (x.t != CJ_DICT && x.t != CJ_NS)
            cj_fail(c, MEMRA_E_TYPE, "dictsort: expected a mapping, got %s", cj_type_repr(x));
        bool cs = kw_true(a, 0, "case_sensitive"), rev = kw_true(a, 2, "reverse");
        const cj_val_t *by = arg(a, 1, "by");
        bool by_value = by && by->t == CJ_STR && by->u.s.n == 5 && !memcmp(by->u.s.p, "value", 5);
        size_t n = x.u.d->n;
        cj_val_t *v = cj_alloc(c, (n + 1) * sizeof *v), *keys = cj_alloc(c, (n + 1) * sizeof *keys);
        for (size_t i = 0; i < n; i++) {
            v[i] = cj_tuple_new(c);
            cj_list_push(c, v[i].u.l, x.u.d->e[i].k);
            cj_list_push(c, v[i].u.l, x.u.d->e[i].v);
            keys[i] = by_value ? x.u.d->e[i].v : x.u.d->e[i].k;
        }
        sort_by(v, keys, n, cs, rev);
        cj_val_t l = cj_list_new(c);
        for (size_t i = 0; i < n; i++)
            cj_list_push(c, l.u.l, v[i]);
        return l;
    }
    if (!strcmp(name, "sort")) {
        cj_list_t *src = cj_iter(c, x);
        size_t n = src->n;
        const cj_val_t *at = arg(a, 3, "attribute");
        cj_val_t *v = cj_alloc(c, (n + 1) * sizeof *v), *keys = cj_alloc(c, (n + 1) * sizeof *keys);
        for (size_t i = 0; i < n; i++) {
            v[i] = src->v[i];
            keys[i] = at ? attr_path(c, src->v[i], *at) : src->v[i];
        }
        sort_by(v, keys, n, kw_true(a, 1, "case_sensitive"), kw_true(a, 0, "reverse"));
        cj_val_t l = cj_list_new(c);
        for (size_t i = 0; i < n; i++)
            cj_list_push(c, l.u.l, v[i]);
        return l;
    }
    if (!strcmp(name, "list")) {
        cj_list_t *src = cj_iter(c, x);
        cj_val_t l = cj_list_new(c);
        for (size_t i = 0; i < src->n; i++)
            cj_list_push(c, l.u.l, src->v[i]);
        return l;
    }
    if (!strcmp(name, "join")) {
        cj_list_t *src = cj_iter(c, x);
        const cj_val_t *sep = arg(a, 0, "d"), *at = arg(a, 1, "attribute");
        cj_buf_t b = {0};
        cj_buf_put(c, &b, "", 0);
        for (size_t i = 0; i < src->n; i++) {
            if (i && sep)
                cj_str_of(c, &b, *sep);
            cj_str_of(c, &b, at ? attr_path(c, src->v[i], *at) : src->v[i]);
        }
        return buf_val(&b);
    }
    if (!strcmp(name, "first") || !strcmp(name, "last")) {
        cj_list_t *src = cj_iter(c, x);
        if (!src->n)
            return cj_undef_fmt(c, "No first item, sequence was empty.");
        return src->v[name[0] == 'f' ? 0 : src->n - 1];
    }
    if (!strcmp(name, "reverse")) {
        if (x.t == CJ_STR) {
            cj_list_t *src = cj_iter(c, x);
            cj_buf_t b = {0};
            cj_buf_put(c, &b, "", 0);
            for (size_t i = src->n; i-- > 0;)
                cj_buf_put(c, &b, src->v[i].u.s.p, src->v[i].u.s.n);
            return buf_val(&b);
        }
        cj_list_t *src = cj_iter(c, x);
        cj_val_t l = cj_list_new(c);
        for (size_t i = src->n; i-- > 0;)
            cj_list_push(c, l.u.l, src->v[i]);
        return l;
    }
    if (!strcmp(name, "unique")) {
        cj_list_t *src = cj_iter(c, x);
        cj_val_t l = cj_list_new(c);
        for (size_t i = 0; i < src->n; i++)
            if (!cj_contains(c, l, src->v[i]))
                cj_list_push(c, l.u.l, src->v[i]);
        return l;
    }
    if (!strcmp(name, "int")) {
        if (x.t == CJ_INT)
            return x;
        if (x.t == CJ_BOOL)
            return cj_int(x.u.b);
        if (x.t == CJ_FLOAT)
            return cj_int((int64_t)x.u.f);
        if (x.t == CJ_STR) {
            char *t = cj_strndup(c, x.u.s.p, x.u.s.n), *e;
            long long v = strtoll(t, &e, 10);
            if (*t && !*e)
                return cj_int(v);
            double f = strtod(t, &e);
            if (*t && !*e)
                return cj_int((int64_t)f);
        }
        return a0 ? *a0 : cj_int(0);
    }
    if (!strcmp(name, "float")) {
        if (x.t == CJ_FLOAT)
            return x;
        if (x.t == CJ_INT || x.t == CJ_BOOL)
            return cj_float(x.t == CJ_INT ? (double)x.u.i : x.u.b);
        if (x.t == CJ_STR) {
            char *t = cj_strndup(c, x.u.s.p, x.u.s.n), *e;
            double f = strtod(t, &e);
            if (*t && !*e)
                return cj_float(f);
        }
        return a0 ? *a0 : cj_float(0);
    }
    if (!strcmp(name, "abs")) {
        if (x.t == CJ_BOOL)
            return cj_int(x.u.b);
        if (x.t == CJ_INT)
            return cj_int(x.u.i < 0 ? -x.u.i : x.u.i);
        if (x.t == CJ_FLOAT)
            return cj_float(x.u.f < 0 ? -x.u.f : x.u.f);
        cj_fail(c, MEMRA_E_TYPE, "bad operand type for abs(): '%s'", cj_type_repr(x));
    }
    if (!strcmp(name, "e") || !strcmp(name, "escape")) {
        cj_val_t sv = cj_to_str(c, x);
        cj_buf_t b = {0};
        cj_buf_put(c, &b, "", 0);
        for (size_t i = 0; i < sv.u.s.n; i++) {
            char ch = sv.u.s.p[i];
            const char *r = ch == '&' ? "&amp;" : ch == '<' ? "&lt;" : ch == '>' ? "&gt;" : ch == '"' ? "&#34;" : ch == '\'' ? "&#39;" : NULL;
            if (r)
                cj_buf_puts(c, &b, r);
            else
                cj_buf_put(c, &b, &ch, 1);
        }
        return buf_val(&b);
    }
    if (!strcmp(name, "map")) {
        cj_list_t *src = cj_iter(c, x);
        cj_val_t l = cj_list_new(c);
        const cj_val_t *at = arg(a, SIZE_MAX, "attribute");
        if (at) {
            const cj_val_t *dflt = arg(a, SIZE_MAX, "default");
            for (size_t i = 0; i < src->n; i++) {
                cj_val_t v = attr_path(c, src->v[i], *at);
                cj_list_push(c, l.u.l, v.t == CJ_UNDEF && dflt ? *dflt : v);
            }
            return l;
        }
        if (!a0)
            return l;
        const char *fname = cj_strndup(c, need_str(c, *a0, "map").u.s.p, a0->u.s.n);
        cj_args_t r = rest_args(a, 1);
        r.nkw = 0;
        for (size_t i = 0; i < src->n; i++)
            cj_list_push(c, l.u.l, cj_filter(c, s, fname, src->v[i], &r));
        return l;
    }
    bool sel = !strcmp(name, "select"), rej = !strcmp(name, "reject");
    bool sela = !strcmp(name, "selectattr"), reja = !strcmp(name, "rejectattr");
    if (sel || rej || sela || reja) {
        cj_list_t *src = cj_iter(c, x);
        cj_val_t l = cj_list_new(c);
        size_t ti = (sela || reja) ? 1 : 0;
        const cj_val_t *tn = arg(a, ti, NULL);
        const char *test = tn ? cj_strndup(c, need_str(c, *tn, name).u.s.p, tn->u.s.n) : NULL;
        cj_args_t r = rest_args(a, ti + 1);
        r.nkw = 0;
        for (size_t i = 0; i < src->n; i++) {
            cj_val_t v = (sela || reja) ? attr_path(c, src->v[i], a0 ? *a0 : cj_undef(NULL)) : src->v[i];
            bool ok = test ? cj_test(c, test, v, &r) : cj_truthy(v);
            if (ok == (sel || sela))
                cj_list_push(c, l.u.l, src->v[i]);
        }
        return l;
    }
    if (!strcmp(name, "min") || !strcmp(name, "max") || !strcmp(name, "sum")) {
        cj_list_t *src = cj_iter(c, x);
        if (name[1] == 'u') {
            cj_val_t acc = cj_int(0);
            for (size_t i = 0; i < src->n; i++) {
                cj_val_t v = src->v[i];
                if (acc.t == CJ_INT && v.t == CJ_INT)
                    acc = cj_int(acc.u.i + v.u.i);
                else
                    acc = cj_float((acc.t == CJ_INT ? (double)acc.u.i : acc.u.f) +
                                   (v.t == CJ_INT ? (double)v.u.i : v.t == CJ_FLOAT ? v.u.f : 0));
            }
            return acc;
        }
        if (!src->n)
            return cj_undef_fmt(c, "No aggregated item, sequence was empty.");
        cj_val_t best = src->v[0];
        for (size_t i = 1; i < src->n; i++) {
            int r = lower_cmp(src->v[i], best, false);
            if (name[1] == 'i' ? r < 0 : r > 0)
                best = src->v[i];
        }
        return best;
    }
    if (!strcmp(name, "format")) {
        cj_val_t f = need_str(c, x, "format");
        if (a->nkw) {
            cj_val_t d = cj_dict_new(c);
            for (size_t k = 0; k < a->nkw; k++)
                cj_dict_set(c, d.u.d, cj_cstr(a->kwn[k]), a->kw[k]);
            return percent_format(c, f, d);
        }
        cj_val_t t = cj_tuple_new(c);
        for (size_t k = 0; k < a->n; k++)
            cj_list_push(c, t.u.l, a->v[k]);
        return percent_format(c, f, t);
    }
    if (!strcmp(name, "indent")) {
        cj_val_t sv = cj_to_str(c, x);
        const cj_val_t *w = arg(a, 0, "width");
        int64_t width = w ? int_arg(c, w, name) : 4;
        bool first = kw_true(a, 1, "first"), blank = kw_true(a, 2, "blank");
        cj_buf_t pad = {0}, b = {0};
        cj_buf_put(c, &b, "", 0);
        for (int64_t i = 0; i < width && i < 256; i++)
            cj_buf_puts(c, &pad, " ");
        size_t st = 0;
        bool firstline = true;
        for (size_t i = 0; i <= sv.u.s.n; i++)
            if (i == sv.u.s.n || sv.u.s.p[i] == '\n') {
                bool empty = i == st;
                if ((firstline ? first : true) && (blank || !empty) && pad.p)
                    cj_buf_put(c, &b, pad.p, pad.n);
                cj_buf_put(c, &b, sv.u.s.p + st, i - st);
                if (i < sv.u.s.n)
                    cj_buf_puts(c, &b, "\n");
                st = i + 1;
                firstline = false;
            }
        return buf_val(&b);
    }
    cj_fail(c, MEMRA_E_UNSUPPORTED, "chat template: no filter named '%s'", name);
}

/* ---- tests ---- */

bool cj_test(cj_ctx_t *c, const char *name, cj_val_t x, const cj_args_t *a)
{
    const cj_val_t *a0 = arg(a, 0, NULL);
    if (!strcmp(name, "defined"))
        return x.t != CJ_UNDEF;
    if (!strcmp(name, "undefined"))
        return x.t == CJ_UNDEF;
    if (!strcmp(name, "none"))
        return x.t == CJ_NONE;
    if (!strcmp(name, "string"))
        return x.t == CJ_STR;
    if (!strcmp(name, "number"))
        return x.t == CJ_INT || x.t == CJ_FLOAT || x.t == CJ_BOOL;
    if (!strcmp(name, "integer"))
        return x.t == CJ_INT;
    if (!strcmp(name, "float"))
        return x.t == CJ_FLOAT;
    if (!strcmp(name, "boolean"))
        return x.t == CJ_BOOL;
    if (!strcmp(name, "true"))
        return x.t == CJ_BOOL && x.u.b;
    if (!strcmp(name, "false"))
        return x.t == CJ_BOOL && !x.u.b;
    if (!strcmp(name, "mapping"))
        return x.t == CJ_DICT;
    /* Undefined has __iter__, __len__ and __getitem__ in jinja2 */
    if (!strcmp(name, "iterable"))
        return x.t == CJ_STR || x.t == CJ_LIST || x.t == CJ_DICT || x.t == CJ_UNDEF;
    if (!strcmp(name, "sequence"))
        return x.t == CJ_STR || x.t == CJ_LIST || x.t == CJ_DICT || x.t == CJ_UNDEF;
    if (!strcmp(name, "callable"))
        return x.t == CJ_MACRO || x.t == CJ_FUNC;
    if (!strcmp(name, "equalto") || !strcmp(name, "eq") || !strcmp(name, "==") || !strcmp(name, "sameas"))
        return a0 && cj_equal(x, *a0);
    if (!strcmp(name, "ne") || !strcmp(name, "!="))
        return !a0 || !cj_equal(x, *a0);
    if (!strcmp(name, "in"))
        return a0 && cj_contains(c, *a0, x);
    if (!strcmp(name, "odd") || !strcmp(name, "even") || !strcmp(name, "divisibleby")) {
        int64_t v = int_arg(c, &x, name);
        int64_t d = name[0] == 'd' ? (a0 ? int_arg(c, a0, name) : 1) : 2;
        if (d == 0)
            cj_fail(c, MEMRA_E_RANGE, "modulo by zero");
        int64_t m = v % d;
        return name[0] == 'o' ? m != 0 : m == 0;
    }
    if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
        cj_val_t sv = need_str(c, x, name);
        for (size_t i = 0; i < sv.u.s.n; i++) {
            char ch = sv.u.s.p[i];
            if (name[0] == 'l' ? (ch >= 'A' && ch <= 'Z') : (ch >= 'a' && ch <= 'z'))
                return false;
        }
        return true;
    }
    if (!strcmp(name, "gt") || !strcmp(name, "lt") || !strcmp(name, "ge") || !strcmp(name, "le")) {
        if (!a0)
            cj_fail(c, MEMRA_E_TYPE, "test '%s' needs an argument", name);
        int r = lower_cmp(x, *a0, true);
        return name[0] == 'g' ? (name[1] == 't' ? r > 0 : r >= 0) : (name[1] == 't' ? r < 0 : r <= 0);
    }
    cj_fail(c, MEMRA_E_UNSUPPORTED, "chat template: no test named '%s'", name);
}

/* ---- global functions ---- */

cj_val_t cj_call_func(cj_ctx_t *c, int fn, const cj_args_t *a)
{
    switch (fn) {
    case FN_RANGE: {
        int64_t start = 0, stop, step = 1;
        if (a->n == 1)
            stop = int_arg(c, &a->v[0], "range");
        else if (a->n == 2 || a->n == 3) {
            start = int_arg(c, &a->v[0], "range");
            stop = int_arg(c, &a->v[1], "range");
            if (a->n == 3)
                step = int_arg(c, &a->v[2], "range");
        } else
            cj_fail(c, MEMRA_E_TYPE, "range expected 1 to 3 arguments, got %zu", a->n);
        if (step == 0)
            cj_fail(c, MEMRA_E_INVALID, "range() arg 3 must not be zero");
        cj_val_t l = cj_list_new(c);
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
            if (l.u.l->n >= 100000)
                cj_fail(c, MEMRA_E_RANGE, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
            cj_list_push(c, l.u.l, cj_int(i));
        }
        return l;
    }
    case FN_NAMESPACE:
    case FN_DICT: {
        cj_val_t d = cj_dict_new(c);
        if (fn == FN_NAMESPACE)
            d.t = CJ_NS;
        for (size_t i = 0; i < a->n; i++) {
            if (a->v[i].t != CJ_DICT)
                cj_fail(c, MEMRA_E_TYPE, "%s() takes keyword arguments or a mapping", fn_names[fn]);
            for (size_t k = 0; k < a->v[i].u.d->n; k++)
                cj_dict_set(c, d.u.d, a->v[i].u.d->e[k].k, a->v[i].u.d->e[k].v);
        }
        for (size_t k = 0; k < a->nkw; k++)
            cj_dict_set(c, d.u.d, cj_cstr(a->kwn[k]), a->kw[k]);
        return d;
    }
    case FN_RAISE: {
        cj_val_t m = a->n ? cj_to_str(c, a->v[0]) : cj_str("", 0);
        cj_fail(c, MEMRA_E_INVALID, "%.*s", (int)m.u.s.n, m.u.s.p);
    }
    case FN_STRFTIME: {
        if (a->n != 1)
            cj_fail(c, MEMRA_E_TYPE, "strftime_now takes one argument");
        cj_val_t f = need_str(c, a->v[0], "strftime_now");
        time_t t = (time_t)c->now;
        struct tm tm;
        if (!gmtime_r(&t, &tm))
            cj_fail(c, MEMRA_E_RANGE, "strftime_now: time out of range");
        char fmt[256], out[512];
        if (f.u.s.n >= sizeof fmt)
            cj_fail(c, MEMRA_E_RANGE, "strftime_now: format longer than 255 bytes");
        memcpy(fmt, f.u.s.p, f.u.s.n);
        fmt[f.u.s.n] = 0;
        size_t n = strftime(out, sizeof out, fmt, &tm);
        return cj_str_copy(c, out, n);
    }
    default: cj_fail(c, MEMRA_E_INTERNAL, "unknown function");
    }
}

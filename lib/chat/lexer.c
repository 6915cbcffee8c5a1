/* Template text -> tokens, with Hugging Face's whitespace settings:
 * trim_blocks (a block or comment tag eats the one newline after it),
 * lstrip_blocks (spaces and tabs between a line start and a block or
 * comment tag go), `-` on a tag side strips all whitespace on that side,
 * `+` keeps it, and one trailing newline of the template is dropped
 * (jinja2's keep_trailing_newline=False). */
#include <stdlib.h>
#include <string.h>

#include "chat_impl.h"

static void push(cj_ctx_t *c, cj_toks_t *t, cj_tok_t tok)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 256;
        cj_tok_t *nv = cj_alloc(c, cap * sizeof *nv);
        if (t->n)
            memcpy(nv, t->v, t->n * sizeof *nv);
        t->v = nv;
        t->cap = cap;
    }
    t->v[t->n++] = tok;
}

static bool is_ws(char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f'; }
static bool is_alpha(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_'; }
static bool is_digit(char ch) { return ch >= '0' && ch <= '9'; }

static int count_nl(const char *p, size_t n)
{
    int k = 0;
    for (size_t i = 0; i < n; i++)
        k += p[i] == '\n';
    return k;
}

static int hexval(char h)
{
    if (h >= '0' && h <= '9')
        return h - '0';
    if (h >= 'a' && h <= 'f')
        return h - 'a' + 10;
    if (h >= 'A' && h <= 'F')
        return h - 'A' + 10;
    return -1;
}

/* a Python string literal at S (quote included); returns the byte after it */
static size_t lex_string(cj_ctx_t *c, const char *s, size_t i, size_t n, int line, cj_tok_t *tok)
{
    char q = s[i++];
    cj_buf_t b = {0};
    cj_buf_put(c, &b, "", 0);
    for (;;) {
        if (i >= n)
            cj_fail(c, MEMRA_E_FORMAT, "chat template: line %d: unterminated string", line);
        char ch = s[i];
        if (ch == q) {
            i++;
            break;
        }
        if (ch != '\\') {
            cj_buf_put(c, &b, &s[i], 1);
            i++;
            continue;
        }
        if (i + 1 >= n)
            cj_fail(c, MEMRA_E_FORMAT, "chat template: line %d: unterminated string", line);
        char e = s[i + 1];
        i += 2;
        int nh = 0;
        switch (e) {
        case 'n': cj_buf_puts(c, &b, "\n"); break;
        case 't': cj_buf_puts(c, &b, "\t"); break;
        case 'r': cj_buf_puts(c, &b, "\r"); break;
        case '0': cj_buf_put(c, &b, "\0", 1); break;
        case 'a': cj_buf_puts(c, &b, "\a"); break;
        case 'b': cj_buf_puts(c, &b, "\b"); break;
        case 'f': cj_buf_puts(c, &b, "\f"); break;
        case 'v': cj_buf_puts(c, &b, "\v"); break;
        case '\\': cj_buf_puts(c, &b, "\\"); break;
        case '\'': cj_buf_puts(c, &b, "'"); break;
        case '"': cj_buf_puts(c, &b, "\""); break;
        case '\n': break;
        case 'x': nh = 2; break;
        case 'u': nh = 4; break;
        case 'U': nh = 8; break;
        default: {
            char two[2] = {'\\', e};
            cj_buf_put(c, &b, two, 2);
        }
        }
        if (nh) {
            uint32_t cp = 0;
            for (int k = 0; k < nh; k++) {
                int h = i < n ? hexval(s[i]) : -1;
                if (h < 0)
                    cj_fail(c, MEMRA_E_FORMAT, "chat template: line %d: bad escape in string", line);
                cp = cp * 16 + (uint32_t)h;
                i++;
            }
            cj_buf_put_cp(c, &b, cp);
        }
    }
    tok->t = TK_STR;
    tok->p = b.p;
    tok->n = b.n;
    return i;
}

static const char *const ops2[] = {"//", "**", "==", "!=", "<=", ">=", NULL};

void cj_lex(cj_ctx_t *c, const char *src0, size_t n0, cj_toks_t *out)
{
    /* jinja2 first turns every \r\n and lone \r into \n, string literals included */
    char *src = cj_alloc(c, n0 + 1);
    size_t n = 0;
    for (size_t i = 0; i < n0; i++) {
        if (src0[i] == '\r') {
            src[n++] = '\n';
            if (i + 1 < n0 && src0[i + 1] == '\n')
                i++;
        } else {
            src[n++] = src0[i];
        }
    }
    if (n && src[n - 1] == '\n')
        n--;
    size_t pos = 0;
    int line = 1;
    bool strip_next = false, trim_next = false;
    for (;;) {
        if (trim_next && pos < n && src[pos] == '\n') {
            pos++;
            line++;
        }
        if (strip_next)
            while (pos < n && is_ws(src[pos]))
                line += src[pos++] == '\n';
        trim_next = strip_next = false;
        /* the next tag */
        size_t t = pos;
        char kind = 0;
        for (; t + 1 < n; t++)
            if (src[t] == '{' && (src[t + 1] == '{' || src[t + 1] == '%' || src[t + 1] == '#')) {
                kind = src[t + 1];
                break;
            }
        if (!kind)
            t = n;
        size_t tend = t;
        char mod = kind && t + 2 < n ? src[t + 2] : 0;
        if (kind && mod == '-') {
            while (tend > pos && is_ws(src[tend - 1]))
                tend--;
        } else if (kind && kind != '{' && mod != '+') {
            size_t ls = tend;
            while (ls > pos && (src[ls - 1] == ' ' || src[ls - 1] == '\t'))
                ls--;
            bool line_start = ls > pos ? src[ls - 1] == '\n' : (ls == 0 || src[ls - 1] == '\n');
            if (line_start)
                tend = ls;
        }
        if (tend > pos) {
            cj_tok_t tok = {.t = TK_TEXT, .p = src + pos, .n = tend - pos, .line = line};
            push(c, out, tok);
        }
        line += count_nl(src + pos, t - pos);
        if (!kind)
            break;
        size_t i = t + 2 + (mod == '-' || mod == '+');
        if (kind == '#') {
            const char *e = NULL;
            for (size_t k = i; k + 1 < n; k++)
                if (src[k] == '#' && src[k + 1] == '}') {
                    e = src + k;
                    break;
                }
            if (!e)
                cj_fail(c, MEMRA_E_FORMAT, "chat template: line %d: unterminated comment", line);
            size_t k = (size_t)(e - src);
            line += count_nl(src + t, k - t);
            if (k > i && src[k - 1] == '-')
                strip_next = true;
            else if (!(k > i && src[k - 1] == '+'))
                trim_next = true;
            pos = k + 2;
            continue;
        }
        if (kind == '%') {
            /* {% raw %}...{% endraw %}: the text between, as it is */
            size_t k = i;
            while (k < n && is_ws(src[k]))
                k++;
            if (n - k >= 3 && !memcmp(src + k, "raw", 3) && (k + 3 >= n || !is_alpha(src[k + 3]))) {
                k += 3;
                while (k < n && is_ws(src[k]))
                    k++;
                bool strip_in = k < n && src[k] == '-';
                if (k < n && (src[k] == '-' || src[k] == '+'))
                    k++;
                if (k + 1 >= n || src[k] != '%' || src[k + 1] != '}')
                    cj_fail(c, MEMRA_E_FORMAT, "chat template: line %d: bad raw tag", line);
                size_t cs = k + 2, ce = 0, after = 0;
                bool strip_out = false, trim_after = false, strip_after = false;
                for (size_t q = cs; q + 1 < n && !after; q++) {
                    if (src[q] != '{' || src[q + 1] != '%')
                        continue;
                    size_t r = q + 2;
                    bool so = r < n && src[r] == '-';
                    if (r < n && (src[r] == '-' || src[r] == '+'))
                        r++;
                    while (r < n && is_ws(src[r]))
                        r++;
                    if (n - r < 6 || memcmp(src + r, "endraw", 6) != 0)
                        continue;
                    r += 6;
                    while (r < n && is_ws(src[r]))
                        r++;
                    char m = r < n ? src[r] : 0;
                    if (m == '-' || m == '+')
                        r++;
                    if (r + 1 < n && src[r] == '%' && src[r + 1] == '}') {
                        ce = q;
                        after = r + 2;
                        strip_out = so;
                        strip_after = m == '-';
                        trim_after = m != '-' && m != '+';
                    }
                }
                if (!after)
                    cj_fail(c, MEMRA_E_FORMAT, "chat template: line %d: missing 'endraw'", line);
                if (strip_in)
                    while (cs < ce && is_ws(src[cs]))
                        cs++;
                if (strip_out)
                    while (ce > cs && is_ws(src[ce - 1]))
                        ce--;
                if (ce > cs)
                    push(c, out, (cj_tok_t){.t = TK_TEXT, .p = src + cs, .n = ce - cs, .line = line});
                line += count_nl(src + t, after - t);
                pos = after;
                strip_next = strip_after;
                trim_next = trim_after;
                continue;
            }
        }
        bool var = kind == '{';
        push(c, out, (cj_tok_t){.t = var ? TK_VAR_BEGIN : TK_BLOCK_BEGIN, .line = line});
        int depth = 0;
        for (;;) {
            while (i < n && is_ws(src[i]))
                line += src[i++] == '\n';
            if (i >= n)
                cj_fail(c, MEMRA_E_FORMAT, "chat template: line %d: unterminated tag", line);
            char ch = src[i];
            char close = var ? '}' : '%';
            /* the tag end: "}}" / "%}" with an optional "-" or "+" before it */
            size_t j = i;
            char m = 0;
            if ((ch == '-' || ch == '+') && i + 1 < n && src[i + 1] == close) {
                m = ch;
                j = i + 1;
            }
            if (depth == 0 && j + 1 < n && src[j] == close && src[j + 1] == '}') {
                push(c, out, (cj_tok_t){.t = var ? TK_VAR_END : TK_BLOCK_END, .line = line});
                pos = j + 2;
                if (m == '-')
                    strip_next = true;
                else if (!var && m != '+')
                    trim_next = true;
                break;
            }
            cj_tok_t tok = {.line = line};
            if (is_alpha(ch)) {
                size_t s = i;
                while (i < n && (is_alpha(src[i]) || is_digit(src[i])))
                    i++;
                tok.t = TK_NAME;
                tok.p = src + s;
                tok.n = i - s;
            } else if (is_digit(ch)) {
                size_t s = i;
                bool fl = false;
                while (i < n && (is_digit(src[i]) || src[i] == '_'))
                    i++;
                if (i + 1 < n && src[i] == '.' && is_digit(src[i + 1])) {
                    fl = true;
                    i++;
                    while (i < n && (is_digit(src[i]) || src[i] == '_'))
                        i++;
                }
                if (i < n && (src[i] == 'e' || src[i] == 'E')) {
                    size_t k = i + 1;
                    if (k < n && (src[k] == '+' || src[k] == '-'))
                        k++;
                    if (k < n && is_digit(src[k])) {
                        fl = true;
                        i = k;
                        while (i < n && is_digit(src[i]))
                            i++;
                    }
                }
                char tmp[64];
                size_t m2 = 0;
                for (size_t k = s; k < i && m2 + 1 < sizeof tmp; k++)
                    if (src[k] != '_')
                        tmp[m2++] = src[k];
                tmp[m2] = 0;
                if (fl) {
                    tok.t = TK_FLOAT;
                    tok.f = strtod(tmp, NULL);
                } else {
                    tok.t = TK_INT;
                    tok.i = strtoll(tmp, NULL, 10);
                }
            } else if (ch == '\'' || ch == '"') {
                size_t s = i;
                i = lex_string(c, src, i, n, line, &tok);
                line += count_nl(src + s, i - s);
            } else {
                tok.t = TK_OP;
                tok.p = src + i;
                tok.n = 1;
                for (int k = 0; ops2[k]; k++)
                    if (i + 1 < n && src[i] == ops2[k][0] && src[i + 1] == ops2[k][1])
                        tok.n = 2;
                if (tok.n == 1 && !strchr("+-*/%~<>=()[]{},.:|!", ch))
                    cj_fail(c, MEMRA_E_FORMAT, "chat template: line %d: unexpected character '%c'", line, ch);
                if (ch == '(' || ch == '[' || ch == '{')
                    depth++;
                else if ((ch == ')' || ch == ']' || ch == '}') && depth > 0)
                    depth--;
                i += tok.n;
            }
            push(c, out, tok);
        }
    }
    push(c, out, (cj_tok_t){.t = TK_EOF, .line = line});
}

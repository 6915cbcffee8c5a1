/* Tokens -> syntax tree, following jinja2's grammar and operator
 * precedence (jinja2/parser.py): condexpr < or < and < not < compare <
 * + - < ~ < * / // % < ** < unary - + < primary, postfix . [] () and then
 * filters | and tests `is`, which bind tighter than any binary operator. */
#include <stdio.h>
#include <string.h>

#include "chat_impl.h"

typedef struct ps {
    cj_ctx_t *c;
    const cj_tok_t *t;
    size_t i, n;
    int depth;
} ps_t;

static const cj_tok_t *cur(ps_t *p) { return &p->t[p->i]; }
static const cj_tok_t *peek(ps_t *p, size_t k) { return &p->t[p->i + k < p->n ? p->i + k : p->n - 1]; }
static void adv(ps_t *p)
{
    if (p->i + 1 < p->n)
        p->i++;
}

static bool tok_is(const cj_tok_t *t, cj_tok_type_t ty, const char *s)
{
    return t->t == ty && strlen(s) == t->n && memcmp(t->p, s, t->n) == 0;
}
static bool is_op(ps_t *p, const char *s) { return tok_is(cur(p), TK_OP, s); }
static bool is_name(ps_t *p, const char *s) { return tok_is(cur(p), TK_NAME, s); }

_Noreturn static void perr(ps_t *p, const char *what)
{
    const cj_tok_t *t = cur(p);
    if (t->t == TK_EOF)
        cj_fail(p->c, MEMRA_E_FORMAT, "chat template: line %d: %s (at end of template)", t->line, what);
    if (t->t == TK_NAME || t->t == TK_OP)
        cj_fail(p->c, MEMRA_E_FORMAT, "chat template: line %d: %s (at '%.*s')", t->line, what, (int)t->n, t->p);
    cj_fail(p->c, MEMRA_E_FORMAT, "chat template: line %d: %s", t->line, what);
}

static void expect_op(ps_t *p, const char *s)
{
    if (!is_op(p, s)) {
        char m[64];
        snprintf(m, sizeof m, "expected '%s'", s);
        perr(p, m);
    }
    adv(p);
}

static const char *expect_name(ps_t *p)
{
    if (cur(p)->t != TK_NAME)
        perr(p, "expected a name");
    const char *s = cj_strndup(p->c, cur(p)->p, cur(p)->n);
    adv(p);
    return s;
}

static void expect_end(ps_t *p)
{
    if (cur(p)->t != TK_BLOCK_END)
        perr(p, "expected the end of the block tag");
    adv(p);
}

static cj_node_t *mk(ps_t *p, cj_kind_t k)
{
    cj_node_t *n = cj_alloc(p->c, sizeof *n);
    n->k = k;
    n->line = cur(p)->line;
    return n;
}

static void add(cj_ctx_t *c, cj_nodes_t *v, cj_node_t *n)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 4;
        cj_node_t **nv = cj_alloc(c, cap * sizeof *nv);
        if (v->n)
            memcpy(nv, v->v, v->n * sizeof *nv);
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = n;
}

static cj_node_t *name_const(ps_t *p, const char *s)
{
    cj_node_t *n = mk(p, N_CONST);
    n->val = cj_cstr(s);
    return n;
}

static cj_node_t *expr(ps_t *p);
static cj_node_t *or_expr(ps_t *p);
static cj_node_t *unary(ps_t *p, bool with_filter);

static void enter(ps_t *p)
{
    if (++p->depth > 200)
        perr(p, "expression nested too deeply");
}

/* (args) after the '(' was seen: positional, then name=value */
static void call_args(ps_t *p, cj_node_t *n)
{
    expect_op(p, "(");
    while (!is_op(p, ")")) {
        if (cur(p)->t == TK_NAME && tok_is(peek(p, 1), TK_OP, "=")) {
            add(p->c, &n->kwnames, name_const(p, expect_name(p)));
            adv(p);
            add(p->c, &n->kwvals, expr(p));
        } else {
            if (n->kwnames.n)
                perr(p, "positional argument after keyword argument");
            add(p->c, &n->kids, expr(p));
        }
        if (!is_op(p, ","))
            break;
        adv(p);
    }
    expect_op(p, ")");
}

static cj_node_t *primary(ps_t *p)
{
    const cj_tok_t *t = cur(p);
    cj_node_t *n;
    enter(p);
    if (t->t == TK_NAME) {
        n = mk(p, N_CONST);
        if (tok_is(t, TK_NAME, "true") || tok_is(t, TK_NAME, "True"))
            n->val = cj_bool(true);
        else if (tok_is(t, TK_NAME, "false") || tok_is(t, TK_NAME, "False"))
            n->val = cj_bool(false);
        else if (tok_is(t, TK_NAME, "none") || tok_is(t, TK_NAME, "None"))
            n->val = cj_none();
        else {
            n->k = N_NAME;
            n->name = cj_strndup(p->c, t->p, t->n);
        }
        adv(p);
    } else if (t->t == TK_STR) {
        n = mk(p, N_CONST);
        cj_buf_t b = {0};
        cj_buf_put(p->c, &b, "", 0);
        while (cur(p)->t == TK_STR) {
            cj_buf_put(p->c, &b, cur(p)->p, cur(p)->n);
            adv(p);
        }
        n->val = cj_str(b.p ? b.p : "", b.n);
    } else if (t->t == TK_INT || t->t == TK_FLOAT) {
        n = mk(p, N_CONST);
        n->val = t->t == TK_INT ? cj_int(t->i) : cj_float(t->f);
        adv(p);
    } else if (is_op(p, "(")) {
        adv(p);
        if (is_op(p, ")")) {
            adv(p);
            n = mk(p, N_TUPLE);
        } else {
            n = expr(p);
            if (is_op(p, ",")) {
                cj_node_t *tup = mk(p, N_TUPLE);
                add(p->c, &tup->kids, n);
                while (is_op(p, ",")) {
                    adv(p);
                    if (is_op(p, ")"))
                        break;
                    add(p->c, &tup->kids, expr(p));
                }
                n = tup;
            }
            expect_op(p, ")");
        }
    } else if (is_op(p, "[")) {
        adv(p);
        n = mk(p, N_LIST);
        while (!is_op(p, "]")) {
            add(p->c, &n->kids, expr(p));
            if (!is_op(p, ","))
                break;
            adv(p);
        }
        expect_op(p, "]");
    } else if (is_op(p, "{")) {
        adv(p);
        n = mk(p, N_DICT);
        while (!is_op(p, "}")) {
            add(p->c, &n->kids, expr(p));
            expect_op(p, ":");
            add(p->c, &n->kids, expr(p));
            if (!is_op(p, ","))
                break;
            adv(p);
        }
        expect_op(p, "}");
    } else {
        perr(p, "unexpected token in expression");
    }
    p->depth--;
    return n;
}

static cj_node_t *postfix(ps_t *p, cj_node_t *n)
{
    for (;;) {
        if (is_op(p, ".")) {
            adv(p);
            cj_node_t *a;
            if (cur(p)->t == TK_INT) {
                a = mk(p, N_ITEM);
                a->b = mk(p, N_CONST);
                a->b->val = cj_int(cur(p)->i);
                adv(p);
            } else {
                a = mk(p, N_ATTR);
                a->name = expect_name(p);
            }
            a->a = n;
            n = a;
        } else if (is_op(p, "[")) {
            adv(p);
            cj_node_t *parts[3] = {NULL, NULL, NULL};
            int k = 0;
            bool slice = false;
            for (;;) {
                if (is_op(p, ":")) {
                    slice = true;
                    if (++k > 2)
                        perr(p, "too many ':' in a slice");
                    adv(p);
                    continue;
                }
                if (is_op(p, "]"))
                    break;
                if (parts[k])
                    perr(p, "expected ']'");
                parts[k] = expr(p);
            }
            expect_op(p, "]");
            cj_node_t *s = mk(p, slice ? N_SLICE : N_ITEM);
            s->a = n;
            if (slice) {
                s->b = parts[0];
                s->c = parts[1];
                s->cond = parts[2];
            } else {
                if (!parts[0])
                    perr(p, "empty subscript");
                s->b = parts[0];
            }
            n = s;
        } else if (is_op(p, "(")) {
            cj_node_t *cl = mk(p, N_CALL);
            cl->a = n;
            call_args(p, cl);
            n = cl;
        } else {
            return n;
        }
    }
}

static cj_node_t *filter_expr(ps_t *p, cj_node_t *n)
{
    for (;;) {
        if (is_op(p, "|")) {
            adv(p);
            cj_node_t *f = mk(p, N_FILTER);
            f->a = n;
            f->name = expect_name(p);
            if (is_op(p, "("))
                call_args(p, f);
            n = f;
        } else if (is_name(p, "is")) {
            adv(p);
            bool neg = false;
            if (is_name(p, "not")) {
                neg = true;
                adv(p);
            }
            cj_node_t *t = mk(p, N_TEST);
            t->a = n;
            t->name = expect_name(p);
            const cj_tok_t *c = cur(p);
            if (is_op(p, "(")) {
                call_args(p, t);
            } else if ((c->t == TK_NAME || c->t == TK_STR || c->t == TK_INT || c->t == TK_FLOAT ||
                        is_op(p, "[") || is_op(p, "{")) &&
                       !is_name(p, "else") && !is_name(p, "or") && !is_name(p, "and")) {
                if (is_name(p, "is"))
                    perr(p, "tests cannot be chained with is");
                add(p->c, &t->kids, postfix(p, primary(p)));
            }
            n = t;
            if (neg) {
                cj_node_t *x = mk(p, N_NOT);
                x->a = t;
                n = x;
            }
        } else if (is_op(p, "(")) {
            cj_node_t *cl = mk(p, N_CALL);
            cl->a = n;
            call_args(p, cl);
            n = cl;
        } else {
            return n;
        }
    }
}

static cj_node_t *unary(ps_t *p, bool with_filter)
{
    cj_node_t *n;
    enter(p);
    if (is_op(p, "-") || is_op(p, "+")) {
        n = mk(p, N_UNARY);
        n->name = is_op(p, "-") ? "-" : "+";
        adv(p);
        n->a = unary(p, false);
    } else {
        n = primary(p);
    }
    n = postfix(p, n);
    if (with_filter)
        n = filter_expr(p, n);
    p->depth--;
    return n;
}

static cj_node_t *binary(ps_t *p, const char *op, cj_node_t *a, cj_node_t *b)
{
    cj_node_t *n = mk(p, N_BINARY);
    n->name = op;
    n->a = a;
    n->b = b;
    return n;
}

static cj_node_t *pow_expr(ps_t *p)
{
    cj_node_t *n = unary(p, true);
    while (is_op(p, "**")) {
        adv(p);
        n = binary(p, "**", n, unary(p, true));
    }
    return n;
}

static cj_node_t *math2(ps_t *p)
{
    cj_node_t *n = pow_expr(p);
    for (;;) {
        const char *op = is_op(p, "*") ? "*" : is_op(p, "/") ? "/" : is_op(p, "//") ? "//" : is_op(p, "%") ? "%" : NULL;
        if (!op)
            return n;
        adv(p);
        n = binary(p, op, n, pow_expr(p));
    }
}

static cj_node_t *concat(ps_t *p)
{
    cj_node_t *n = math2(p);
    while (is_op(p, "~")) {
        adv(p);
        n = binary(p, "~", n, math2(p));
    }
    return n;
}

static cj_node_t *math1(ps_t *p)
{
    cj_node_t *n = concat(p);
    for (;;) {
        const char *op = is_op(p, "+") ? "+" : is_op(p, "-") ? "-" : NULL;
        if (!op)
            return n;
        adv(p);
        n = binary(p, op, n, concat(p));
    }
}

static const char *cmp_op(ps_t *p)
{
    static const char *const ops[] = {"==", "!=", "<", ">", "<=", ">=", NULL};
    for (int k = 0; ops[k]; k++)
        if (is_op(p, ops[k])) {
            adv(p);
            return ops[k];
        }
    if (is_name(p, "in")) {
        adv(p);
        return "in";
    }
    if (is_name(p, "not") && tok_is(peek(p, 1), TK_NAME, "in")) {
        adv(p);
        adv(p);
        return "not in";
    }
    return NULL;
}

static cj_node_t *compare(ps_t *p)
{
    cj_node_t *n = math1(p), *prev_rhs = NULL, *chain = NULL;
    const char *op;
    while ((op = cmp_op(p))) {
        cj_node_t *rhs = math1(p);
        cj_node_t *c = mk(p, N_COMPARE);
        c->name = op;
        c->a = prev_rhs ? prev_rhs : n;
        c->b = rhs;
        if (chain) {
            /* a < b < c is (a < b) and (b < c) */
            cj_node_t *x = mk(p, N_AND);
            x->a = chain;
            x->b = c;
            chain = x;
        } else {
            chain = c;
        }
        prev_rhs = rhs;
    }
    return chain ? chain : n;
}

static cj_node_t *not_expr(ps_t *p)
{
    if (is_name(p, "not")) {
        cj_node_t *n = mk(p, N_NOT);
        adv(p);
        enter(p);
        n->a = not_expr(p);
        p->depth--;
        return n;
    }
    return compare(p);
}

/* SUB (WORD SUB)*: a left-associative chain of nodes of kind K. */
static cj_node_t *chain(ps_t *p, const char *word, cj_kind_t k, cj_node_t *(*sub)(ps_t *))
{
    cj_node_t *n = sub(p);
    while (is_name(p, word)) {
        adv(p);
        cj_node_t *x = mk(p, k);
        x->a = n;
        x->b = sub(p);
        n = x;
    }
    return n;
}

static cj_node_t *and_expr(ps_t *p)
{
    return chain(p, "and", N_AND, not_expr);
}

static cj_node_t *or_expr(ps_t *p)
{
    return chain(p, "or", N_OR, and_expr);
}

static cj_node_t *expr(ps_t *p)
{
    enter(p);
    cj_node_t *n = or_expr(p);
    while (is_name(p, "if")) {
        adv(p);
        cj_node_t *x = mk(p, N_COND);
        x->cond = or_expr(p);
        x->a = n;
        if (is_name(p, "else")) {
            adv(p);
            x->b = expr(p);
        }
        n = x;
    }
    p->depth--;
    return n;
}

/* ---- statements ---- */

static cj_node_t *body(ps_t *p, const char *const *stops);

static bool at_stop(ps_t *p, const char *const *stops)
{
    if (cur(p)->t != TK_BLOCK_BEGIN)
        return false;
    const cj_tok_t *t = peek(p, 1);
    for (int k = 0; stops && stops[k]; k++)
        if (tok_is(t, TK_NAME, stops[k]))
            return true;
    return false;
}

/* after BLOCK_BEGIN NAME of a closing tag: check the name and eat the tag */
static void close_tag(ps_t *p, const char *name)
{
    adv(p); /* BLOCK_BEGIN */
    if (!is_name(p, name)) {
        char m[64];
        snprintf(m, sizeof m, "expected '%s'", name);
        perr(p, m);
    }
    adv(p);
    expect_end(p);
}

/* After a block's main body: an optional "{% else %}" body into N->c, then
 * "{% END %}" (endif, endfor). */
static cj_node_t *else_and_end(ps_t *p, cj_node_t *n, const char *end)
{
    if (is_name(p, "else")) {
        const char *const stops[] = {end, NULL};
        adv(p);
        expect_end(p);
        n->c = body(p, stops);
        adv(p);
    }
    if (!is_name(p, end)) {
        char m[32];
        snprintf(m, sizeof m, "expected '%s'", end);
        perr(p, m);
    }
    adv(p);
    expect_end(p);
    return n;
}

static cj_node_t *stmt_if(ps_t *p)
{
    static const char *const stops[] = {"elif", "else", "endif", NULL};
    cj_node_t *n = mk(p, N_IF);
    n->cond = expr(p);
    expect_end(p);
    n->b = body(p, stops);
    adv(p); /* BLOCK_BEGIN */
    if (is_name(p, "elif")) {
        adv(p);
        n->c = stmt_if(p); /* eats through endif */
        return n;
    }
    return else_and_end(p, n, "endif");
}

static cj_node_t *stmt_for(ps_t *p)
{
    static const char *const stops[] = {"else", "endfor", NULL};
    cj_node_t *n = mk(p, N_FOR);
    bool paren = is_op(p, "(");
    if (paren)
        adv(p);
    for (;;) {
        add(p->c, &n->targets, name_const(p, expect_name(p)));
        if (!is_op(p, ","))
            break;
        adv(p);
    }
    if (paren)
        expect_op(p, ")");
    if (!is_name(p, "in"))
        perr(p, "expected 'in'");
    adv(p);
    n->a = or_expr(p);
    if (is_name(p, "if")) {
        adv(p);
        n->cond = or_expr(p);
    }
    if (is_name(p, "recursive"))
        perr(p, "recursive loops are not supported");
    expect_end(p);
    n->b = body(p, stops);
    adv(p);
    return else_and_end(p, n, "endfor");
}

static cj_node_t *stmt_set(ps_t *p)
{
    cj_node_t *n = mk(p, N_SET);
    n->name = expect_name(p);
    if (is_op(p, ".")) {
        adv(p);
        n->attr = expect_name(p);
    } else if (is_op(p, ",")) {
        add(p->c, &n->targets, name_const(p, n->name));
        while (is_op(p, ",")) {
            adv(p);
            add(p->c, &n->targets, name_const(p, expect_name(p)));
        }
    }
    if (is_op(p, "=")) {
        adv(p);
        n->a = expr(p);
        if (is_op(p, ",")) {
            cj_node_t *tup = mk(p, N_TUPLE);
            add(p->c, &tup->kids, n->a);
            while (is_op(p, ",")) {
                adv(p);
                add(p->c, &tup->kids, expr(p));
            }
            n->a = tup;
        }
        expect_end(p);
        return n;
    }
    if (n->attr || n->targets.n)
        perr(p, "expected '='");
    /* {% set x %}...{% endset %}, optionally with filters */
    static const char *const end[] = {"endset", NULL};
    n->k = N_SET_BLOCK;
    cj_node_t *f = NULL;
    while (is_op(p, "|")) {
        adv(p);
        cj_node_t *x = mk(p, N_FILTER);
        x->a = f;
        x->name = expect_name(p);
        if (is_op(p, "("))
            call_args(p, x);
        f = x;
    }
    n->c = f;
    expect_end(p);
    n->b = body(p, end);
    close_tag(p, "endset");
    return n;
}

static void params(ps_t *p, cj_node_t *n)
{
    expect_op(p, "(");
    while (!is_op(p, ")")) {
        add(p->c, &n->targets, name_const(p, expect_name(p)));
        cj_node_t *d = NULL;
        if (is_op(p, "=")) {
            adv(p);
            d = expr(p);
        }
        add(p->c, &n->defaults, d);
        if (!is_op(p, ","))
            break;
        adv(p);
    }
    expect_op(p, ")");
}

static cj_node_t *stmt_macro(ps_t *p)
{
    static const char *const end[] = {"endmacro", NULL};
    cj_node_t *n = mk(p, N_MACRO);
    n->name = expect_name(p);
    params(p, n);
    expect_end(p);
    n->b = body(p, end);
    close_tag(p, "endmacro");
    return n;
}

static cj_node_t *stmt_call(ps_t *p)
{
    static const char *const end[] = {"endcall", NULL};
    cj_node_t *n = mk(p, N_CALL_BLOCK);
    n->c = mk(p, N_MACRO); /* the caller: its parameters and body */
    n->c->name = "caller";
    if (is_op(p, "("))
        params(p, n->c);
    n->a = expr(p);
    if (n->a->k != N_CALL)
        perr(p, "expected a macro call");
    expect_end(p);
    n->c->b = body(p, end);
    close_tag(p, "endcall");
    return n;
}

static cj_node_t *stmt_filter(ps_t *p)
{
    static const char *const end[] = {"endfilter", NULL};
    cj_node_t *n = mk(p, N_FILTER_BLOCK), *f = NULL;
    do {
        if (f)
            adv(p); /* '|' */
        cj_node_t *x = mk(p, N_FILTER);
        x->a = f;
        x->name = expect_name(p);
        if (is_op(p, "("))
            call_args(p, x);
        f = x;
    } while (is_op(p, "|"));
    n->a = f;
    expect_end(p);
    n->b = body(p, end);
    close_tag(p, "endfilter");
    return n;
}

static cj_node_t *body(ps_t *p, const char *const *stops)
{
    cj_node_t *b = mk(p, N_BODY);
    enter(p); /* statements nest too: the depth bounds the evaluator's recursion */
    for (;;) {
        const cj_tok_t *t = cur(p);
        if (t->t == TK_EOF) {
            if (stops) {
                char m[64];
                size_t k = 0;
                while (stops[k + 1])
                    k++; /* the closing tag is the last stop */
                snprintf(m, sizeof m, "missing '%s'", stops[k]);
                perr(p, m);
            }
            p->depth--;
            return b;
        }
        if (t->t == TK_TEXT) {
            cj_node_t *x = mk(p, N_TEXT);
            x->val = cj_str(t->p, t->n);
            add(p->c, &b->kids, x);
            adv(p);
            continue;
        }
        if (t->t == TK_VAR_BEGIN) {
            adv(p);
            cj_node_t *x = mk(p, N_OUTPUT);
            x->a = expr(p);
            if (cur(p)->t != TK_VAR_END)
                perr(p, "expected '}}'");
            adv(p);
            add(p->c, &b->kids, x);
            continue;
        }
        if (t->t != TK_BLOCK_BEGIN)
            perr(p, "unexpected token");
        if (at_stop(p, stops)) {
            p->depth--;
            return b;
        }
        adv(p);
        if (cur(p)->t != TK_NAME)
            perr(p, "expected a statement name");
        cj_node_t *x;
        if (is_name(p, "if")) {
            adv(p);
            x = stmt_if(p);
        } else if (is_name(p, "for")) {
            adv(p);
            x = stmt_for(p);
        } else if (is_name(p, "set")) {
            adv(p);
            x = stmt_set(p);
        } else if (is_name(p, "macro")) {
            adv(p);
            x = stmt_macro(p);
        } else if (is_name(p, "call")) {
            adv(p);
            x = stmt_call(p);
        } else if (is_name(p, "filter")) {
            adv(p);
            x = stmt_filter(p);
        } else if (is_name(p, "break") || is_name(p, "continue")) {
            x = mk(p, is_name(p, "break") ? N_BREAK : N_CONTINUE);
            adv(p);
            expect_end(p);
        } else if (is_name(p, "generation")) {
            /* Hugging Face's {% generation %} marks assistant text for
             * training masks; it renders its body unchanged */
            static const char *const end[] = {"endgeneration", NULL};
            adv(p);
            expect_end(p);
            x = body(p, end);
            close_tag(p, "endgeneration");
        } else {
            perr(p, "unknown or unexpected statement");
        }
        add(p->c, &b->kids, x);
    }
}

cj_node_t *cj_parse(cj_ctx_t *c, const cj_toks_t *toks)
{
    ps_t p = {.c = c, .t = toks->v, .n = toks->n};
    return body(&p, NULL);
}

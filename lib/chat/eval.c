/* Statements and expressions of the chat-template interpreter, with
 * jinja2's semantics: an undefined name or attribute is a value that prints
 * as nothing and is false, and using it any further (an attribute of it,
 * a method call on it, arithmetic) is an error carrying jinja2's message. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "chat_impl.h"

enum { FLOW_NEXT, FLOW_BREAK, FLOW_CONTINUE };

/* helpers kept out of the recursive evaluator's frames, which bound how deep
 * a template may nest on a given stack */
#define COLD __attribute__((noinline))

cj_val_t cj_undef_fmt(cj_ctx_t *c, const char *fmt, ...)
{
    char tmp[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    return cj_undef(cj_strndup(c, tmp, strlen(tmp)));
}

_Noreturn void cj_undef_fail(cj_ctx_t *c, cj_val_t u)
{
    cj_fail(c, MEMRA_E_TYPE, "%s", u.u.s.p ? u.u.s.p : "value is undefined");
}

/* Python repr of a name or key, for messages */
static const char *repr_c(cj_ctx_t *c, cj_val_t v)
{
    cj_buf_t b = {0};
    cj_buf_put(c, &b, "", 0);
    cj_repr_of(c, &b, v);
    return b.p;
}

static cj_scope_t *scope_new(cj_ctx_t *c, cj_scope_t *parent)
{
    cj_scope_t *s = cj_alloc(c, sizeof *s);
    s->parent = parent;
    s->vars = cj_dict_new(c).u.d;
    return s;
}

static void scope_set(cj_ctx_t *c, cj_scope_t *s, const char *name, cj_val_t v)
{
    cj_dict_set(c, s->vars, cj_cstr(name), v);
}

static cj_val_t lookup(cj_ctx_t *c, cj_scope_t *s, const char *name)
{
    size_t n = strlen(name);
    for (; s; s = s->parent) {
        cj_val_t *v = cj_dict_find(s->vars, name, n);
        if (v)
            return *v;
    }
    int fn = cj_func_id(name);
    if (fn >= 0)
        return (cj_val_t){.t = CJ_FUNC, .u.fn = fn};
    return cj_undef_fmt(c, "'%s' is undefined", name);
}

cj_val_t cj_getattr(cj_ctx_t *c, cj_val_t obj, const char *name)
{
    if (obj.t == CJ_UNDEF)
        cj_undef_fail(c, obj);
    if (obj.t == CJ_DICT || obj.t == CJ_NS) {
        cj_val_t *v = cj_dict_find(obj.u.d, name, strlen(name));
        if (v)
            return *v;
    }
    return cj_undef_fmt(c, "'%s' has no attribute %s", cj_type_repr(obj), repr_c(c, cj_cstr(name)));
}

static int64_t utf8_index(const char *p, size_t n, int64_t cp_index, size_t *len)
{
    int64_t k = -1;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)p[i] & 0xC0) != 0x80 && ++k == cp_index) {
            size_t j = i + 1;
            while (j < n && ((unsigned char)p[j] & 0xC0) == 0x80)
                j++;
            *len = j - i;
            return (int64_t)i;
        }
    return -1;
}

cj_val_t cj_getitem(cj_ctx_t *c, cj_val_t obj, cj_val_t key)
{
    if (obj.t == CJ_UNDEF)
        cj_undef_fail(c, obj);
    if (obj.t == CJ_DICT || obj.t == CJ_NS) {
        cj_val_t *v = cj_dict_findv(obj.u.d, key);
        if (v)
            return *v;
    } else if ((obj.t == CJ_LIST || obj.t == CJ_STR) && (key.t == CJ_INT || key.t == CJ_BOOL)) {
        int64_t i = key.t == CJ_INT ? key.u.i : key.u.b;
        if (obj.t == CJ_LIST) {
            int64_t n = (int64_t)obj.u.l->n;
            if (i < 0)
                i += n;
            if (i >= 0 && i < n)
                return obj.u.l->v[i];
        } else {
            int64_t n = (int64_t)cj_utf8_len(obj.u.s.p, obj.u.s.n);
            if (i < 0)
                i += n;
            size_t len;
            int64_t at = i >= 0 && i < n ? utf8_index(obj.u.s.p, obj.u.s.n, i, &len) : -1;
            if (at >= 0)
                return cj_str(obj.u.s.p + at, len);
        }
    }
    if (key.t == CJ_STR)
        return cj_undef_fmt(c, "'%s' has no attribute %s", cj_type_repr(obj), repr_c(c, key));
    return cj_undef_fmt(c, "%s has no element %s", cj_type_repr(obj), repr_c(c, key));
}

cj_list_t *cj_iter(cj_ctx_t *c, cj_val_t v)
{
    cj_list_t *l;
    switch (v.t) {
    case CJ_LIST: return v.u.l;
    case CJ_UNDEF: return cj_list_new(c).u.l;
    case CJ_DICT:
    case CJ_NS:
        l = cj_list_new(c).u.l;
        for (size_t i = 0; i < v.u.d->n; i++)
            cj_list_push(c, l, v.u.d->e[i].k);
        return l;
    case CJ_STR:
        l = cj_list_new(c).u.l;
        for (size_t i = 0; i < v.u.s.n;) {
            size_t j = i + 1;
            while (j < v.u.s.n && ((unsigned char)v.u.s.p[j] & 0xC0) == 0x80)
                j++;
            cj_list_push(c, l, cj_str(v.u.s.p + i, j - i));
            i = j;
        }
        return l;
    default:
        cj_fail(c, MEMRA_E_TYPE, "'%s' object is not iterable",
                v.t == CJ_NONE ? "NoneType" : v.t == CJ_BOOL ? "bool" : v.t == CJ_INT ? "int" : v.t == CJ_FLOAT ? "float" : "object");
    }
}

bool cj_contains(cj_ctx_t *c, cj_val_t hay, cj_val_t x)
{
    switch (hay.t) {
    case CJ_STR:
        if (x.t != CJ_STR)
            cj_fail(c, MEMRA_E_TYPE, "'in <string>' requires string as left operand, not %s", cj_type_repr(x));
        if (x.u.s.n == 0)
            return true;
        for (size_t i = 0; i + x.u.s.n <= hay.u.s.n; i++)
            if (memcmp(hay.u.s.p + i, x.u.s.p, x.u.s.n) == 0)
                return true;
        return false;
    case CJ_LIST:
        for (size_t i = 0; i < hay.u.l->n; i++)
            if (cj_equal(hay.u.l->v[i], x))
                return true;
        return false;
    case CJ_DICT:
    case CJ_NS: return cj_dict_findv(hay.u.d, x) != NULL;
    case CJ_UNDEF: return false;
    default: cj_fail(c, MEMRA_E_TYPE, "argument of type '%s' is not iterable", hay.t == CJ_NONE ? "NoneType" : cj_type_repr(hay));
    }
}

static void count_step(cj_ctx_t *c)
{
    if (++c->steps > c->max_steps)
        cj_fail(c, MEMRA_E_RANGE, "chat template: more than %llu loop iterations and macro calls",
                (unsigned long long)c->max_steps);
}

COLD static void eval_args(cj_ctx_t *c, cj_scope_t *s, const cj_node_t *e, cj_args_t *a)
{
    a->n = e->kids.n;
    a->v = a->n ? cj_alloc(c, a->n * sizeof *a->v) : NULL;
    for (size_t i = 0; i < a->n; i++)
        a->v[i] = cj_eval(c, s, e->kids.v[i]);
    a->nkw = e->kwvals.n;
    a->kw = a->nkw ? cj_alloc(c, a->nkw * sizeof *a->kw) : NULL;
    a->kwn = a->nkw ? cj_alloc(c, a->nkw * sizeof *a->kwn) : NULL;
    for (size_t i = 0; i < a->nkw; i++) {
        a->kwn[i] = e->kwnames.v[i]->val.u.s.p;
        a->kw[i] = cj_eval(c, s, e->kwvals.v[i]);
    }
}

/* a filter chain whose innermost operand is NULL: applied to X */
static cj_val_t apply_filters(cj_ctx_t *c, cj_scope_t *s, const cj_node_t *f, cj_val_t x)
{
    if (!f)
        return x;
    x = apply_filters(c, s, f->a, x);
    cj_args_t a;
    eval_args(c, s, f, &a);
    return cj_filter(c, s, f->name, x, &a);
}

COLD static cj_val_t call_value(cj_ctx_t *c, cj_val_t fn, const cj_args_t *a)
{
    switch (fn.t) {
    case CJ_MACRO: return cj_call_macro(c, fn, a, cj_undef(NULL));
    case CJ_FUNC: return cj_call_func(c, fn.u.fn, a);
    case CJ_UNDEF: cj_undef_fail(c, fn);
    default: cj_fail(c, MEMRA_E_TYPE, "'%s' is not callable", cj_type_repr(fn));
    }
}

static bool is_numv(cj_val_t v) { return v.t == CJ_INT || v.t == CJ_FLOAT || v.t == CJ_BOOL; }
static double fval(cj_val_t v) { return v.t == CJ_FLOAT ? v.u.f : v.t == CJ_INT ? (double)v.u.i : (double)v.u.b; }
static int64_t ival(cj_val_t v) { return v.t == CJ_INT ? v.u.i : v.t == CJ_BOOL ? (int64_t)v.u.b : 0; }

static const char *pytype(cj_val_t v)
{
    switch (v.t) {
    case CJ_NONE: return "NoneType";
    case CJ_BOOL: return "bool";
    case CJ_INT: return "int";
    case CJ_FLOAT: return "float";
    case CJ_STR: return "str";
    case CJ_LIST: return "list";
    case CJ_DICT: return "dict";
    default: return "object";
    }
}

_Noreturn static void bad_operands(cj_ctx_t *c, const char *op, cj_val_t a, cj_val_t b)
{
    if (a.t == CJ_UNDEF)
        cj_undef_fail(c, a);
    if (b.t == CJ_UNDEF)
        cj_undef_fail(c, b);
    if (!strcmp(op, "+") && a.t == CJ_STR)
        cj_fail(c, MEMRA_E_TYPE, "can only concatenate str (not \"%s\") to str", pytype(b));
    cj_fail(c, MEMRA_E_TYPE, "unsupported operand type(s) for %s: '%s' and '%s'", op, pytype(a), pytype(b));
}

static cj_val_t repeat(cj_ctx_t *c, cj_val_t seq, int64_t k)
{
    if (seq.t == CJ_STR) {
        cj_buf_t b = {0};
        cj_buf_put(c, &b, "", 0);
        for (int64_t i = 0; i < k; i++)
            cj_buf_put(c, &b, seq.u.s.p, seq.u.s.n);
        return cj_str(b.p, b.n);
    }
    cj_val_t l = cj_list_new(c);
    for (int64_t i = 0; i < k; i++) {
        count_step(c);
        for (size_t j = 0; j < seq.u.l->n; j++)
            cj_list_push(c, l.u.l, seq.u.l->v[j]);
    }
    return l;
}

COLD static cj_val_t binary(cj_ctx_t *c, const char *op, cj_val_t a, cj_val_t b)
{
    if (op[0] == '~') {
        cj_buf_t buf = {0};
        cj_buf_put(c, &buf, "", 0);
        cj_str_of(c, &buf, a);
        cj_str_of(c, &buf, b);
        return cj_str(buf.p, buf.n);
    }
    if (is_numv(a) && is_numv(b)) {
        bool fl = a.t == CJ_FLOAT || b.t == CJ_FLOAT;
        int64_t x = ival(a), y = ival(b), r;
        double fx = fval(a), fy = fval(b);
        switch (op[0]) {
        case '+':
            if (!fl && !__builtin_add_overflow(x, y, &r))
                return cj_int(r);
            return cj_float(fx + fy);
        case '-':
            if (!fl && !__builtin_sub_overflow(x, y, &r))
                return cj_int(r);
            return cj_float(fx - fy);
        case '*':
            if (op[1] == '*') {
                if (!fl && y >= 0) {
                    double p = pow(fx, fy);
                    if (p < 9.2e18)
                        return cj_int((int64_t)llround(p));
                }
                return cj_float(pow(fx, fy));
            }
            if (!fl && !__builtin_mul_overflow(x, y, &r))
                return cj_int(r);
            return cj_float(fx * fy);
        case '/':
            if (fy == 0)
                cj_fail(c, MEMRA_E_RANGE, "division by zero");
            if (op[1] == '/') {
                if (!fl) {
                    int64_t q = x / y;
                    if ((x % y != 0) && ((x < 0) != (y < 0)))
                        q--;
                    return cj_int(q);
                }
                return cj_float(floor(fx / fy));
            }
            return cj_float(fx / fy);
        case '%':
            if (fy == 0)
                cj_fail(c, MEMRA_E_RANGE, "modulo by zero");
            if (!fl) {
                int64_t m = x % y;
                if (m != 0 && ((m < 0) != (y < 0)))
                    m += y;
                return cj_int(m);
            }
            {
                double m = fmod(fx, fy);
                if (m != 0 && ((m < 0) != (fy < 0)))
                    m += fy;
                return cj_float(m);
            }
        }
    }
    if (op[0] == '%' && a.t == CJ_STR)
        return cj_percent(c, a, b);
    if (op[0] == '+' && a.t == CJ_STR && b.t == CJ_STR) {
        char *p = cj_alloc(c, a.u.s.n + b.u.s.n + 1);
        memcpy(p, a.u.s.p, a.u.s.n);
        memcpy(p + a.u.s.n, b.u.s.p, b.u.s.n);
        if (a.u.s.n + b.u.s.n > c->max_output)
            cj_fail(c, MEMRA_E_RANGE, "chat template: string longer than %zu bytes", c->max_output);
        return cj_str(p, a.u.s.n + b.u.s.n);
    }
    if (op[0] == '+' && a.t == CJ_LIST && b.t == CJ_LIST) {
        cj_val_t l = cj_list_new(c);
        for (size_t i = 0; i < a.u.l->n; i++)
            cj_list_push(c, l.u.l, a.u.l->v[i]);
        for (size_t i = 0; i < b.u.l->n; i++)
            cj_list_push(c, l.u.l, b.u.l->v[i]);
        return l;
    }
    if (op[0] == '*' && op[1] == 0) {
        if ((a.t == CJ_STR || a.t == CJ_LIST) && (b.t == CJ_INT || b.t == CJ_BOOL))
            return repeat(c, a, ival(b));
        if ((b.t == CJ_STR || b.t == CJ_LIST) && (a.t == CJ_INT || a.t == CJ_BOOL))
            return repeat(c, b, ival(a));
    }
    bad_operands(c, op, a, b);
}

static int cmp_order(cj_ctx_t *c, const char *op, cj_val_t a, cj_val_t b)
{
    if (is_numv(a) && is_numv(b)) {
        if (a.t != CJ_FLOAT && b.t != CJ_FLOAT)
            return ival(a) < ival(b) ? -1 : ival(a) > ival(b);
        double x = fval(a), y = fval(b);
        return x < y ? -1 : x > y;
    }
    if (a.t == CJ_STR && b.t == CJ_STR) {
        size_t n = a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n;
        int r = memcmp(a.u.s.p, b.u.s.p, n);
        if (r)
            return r < 0 ? -1 : 1;
        return a.u.s.n < b.u.s.n ? -1 : a.u.s.n > b.u.s.n;
    }
    if (a.t == CJ_LIST && b.t == CJ_LIST) {
        for (size_t i = 0; i < a.u.l->n && i < b.u.l->n; i++)
            if (!cj_equal(a.u.l->v[i], b.u.l->v[i]))
                return cmp_order(c, op, a.u.l->v[i], b.u.l->v[i]);
        return a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
    }
    if (a.t == CJ_UNDEF)
        cj_undef_fail(c, a);
    if (b.t == CJ_UNDEF)
        cj_undef_fail(c, b);
    cj_fail(c, MEMRA_E_TYPE, "'%s' not supported between instances of '%s' and '%s'", op, pytype(a), pytype(b));
}

COLD static bool compare(cj_ctx_t *c, const char *op, cj_val_t a, cj_val_t b)
{
    if (!strcmp(op, "=="))
        return cj_equal(a, b);
    if (!strcmp(op, "!="))
        return !cj_equal(a, b);
    if (!strcmp(op, "in"))
        return cj_contains(c, b, a);
    if (!strcmp(op, "not in"))
        return !cj_contains(c, b, a);
    int r = cmp_order(c, op, a, b);
    if (!strcmp(op, "<"))
        return r < 0;
    if (!strcmp(op, ">"))
        return r > 0;
    if (!strcmp(op, "<="))
        return r <= 0;
    return r >= 0;
}

static int64_t slice_arg(cj_ctx_t *c, cj_scope_t *s, const cj_node_t *e, bool *given)
{
    *given = false;
    if (!e)
        return 0;
    cj_val_t v = cj_eval(c, s, e);
    if (v.t == CJ_NONE)
        return 0;
    if (v.t != CJ_INT && v.t != CJ_BOOL)
        cj_fail(c, MEMRA_E_TYPE, "slice indices must be integers or None");
    *given = true;
    return ival(v);
}

COLD static cj_val_t slice(cj_ctx_t *c, cj_scope_t *s, const cj_node_t *e)
{
    cj_val_t obj = cj_eval(c, s, e->a);
    bool g0, g1, g2;
    int64_t start = slice_arg(c, s, e->b, &g0), stop = slice_arg(c, s, e->c, &g1), step = slice_arg(c, s, e->cond, &g2);
    if (!g2)
        step = 1;
    if (step == 0)
        cj_fail(c, MEMRA_E_INVALID, "slice step cannot be zero");
    cj_list_t *items;
    if (obj.t == CJ_LIST)
        items = obj.u.l;
    else if (obj.t == CJ_STR)
        items = cj_iter(c, obj);
    else if (obj.t == CJ_UNDEF)
        cj_undef_fail(c, obj);
    else /* jinja2's getitem turns the TypeError into an undefined value */
        return cj_undef_fmt(c, "%s has no element slice", cj_type_repr(obj));
    int64_t n = (int64_t)items->n;
    /* CPython's PySlice_AdjustIndices */
    if (!g0)
        start = step < 0 ? n - 1 : 0;
    else if (start < 0) {
        start += n;
        if (start < 0)
            start = step < 0 ? -1 : 0;
    } else if (start >= n)
        start = step < 0 ? n - 1 : n;
    if (!g1)
        stop = step < 0 ? -1 : n;
    else if (stop < 0) {
        stop += n;
        if (stop < 0)
            stop = step < 0 ? -1 : 0;
    } else if (stop >= n)
        stop = step < 0 ? n - 1 : n;
    cj_val_t out = items->tuple ? cj_tuple_new(c) : cj_list_new(c);
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
        cj_list_push(c, out.u.l, items->v[i]);
    if (obj.t == CJ_LIST)
        return out;
    cj_buf_t b = {0};
    cj_buf_put(c, &b, "", 0);
    for (size_t i = 0; i < out.u.l->n; i++)
        cj_buf_put(c, &b, out.u.l->v[i].u.s.p, out.u.l->v[i].u.s.n);
    return cj_str(b.p, b.n);
}

/* a left-leaning chain (a + b + c ...) parses in a loop but evaluates
 * recursively, and macro calls stack statements on statements, so the
 * evaluator counts its own depth (expressions and statements); this many
 * frames stay inside a 1 MiB stack */
#define MAX_EVAL_NEST 1000

static cj_val_t eval_node(cj_ctx_t *c, cj_scope_t *s, const cj_node_t *e);

cj_val_t cj_eval(cj_ctx_t *c, cj_scope_t *s, const cj_node_t *e)
{
    if (++c->nest > MAX_EVAL_NEST)
        cj_fail(c, MEMRA_E_RANGE, "chat template: line %d: expressions and calls nested deeper than %d", e->line,
                MAX_EVAL_NEST);
    cj_val_t v = eval_node(c, s, e);
    c->nest--;
    return v;
}

static cj_val_t eval_node(cj_ctx_t *c, cj_scope_t *s, const cj_node_t *e)
{
    cj_val_t a, b;
    cj_args_t args;
    switch (e->k) {
    case N_CONST: return e->val;
    case N_NAME: return lookup(c, s, e->name);
    case N_LIST:
    case N_TUPLE:
        a = e->k == N_TUPLE ? cj_tuple_new(c) : cj_list_new(c);
        for (size_t i = 0; i < e->kids.n; i++)
            cj_list_push(c, a.u.l, cj_eval(c, s, e->kids.v[i]));
        return a;
    case N_DICT:
        a = cj_dict_new(c);
        for (size_t i = 0; i + 1 < e->kids.n; i += 2) {
            cj_val_t k = cj_eval(c, s, e->kids.v[i]);
            cj_dict_set(c, a.u.d, k, cj_eval(c, s, e->kids.v[i + 1]));
        }
        return a;
    case N_ATTR: return cj_getattr(c, cj_eval(c, s, e->a), e->name);
    case N_ITEM:
        a = cj_eval(c, s, e->a);
        return cj_getitem(c, a, cj_eval(c, s, e->b));
    case N_SLICE: return slice(c, s, e);
    case N_CALL:
        if (e->a->k == N_ATTR) {
            a = cj_eval(c, s, e->a->a);
            if (a.t == CJ_UNDEF)
                cj_undef_fail(c, a);
            eval_args(c, s, e, &args);
            cj_val_t r;
            if (cj_method(c, a, e->a->name, &args, &r))
                return r;
            return call_value(c, cj_getattr(c, a, e->a->name), &args);
        }
        a = cj_eval(c, s, e->a);
        eval_args(c, s, e, &args);
        return call_value(c, a, &args);
    case N_FILTER:
        a = cj_eval(c, s, e->a);
        eval_args(c, s, e, &args);
        return cj_filter(c, s, e->name, a, &args);
    case N_TEST:
        a = cj_eval(c, s, e->a);
        eval_args(c, s, e, &args);
        return cj_bool(cj_test(c, e->name, a, &args));
    case N_UNARY:
        a = cj_eval(c, s, e->a);
        if (a.t == CJ_UNDEF)
            cj_undef_fail(c, a);
        if (!is_numv(a))
            cj_fail(c, MEMRA_E_TYPE, "bad operand type for unary %s: '%s'", e->name, pytype(a));
        if (e->name[0] == '+')
            return a.t == CJ_BOOL ? cj_int(a.u.b) : a;
        if (a.t == CJ_FLOAT)
            return cj_float(-a.u.f);
        return cj_int(-ival(a));
    case N_BINARY:
        a = cj_eval(c, s, e->a);
        b = cj_eval(c, s, e->b);
        return binary(c, e->name, a, b);
    case N_AND:
        a = cj_eval(c, s, e->a);
        return cj_truthy(a) ? cj_eval(c, s, e->b) : a;
    case N_OR:
        a = cj_eval(c, s, e->a);
        return cj_truthy(a) ? a : cj_eval(c, s, e->b);
    case N_NOT: return cj_bool(!cj_truthy(cj_eval(c, s, e->a)));
    case N_COND:
        if (cj_truthy(cj_eval(c, s, e->cond)))
            return cj_eval(c, s, e->a);
        if (e->b)
            return cj_eval(c, s, e->b);
        return cj_undef_fmt(c, "the inline if-expression on line %d evaluated to false and no else section was defined.", e->line);
    case N_COMPARE:
        a = cj_eval(c, s, e->a);
        b = cj_eval(c, s, e->b);
        return cj_bool(compare(c, e->name, a, b));
    default: cj_fail(c, MEMRA_E_INTERNAL, "chat template: line %d: statement used as an expression", e->line);
    }
}

static int exec(cj_ctx_t *c, cj_scope_t *s, const cj_node_t *n);

COLD static cj_val_t render_body(cj_ctx_t *c, cj_scope_t *s, const cj_node_t *body)
{
    cj_buf_t buf = {0}, *saved = c->out;
    cj_buf_put(c, &buf, "", 0);
    c->out = &buf;
    exec(c, s, body);
    c->out = saved;
    return cj_str(buf.p, buf.n);
}

cj_val_t cj_call_macro(cj_ctx_t *c, cj_val_t mv, const cj_args_t *a, cj_val_t caller)
{
    const cj_macro_t *m = mv.u.m;
    const cj_node_t *n = m->node;
    count_step(c);
    if (++c->depth > c->max_depth)
        cj_fail(c, MEMRA_E_RANGE, "chat template: macro calls nested deeper than %d", c->max_depth);
    if (a->n > n->targets.n)
        cj_fail(c, MEMRA_E_TYPE, "macro '%s' takes not more than %zu argument(s)", n->name, n->targets.n);
    cj_scope_t *s = scope_new(c, m->scope);
    for (size_t i = 0; i < n->targets.n; i++) {
        const char *pn = n->targets.v[i]->val.u.s.p;
        cj_val_t v;
        bool have = false;
        if (i < a->n) {
            v = a->v[i];
            have = true;
        }
        for (size_t k = 0; k < a->nkw; k++)
            if (!strcmp(a->kwn[k], pn)) {
                v = a->kw[k];
                have = true;
            }
        if (!have)
            v = n->defaults.v[i] ? cj_eval(c, s, n->defaults.v[i])
                                 : cj_undef_fmt(c, "parameter '%s' was not provided", pn);
        scope_set(c, s, pn, v);
    }
    for (size_t k = 0; k < a->nkw; k++) {
        bool known = false;
        for (size_t i = 0; i < n->targets.n; i++)
            known |= !strcmp(a->kwn[k], n->targets.v[i]->val.u.s.p);
        if (!known)
            cj_fail(c, MEMRA_E_TYPE, "macro '%s' takes no keyword argument '%s'", n->name, a->kwn[k]);
    }
    if (caller.t == CJ_MACRO)
        scope_set(c, s, "caller", caller);
    cj_val_t r = render_body(c, s, n->b);
    c->depth--;
    return r;
}

static void bind_targets(cj_ctx_t *c, cj_scope_t *s, const cj_nodes_t *targets, cj_val_t item)
{
    if (targets->n == 1) {
        scope_set(c, s, targets->v[0]->val.u.s.p, item);
        return;
    }
    cj_list_t *l = cj_iter(c, item);
    if (l->n != targets->n)
        cj_fail(c, MEMRA_E_TYPE, "cannot unpack %zu values into %zu names", l->n, targets->n);
    for (size_t i = 0; i < l->n; i++)
        scope_set(c, s, targets->v[i]->val.u.s.p, l->v[i]);
}

COLD static void exec_for(cj_ctx_t *c, cj_scope_t *s, const cj_node_t *n)
{
    cj_list_t *items = cj_iter(c, cj_eval(c, s, n->a));
    cj_scope_t *ls = scope_new(c, s);
    if (n->cond) {
        cj_list_t *kept = cj_list_new(c).u.l;
        for (size_t i = 0; i < items->n; i++) {
            count_step(c);
            bind_targets(c, ls, &n->targets, items->v[i]);
            if (cj_truthy(cj_eval(c, ls, n->cond)))
                cj_list_push(c, kept, items->v[i]);
        }
        items = kept;
        ls = scope_new(c, s);
    }
    size_t len = items->n;
    for (size_t i = 0; i < len; i++) {
        count_step(c);
        /* each iteration starts from the enclosing values: jinja2 does not
         * carry a loop body's assignments into the next iteration */
        if (i)
            ls = scope_new(c, s);
        cj_val_t loop = cj_dict_new(c);
        cj_dict_t *d = loop.u.d;
        cj_dict_set(c, d, cj_cstr("index"), cj_int((int64_t)i + 1));
        cj_dict_set(c, d, cj_cstr("index0"), cj_int((int64_t)i));
        cj_dict_set(c, d, cj_cstr("revindex"), cj_int((int64_t)(len - i)));
        cj_dict_set(c, d, cj_cstr("revindex0"), cj_int((int64_t)(len - i - 1)));
        cj_dict_set(c, d, cj_cstr("first"), cj_bool(i == 0));
        cj_dict_set(c, d, cj_cstr("last"), cj_bool(i + 1 == len));
        cj_dict_set(c, d, cj_cstr("length"), cj_int((int64_t)len));
        cj_dict_set(c, d, cj_cstr("depth"), cj_int(1));
        cj_dict_set(c, d, cj_cstr("depth0"), cj_int(0));
        cj_dict_set(c, d, cj_cstr("previtem"), i ? items->v[i - 1] : cj_undef("there is no previous item"));
        cj_dict_set(c, d, cj_cstr("nextitem"), i + 1 < len ? items->v[i + 1] : cj_undef("there is no next item"));
        scope_set(c, ls, "loop", loop);
        bind_targets(c, ls, &n->targets, items->v[i]);
        int f = exec(c, ls, n->b);
        if (f == FLOW_BREAK)
            break;
    }
    if (len == 0 && n->c)
        exec(c, s, n->c);
}

static int exec_node(cj_ctx_t *c, cj_scope_t *s, const cj_node_t *n);

static COLD void exec_other(cj_ctx_t *c, cj_scope_t *s, const cj_node_t *n)
{
    cj_val_t v;
    switch (n->k) {
    case N_SET:
        v = cj_eval(c, s, n->a);
        if (n->attr) {
            cj_val_t ns = lookup(c, s, n->name);
            if (ns.t != CJ_NS)
                cj_fail(c, MEMRA_E_TYPE, "chat template: line %d: cannot assign attribute on non-namespace object", n->line);
            cj_dict_set(c, ns.u.d, cj_cstr(n->attr), v);
        } else if (n->targets.n) {
            bind_targets(c, s, &n->targets, v);
        } else {
            scope_set(c, s, n->name, v);
        }
        return;
    case N_SET_BLOCK:
        v = render_body(c, s, n->b);
        scope_set(c, s, n->name, apply_filters(c, s, n->c, v));
        return;
    case N_MACRO: {
        cj_macro_t *m = cj_alloc(c, sizeof *m);
        m->node = n;
        m->scope = s;
        scope_set(c, s, n->name, (cj_val_t){.t = CJ_MACRO, .u.m = m});
        return;
    }
    case N_CALL_BLOCK: {
        cj_macro_t *m = cj_alloc(c, sizeof *m);
        m->node = n->c;
        m->scope = s;
        const cj_node_t *call = n->a;
        cj_val_t fn = cj_eval(c, s, call->a);
        if (fn.t != CJ_MACRO)
            cj_fail(c, MEMRA_E_TYPE, "chat template: line %d: call block needs a macro", n->line);
        cj_args_t a;
        eval_args(c, s, call, &a);
        v = cj_call_macro(c, fn, &a, (cj_val_t){.t = CJ_MACRO, .u.m = m});
        cj_buf_put(c, c->out, v.u.s.p, v.u.s.n);
        return;
    }
    default: return;
    }
}


static int exec(cj_ctx_t *c, cj_scope_t *s, const cj_node_t *n)
{
    if (++c->nest > MAX_EVAL_NEST)
        cj_fail(c, MEMRA_E_RANGE, "chat template: line %d: statements and calls nested deeper than %d", n->line,
                MAX_EVAL_NEST);
    int f = exec_node(c, s, n);
    c->nest--;
    return f;
}

static int exec_node(cj_ctx_t *c, cj_scope_t *s, const cj_node_t *n)
{
    cj_val_t v;
    switch (n->k) {
    case N_BODY:
        for (size_t i = 0; i < n->kids.n; i++) {
            int f = exec(c, s, n->kids.v[i]);
            if (f != FLOW_NEXT)
                return f;
        }
        return FLOW_NEXT;
    case N_TEXT: cj_buf_put(c, c->out, n->val.u.s.p, n->val.u.s.n); return FLOW_NEXT;
    case N_OUTPUT:
        v = cj_eval(c, s, n->a);
        cj_str_of(c, c->out, v);
        return FLOW_NEXT;
    case N_IF:
        if (cj_truthy(cj_eval(c, s, n->cond)))
            return exec(c, s, n->b);
        return n->c ? exec(c, s, n->c) : FLOW_NEXT;
    case N_FOR: exec_for(c, s, n); return FLOW_NEXT;
    case N_SET:
    case N_SET_BLOCK:
    case N_MACRO:
    case N_CALL_BLOCK: exec_other(c, s, n); return FLOW_NEXT;
    case N_FILTER_BLOCK:
        v = apply_filters(c, s, n->a, render_body(c, s, n->b));
        cj_str_of(c, c->out, v);
        return FLOW_NEXT;
    case N_BREAK: return FLOW_BREAK;
    case N_CONTINUE: return FLOW_CONTINUE;
    default: cj_fail(c, MEMRA_E_INTERNAL, "chat template: line %d: expression used as a statement", n->line);
    }
}

void cj_render(cj_ctx_t *c, const cj_node_t *root, cj_dict_t *vars)
{
    cj_scope_t *g = cj_alloc(c, sizeof *g);
    g->vars = vars;
    c->globals = g;
    exec(c, g, root);
}

/* Chat-template interpreter: a Jinja subset (the one Hugging Face chat
 * templates use), private to lib/chat/. Everything a render allocates comes
 * from one arena freed at the end, so values are plain structs passed by
 * value and never reference-counted. */
#ifndef MEMRA_CHAT_IMPL_H
#define MEMRA_CHAT_IMPL_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "memra/common.h"

/* ---- arena ---- */
typedef struct cj_chunk {
    struct cj_chunk *next;
    size_t used, cap;
    max_align_t data[];
} cj_chunk_t;

typedef struct cj_arena {
    cj_chunk_t *head;
    size_t total, limit; /* bytes taken from malloc, and their cap */
} cj_arena_t;

/* ---- values ---- */
typedef enum cj_type {
    CJ_UNDEF, /* jinja's Undefined: empty when printed, an error when used */
    CJ_NONE,
    CJ_BOOL,
    CJ_INT,
    CJ_FLOAT,
    CJ_STR,
    CJ_LIST,
    CJ_DICT,
    CJ_NS,    /* namespace(): a dict whose attributes `set` may change */
    CJ_MACRO,
    CJ_FUNC,  /* a global function: range, namespace, raise_exception, strftime_now */
} cj_type_t;

typedef struct cj_list cj_list_t;
struct cj_macro;
typedef struct cj_dict cj_dict_t;
struct cj_node;

typedef struct cj_val {
    cj_type_t t;
    union {
        bool b;
        int64_t i;
        double f;
        struct {
            const char *p; /* CJ_STR: bytes (not NUL-terminated); CJ_UNDEF: why (NUL-terminated, may be NULL) */
            size_t n;
        } s;
        cj_list_t *l;
        cj_dict_t *d;
        struct cj_macro *m;      /* CJ_MACRO */
        int fn;                  /* CJ_FUNC */
    } u;
} cj_val_t;

struct cj_list {
    size_t n, cap;
    cj_val_t *v;
    bool tuple; /* a Python tuple: prints as (a, b) */
};

typedef struct cj_entry {
    cj_val_t k, v;
} cj_entry_t;

struct cj_dict {
    size_t n, cap;
    cj_entry_t *e;
};

/* ---- render state ---- */
typedef struct cj_buf {
    char *p;
    size_t n, cap;
} cj_buf_t;

typedef struct cj_scope {
    struct cj_scope *parent;
    cj_dict_t *vars;
} cj_scope_t;

/* a macro and the scope it was defined in */
typedef struct cj_macro {
    const struct cj_node *node;
    cj_scope_t *scope;
} cj_macro_t;

typedef struct cj_ctx {
    cj_arena_t arena;
    jmp_buf fail;            /* every error longjmps here after filling status/msg */
    memra_status_t status;
    char msg[512];
    const char *src;         /* the template text */
    cj_scope_t *globals;
    cj_buf_t *out;           /* where output goes now (a macro call swaps it) */
    size_t max_output;       /* bytes of any one output buffer */
    uint64_t steps, max_steps; /* loop iterations and macro calls */
    int depth, max_depth;    /* macro call depth */
    int nest;                /* evaluator recursion (expressions, statements, calls): bounds the stack */
    int64_t now;             /* strftime_now: seconds, read as UTC broken-down time */
} cj_ctx_t;

/* fail with a status and message; never returns */
_Noreturn void cj_fail(cj_ctx_t *c, memra_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

void *cj_alloc(cj_ctx_t *c, size_t n);
void cj_arena_free(cj_arena_t *a);
char *cj_strndup(cj_ctx_t *c, const char *s, size_t n);

/* constructors */
cj_val_t cj_undef(const char *why);
cj_val_t cj_none(void);
cj_val_t cj_bool(bool b);
cj_val_t cj_int(int64_t i);
cj_val_t cj_float(double f);
cj_val_t cj_str(const char *p, size_t n);   /* borrows P: it must live in the arena or the template */
cj_val_t cj_cstr(const char *p);
cj_val_t cj_str_copy(cj_ctx_t *c, const char *p, size_t n);
cj_val_t cj_list_new(cj_ctx_t *c);
cj_val_t cj_tuple_new(cj_ctx_t *c);
cj_val_t cj_dict_new(cj_ctx_t *c);
void cj_list_push(cj_ctx_t *c, cj_list_t *l, cj_val_t v);
void cj_dict_set(cj_ctx_t *c, cj_dict_t *d, cj_val_t k, cj_val_t v);
cj_val_t *cj_dict_find(const cj_dict_t *d, const char *k, size_t n);
cj_val_t *cj_dict_findv(const cj_dict_t *d, cj_val_t k);

/* helpers */
bool cj_truthy(cj_val_t v);
bool cj_equal(cj_val_t a, cj_val_t b);
const char *cj_type_repr(cj_val_t v); /* "list object", "None", ... as jinja names types */
void cj_buf_put(cj_ctx_t *c, cj_buf_t *b, const char *p, size_t n);
/* CP as UTF-8 (memra__utf8_put). */
void cj_buf_put_cp(cj_ctx_t *c, cj_buf_t *b, uint32_t cp);
void cj_buf_puts(cj_ctx_t *c, cj_buf_t *b, const char *s);
void cj_str_of(cj_ctx_t *c, cj_buf_t *b, cj_val_t v);  /* python str() */
void cj_repr_of(cj_ctx_t *c, cj_buf_t *b, cj_val_t v); /* python repr() */
cj_val_t cj_to_str(cj_ctx_t *c, cj_val_t v);           /* str() as a value */
/* json.dumps(v, ensure_ascii=, indent=, separators=, sort_keys=) */
typedef struct cj_json_opts {
    int indent;                  /* < 0: none (one line) */
    bool ascii;                  /* ensure_ascii: non-ASCII as \uXXXX */
    bool sort;                   /* sort_keys */
    const char *item_sep, *key_sep;
} cj_json_opts_t;
void cj_tojson(cj_ctx_t *c, cj_buf_t *b, cj_val_t v, const cj_json_opts_t *o, int level);
void cj_fmt_float(char *buf, size_t cap, double f); /* python repr of a float */
size_t cj_utf8_len(const char *p, size_t n);        /* code points */

/* JSON text -> value (objects keep their key order) */
cj_val_t cj_json_parse(cj_ctx_t *c, const char *text, size_t n);

/* ---- lexer ---- */
typedef enum cj_tok_type {
    TK_TEXT,
    TK_VAR_BEGIN,
    TK_VAR_END,
    TK_BLOCK_BEGIN,
    TK_BLOCK_END,
    TK_NAME,
    TK_STR,
    TK_INT,
    TK_FLOAT,
    TK_OP,
    TK_EOF,
} cj_tok_type_t;

typedef struct cj_tok {
    cj_tok_type_t t;
    const char *p; /* TEXT/NAME/OP: bytes in the source; STR: unescaped copy */
    size_t n;
    int64_t i;
    double f;
    int line;
} cj_tok_t;

typedef struct cj_toks {
    cj_tok_t *v;
    size_t n, cap;
} cj_toks_t;

void cj_lex(cj_ctx_t *c, const char *src, size_t n, cj_toks_t *out);

/* ---- syntax tree ---- */
typedef enum cj_kind {
    /* statements */
    N_BODY, N_TEXT, N_OUTPUT, N_IF, N_FOR, N_SET, N_SET_BLOCK, N_MACRO, N_CALL_BLOCK, N_FILTER_BLOCK,
    N_BREAK, N_CONTINUE,
    /* expressions */
    N_CONST, N_NAME, N_LIST, N_DICT, N_TUPLE, N_ATTR, N_ITEM, N_SLICE, N_CALL, N_FILTER, N_TEST,
    N_UNARY, N_BINARY, N_AND, N_OR, N_NOT, N_COND, N_COMPARE,
} cj_kind_t;

typedef struct cj_node cj_node_t;

typedef struct cj_nodes {
    cj_node_t **v;
    size_t n, cap;
} cj_nodes_t;

struct cj_node {
    cj_kind_t k;
    int line;
    cj_val_t val;        /* N_CONST; N_TEXT (str) */
    const char *name;    /* N_NAME, N_ATTR, N_FILTER, N_TEST, N_MACRO, N_SET (target), N_BINARY/N_COMPARE/N_UNARY (op) */
    const char *attr;    /* N_SET: namespace attribute or NULL */
    cj_node_t *a, *b, *c; /* operands; N_IF: a = cond, b = then, c = else; N_FOR: a = iter, b = body, c = else */
    cj_node_t *cond;      /* N_FOR: loop filter */
    cj_nodes_t kids;      /* N_BODY statements; N_LIST/N_TUPLE items; N_DICT keys,values; call/filter/test args */
    cj_nodes_t kwnames;   /* keyword argument names (N_CONST strings), parallel to kwvals */
    cj_nodes_t kwvals;
    cj_nodes_t targets;   /* N_FOR / N_SET names (N_CONST strings); N_MACRO parameter names */
    cj_nodes_t defaults;  /* N_MACRO parameter defaults (NULL entries = none) */
};

cj_node_t *cj_parse(cj_ctx_t *c, const cj_toks_t *toks);

/* ---- evaluation ---- */
void cj_render(cj_ctx_t *c, const cj_node_t *root, cj_dict_t *vars);
cj_val_t cj_eval(cj_ctx_t *c, cj_scope_t *s, const cj_node_t *e);

/* builtins.c: filters, tests, methods and global functions; ARGS/KW are
 * evaluated arguments (KWN: names). */
typedef struct cj_args {
    cj_val_t *v;
    size_t n;
    const char **kwn;
    cj_val_t *kw;
    size_t nkw;
} cj_args_t;

cj_val_t cj_filter(cj_ctx_t *c, cj_scope_t *s, const char *name, cj_val_t x, const cj_args_t *a);
bool cj_test(cj_ctx_t *c, const char *name, cj_val_t x, const cj_args_t *a);
bool cj_method(cj_ctx_t *c, cj_val_t self, const char *name, const cj_args_t *a, cj_val_t *out);
cj_val_t cj_call_func(cj_ctx_t *c, int fn, const cj_args_t *a);
int cj_func_id(const char *name); /* -1 if NAME is no global function */
cj_val_t cj_percent(cj_ctx_t *c, cj_val_t fmt, cj_val_t args); /* FMT % ARGS */
cj_val_t cj_call_macro(cj_ctx_t *c, cj_val_t m, const cj_args_t *a, cj_val_t caller);
cj_val_t cj_getattr(cj_ctx_t *c, cj_val_t obj, const char *name);
cj_val_t cj_getitem(cj_ctx_t *c, cj_val_t obj, cj_val_t key);
bool cj_contains(cj_ctx_t *c, cj_val_t hay, cj_val_t x);
cj_val_t cj_undef_fmt(cj_ctx_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* items of an iterable value (list, dict keys, string characters); undefined is empty */
cj_list_t *cj_iter(cj_ctx_t *c, cj_val_t v);
/* raise the error of an undefined value being used */
_Noreturn void cj_undef_fail(cj_ctx_t *c, cj_val_t u);

/* chat.c: one render into a malloc'd string */
struct memra_chat_params;
typedef struct memra__chat_job {
    const char *tmpl;
    const char *ctx;
    const char *bos, *eos; /* given when the context lacks them (may be NULL) */
    const struct memra_chat_params *params;
} memra__chat_job_t;
memra_status_t memra__chat_render(const memra__chat_job_t *j, char **out, size_t *n_out);

#endif

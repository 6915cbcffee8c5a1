/* The public chat-template API: parse the context, lex, parse and run the
 * template in one arena, copy the rendering out. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../internal.h"
#include "chat_impl.h"
#include "memra/chat.h"

#define DEF_MAX_OUTPUT (16u << 20)
#define DEF_MAX_STEPS 10000000u
#define DEF_MAX_DEPTH 64
#define ARENA_LIMIT ((size_t)1 << 30)

void memra_chat_params_init(memra_chat_params_t *p, uint32_t size)
{
    if (!p || size < sizeof(uint32_t))
        return;
    const memra_chat_params_t d = {.size = sizeof d};
    memra__sized_write(p, size, &d, sizeof d);
}

/* "YYYY-MM-DD[THH:MM[:SS]]" as seconds read back by gmtime */
static bool parse_now(const char *s, int64_t *out)
{
    int Y, M, D, h = 0, m = 0, sec = 0, used = 0;
    if (sscanf(s, "%4d-%2d-%2d%n", &Y, &M, &D, &used) != 3)
        return false;
    const char *r = s + used;
    if (*r == 'T' || *r == ' ') {
        int u2 = 0;
        if (sscanf(r + 1, "%2d:%2d%n", &h, &m, &u2) != 2)
            return false;
        r += 1 + u2;
        if (*r == ':') {
            int u3 = 0;
            if (sscanf(r + 1, "%2d%n", &sec, &u3) != 1)
                return false;
            r += 1 + u3;
        }
    }
    if (*r || M < 1 || M > 12 || D < 1 || D > 31 || h > 23 || m > 59 || sec > 60)
        return false;
    struct tm tm = {.tm_year = Y - 1900, .tm_mon = M - 1, .tm_mday = D, .tm_hour = h, .tm_min = m, .tm_sec = sec};
    *out = (int64_t)timegm(&tm);
    return true;
}


#define HAS(p, f) ((p) && (p)->size >= offsetof(memra_chat_params_t, f) + sizeof((p)->f))

memra_status_t memra__chat_render(const memra__chat_job_t *j, char **out, size_t *n_out)
{
    if (!j->tmpl || !j->ctx || !out)
        return memra__fail(NULL, MEMRA_E_INVALID, "memra_chat_render: NULL template, context or output");
    const memra_chat_params_t *p = j->params;
    if (p && p->size < sizeof(uint32_t))
        return memra__fail(NULL, MEMRA_E_INVALID, "memra_chat_render: params->size is not set");
    cj_ctx_t *c = calloc(1, sizeof *c);
    if (!c)
        return memra__fail(NULL, MEMRA_E_NOMEM, "memra_chat_render: out of memory");
    c->arena.limit = ARENA_LIMIT;
    c->max_output = HAS(p, max_output) && p->max_output ? (size_t)p->max_output : DEF_MAX_OUTPUT;
    c->max_steps = HAS(p, max_steps) && p->max_steps ? p->max_steps : DEF_MAX_STEPS;
    c->max_depth = HAS(p, max_depth) && p->max_depth ? (int)(p->max_depth > 10000 ? 10000 : p->max_depth) : DEF_MAX_DEPTH;
    const char *now = HAS(p, now) ? p->now : NULL;
    if (now) {
        if (!parse_now(now, &c->now)) {
            free(c);
            return memra__fail(NULL, MEMRA_E_INVALID, "memra_chat_render: now \"%s\" is not YYYY-MM-DD[THH:MM[:SS]]", now);
        }
    } else {
        time_t t = time(NULL);
        struct tm lt;
        c->now = (int64_t)t;
        if (localtime_r(&t, &lt))
            c->now += lt.tm_gmtoff;
    }
    memra_status_t st = MEMRA_OK;
    if (setjmp(c->fail) == 0) {
        cj_val_t vars = cj_json_parse(c, j->ctx, strlen(j->ctx));
        if (vars.t != CJ_DICT)
            cj_fail(c, MEMRA_E_INVALID, "context JSON: not an object");
        if (j->bos && !cj_dict_find(vars.u.d, "bos_token", 9))
            cj_dict_set(c, vars.u.d, cj_cstr("bos_token"), cj_cstr(j->bos));
        if (j->eos && !cj_dict_find(vars.u.d, "eos_token", 9))
            cj_dict_set(c, vars.u.d, cj_cstr("eos_token"), cj_cstr(j->eos));
        cj_toks_t toks = {0};
        cj_lex(c, j->tmpl, strlen(j->tmpl), &toks);
        cj_node_t *root = cj_parse(c, &toks);
        cj_buf_t buf = {0};
        cj_buf_put(c, &buf, "", 0);
        c->out = &buf;
        cj_render(c, root, vars.u.d);
        char *r = malloc(buf.n + 1);
        if (!r)
            cj_fail(c, MEMRA_E_NOMEM, "memra_chat_render: out of memory");
        memcpy(r, buf.p, buf.n + 1);
        *out = r;
        if (n_out)
            *n_out = buf.n;
    } else {
        st = memra__fail(NULL, c->status, "%s", c->msg);
    }
    cj_arena_free(&c->arena);
    free(c);
    return st;
}

memra_status_t memra_chat_render_alloc(const char *tmpl, const char *context_json, const memra_chat_params_t *params,
                                       char **out, size_t *n_out)
{
    memra__chat_job_t j = {.tmpl = tmpl, .ctx = context_json, .params = params};
    return memra__chat_render(&j, out, n_out);
}

memra_status_t memra_chat_render(const char *tmpl, const char *context_json, const memra_chat_params_t *params,
                                 char *buf, size_t cap, size_t *n_out)
{
    if (!n_out || (!buf && cap))
        return memra__fail(NULL, MEMRA_E_INVALID, "memra_chat_render: NULL n_out, or NULL buf with cap > 0");
    char *r = NULL;
    size_t n = 0;
    memra__chat_job_t j = {.tmpl = tmpl, .ctx = context_json, .params = params};
    memra_status_t st = memra__chat_render(&j, &r, &n);
    if (st != MEMRA_OK)
        return st;
    *n_out = n;
    if (cap < n + 1) {
        free(r);
        return memra__fail(NULL, MEMRA_E_RANGE, "memra_chat_render: the rendering needs %zu bytes and a NUL, buffer has %zu",
                           n, cap);
    }
    memcpy(buf, r, n + 1);
    free(r);
    return MEMRA_OK;
}

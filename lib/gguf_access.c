/* Read-only accessors of an open GGUF handle. Numeric getters widen any
 * integer (or bool) type and range-check instead of failing on type, so
 * callers that need llama.cpp's strict typing check memra_gguf_kv_type. */
#include <math.h>
#include <string.h>

#include "gguf_impl.h"

static uint64_t le(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static bool kv_ok(const memra_gguf_t *g, int64_t i)
{
    return g && i >= 0 && i < g->n_kv;
}

static bool t_ok(const memra_gguf_t *g, int64_t i)
{
    return g && i >= 0 && i < g->n_tensors;
}

uint32_t memra_gguf_version(const memra_gguf_t *g) { return g ? g->version : 0; }
uint32_t memra_gguf_alignment(const memra_gguf_t *g) { return g ? g->alignment : 0; }
uint32_t memra_gguf_n_shards(const memra_gguf_t *g) { return g ? g->n_shards : 0; }
int64_t memra_gguf_n_kv(const memra_gguf_t *g) { return g ? g->n_kv : 0; }
int64_t memra_gguf_n_tensors(const memra_gguf_t *g) { return g ? g->n_tensors : 0; }

int64_t memra_gguf_find_kv(const memra_gguf_t *g, const char *key)
{
    return g && key ? memra__gguf_find(g, false, key) : -1;
}

int64_t memra_gguf_find_tensor(const memra_gguf_t *g, const char *name)
{
    return g && name ? memra__gguf_find(g, true, name) : -1;
}

const char *memra_gguf_kv_key(const memra_gguf_t *g, int64_t i)
{
    return kv_ok(g, i) ? g->kv[i].key : NULL;
}

memra_gguf_type_t memra_gguf_kv_type(const memra_gguf_t *g, int64_t i)
{
    return kv_ok(g, i) ? g->kv[i].type : MEMRA_GGUF_TYPE_COUNT;
}

/* Decodes one numeric element of type T at P into exactly one of the
 * three views; *kind: 0 unsigned, 1 signed, 2 float. */
static void decode(memra_gguf_type_t t, const uint8_t *p, uint64_t *u, int64_t *s, double *f, int *kind)
{
    switch (t) {
    case MEMRA_GGUF_UINT8: case MEMRA_GGUF_BOOL: *u = p[0]; *kind = 0; return;
    case MEMRA_GGUF_UINT16: *u = le(p, 2); *kind = 0; return;
    case MEMRA_GGUF_UINT32: *u = le(p, 4); *kind = 0; return;
    case MEMRA_GGUF_UINT64: *u = le(p, 8); *kind = 0; return;
    case MEMRA_GGUF_INT8: *s = (int8_t)p[0]; *kind = 1; return;
    case MEMRA_GGUF_INT16: *s = (int16_t)le(p, 2); *kind = 1; return;
    case MEMRA_GGUF_INT32: *s = (int32_t)le(p, 4); *kind = 1; return;
    case MEMRA_GGUF_INT64: *s = (int64_t)le(p, 8); *kind = 1; return;
    case MEMRA_GGUF_FLOAT32: { uint32_t b = (uint32_t)le(p, 4); float v; memcpy(&v, &b, 4); *f = v; *kind = 2; return; }
    case MEMRA_GGUF_FLOAT64: { uint64_t b = le(p, 8); memcpy(f, &b, 8); *kind = 2; return; }
    default: *kind = -1; return;
    }
}

static memra_status_t get_u64(memra_gguf_type_t t, const uint8_t *p, uint64_t *out)
{
    uint64_t u = 0; int64_t s = 0; double f; int kind;
    decode(t, p, &u, &s, &f, &kind);
    if (kind == 0) { *out = u; return MEMRA_OK; }
    if (kind == 1) { if (s < 0) return MEMRA_E_RANGE; *out = (uint64_t)s; return MEMRA_OK; }
    return MEMRA_E_TYPE;
}

static memra_status_t get_i64(memra_gguf_type_t t, const uint8_t *p, int64_t *out)
{
    uint64_t u = 0; int64_t s = 0; double f; int kind;
    decode(t, p, &u, &s, &f, &kind);
    if (kind == 1) { *out = s; return MEMRA_OK; }
    if (kind == 0) { if (u > (uint64_t)INT64_MAX) return MEMRA_E_RANGE; *out = (int64_t)u; return MEMRA_OK; }
    return MEMRA_E_TYPE;
}

static memra_status_t get_f64(memra_gguf_type_t t, const uint8_t *p, double *out)
{
    uint64_t u; int64_t s; double f = 0; int kind;
    decode(t, p, &u, &s, &f, &kind);
    if (kind != 2)
        return MEMRA_E_TYPE;
    *out = f;
    return MEMRA_OK;
}

static memra_status_t scalar(const memra_gguf_t *g, int64_t i, const char *fn)
{
    if (!kv_ok(g, i))
        return memra__fail(NULL, MEMRA_E_INVALID, "%s: key index %lld out of range", fn, (long long)i);
    memra_gguf_type_t t = g->kv[i].type;
    if (t == MEMRA_GGUF_ARRAY || t == MEMRA_GGUF_STRING)
        return memra__fail(NULL, MEMRA_E_TYPE, "%s: key '%s' is %s, not a number", fn, g->kv[i].key,
                           memra_gguf_type_name(t));
    return MEMRA_OK;
}

static memra_status_t null_out(const char *fn)
{
    return memra__fail(NULL, MEMRA_E_INVALID, "%s: out is NULL", fn);
}

static memra_status_t report(const memra_gguf_t *g, int64_t i, memra_status_t st, const char *want)
{
    if (st == MEMRA_OK)
        return st;
    return memra__fail(NULL, st, "key '%s' (%s) %s %s", g->kv[i].key,
                       memra_gguf_type_name(g->kv[i].type),
                       st == MEMRA_E_RANGE ? "does not fit" : "cannot be read as", want);
}

memra_status_t memra_gguf_kv_u64(const memra_gguf_t *g, int64_t i, uint64_t *out)
{
    memra_status_t st = scalar(g, i, "memra_gguf_kv_u64");
    if (st || !out)
        return st ? st : null_out("memra_gguf_kv_u64");
    return report(g, i, get_u64(g->kv[i].type, g->kv[i].data, out), "uint64");
}

memra_status_t memra_gguf_kv_i64(const memra_gguf_t *g, int64_t i, int64_t *out)
{
    memra_status_t st = scalar(g, i, "memra_gguf_kv_i64");
    if (st || !out)
        return st ? st : null_out("memra_gguf_kv_i64");
    return report(g, i, get_i64(g->kv[i].type, g->kv[i].data, out), "int64");
}

memra_status_t memra_gguf_kv_f64(const memra_gguf_t *g, int64_t i, double *out)
{
    memra_status_t st = scalar(g, i, "memra_gguf_kv_f64");
    if (st || !out)
        return st ? st : null_out("memra_gguf_kv_f64");
    return report(g, i, get_f64(g->kv[i].type, g->kv[i].data, out), "float");
}

memra_status_t memra_gguf_kv_bool(const memra_gguf_t *g, int64_t i, int *out)
{
    memra_status_t st = scalar(g, i, "memra_gguf_kv_bool");
    if (st || !out)
        return st ? st : null_out("memra_gguf_kv_bool");
    if (g->kv[i].type != MEMRA_GGUF_BOOL)
        return report(g, i, MEMRA_E_TYPE, "bool");
    *out = g->kv[i].data[0] != 0;
    return MEMRA_OK;
}

memra_status_t memra_gguf_kv_str(const memra_gguf_t *g, int64_t i, const char **out, size_t *len)
{
    if (!kv_ok(g, i) || !out)
        return memra__fail(NULL, MEMRA_E_INVALID, "memra_gguf_kv_str: bad key index or NULL out");
    if (g->kv[i].type != MEMRA_GGUF_STRING)
        return report(g, i, MEMRA_E_TYPE, "string");
    *out = g->kv[i].str;
    if (len)
        *len = g->kv[i].str_len;
    return MEMRA_OK;
}

memra_gguf_type_t memra_gguf_arr_type(const memra_gguf_t *g, int64_t i)
{
    return kv_ok(g, i) && g->kv[i].type == MEMRA_GGUF_ARRAY ? g->kv[i].arr_type : MEMRA_GGUF_TYPE_COUNT;
}

uint64_t memra_gguf_arr_n(const memra_gguf_t *g, int64_t i)
{
    return kv_ok(g, i) && g->kv[i].type == MEMRA_GGUF_ARRAY ? g->kv[i].n : 0;
}

const void *memra_gguf_arr_data(const memra_gguf_t *g, int64_t i)
{
    if (!kv_ok(g, i) || g->kv[i].type != MEMRA_GGUF_ARRAY || g->kv[i].arr_type == MEMRA_GGUF_STRING)
        return NULL;
    return g->kv[i].data;
}

static const uint8_t *elem(const memra_gguf_t *g, int64_t i, uint64_t j, const char *fn, memra_status_t *st)
{
    static const unsigned sz[MEMRA_GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if (!kv_ok(g, i) || g->kv[i].type != MEMRA_GGUF_ARRAY) {
        *st = memra__fail(NULL, MEMRA_E_INVALID, "%s: key %lld is not an array", fn, (long long)i);
        return NULL;
    }
    if (j >= g->kv[i].n) {
        *st = memra__fail(NULL, MEMRA_E_RANGE, "%s: index %llu out of range for '%s' (%llu elements)",
                          fn, (unsigned long long)j, g->kv[i].key, (unsigned long long)g->kv[i].n);
        return NULL;
    }
    if (g->kv[i].arr_type == MEMRA_GGUF_STRING)
        return g->kv[i].strs[j];
    return g->kv[i].data + j * sz[g->kv[i].arr_type];
}

memra_status_t memra_gguf_arr_u64(const memra_gguf_t *g, int64_t i, uint64_t j, uint64_t *out)
{
    memra_status_t st = MEMRA_OK;
    const uint8_t *p = elem(g, i, j, "memra_gguf_arr_u64", &st);
    if (!p || !out)
        return p ? null_out("memra_gguf_arr_u64") : st;
    return report(g, i, get_u64(g->kv[i].arr_type, p, out), "uint64 elements");
}

memra_status_t memra_gguf_arr_i64(const memra_gguf_t *g, int64_t i, uint64_t j, int64_t *out)
{
    memra_status_t st = MEMRA_OK;
    const uint8_t *p = elem(g, i, j, "memra_gguf_arr_i64", &st);
    if (!p || !out)
        return p ? null_out("memra_gguf_arr_i64") : st;
    return report(g, i, get_i64(g->kv[i].arr_type, p, out), "int64 elements");
}

memra_status_t memra_gguf_arr_f64(const memra_gguf_t *g, int64_t i, uint64_t j, double *out)
{
    memra_status_t st = MEMRA_OK;
    const uint8_t *p = elem(g, i, j, "memra_gguf_arr_f64", &st);
    if (!p || !out)
        return p ? null_out("memra_gguf_arr_f64") : st;
    return report(g, i, get_f64(g->kv[i].arr_type, p, out), "float elements");
}

memra_status_t memra_gguf_arr_str(const memra_gguf_t *g, int64_t i, uint64_t j, const char **out,
                                  size_t *len)
{
    memra_status_t st = MEMRA_OK;
    const uint8_t *p = elem(g, i, j, "memra_gguf_arr_str", &st);
    if (!p || !out)
        return p ? null_out("memra_gguf_arr_str") : st;
    if (g->kv[i].arr_type != MEMRA_GGUF_STRING)
        return report(g, i, MEMRA_E_TYPE, "string elements");
    *out = (const char *)p + 8;
    if (len)
        *len = (size_t)le(p, 8);
    return MEMRA_OK;
}

const char *memra_gguf_tensor_name(const memra_gguf_t *g, int64_t i)
{
    return t_ok(g, i) ? g->tensors[i].name : NULL;
}

memra_type_t memra_gguf_tensor_type(const memra_gguf_t *g, int64_t i)
{
    return t_ok(g, i) ? g->tensors[i].type : MEMRA_TYPE_COUNT;
}

uint32_t memra_gguf_tensor_shape(const memra_gguf_t *g, int64_t i, int64_t ne[4])
{
    if (!t_ok(g, i))
        return 0;
    if (ne)
        memcpy(ne, g->tensors[i].ne, sizeof g->tensors[i].ne);
    return g->tensors[i].n_dims;
}

uint64_t memra_gguf_tensor_offset(const memra_gguf_t *g, int64_t i)
{
    return t_ok(g, i) ? g->tensors[i].offset : 0;
}

uint64_t memra_gguf_tensor_nbytes(const memra_gguf_t *g, int64_t i)
{
    return t_ok(g, i) ? g->tensors[i].nbytes : 0;
}

uint32_t memra_gguf_tensor_shard(const memra_gguf_t *g, int64_t i)
{
    return t_ok(g, i) ? g->tensors[i].shard : 0;
}

const void *memra_gguf_tensor_data(const memra_gguf_t *g, int64_t i)
{
    return t_ok(g, i) ? g->tensors[i].data : NULL;
}

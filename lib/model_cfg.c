/* Config keys with llama.cpp's loader semantics: scalars are typed
 * strictly (a u32 key must be UINT32, a float FLOAT32), per-layer keys may
 * be a scalar or an array of exactly n_layer entries. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model_impl.h"

/* "<arch>.KEY", except for keys that are already global. */
static const char *full_key(const memra_model_t *m, const char *key, char *buf, size_t cap)
{
    if (strncmp(key, "general.", 8) == 0 || strncmp(key, "tokenizer.", 10) == 0 ||
        strncmp(key, "split.", 6) == 0)
        return key;
    snprintf(buf, cap, "%s.%s", m->arch_name, key);
    return buf;
}

static int64_t find(const memra_model_t *m, const char *key, char *buf, size_t cap)
{
    return memra_gguf_find_kv(m->gguf, full_key(m, key, buf, cap));
}

bool memra__cfg_has(const memra_model_t *m, const char *key)
{
    char buf[256];
    return find(m, key, buf, sizeof buf) >= 0;
}

static memra_status_t wrong_type(memra_model_t *m, const char *k, int64_t i, const char *want)
{
    memra_gguf_type_t t = memra_gguf_kv_type(m->gguf, i);
    return memra__model_fail(m, MEMRA_E_FORMAT, "key '%s' has wrong type %s (expected %s)", k,
                             t == MEMRA_GGUF_ARRAY ? "ARRAY" : memra_gguf_type_name(t), want);
}

/* Finds KEY and checks it has type WANT. *idx = -1 when it is absent
 * and not required. */
static memra_status_t find_typed(memra_model_t *m, const char *key, bool required, memra_gguf_type_t want,
                                 int64_t *idx)
{
    char buf[256];
    const char *k = full_key(m, key, buf, sizeof buf);
    *idx = memra_gguf_find_kv(m->gguf, k);
    if (*idx < 0)
        return required ? memra__model_fail(m, MEMRA_E_FORMAT, "required key '%s' is missing", k) : MEMRA_OK;
    if (memra_gguf_kv_type(m->gguf, *idx) != want)
        return wrong_type(m, k, *idx, memra_gguf_type_name(want));
    return MEMRA_OK;
}

static memra_status_t get_u32(memra_model_t *m, const char *key, bool required, uint32_t def, uint32_t *out)
{
    int64_t i;
    uint64_t v = def;
    memra_status_t st = find_typed(m, key, required, MEMRA_GGUF_UINT32, &i);
    if (!st && i >= 0)
        memra_gguf_kv_u64(m->gguf, i, &v);
    *out = (uint32_t)v;
    return st;
}

memra_status_t memra__cfg_u32(memra_model_t *m, const char *key, uint32_t *out)
{
    return get_u32(m, key, true, 0, out);
}

memra_status_t memra__cfg_u32_or(memra_model_t *m, const char *key, uint32_t def, uint32_t *out)
{
    return get_u32(m, key, false, def, out);
}

/* A float key (or DEF when absent and not required) that must be finite
 * and, per RANGE, > 0 or >= 0: a file outside that range would load and
 * then give NaN logits or fail every forward, so it is refused here with
 * the key's name. */
typedef enum { ANY_FINITE, POSITIVE, NON_NEGATIVE } f32_range;

static memra_status_t get_f32(memra_model_t *m, const char *key, bool required, float def, f32_range range,
                              float *out)
{
    int64_t i;
    double v = def;
    memra_status_t st = find_typed(m, key, required, MEMRA_GGUF_FLOAT32, &i);
    if (!st && i >= 0)
        memra_gguf_kv_f64(m->gguf, i, &v);
    if (!st && i >= 0) {
        char buf[256];
        const char *k = full_key(m, key, buf, sizeof buf);
        if (!isfinite(v))
            return memra__model_fail(m, MEMRA_E_FORMAT, "key '%s' is %g; expected a finite number", k, v);
        if ((range == POSITIVE && !(v > 0.0)) || (range == NON_NEGATIVE && !(v >= 0.0)))
            return memra__model_fail(m, MEMRA_E_FORMAT, "key '%s' is %g; expected a number %s 0", k, v,
                                     range == POSITIVE ? ">" : ">=");
    }
    *out = (float)v;
    return st;
}

memra_status_t memra__cfg_f32(memra_model_t *m, const char *key, float *out)
{
    return get_f32(m, key, true, 0.0f, ANY_FINITE, out);
}

memra_status_t memra__cfg_f32_or(memra_model_t *m, const char *key, float def, float *out)
{
    return get_f32(m, key, false, def, ANY_FINITE, out);
}

memra_status_t memra__cfg_f32_pos(memra_model_t *m, const char *key, float *out)
{
    return get_f32(m, key, true, 0.0f, POSITIVE, out);
}

memra_status_t memra__cfg_f32_pos_or(memra_model_t *m, const char *key, float def, float *out)
{
    return get_f32(m, key, false, def, POSITIVE, out);
}

memra_status_t memra__cfg_f32_nonneg_or(memra_model_t *m, const char *key, float def, float *out)
{
    return get_f32(m, key, false, def, NON_NEGATIVE, out);
}

memra_status_t memra__cfg_u32_per_layer(memra_model_t *m, const char *key, int32_t n, bool required,
                                        uint32_t def, uint32_t *out)
{
    char buf[256];
    const char *k = full_key(m, key, buf, sizeof buf);
    int64_t i = memra_gguf_find_kv(m->gguf, k);
    if (i < 0) {
        if (required)
            return memra__model_fail(m, MEMRA_E_FORMAT, "required key '%s' is missing", k);
        for (int32_t j = 0; j < n; j++)
            out[j] = def;
        return MEMRA_OK;
    }
    memra_gguf_type_t t = memra_gguf_kv_type(m->gguf, i);
    if (t == MEMRA_GGUF_UINT32) {
        uint64_t v = 0;
        memra_gguf_kv_u64(m->gguf, i, &v);
        for (int32_t j = 0; j < n; j++)
            out[j] = (uint32_t)v;
        return MEMRA_OK;
    }
    if (t != MEMRA_GGUF_ARRAY)
        return wrong_type(m, k, i, "UINT32 or an array");
    memra_gguf_type_t et = memra_gguf_arr_type(m->gguf, i);
    if (et != MEMRA_GGUF_INT32 && et != MEMRA_GGUF_UINT32 && et != MEMRA_GGUF_BOOL)
        return memra__model_fail(m, MEMRA_E_FORMAT, "key '%s': array of %s (expected INT32, UINT32 or BOOL)",
                                 k, memra_gguf_type_name(et));
    if (memra_gguf_arr_n(m->gguf, i) != (uint64_t)n)
        return memra__model_fail(m, MEMRA_E_FORMAT, "key '%s': array has %llu entries, expected %d", k,
                                 (unsigned long long)memra_gguf_arr_n(m->gguf, i), n);
    for (int32_t j = 0; j < n; j++) {
        int64_t v = 0;
        memra_gguf_arr_i64(m->gguf, i, (uint64_t)j, &v);
        if (v < 0 || v > UINT32_MAX)
            return memra__model_fail(m, MEMRA_E_FORMAT, "key '%s'[%d] = %lld is out of range", k, j, (long long)v);
        out[j] = (uint32_t)v;
    }
    return MEMRA_OK;
}

memra_status_t memra__cfg_i32_array(memra_model_t *m, const char *key, int32_t n, int32_t *out)
{
    char buf[256];
    const char *k = full_key(m, key, buf, sizeof buf);
    int64_t i = memra_gguf_find_kv(m->gguf, k);
    if (i < 0)
        return memra__model_fail(m, MEMRA_E_FORMAT, "required key '%s' is missing", k);
    memra_gguf_type_t et = memra_gguf_arr_type(m->gguf, i);
    if (memra_gguf_kv_type(m->gguf, i) != MEMRA_GGUF_ARRAY || (et != MEMRA_GGUF_INT32 && et != MEMRA_GGUF_UINT32))
        return wrong_type(m, k, i, "an INT32 array");
    if (memra_gguf_arr_n(m->gguf, i) != (uint64_t)n)
        return memra__model_fail(m, MEMRA_E_FORMAT, "key '%s': array has %llu entries, expected %d", k,
                                 (unsigned long long)memra_gguf_arr_n(m->gguf, i), n);
    for (int32_t j = 0; j < n; j++) {
        int64_t v = 0;
        memra_gguf_arr_i64(m->gguf, i, (uint64_t)j, &v);
        if (v < INT32_MIN || v > INT32_MAX)
            return memra__model_fail(m, MEMRA_E_FORMAT, "key '%s'[%d] out of range", k, j);
        out[j] = (int32_t)v;
    }
    return MEMRA_OK;
}

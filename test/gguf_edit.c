#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "gguf_edit.h"
#include "memra/model.h"

static bool is(const char *a, const char *b)
{
    return a && b && strcmp(a, b) == 0;
}

static memra_status_t copy_array(const memra_gguf_t *g, int64_t i, memra_gguf_writer_t *w, const char *key)
{
    memra_gguf_type_t et = memra_gguf_arr_type(g, i);
    uint64_t n = memra_gguf_arr_n(g, i);
    if (et != MEMRA_GGUF_STRING)
        return memra_gguf_writer_add_array(w, key, et, memra_gguf_arr_data(g, i), n);
    const char **strs = malloc((n ? n : 1) * sizeof *strs);
    size_t *lens = malloc((n ? n : 1) * sizeof *lens);
    memra_status_t st = strs && lens ? MEMRA_OK : MEMRA_E_NOMEM;
    for (uint64_t j = 0; j < n && !st; j++)
        st = memra_gguf_arr_str(g, i, j, &strs[j], &lens[j]);
    if (!st)
        st = memra_gguf_writer_add_str_array(w, key, strs, lens, n);
    free(strs);
    free(lens);
    return st;
}

memra_status_t tu_gguf_copy_kvs(const memra_gguf_t *g, memra_gguf_writer_t *w, const tu_gguf_edit *e)
{
    static const tu_gguf_edit none;
    if (!e)
        e = &none;
    memra_status_t st = MEMRA_OK;
    if (e->set_f32_key)
        st = memra_gguf_writer_add_f32(w, e->set_f32_key, e->set_f32);
    for (int64_t i = 0; i < memra_gguf_n_kv(g) && !st; i++) {
        const char *key = memra_gguf_kv_key(g, i);
        memra_gguf_type_t t = memra_gguf_kv_type(g, i);
        if (is(key, e->drop_key) || is(key, e->set_f32_key) || strcmp(key, "general.alignment") == 0)
            continue;
        if (is(key, "general.architecture") && e->set_arch) {
            st = memra_gguf_writer_add_str(w, key, e->set_arch);
        } else if (is(key, e->retype_key_i32)) {
            uint64_t v = 0;
            st = memra_gguf_kv_u64(g, i, &v);
            if (!st)
                st = memra_gguf_writer_add_i32(w, key, (int32_t)v);
        } else if (t == MEMRA_GGUF_STRING) {
            const char *s;
            st = memra_gguf_kv_str(g, i, &s, NULL);
            if (!st)
                st = memra_gguf_writer_add_str(w, key, s);
        } else if (t == MEMRA_GGUF_ARRAY) {
            st = copy_array(g, i, w, key);
        } else {
            uint64_t raw = 0;
            /* scalars: re-read through the typed getters into their C type */
            switch (t) {
            case MEMRA_GGUF_FLOAT32: { double d; st = memra_gguf_kv_f64(g, i, &d); float f = (float)d; memcpy(&raw, &f, 4); break; }
            case MEMRA_GGUF_FLOAT64: { double d; st = memra_gguf_kv_f64(g, i, &d); memcpy(&raw, &d, 8); break; }
            case MEMRA_GGUF_INT8: case MEMRA_GGUF_INT16: case MEMRA_GGUF_INT32: case MEMRA_GGUF_INT64: {
                int64_t v; st = memra_gguf_kv_i64(g, i, &v); memcpy(&raw, &v, 8); break; }
            default: st = memra_gguf_kv_u64(g, i, &raw); break;
            }
            if (!st)
                st = memra_gguf_writer_add_scalar(w, key, t, &raw);
        }
    }
    return st;
}

memra_status_t tu_gguf_copy_tensors(const memra_gguf_t *g, memra_gguf_writer_t *w, const tu_gguf_edit *e,
                                    void **owned)
{
    static const tu_gguf_edit none;
    static const float zeros[16];
    if (!e)
        e = &none;
    *owned = NULL;
    memra_status_t st = MEMRA_OK;
    for (int64_t i = 0; i < memra_gguf_n_tensors(g) && !st; i++) {
        const char *name = memra_gguf_tensor_name(g, i);
        if (is(name, e->drop_tensor))
            continue;
        int64_t ne[4];
        uint32_t nd = memra_gguf_tensor_shape(g, i, ne);
        const void *data = memra_gguf_tensor_data(g, i);
        if (is(name, e->reshape_tensor)) {
            size_t nb = (size_t)memra_gguf_tensor_nbytes(g, i);
            uint8_t *twice = malloc(2 * nb);
            if (!twice)
                return MEMRA_E_NOMEM;
            memcpy(twice, data, nb);
            memcpy(twice + nb, data, nb);
            *owned = twice;
            data = twice;
            if (nd == 1) {
                ne[0] *= 2;
            } else {
                ne[nd - 1] *= 2; /* double the outer dim so the bytes line up */
            }
        }
        st = memra_gguf_writer_add_tensor(w, name, memra_gguf_tensor_type(g, i), nd, ne, data);
    }
    if (!st && e->extra_tensor) {
        int64_t ne = 16;
        st = memra_gguf_writer_add_tensor(w, e->extra_tensor, MEMRA_TYPE_F32, 1, &ne, zeros);
    }
    return st;
}

memra_status_t tu_gguf_rewrite(const char *src_path, const char *dst_path, const tu_gguf_edit *e)
{
    memra_gguf_t *g = NULL;
    memra_gguf_writer_t *w = NULL;
    void *owned = NULL;
    memra_status_t st = memra_gguf_open(src_path, &g);
    if (!st)
        st = memra_gguf_writer_create(&w);
    if (!st && memra_gguf_alignment(g) != 32)
        st = memra_gguf_writer_set_alignment(w, memra_gguf_alignment(g));
    if (!st)
        st = tu_gguf_copy_kvs(g, w, e);
    if (!st)
        st = tu_gguf_copy_tensors(g, w, e, &owned);
    if (!st)
        st = memra_gguf_writer_write(w, dst_path);
    free(owned);
    memra_gguf_writer_destroy(w);
    memra_gguf_close(g);
    return st;
}

void tu_expect_bad_model(const char *src_path, const tu_gguf_edit *e, memra_status_t status, const char *needle)
{
    char dst[256];
    const char *tmp = getenv("TMPDIR");
    snprintf(dst, sizeof dst, "%s/memra-bad-model-%d.gguf", tmp && *tmp ? tmp : "/tmp", (int)getpid());
    assert_int_equal(tu_gguf_rewrite(src_path, dst, e), MEMRA_OK);
    memra_model_t *m = NULL;
    memra_status_t st = memra_model_load(dst, NULL, &m);
    remove(dst);
    assert_null(m);
    if (st != status || !strstr(memra_last_error(), needle))
        fail_msg("%s: got %s '%s', want %s naming '%s'", src_path, memra_status_name(st), memra_last_error(),
                 memra_status_name(status), needle);
}

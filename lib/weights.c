/* Weight lookup for arch binders: find the tensor, check type and shape,
 * place it on the stage's device, mark it used. On host-memory backends
 * (the CPU reference) weights are used in place from the file mapping. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_impl.h"
#include "quant.h"

static memra_status_t track(memra_model_t *m, memra__stage_t *st, void *p)
{
    if (st->n_allocs == st->cap_allocs) {
        size_t cap = st->cap_allocs ? st->cap_allocs * 2 : 64;
        void **na = realloc(st->allocs, cap * sizeof *na);
        if (!na) {
            st->be->iface->free(st->be, p);
            return memra__model_fail(m, MEMRA_E_NOMEM, "out of memory tracking device allocations");
        }
        st->allocs = na;
        st->cap_allocs = cap;
    }
    st->allocs[st->n_allocs++] = p;
    return MEMRA_OK;
}

/* Device copy of N bytes at SRC on STAGE (or SRC itself on host backends). */
static memra_status_t place(memra_model_t *m, int32_t stage, const void *src, size_t n, const void **out)
{
    memra__stage_t *st = &m->stages[stage];
    const memra__backend_i *ops = st->be->iface;
    st->weight_bytes += n;
    if (ops->host_memory) {
        *out = src;
        return MEMRA_OK;
    }
    void *p = ops->alloc(st->be, n);
    if (!p)
        return memra__model_fail(m, MEMRA_E_NOMEM, "cannot allocate %zu bytes of weights on stage %d", n, stage);
    memra_status_t s = track(m, st, p);
    if (s)
        return s;
    if ((s = ops->upload(st->be, p, src, n)))
        return memra__model_fail(m, s, "weight upload failed: %s", memra_last_error());
    *out = p;
    return MEMRA_OK;
}

bool memra__w_exists(const memra_model_t *m, const char *fmt, ...)
{
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    return memra_gguf_find_tensor(m->gguf, name) >= 0;
}

static void fmt_shape(char *buf, size_t cap, int n, const int64_t *ne)
{
    size_t o = 0;
    o += (size_t)snprintf(buf + o, cap - o, "{");
    for (int d = 0; d < n && o < cap; d++)
        o += (size_t)snprintf(buf + o, cap - o, d ? ", %lld" : "%lld", (long long)ne[d]);
    if (o < cap)
        snprintf(buf + o, cap - o, "}");
}

/* Shapes compare modulo trailing 1s; -1 in WANT matches anything. */
static bool shape_ok(const int64_t have[4], int n, const int64_t *want)
{
    for (int d = 0; d < 4; d++) {
        int64_t w = d < n ? want[d] : 1;
        if (w >= 0 && have[d] != w)
            return false;
    }
    return true;
}

/* Finds the tensor NAME and checks its shape (into NE). *IDX = -1 when it
 * is absent and FLAGS allow that. */
static memra_status_t lookup(memra_model_t *m, const char *name, unsigned flags, int n_dims, const int64_t *shape,
                             int64_t ne[4], int64_t *idx)
{
    *idx = memra_gguf_find_tensor(m->gguf, name);
    if (*idx < 0)
        return flags & MEMRA_W_REQUIRED ? memra__model_fail(m, MEMRA_E_FORMAT, "missing tensor '%s'", name)
                                        : MEMRA_OK;
    memra_gguf_tensor_shape(m->gguf, *idx, ne);
    if (!shape_ok(ne, n_dims, shape)) {
        char hs[96], ws[96];
        fmt_shape(hs, sizeof hs, 4, ne);
        fmt_shape(ws, sizeof ws, n_dims, shape);
        return memra__model_fail(m, MEMRA_E_FORMAT, "tensor '%s' has shape %s, expected %s", name, hs, ws);
    }
    return MEMRA_OK;
}

memra_status_t memra__w_get(memra_model_t *m, int32_t stage, memra_weight_t *w, unsigned flags, int n_dims,
                            const int64_t *shape, const char *fmt, ...)
{
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    memset(w, 0, sizeof *w);
    int64_t i, ne[4];
    memra_status_t s = lookup(m, name, flags, n_dims, shape, ne, &i);
    if (s || i < 0)
        return s;
    memra_type_t t = memra_gguf_tensor_type(m->gguf, i);
    if (!memra__quant_can_compute(t))
        return memra__model_fail(m, MEMRA_E_UNSUPPORTED, "tensor '%s' has type %s, which memra cannot compute",
                                 name, memra_type_name(t));
    m->tensor_used[i] = true;
    w->type = t;
    memcpy(w->ne, ne, sizeof ne);
    w->nb1 = memra__row_bytes(t, ne[0]);
    w->nb2 = w->nb1 * (size_t)ne[1];
    return place(m, stage, memra_gguf_tensor_data(m->gguf, i), (size_t)memra_gguf_tensor_nbytes(m->gguf, i),
                 &w->data);
}

memra_status_t memra__w_vec(memra_model_t *m, int32_t stage, const float **out, unsigned flags, int64_t n,
                            const char *fmt, ...)
{
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    *out = NULL;
    int64_t i, ne[4];
    memra_status_t s = lookup(m, name, flags, 1, &n, ne, &i);
    if (s || i < 0)
        return s;
    memra_type_t t = memra_gguf_tensor_type(m->gguf, i);
    const void *src = memra_gguf_tensor_data(m->gguf, i);
    m->tensor_used[i] = true;
    if (t == MEMRA_TYPE_F32 && ((uintptr_t)src % sizeof(float)) == 0)
        return place(m, stage, src, (size_t)n * sizeof(float), (const void **)out);
    /* Converted vectors need their own storage on every backend. */
    if (!memra__quant_can_compute(t) || n % memra_type_block_size(t) != 0)
        return memra__model_fail(m, MEMRA_E_UNSUPPORTED, "tensor '%s' has type %s (expected a float vector)",
                                 name, memra_type_name(t));
    float *tmp = malloc((size_t)n * sizeof *tmp);
    if (!tmp)
        return memra__model_fail(m, MEMRA_E_NOMEM, "out of memory converting '%s'", name);
    memra__dequantize_row(t, src, tmp, n);
    memra__stage_t *st = &m->stages[stage];
    void *p = st->be->iface->alloc(st->be, (size_t)n * sizeof(float));
    s = p ? track(m, st, p) : memra__model_fail(m, MEMRA_E_NOMEM, "cannot allocate '%s'", name);
    if (!s && (s = st->be->iface->upload(st->be, p, tmp, (size_t)n * sizeof(float))))
        memra__model_fail(m, s, "upload of '%s' failed", name);
    free(tmp);
    if (!s) {
        st->weight_bytes += (size_t)n * sizeof(float); /* counted like every other placed weight */
        *out = p;
    }
    return s;
}

void memra__w_skip_layer(memra_model_t *m, int32_t il)
{
    char prefix[32];
    int n = snprintf(prefix, sizeof prefix, "blk.%d.", il);
    for (int64_t i = 0; i < memra_gguf_n_tensors(m->gguf); i++)
        if (strncmp(memra_gguf_tensor_name(m->gguf, i), prefix, (size_t)n) == 0)
            m->tensor_used[i] = true;
}

int32_t memra__stage_of_layer(const memra_model_t *m, int32_t il)
{
    for (int32_t s = 0; s < m->n_stages; s++)
        if (il >= m->stages[s].layer0 && il < m->stages[s].layer1)
            return s;
    return m->n_stages - 1;
}

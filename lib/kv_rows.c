/* KV cache rows of the forwards (lib/kv_rows.h). */
#include "kv_rows.h"

#include <stdlib.h>

#include "quant.h"

memra_type_t memra__kv_type(const memra_cache_t *c, memra__kv_part_t part)
{
    return part == MEMRA__KV_K ? c->type_k : c->type_v;
}

static int64_t row_floats(const memra_cache_t *c, int32_t il, memra__kv_part_t part)
{
    const memra__layer_cache_t *lc = &c->model->layer_cache[il];
    return part == MEMRA__KV_K ? lc->k_floats : lc->v_floats;
}

size_t memra__kv_row_bytes(const memra_cache_t *c, int32_t il, memra__kv_part_t part)
{
    return memra__row_bytes(memra__kv_type(c, part), row_floats(c, il, part));
}

static void *rows_at(const memra_cache_t *c, int32_t il, memra__kv_part_t part, int64_t pos)
{
    char *base = part == MEMRA__KV_K ? c->k[il] : c->v[il];
    return base + (size_t)pos * memra__kv_row_bytes(c, il, part);
}

float *memra__kv_dst(memra__run_t *r, int32_t il, memra__kv_part_t part, float *scratch)
{
    /* (a recorded step's rows move with the position: they go through
     * kv_store, which reads it on the device) */
    if (r->n_seg == 1 && memra__kv_type(r->seg[0].c, part) == MEMRA_TYPE_F32 && !r->recorded)
        return rows_at(r->seg[0].c, il, part, r->seg[0].pos0);
    return scratch;
}

/* Appends to A the kv_store items of each segment's rows of SRC (one
 * part of layer IL) that need one (an F32 cache's rows computed in place
 * need none). */
static int32_t kv_items(memra__run_t *r, int32_t il, memra__kv_part_t part, const float *src, int64_t src_stride,
                        memra_kv_store_args_t *a, int32_t n)
{
    for (int32_t i = 0; i < r->n_seg; i++) {
        const memra__seg_t *s = &r->seg[i];
        const memra_cache_t *c = s->c;
        const int64_t w = row_floats(c, il, part);
        void *dst = rows_at(c, il, part, s->pos0);
        const float *from = src + (int64_t)s->row0 * src_stride;
        const memra_type_t type = memra__kv_type(c, part);
        if (type == MEMRA_TYPE_F32 && from == dst && src_stride == w)
            continue; /* computed in place (memra__kv_dst) */
        a[n++] = (memra_kv_store_args_t){.src = from, .src_stride = src_stride, .dst = dst,
                                         .dst_row_bytes = memra__kv_row_bytes(c, il, part), .type = type,
                                         .rows = s->n, .cols = w,
                                         .pos_dev = r->recorded ? r->pos + s->row0 : NULL, .pos = s->pos0};
    }
    return n;
}

memra_status_t memra__kv_put(memra__run_t *r, int32_t il, memra__kv_part_t part, const float *src,
                             int64_t src_stride)
{
    /* one kv_store per segment (an F32 cache's is a copy), all in one
     * batched call: a backend may store a step's rows in one launch */
    memra_kv_store_args_t a[MEMRA_MAX_BATCH];
    if (r->n_seg > MEMRA_MAX_BATCH)
        return memra__fail(r->be->err, MEMRA_E_INTERNAL, "kv_put: %d segments", (int)r->n_seg);
    return memra__kv_store_batch(r->be, a, kv_items(r, il, part, src, src_stride, a, 0));
}

/* K's and V's items in one batched call while they fit one (a backend's
 * batched store: one launch for both, each row converted as the one-item
 * store converts it). MEMRA_KV_PAIR=0: one call each. */
static bool kv_pair(void)
{
    static int pair = -1;
    if (pair < 0) {
        const char *e = getenv("MEMRA_KV_PAIR");
        pair = !(e && e[0] == '0');
    }
    return pair;
}

memra_status_t memra__kv_put_kv(memra__run_t *r, int32_t il, const float *k, int64_t k_stride, const float *v,
                                int64_t v_stride)
{
    if (!kv_pair() || 2 * r->n_seg > MEMRA_MAX_BATCH) {
        MEMRA__TRY(memra__kv_put(r, il, MEMRA__KV_K, k, k_stride));
        return memra__kv_put(r, il, MEMRA__KV_V, v, v_stride);
    }
    memra_kv_store_args_t a[MEMRA_MAX_BATCH];
    const int32_t n = kv_items(r, il, MEMRA__KV_K, k, k_stride, a, 0);
    return memra__kv_store_batch(r->be, a, kv_items(r, il, MEMRA__KV_V, v, v_stride, a, n));
}

bool memra__kv_put_kv_with(memra__run_t *r, int32_t il, const float *k, int64_t k_stride, const float *v,
                           int64_t v_stride, memra_qk_args_t *qk, memra_kv_store_args_t *items)
{
    if (r->n_seg > 1 || !kv_pair()) /* (MEMRA_KV_PAIR=0: the two calls of memra__kv_put_kv) */
        return false;
    memra_kv_store_args_t a[2];
    int32_t n = kv_items(r, il, MEMRA__KV_K, k, k_stride, a, 0);
    n = kv_items(r, il, MEMRA__KV_V, v, v_stride, a, n);
    if (n > MEMRA_QK_MAX_STORES)
        return false;
    for (int32_t i = 0; i < n; i++)
        items[i] = a[i];
    qk->store = items;
    qk->n_store = n;
    return true;
}

void memra__kv_attn(const memra_cache_t *c, int32_t il, memra_attn_args_t *a)
{
    a->k_cache = c->k[il];
    a->v_cache = c->v[il];
    a->k_type = c->type_k;
    a->v_type = c->type_v;
    a->k_row_bytes = memra__kv_row_bytes(c, il, MEMRA__KV_K);
    a->v_row_bytes = memra__kv_row_bytes(c, il, MEMRA__KV_V);
    a->kv_stride = c->model->layer_cache[il].k_floats;
}

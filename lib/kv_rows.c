/* KV cache rows of the forwards (lib/kv_rows.h). */
#include "kv_rows.h"

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
    if (r->n_seg == 1 && memra__kv_type(r->seg[0].c, part) == MEMRA_TYPE_F32)
        return rows_at(r->seg[0].c, il, part, r->seg[0].pos0);
    return scratch;
}

memra_status_t memra__kv_put(memra__run_t *r, int32_t il, memra__kv_part_t part, const float *src,
                             int64_t src_stride)
{
    /* one kv_store per segment (an F32 cache's is a copy), all in one
     * batched call: a backend may store a step's rows in one launch */
    memra_kv_store_args_t a[MEMRA_MAX_BATCH];
    int32_t n = 0;
    if (r->n_seg > MEMRA_MAX_BATCH)
        return memra__fail(r->be->err, MEMRA_E_INTERNAL, "kv_put: %d segments", (int)r->n_seg);
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
                                         .rows = s->n, .cols = w};
    }
    return memra__kv_store_batch(r->be, a, n);
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

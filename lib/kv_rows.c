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
    for (int32_t i = 0; i < r->n_seg; i++) {
        const memra__seg_t *s = &r->seg[i];
        const memra_cache_t *c = s->c;
        const int64_t w = row_floats(c, il, part);
        void *dst = rows_at(c, il, part, s->pos0);
        const float *from = src + (int64_t)s->row0 * src_stride;
        const memra_type_t type = memra__kv_type(c, part);
        if (type == MEMRA_TYPE_F32 && from == dst && src_stride == w)
            continue;
        memra_status_t st;
        if (type == MEMRA_TYPE_F32 && src_stride == w) { /* one contiguous block: a plain copy */
            st = r->ops->copy(r->be, dst, from, (size_t)(s->n * w) * sizeof(float));
        } else if (type == MEMRA_TYPE_F32) {
            const memra_ew_args_t e = {.op = MEMRA_EW_COPY, .y = dst, .a = from, .rows = s->n, .cols = w,
                                       .ys = w, .as = src_stride};
            st = r->ops->elementwise(r->be, &e);
        } else {
            const memra_kv_store_args_t a = {.src = from, .src_stride = src_stride, .dst = dst,
                                             .dst_row_bytes = memra__kv_row_bytes(c, il, part), .type = type,
                                             .rows = s->n, .cols = w};
            st = r->ops->kv_store(r->be, &a);
        }
        if (st)
            return st;
    }
    return MEMRA_OK;
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

/* Per-head RMS norm + rope of q and k, and a norm-only v (memra_qk_args_t,
 * lib/backend.h): validation, and the sequence of separate ops that
 * defines it. The CPU reference always runs the sequence; the CUDA backend
 * runs every part in one launch (four launches become one in every
 * attention layer of qwen35, five in gemma4's). */
#include "backend.h"

static memra_status_t check(memra__backend_t *be, const memra_qk_args_t *a, bool *none)
{
    *none = false;
    if (!a || a->n_parts < 1 || a->n_parts > MEMRA_QK_MAX_PARTS)
        return memra__fail(be->err, MEMRA_E_INVALID, "qk_norm_rope: 1 to %d parts", MEMRA_QK_MAX_PARTS);
    memra_rope_args_t r = a->rope;
    for (int p = 0; p < a->n_parts; p++) {
        const memra_qk_part_t *q = &a->part[p];
        r.x = q->dst;
        r.n_heads = q->n_heads;
        r.head_stride = q->dst_head_stride;
        r.token_stride = q->dst_token_stride;
        bool no_rope; /* a part with no rotated dims still gets its norm */
        memra_status_t st = memra__check_rope(be, &r, &no_rope); /* the shape, also of a norm-only part */
        if (st)
            return st;
        if (r.n_tokens == 0 || q->n_heads == 0)
            continue;
        if (!q->src || !q->dst || q->src_head_stride < r.head_dim || q->dst_head_stride < r.head_dim ||
            (r.n_tokens > 1 && (q->src_token_stride < q->n_heads * q->src_head_stride ||
                                q->dst_token_stride < q->n_heads * q->dst_head_stride)))
            return memra__fail(be->err, MEMRA_E_INVALID, "qk_norm_rope: part %d lacks src or has strides below its heads", p);
    }
    if (a->n_store < 0 || a->n_store > MEMRA_QK_MAX_STORES || (a->n_store && !a->store))
        return memra__fail(be->err, MEMRA_E_INVALID, "qk_norm_rope: %d stores (0 to %d)", a->n_store,
                           MEMRA_QK_MAX_STORES);
    for (int i = 0; i < a->n_store; i++) {
        bool skip;
        memra_status_t st = memra__check_kv_store(be, &a->store[i], &skip);
        if (st)
            return st;
    }
    *none = a->rope.n_tokens == 0;
    return MEMRA_OK;
}

/* norm over the part's head rows (one call when heads and tokens form one
 * stride, else one call per token), then rope unless the part is no_rope */
static memra_status_t sequence(memra__backend_t *be, const memra_qk_args_t *a)
{
    const memra__backend_i *ops = be->iface;
    const int64_t n = a->rope.n_tokens, hd = a->rope.head_dim;
    for (int p = 0; p < a->n_parts; p++) {
        const memra_qk_part_t *q = &a->part[p];
        if (q->n_heads == 0)
            continue;
        const bool flat = n == 1 || (q->src_token_stride == q->n_heads * q->src_head_stride &&
                                     q->dst_token_stride == q->n_heads * q->dst_head_stride);
        for (int64_t t = 0; t < (flat ? 1 : n); t++) {
            memra_status_t st = ops->norm(be, MEMRA_NORM_RMS, q->src + t * q->src_token_stride, q->src_head_stride,
                                          q->norm_w, q->dst + t * q->dst_token_stride, q->dst_head_stride,
                                          (flat ? n : 1) * q->n_heads, hd, a->eps);
            if (st)
                return st;
        }
        if (q->no_rope)
            continue;
        memra_rope_args_t r = a->rope;
        r.x = q->dst;
        r.n_heads = q->n_heads;
        r.head_stride = q->dst_head_stride;
        r.token_stride = q->dst_token_stride;
        memra_status_t st = ops->rope(be, &r);
        if (st)
            return st;
    }
    return MEMRA_OK;
}

memra_status_t memra__qk_norm_rope(memra__backend_t *be, const memra_qk_args_t *a)
{
    bool none;
    memra_status_t st = check(be, a, &none);
    if (st || none)
        return st;
    if (be->iface->qk_norm_rope) {
        bool done = false;
        st = be->iface->qk_norm_rope(be, a, &done);
        if (st || done)
            return st;
        if (a->n_store) { /* the backend's step without the stores, then the stores */
            memra_qk_args_t b = *a;
            b.n_store = 0;
            st = be->iface->qk_norm_rope(be, &b, &done);
            if (!st && done)
                st = memra__kv_store_batch(be, a->store, a->n_store);
            if (st || done)
                return st;
        }
    }
    st = sequence(be, a);
    return st || !a->n_store ? st : memra__kv_store_batch(be, a->store, a->n_store);
}

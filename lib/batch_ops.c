/* Batched per-sequence ops (lib/backend.h): a step of several sequences
 * runs each layer's KV write, attention and Gated DeltaNet step as one call
 * over the sequences instead of one per sequence, so that a backend can
 * launch them together (CUDA: one kernel over every one-token item). The
 * driver validates everything first, then hands the backend's batched slot
 * what it takes and runs the rest one by one, exactly as before. */
#include <stdlib.h>
#include <string.h>

#include "batch_ops.h"
#include "quant.h"

bool memra__ranges_overlap(const void *p, size_t n, const void *q, size_t m)
{
    const uintptr_t a = (uintptr_t)p, b = (uintptr_t)q;
    return n > 0 && m > 0 && a < b + m && b < a + n;
}

/* A written range of item ITEM: bytes [lo, hi). */
typedef struct wrange {
    uintptr_t lo, hi;
    int32_t item;
} wrange_t;

static int wrange_cmp(const void *x, const void *y)
{
    const wrange_t *a = x, *b = y;
    return a->lo < b->lo ? -1 : a->lo > b->lo;
}

/* No range one item writes overlaps one another item writes (the slots run
 * items in any order, or at once); an item's own ranges are its op's
 * business. The ranges sorted by start, a range overlaps an earlier one of
 * another item iff it starts below the largest end among those: the sweep
 * keeps the largest end and the largest of the other items' ends. 64 Gated
 * DeltaNet steps (six ranges each) cost ~10 us this way, ~35 us pairwise. */
static memra_status_t check_disjoint(memra__backend_t *be, const memra__batch_op_t *op, const unsigned char *items,
                                     int32_t n, const bool *none)
{
    wrange_t r[MEMRA_MAX_BATCH * MEMRA__BATCH_MAX_WRITES];
    int n_r = 0;
    for (int32_t i = 0; i < n; i++) {
        const void *p[MEMRA__BATCH_MAX_WRITES];
        size_t len[MEMRA__BATCH_MAX_WRITES];
        const int k = none[i] ? 0 : op->writes(items + (size_t)i * op->size, p, len);
        for (int j = 0; j < k; j++)
            if (len[j] > 0)
                r[n_r++] = (wrange_t){(uintptr_t)p[j], (uintptr_t)p[j] + len[j], i};
    }
    qsort(r, (size_t)n_r, sizeof r[0], wrange_cmp);
    wrange_t top = {0, 0, -1}, other = {0, 0, -1}; /* the largest end, and the largest of another item */
    for (int i = 0; i < n_r; i++) {
        const wrange_t *prev = top.item != r[i].item ? &top : &other;
        if (prev->item >= 0 && r[i].lo < prev->hi) {
            const int32_t a = prev->item < r[i].item ? prev->item : r[i].item;
            const int32_t b = prev->item < r[i].item ? r[i].item : prev->item;
            return memra__fail(be->err, MEMRA_E_INVALID, "%s: items %d and %d write overlapping memory", op->name,
                               (int)a, (int)b);
        }
        if (r[i].hi > top.hi || top.item < 0) {
            if (top.item != r[i].item)
                other = top;
            top = r[i];
        } else if (r[i].item != top.item && (r[i].hi > other.hi || other.item < 0)) {
            other = r[i];
        }
    }
    return MEMRA_OK;
}

memra_status_t memra__batch_run(memra__backend_t *be, const memra__batch_op_t *op, const void *items, int32_t n)
{
    if (n < 0 || n > MEMRA_MAX_BATCH || (n > 0 && !items) || op->size > MEMRA__BATCH_ITEM_MAX)
        return memra__fail(be->err, MEMRA_E_INVALID, "%s: %d items (need 0..%d)", op->name, (int)n, MEMRA_MAX_BATCH);
    const unsigned char *it = items;
    bool none[MEMRA_MAX_BATCH];
    int32_t n_live = 0;
    for (int32_t i = 0; i < n; i++) {
        memra_status_t st = op->check(be, it + (size_t)i * op->size, &none[i]);
        if (st)
            return memra__relay(be->err, st, "%s: item %d: ", op->name, (int)i);
        n_live += !none[i];
    }
    MEMRA__TRY(check_disjoint(be, op, it, n, none));
    if (n_live == 0)
        return MEMRA_OK;
    /* the items with work, back to back (a copy only when some have none) */
    _Alignas(max_align_t) unsigned char buf[MEMRA_MAX_BATCH * MEMRA__BATCH_ITEM_MAX];
    const unsigned char *live = it;
    if (n_live < n) {
        int32_t k = 0;
        for (int32_t i = 0; i < n; i++)
            if (!none[i])
                memcpy(buf + (size_t)k++ * op->size, it + (size_t)i * op->size, op->size);
        live = buf;
    }
    bool done[MEMRA_MAX_BATCH] = {false};
    if (op->slot && n_live > 1)
        MEMRA__TRY(op->slot(be, live, n_live, done));
    for (int32_t i = 0; i < n_live; i++)
        if (!done[i])
            MEMRA__TRY(op->one(be, live + (size_t)i * op->size));
    return MEMRA_OK;
}

/* ---- attention ---------------------------------------------------------------- */

static memra_status_t attn_check(memra__backend_t *be, const void *item, bool *none)
{
    return memra__check_attention(be, item, none);
}

static int attn_writes(const void *item, const void **p, size_t *n)
{
    const memra_attn_args_t *a = item;
    p[0] = a->out;
    n[0] = (size_t)(a->n_tokens * a->n_head * a->head_dim) * sizeof(float);
    return 1;
}

static memra_status_t attn_one(memra__backend_t *be, const void *item)
{
    return be->iface->attention(be, item);
}

static memra_status_t attn_slot(memra__backend_t *be, const void *items, int32_t n, bool *done)
{
    return be->iface->attention_batch(be, items, n, done);
}

memra_status_t memra__attention_batch(memra__backend_t *be, const memra_attn_args_t *a, int32_t n)
{
    _Static_assert(sizeof *a <= MEMRA__BATCH_ITEM_MAX, "attention args exceed the batch item buffer");
    if (n == 1) /* one sequence: the one-item slot, as always */
        return be->iface->attention(be, a);
    const memra__batch_op_t op = {"attention_batch", sizeof *a, attn_check, attn_writes,
                                  be->iface->attention_batch ? attn_slot : NULL, attn_one};
    return memra__batch_run(be, &op, a, n);
}

/* ---- kv_store ------------------------------------------------------------------ */

static memra_status_t kv_check(memra__backend_t *be, const void *item, bool *none)
{
    return memra__check_kv_store(be, item, none);
}

static int kv_writes(const void *item, const void **p, size_t *n)
{
    const memra_kv_store_args_t *a = item;
    p[0] = a->dst;
    n[0] = (size_t)(a->rows - 1) * a->dst_row_bytes + memra__row_bytes(a->type, a->cols);
    return 1;
}

static memra_status_t kv_one(memra__backend_t *be, const void *item)
{
    return be->iface->kv_store(be, item);
}

static memra_status_t kv_slot(memra__backend_t *be, const void *items, int32_t n, bool *done)
{
    return be->iface->kv_store_batch(be, items, n, done);
}

memra_status_t memra__kv_store_batch(memra__backend_t *be, const memra_kv_store_args_t *a, int32_t n)
{
    _Static_assert(sizeof *a <= MEMRA__BATCH_ITEM_MAX, "kv_store args exceed the batch item buffer");
    if (n == 1)
        return be->iface->kv_store(be, a);
    const memra__batch_op_t op = {"kv_store_batch", sizeof *a, kv_check, kv_writes,
                                  be->iface->kv_store_batch ? kv_slot : NULL, kv_one};
    return memra__batch_run(be, &op, a, n);
}

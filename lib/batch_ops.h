/* The driver shared by the batched per-sequence ops (memra__attention_batch,
 * memra__kv_store_batch, memra__gdn_batch in lib/backend.h): one op
 * described by its item size and callbacks, run over N items. Not
 * installed. */
#ifndef MEMRA_BATCH_OPS_H
#define MEMRA_BATCH_OPS_H

#include "backend.h"

#define MEMRA__BATCH_MAX_WRITES 6 /* memory ranges one item may write */
#define MEMRA__BATCH_ITEM_MAX 512 /* bytes of the largest item type */

typedef struct memra__batch_op {
    const char *name; /* in messages: "attention_batch: ..." */
    size_t size;      /* bytes of one item, <= MEMRA__BATCH_ITEM_MAX */
    /* the one-item slot's validation: an error, or *none when the item has
     * nothing to do */
    memra_status_t (*check)(memra__backend_t *be, const void *item, bool *none);
    /* the ranges a validated item writes (outputs, states, scratch):
     * returns how many, at most MEMRA__BATCH_MAX_WRITES */
    int (*writes)(const void *item, const void **p, size_t *n);
    /* the backend's batched slot (NULL: none) */
    memra_status_t (*slot)(memra__backend_t *be, const void *items, int32_t n, bool *done);
    /* the one-item path of a validated item */
    memra_status_t (*one)(memra__backend_t *be, const void *item);
} memra__batch_op_t;

/* Validates the N (0..MEMRA_MAX_BATCH) items of ITEMS (each with
 * op->check, then no two items' written ranges overlap), then runs them:
 * the backend's slot over the items that have work (when there are two or
 * more), op->one for every item it leaves undone. A validation error
 * queues nothing; the message names the item. */
memra_status_t memra__batch_run(memra__backend_t *be, const memra__batch_op_t *op, const void *items, int32_t n);

#endif

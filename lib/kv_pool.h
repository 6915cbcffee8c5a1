/* The paged KV pool (docs/BATCHING.md, "Paged KV pool"): with a pool, a
 * cache's K and V rows of a layer live in an area, a reserved address
 * range of its capacity in which physical pages of the stage's pool are
 * mapped as the cache grows, so kernels address rows as before. Pages
 * return to the pool when a cache is cleared or freed. A fork maps the
 * parent's whole pages below its position too (a page counts its
 * mappings) and copies the partial one; a write into a page mapped more
 * than once first gives the writer its own copy. */
#ifndef MEMRA_KV_POOL_H
#define MEMRA_KV_POOL_H

#include <stdint.h>

#include "backend.h"

typedef struct memra__kv_pool {
    memra__backend_t *be;
    void *arena;
    size_t page;       /* bytes */
    int64_t n_pages;
    int32_t *refs;     /* mappings per page */
    int64_t *free_ids; /* a stack of the unmapped pages */
    int64_t n_free;
} memra__kv_pool_t;

typedef struct memra__kv_area {
    uint8_t *va;       /* NULL: no area */
    size_t bytes;      /* reserved: whole pages */
    int64_t n_pages;
    int64_t *ids;      /* the page mapped at each page of the range, or -1 */
} memra__kv_area_t;

/* A pool of BYTES (rounded down to whole pages) in pages of PAGE_REQ bytes
 * rounded up to the backend's granularity (0: the granularity).
 * MEMRA_E_UNSUPPORTED when the backend has no paged memory. */
memra_status_t memra__kv_pool_create(memra__backend_t *be, int64_t bytes, int64_t page_req, memra__kv_pool_t **out);
void memra__kv_pool_free(memra__kv_pool_t *p);
int64_t memra__kv_pool_used(const memra__kv_pool_t *p);

/* Reserves A for BYTES of rows (nothing mapped). */
memra_status_t memra__kv_area_reserve(memra__kv_pool_t *p, memra__kv_area_t *a, size_t bytes);
/* Unmaps every page (back to the pool when no other area maps it). */
void memra__kv_area_clear(memra__kv_pool_t *p, memra__kv_area_t *a);
/* Clears and releases the range. */
void memra__kv_area_free(memra__kv_pool_t *p, memra__kv_area_t *a);
/* Makes bytes [FROM, END) mapped and writable by A alone (bytes below FROM
 * are mapped already: rows are written in order)
 * (a page shared with another area is copied first; the caller has
 * synchronized the work that reads A). Pages taken for a call that fails
 * go back: A is as it was. MEMRA_E_FULL when the pool runs out. */
memra_status_t memra__kv_area_ensure(memra__kv_pool_t *p, memra__kv_area_t *a, size_t from, size_t end);
/* Pages memra__kv_area_ensure(P, A, FROM, END) takes from the pool, and
 * in *SHARED whether any of them replaces a shared page (a copy); pages
 * below FROM's are taken as mapped. FROM == END: the pages of [0, END)
 * that are not mapped. */
int64_t memra__kv_area_need(const memra__kv_pool_t *p, const memra__kv_area_t *a, size_t from, size_t end,
                            bool *shared);
/* Pages of [LO, END) that are not mapped. */
int64_t memra__kv_area_missing(const memra__kv_pool_t *p, const memra__kv_area_t *a, size_t lo, size_t end);
/* Unmaps the pages wholly below byte LO (a sliding window's rows no step
 * reads again), from the highest down to the first that is not mapped. */
void memra__kv_area_drop_below(memra__kv_pool_t *p, memra__kv_area_t *a, size_t lo);
/* Maps SRC's pages wholly below byte END into DST (an empty area of the
 * same pool), shared, and copies the bytes of the page END falls in. */
memra_status_t memra__kv_area_fork(memra__kv_pool_t *p, memra__kv_area_t *dst, const memra__kv_area_t *src,
                                   size_t end);

#endif

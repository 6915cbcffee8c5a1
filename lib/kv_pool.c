/* The paged KV pool (lib/kv_pool.h). */
#include <stdlib.h>

#include "internal.h"
#include "kv_pool.h"

memra_status_t memra__kv_pool_create(memra__backend_t *be, int64_t bytes, int64_t page_req, memra__kv_pool_t **out)
{
    *out = NULL;
    const memra__backend_i *i = be->iface;
    if (!i->vm_granularity || !i->vm_arena_create || !i->vm_map)
        return memra__fail(be->err, MEMRA_E_UNSUPPORTED, "kv pool: the %s backend has no paged memory", i->name);
    const size_t g = i->vm_granularity(be);
    if (g == 0)
        return memra__fail(be->err, MEMRA_E_UNSUPPORTED, "kv pool: the %s device has no paged memory", i->name);
    const size_t page = page_req > 0 ? ((size_t)page_req + g - 1) / g * g : g;
    const int64_t n = bytes / (int64_t)page;
    if (n < 1)
        return memra__fail(be->err, MEMRA_E_INVALID, "kv pool: %lld bytes hold no page of %zu bytes",
                           (long long)bytes, page);
    memra__kv_pool_t *p = calloc(1, sizeof *p);
    if (!p || !(p->refs = calloc((size_t)n, sizeof *p->refs)) || !(p->free_ids = malloc((size_t)n * sizeof *p->free_ids))) {
        memra__kv_pool_free(p);
        return memra__fail(be->err, MEMRA_E_NOMEM, "kv pool: out of memory");
    }
    p->be = be;
    p->page = page;
    p->n_pages = n;
    for (int64_t k = 0; k < n; k++)
        p->free_ids[k] = n - 1 - k; /* page 0 on top */
    p->n_free = n;
    p->arena = i->vm_arena_create(be, page, n);
    if (!p->arena) {
        memra__kv_pool_free(p);
        return memra__fail(be->err, MEMRA_E_NOMEM, "kv pool: cannot create %lld pages of %zu bytes on %s",
                           (long long)n, page, i->name);
    }
    *out = p;
    return MEMRA_OK;
}

void memra__kv_pool_free(memra__kv_pool_t *p)
{
    if (!p)
        return;
    if (p->arena)
        p->be->iface->vm_arena_free(p->be, p->arena);
    free(p->refs);
    free(p->free_ids);
    free(p);
}

int64_t memra__kv_pool_used(const memra__kv_pool_t *p)
{
    return p ? p->n_pages - p->n_free : 0;
}

memra_status_t memra__kv_area_reserve(memra__kv_pool_t *p, memra__kv_area_t *a, size_t bytes)
{
    *a = (memra__kv_area_t){0};
    const int64_t n = (int64_t)((bytes + p->page - 1) / p->page);
    if (n == 0)
        return MEMRA_OK;
    a->ids = malloc((size_t)n * sizeof *a->ids);
    if (!a->ids)
        return memra__fail(p->be->err, MEMRA_E_NOMEM, "kv pool: out of memory");
    a->va = p->be->iface->vm_reserve(p->be, (size_t)n * p->page);
    if (!a->va) {
        free(a->ids);
        a->ids = NULL;
        return memra__fail(p->be->err, MEMRA_E_NOMEM, "kv pool: cannot reserve %lld pages of address space",
                           (long long)n);
    }
    for (int64_t k = 0; k < n; k++)
        a->ids[k] = -1;
    a->n_pages = n;
    a->bytes = (size_t)n * p->page;
    return MEMRA_OK;
}

static void put_page(memra__kv_pool_t *p, int64_t id)
{
    if (--p->refs[id] == 0)
        p->free_ids[p->n_free++] = id;
}

static int64_t take_page(memra__kv_pool_t *p)
{
    if (p->n_free == 0)
        return -1;
    const int64_t id = p->free_ids[--p->n_free];
    p->refs[id] = 1;
    return id;
}

static void unmap_at(memra__kv_pool_t *p, memra__kv_area_t *a, int64_t k)
{
    if (a->ids[k] < 0)
        return;
    p->be->iface->vm_unmap(p->be, p->arena, a->va + (size_t)k * p->page);
    put_page(p, a->ids[k]);
    a->ids[k] = -1;
}

void memra__kv_area_clear(memra__kv_pool_t *p, memra__kv_area_t *a)
{
    for (int64_t k = 0; a->va && k < a->n_pages; k++)
        unmap_at(p, a, k);
}

void memra__kv_area_free(memra__kv_pool_t *p, memra__kv_area_t *a)
{
    if (!a->va)
        return;
    memra__kv_area_clear(p, a);
    p->be->iface->vm_unreserve(p->be, a->va, a->bytes);
    free(a->ids);
    *a = (memra__kv_area_t){0};
}

int64_t memra__kv_area_need(const memra__kv_pool_t *p, const memra__kv_area_t *a, size_t from, size_t end,
                            bool *shared)
{
    *shared = false;
    if (!a->va || end == 0)
        return 0;
    const int64_t last = (int64_t)((end - 1) / p->page), first = from < end ? (int64_t)(from / p->page) : 0;
    int64_t need = 0;
    /* from FROM's page on: the rows below FROM were written, so their pages are mapped (the
     * step's cost stays the pages it writes, not the cache's length) */
    for (int64_t k = first; k <= last && k < a->n_pages; k++) {
        const bool cow = from < end && a->ids[k] >= 0 && p->refs[a->ids[k]] > 1;
        need += a->ids[k] < 0 || cow;
        *shared = *shared || cow;
    }
    return need;
}

int64_t memra__kv_area_missing(const memra__kv_pool_t *p, const memra__kv_area_t *a, size_t lo, size_t end)
{
    int64_t n = 0;
    for (int64_t k = (int64_t)(lo / p->page); a->va && lo < end && k <= (int64_t)((end - 1) / p->page); k++)
        n += a->ids[k] < 0;
    return n;
}

void memra__kv_area_drop_below(memra__kv_pool_t *p, memra__kv_area_t *a, size_t lo)
{
    for (int64_t k = (int64_t)(lo / p->page) - 1; a->va && k >= 0 && a->ids[k] >= 0; k--)
        unmap_at(p, a, k);
}

/* Maps pool page ID at page K of A; the page goes back on failure. */
static memra_status_t map_at(memra__kv_pool_t *p, memra__kv_area_t *a, int64_t k, int64_t id)
{
    memra_status_t st = p->be->iface->vm_map(p->be, p->arena, id, a->va + (size_t)k * p->page);
    if (st) {
        put_page(p, id);
        return st;
    }
    a->ids[k] = id;
    return MEMRA_OK;
}

memra_status_t memra__kv_area_ensure(memra__kv_pool_t *p, memra__kv_area_t *a, size_t from, size_t end)
{
    if (!a->va || from >= end)
        return MEMRA_OK;
    if (end > a->bytes)
        return memra__fail(p->be->err, MEMRA_E_INVALID, "kv pool: bytes up to %zu past the area's %zu", end, a->bytes);
    const int64_t last = (int64_t)((end - 1) / p->page), first = from < end ? (int64_t)(from / p->page) : 0;
    /* every page first, so that running out changes nothing */
    bool shared;
    const int64_t need = memra__kv_area_need(p, a, from, end, &shared);
    if (need > p->n_free)
        return memra__fail(p->be->err, MEMRA_E_FULL, "the KV pool is exhausted: %lld more page(s) of %zu bytes "
                           "needed, %lld of %lld free (free or clear caches, or load with a larger kv_pool_bytes)",
                           (long long)need, p->page, (long long)p->n_free, (long long)p->n_pages);
    const memra__backend_i *i = p->be->iface;
    memra_status_t st = MEMRA_OK;
    for (int64_t k = first; k <= last && !st; k++) {
        if (a->ids[k] < 0) {
            st = map_at(p, a, k, take_page(p));
        } else if (p->refs[a->ids[k]] > 1) {
            /* copy-on-write: the page's bytes into a page of A's own, through
             * a scratch range, then swapped in at the same address */
            uint8_t *tmp = i->vm_reserve(p->be, p->page);
            const int64_t id = take_page(p);
            if (!tmp) {
                put_page(p, id);
                return memra__fail(p->be->err, MEMRA_E_NOMEM, "kv pool: cannot reserve a page of address space");
            }
            st = i->vm_map(p->be, p->arena, id, tmp);
            if (!st)
                st = i->copy(p->be, tmp, a->va + (size_t)k * p->page, p->page);
            if (!st)
                st = i->synchronize(p->be);
            i->vm_unmap(p->be, p->arena, tmp);
            i->vm_unreserve(p->be, tmp, p->page);
            if (!st) {
                unmap_at(p, a, k);
                st = map_at(p, a, k, id);
            } else {
                put_page(p, id);
            }
        }
    }
    return st;
}

memra_status_t memra__kv_area_fork(memra__kv_pool_t *p, memra__kv_area_t *dst, const memra__kv_area_t *src,
                                   size_t end)
{
    if (!src->va || end == 0)
        return MEMRA_OK;
    const int64_t full = (int64_t)(end / p->page);
    const size_t rest = end - (size_t)full * p->page;
    if (rest && p->n_free == 0)
        return memra__fail(p->be->err, MEMRA_E_FULL, "the KV pool is exhausted: no page for the fork's partial page");
    memra_status_t st = MEMRA_OK;
    for (int64_t k = 0; k < full && !st; k++) {
        if (src->ids[k] < 0)
            continue;
        p->refs[src->ids[k]]++;
        st = map_at(p, dst, k, src->ids[k]);
    }
    if (!st && rest && src->ids[full] >= 0) {
        st = map_at(p, dst, full, take_page(p));
        if (!st)
            st = p->be->iface->copy(p->be, dst->va + (size_t)full * p->page, src->va + (size_t)full * p->page, rest);
    }
    if (st)
        memra__kv_area_clear(p, dst);
    return st;
}

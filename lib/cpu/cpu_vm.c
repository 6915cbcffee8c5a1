/* Paged KV memory on the CPU backend (backend.h: vm_*): an arena is an
 * anonymous memory file (memfd) of its pages, a reserved range is
 * inaccessible address space, and mapping a page maps the file's page
 * there shared, so one page can back several caches' rows (the pool's
 * copy-on-write forks). Linux only: memfd_create and MAP_FIXED. */
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cpu_backend.h"

typedef struct cpu_arena {
    int fd;
    size_t page;
    int64_t n_pages;
} cpu_arena_t;

size_t memra__cpu_vm_granularity(memra__backend_t *be)
{
    (void)be;
    const long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (size_t)p : 4096;
}

void *memra__cpu_vm_arena_create(memra__backend_t *be, size_t page, int64_t n_pages)
{
    (void)be;
    cpu_arena_t *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->fd = memfd_create("memra-kv", MFD_CLOEXEC);
    /* the file is sparse: a page takes memory once written */
    if (a->fd < 0 || ftruncate(a->fd, (off_t)(page * (size_t)n_pages)) != 0) {
        if (a->fd >= 0)
            close(a->fd);
        free(a);
        return NULL;
    }
    a->page = page;
    a->n_pages = n_pages;
    return a;
}

void memra__cpu_vm_arena_free(memra__backend_t *be, void *arena)
{
    (void)be;
    cpu_arena_t *a = arena;
    if (a) {
        close(a->fd);
        free(a);
    }
}

void *memra__cpu_vm_reserve(memra__backend_t *be, size_t bytes)
{
    (void)be;
    void *p = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void memra__cpu_vm_unreserve(memra__backend_t *be, void *va, size_t bytes)
{
    (void)be;
    if (va)
        munmap(va, bytes);
}

memra_status_t memra__cpu_vm_map(memra__backend_t *be, void *arena, int64_t page, void *va)
{
    cpu_arena_t *a = arena;
    if (page < 0 || page >= a->n_pages)
        return memra__fail(be->err, MEMRA_E_INVALID, "cpu vm: page %lld outside the arena", (long long)page);
    void *p = mmap(va, a->page, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, a->fd, (off_t)((size_t)page * a->page));
    if (p == MAP_FAILED)
        return memra__fail(be->err, MEMRA_E_NOMEM, "cpu vm: mapping a KV page failed");
    return MEMRA_OK;
}

void memra__cpu_vm_unmap(memra__backend_t *be, void *arena, void *va)
{
    (void)be;
    cpu_arena_t *a = arena;
    /* back to reserved, inaccessible address space */
    mmap(va, a->page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
}

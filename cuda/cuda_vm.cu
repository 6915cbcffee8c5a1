/* Paged KV memory on the CUDA backend (backend.h: vm_*), through the
 * driver's virtual memory management (cuMemCreate, cuMemAddressReserve,
 * cuMemMap; the library links cudart only, so through the runtime's
 * driver entry points): an arena is one allocation handle per page,
 * created when the page is first mapped; a reserved range is device
 * address space; mapping a page maps its handle there read-write for the
 * backend's device. */
#include <stdlib.h>
#include <string.h>
#include <cuda.h>

#include "cuda_common.cuh"

namespace {

struct vm_fns {
    bool ok;
    CUresult (*granularity)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags);
    CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
    CUresult (*addr_free)(CUdeviceptr, size_t);
    CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
    CUresult (*release)(CUmemGenericAllocationHandle);
    CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
    CUresult (*unmap)(CUdeviceptr, size_t);
    CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
};

template <typename F> static bool entry(const char *name, F *out)
{
    void *p = NULL;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess || !p) {
        cudaGetLastError();
        return false;
    }
    *out = (F)p;
    return true;
}

static const vm_fns &fns(void)
{
    static vm_fns f = [] {
        vm_fns v;
        memset(&v, 0, sizeof v);
        v.ok = entry("cuMemGetAllocationGranularity", &v.granularity) && entry("cuMemAddressReserve", &v.reserve) &&
               entry("cuMemAddressFree", &v.addr_free) && entry("cuMemCreate", &v.create) &&
               entry("cuMemRelease", &v.release) && entry("cuMemMap", &v.map) && entry("cuMemUnmap", &v.unmap) &&
               entry("cuMemSetAccess", &v.set_access);
        return v;
    }();
    return f;
}

static CUmemAllocationProp prop_of(int device)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = device;
    return p;
}

struct cu_arena {
    int device;
    size_t page;
    int64_t n_pages;
    CUmemGenericAllocationHandle *h; /* 0: not created yet */
};

} // namespace

extern "C" size_t memra__cuda_vm_granularity(memra__backend_t *be)
{
    const vm_fns &f = fns();
    size_t g = 0;
    const CUmemAllocationProp p = prop_of(memra__cuda_ctx(be)->device);
    if (!f.ok || f.granularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS)
        return 0;
    return g;
}

extern "C" void *memra__cuda_vm_arena_create(memra__backend_t *be, size_t page, int64_t n_pages)
{
    cu_arena *a = (cu_arena *)calloc(1, sizeof *a);
    if (!a || !(a->h = (CUmemGenericAllocationHandle *)calloc((size_t)n_pages, sizeof *a->h))) {
        free(a);
        return NULL;
    }
    a->device = memra__cuda_ctx(be)->device;
    a->page = page;
    a->n_pages = n_pages;
    return a;
}

extern "C" void memra__cuda_vm_arena_free(memra__backend_t *be, void *arena)
{
    (void)be;
    cu_arena *a = (cu_arena *)arena;
    if (!a)
        return;
    for (int64_t i = 0; i < a->n_pages; i++)
        if (a->h[i])
            fns().release(a->h[i]);
    free(a->h);
    free(a);
}

extern "C" void *memra__cuda_vm_reserve(memra__backend_t *be, size_t bytes)
{
    const vm_fns &f = fns();
    const size_t g = memra__cuda_vm_granularity(be);
    CUdeviceptr p = 0;
    if (!f.ok || !g || f.reserve(&p, bytes, g, 0, 0) != CUDA_SUCCESS)
        return NULL;
    return (void *)p;
}

extern "C" void memra__cuda_vm_unreserve(memra__backend_t *be, void *va, size_t bytes)
{
    (void)be;
    if (va)
        fns().addr_free((CUdeviceptr)va, bytes);
}

extern "C" memra_status_t memra__cuda_vm_map(memra__backend_t *be, void *arena, int64_t page, void *va)
{
    const vm_fns &f = fns();
    cu_arena *a = (cu_arena *)arena;
    if (page < 0 || page >= a->n_pages)
        return memra__fail(be->err, MEMRA_E_INVALID, "cuda vm: page %lld outside the arena", (long long)page);
    const CUmemAllocationProp p = prop_of(a->device);
    if (!a->h[page] && f.create(&a->h[page], a->page, &p, 0) != CUDA_SUCCESS) {
        a->h[page] = 0;
        return memra__fail(be->err, MEMRA_E_NOMEM, "cuda vm: no device memory for a KV page of %zu bytes", a->page);
    }
    CUmemAccessDesc d;
    memset(&d, 0, sizeof d);
    d.location = p.location;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (f.map((CUdeviceptr)va, a->page, 0, a->h[page], 0) != CUDA_SUCCESS)
        return memra__fail(be->err, MEMRA_E_DEVICE, "cuda vm: cuMemMap of a KV page failed");
    if (f.set_access((CUdeviceptr)va, a->page, &d, 1) != CUDA_SUCCESS) {
        f.unmap((CUdeviceptr)va, a->page);
        return memra__fail(be->err, MEMRA_E_DEVICE, "cuda vm: cuMemSetAccess of a KV page failed");
    }
    return MEMRA_OK;
}

extern "C" void memra__cuda_vm_unmap(memra__backend_t *be, void *arena, void *va)
{
    (void)be;
    fns().unmap((CUdeviceptr)va, ((cu_arena *)arena)->page); /* an address nothing maps: an error, ignored */
}

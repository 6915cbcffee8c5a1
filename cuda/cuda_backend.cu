/* CUDA backend: device selection, memory, the engine's stream and cuBLAS
 * handle. Op kernels live in the other files of cuda/. */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "cuda_common.cuh"

extern "C" int memra__cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky "no device" error */
        return 0;
    }
    return n;
}

static memra_status_t check_device(int device)
{
    int n = memra__cuda_device_count();
    if (n == 0)
        return memra__fail(NULL, MEMRA_E_NO_DEVICE, "CUDA device %d requested, but no CUDA GPU is visible", device);
    if (device < 0 || device >= n)
        return memra__fail(NULL, MEMRA_E_NO_DEVICE, "CUDA device %d requested, but only %d device(s) exist", device, n);
    return MEMRA_OK;
}

extern "C" memra_status_t memra__cuda_device_info(int device, memra_engine_info_t *info)
{
    memra_status_t st = check_device(device);
    if (st)
        return st;
    cudaDeviceProp prop;
    MEMRA_CUDA_TRY((memra__backend_t *)NULL, cudaGetDeviceProperties(&prop, device));
    int prev = 0;
    cudaGetDevice(&prev);
    MEMRA_CUDA_TRY((memra__backend_t *)NULL, cudaSetDevice(device));
    size_t free_b = 0, total_b = 0;
    cudaError_t e = cudaMemGetInfo(&free_b, &total_b);
    cudaSetDevice(prev);
    MEMRA_CUDA_TRY((memra__backend_t *)NULL, e);
    info->sm_count = prop.multiProcessorCount;
    info->cc_major = prop.major;
    info->cc_minor = prop.minor;
    info->mem_total = total_b;
    info->mem_free = free_b;
    info->n_threads = 0;
    snprintf(info->device_name, sizeof info->device_name, "%s", prop.name);
    return MEMRA_OK;
}

static void *cu_alloc(memra__backend_t *be, size_t n)
{
    void *p = NULL;
    cudaSetDevice(memra__cuda_ctx(be)->device);
    if (cudaMalloc(&p, n ? n : 1) != cudaSuccess) {
        cudaGetLastError();
        memra__fail(be->err, MEMRA_E_NOMEM, "cuda: cudaMalloc of %zu bytes failed", n);
        return NULL;
    }
    return p;
}

static void cu_free(memra__backend_t *be, void *p)
{
    if (p) {
        cudaSetDevice(memra__cuda_ctx(be)->device);
        cudaFree(p);
    }
}

static memra_status_t cu_copy_kind(memra__backend_t *be, void *dst, const void *src, size_t n, cudaMemcpyKind kind)
{
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    if (!n)
        return MEMRA_OK;
    MEMRA_CUDA_TRY(be, cudaMemcpyAsync(dst, src, n, kind, c->stream));
    return MEMRA_OK;
}

static memra_status_t cu_upload(memra__backend_t *be, void *dst, const void *src, size_t n)
{
    memra_status_t st = cu_copy_kind(be, dst, src, n, cudaMemcpyHostToDevice);
    /* the host buffer may be reused as soon as we return */
    if (!st)
        MEMRA_CUDA_TRY(be, cudaStreamSynchronize(memra__cuda_ctx(be)->stream));
    return st;
}

static memra_status_t cu_download(memra__backend_t *be, void *dst, const void *src, size_t n)
{
    return cu_copy_kind(be, dst, src, n, cudaMemcpyDeviceToHost);
}

static memra_status_t cu_copy(memra__backend_t *be, void *dst, const void *src, size_t n)
{
    return cu_copy_kind(be, dst, src, n, cudaMemcpyDeviceToDevice);
}

static memra_status_t cu_sync(memra__backend_t *be)
{
    MEMRA_CUDA_TRY(be, cudaStreamSynchronize(memra__cuda_ctx(be)->stream));
    return MEMRA_OK;
}

void *memra__cuda_ws(memra__backend_t *be, size_t bytes)
{
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    if (bytes <= c->ws_size)
        return c->ws;
    /* grow by a quarter more than asked, so a slowly growing need does not
     * reallocate on every call; cudaFree waits for the ops still using it */
    size_t want = bytes + bytes / 4;
    want = (want + ((size_t)1 << 20) - 1) & ~(((size_t)1 << 20) - 1);
    cudaSetDevice(c->device);
    if (c->ws) {
        cudaStreamSynchronize(c->stream);
        cudaFree(c->ws);
    }
    c->ws = NULL;
    c->ws_size = 0;
    if (cudaMalloc(&c->ws, want) != cudaSuccess) {
        cudaGetLastError();
        c->ws = NULL;
        memra__fail(be->err, MEMRA_E_NOMEM, "cuda: workspace of %zu bytes: cudaMalloc failed", want);
        return NULL;
    }
    c->ws_size = want;
    return c->ws;
}

long memra__cuda_env_long(const char *name, long def)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return def;
    char *end;
    long r = strtol(v, &end, 10);
    return *end ? def : r;
}

static memra__backend_i make_iface(void)
{
    memra__backend_i i;
    memset(&i, 0, sizeof i);
    i.api_version = MEMRA_BACKEND_API_VERSION;
    i.name = "cuda";
    i.alloc = cu_alloc;
    i.free = cu_free;
    i.upload = cu_upload;
    i.download = cu_download;
    i.copy = cu_copy;
    i.synchronize = cu_sync;
    i.matmul = memra__cuda_matmul;
    i.get_rows = memra__cuda_get_rows;
    i.norm = memra__cuda_norm;
    i.elementwise = memra__cuda_elementwise;
    i.rope = memra__cuda_rope;
    i.attention = memra__cuda_attention;
    i.conv = memra__cuda_conv;
    i.delta = memra__cuda_delta;
    i.route = memra__cuda_route;
    i.moe = memra__cuda_moe;
    i.argmax = memra__cuda_argmax;
    return i;
}

static const memra__backend_i cuda_iface = make_iface();

extern "C" memra_status_t memra__cuda_backend_create(int device, memra__backend_t **out)
{
    *out = NULL;
    memra_status_t st = check_device(device);
    if (st)
        return st;
    memra__backend_t *be = (memra__backend_t *)calloc(1, sizeof *be);
    memra__cuda_ctx_t *c = (memra__cuda_ctx_t *)calloc(1, sizeof *c);
    if (!be || !c) {
        free(be);
        free(c);
        return memra__fail(NULL, MEMRA_E_NOMEM, "cuda backend: out of memory");
    }
    c->device = device;
    be->iface = &cuda_iface;
    be->ctx = c;
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess)
        e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        free(be);
        free(c);
        return memra__fail(NULL, MEMRA_E_DEVICE, "cuda device %d: %s", device, cudaGetErrorString(e));
    }
    if (cublasCreate(&c->cublas) != CUBLAS_STATUS_SUCCESS) {
        cudaStreamDestroy(c->stream);
        free(be);
        free(c);
        return memra__fail(NULL, MEMRA_E_DEVICE, "cuda device %d: cublasCreate failed", device);
    }
    cublasSetStream(c->cublas, c->stream);
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, device) == cudaSuccess)
        c->sm_count = prop.multiProcessorCount;
    /* argmax: 64 (value, index) partials and the answer; pinned host int */
    if (cudaMalloc(&c->argmax_part, 64 * 8 + 16) != cudaSuccess ||
        cudaMallocHost((void **)&c->argmax_host, sizeof(int32_t)) != cudaSuccess) {
        cudaGetLastError();
        cudaFree(c->argmax_part);
        cublasDestroy(c->cublas);
        cudaStreamDestroy(c->stream);
        free(be);
        free(c);
        return memra__fail(NULL, MEMRA_E_NOMEM, "cuda device %d: out of memory for the argmax buffers", device);
    }
    *out = be;
    return MEMRA_OK;
}

extern "C" void memra__cuda_backend_destroy(memra__backend_t *be)
{
    if (!be)
        return;
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    cudaSetDevice(c->device);
    cudaStreamSynchronize(c->stream);
    cublasDestroy(c->cublas);
    cudaStreamDestroy(c->stream);
    cudaFree(c->ws);
    cudaFree(c->argmax_part);
    cudaFreeHost(c->argmax_host);
    free(c);
    free(be);
}

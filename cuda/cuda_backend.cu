/* CUDA backend: device selection, memory, the engine's stream and cuBLAS
 * handle. Op kernels live in the other files of cuda/. */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include <cuda.h>
#include <nvtx3/nvToolsExt.h>

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

/* Portable: a pipeline's stages on other devices may copy into it too. */
extern "C" void *memra__cuda_host_alloc(int device, size_t bytes)
{
    void *p = NULL;
    int prev = -1;
    cudaGetDevice(&prev);
    if (cudaSetDevice(device) != cudaSuccess || cudaHostAlloc(&p, bytes, cudaHostAllocPortable) != cudaSuccess) {
        cudaGetLastError();
        p = NULL;
    }
    if (prev >= 0)
        cudaSetDevice(prev);
    return p;
}

extern "C" void memra__cuda_host_free(void *p)
{
    cudaFreeHost(p);
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

/* Makes BE's device current on the calling thread. Pipeline stage workers
 * and the serial stage walk call engines of several GPUs from one thread,
 * and a kernel launched into another device's stream fails; cudaGetDevice
 * is a thread-local read, so the common case costs next to nothing. */
static void use_device(memra__backend_t *be)
{
    int cur = -1, dev = memra__cuda_ctx(be)->device;
    if (cudaGetDevice(&cur) != cudaSuccess || cur != dev)
        cudaSetDevice(dev);
}

/* Wraps op slot F (named NAME) so that it runs with its engine's device
 * current, inside an NVTX range of its op class (a no-op unless a tool such
 * as Nsight Systems is attached) and, with MEMRA_CUDA_PROFILE=1, between
 * two timing events. */
template <const char *NAME, auto F> struct on_device;
template <const char *NAME, typename... A, memra_status_t (*F)(memra__backend_t *, A...)>
struct on_device<NAME, F> {
    static memra_status_t call(memra__backend_t *be, A... args)
    {
        use_device(be);
        memra__cuda_ctx_t *c = memra__cuda_ctx(be);
        nvtxRangePushA(NAME);
        const int ev = c->prof ? memra__cuda_prof_begin(c) : -1;
        const memra_status_t st = F(be, args...);
        if (ev >= 0)
            memra__cuda_prof_end(c, ev, NAME);
        nvtxRangePop();
        return st;
    }
};

#define OP_NAME(x) static constexpr char op_##x[] = #x
OP_NAME(matmul);
OP_NAME(matmul_ex);
OP_NAME(router);
OP_NAME(get_rows);
OP_NAME(norm);
OP_NAME(norm_ex);
OP_NAME(elementwise);
OP_NAME(rope);
OP_NAME(attention);
OP_NAME(kv_store);
OP_NAME(conv);
OP_NAME(delta);
OP_NAME(gdn);
OP_NAME(attention_batch);
OP_NAME(kv_store_batch);
OP_NAME(gdn_batch);
OP_NAME(qk_norm_rope);
OP_NAME(route);
OP_NAME(moe);
OP_NAME(moe_fused);
OP_NAME(argmax);
#undef OP_NAME

static void *cu_alloc(memra__backend_t *be, size_t n)
{
    void *p = NULL;
    use_device(be);
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
        use_device(be);
        cudaFree(p);
    }
}

static memra_status_t cu_copy_kind(memra__backend_t *be, void *dst, const void *src, size_t n, cudaMemcpyKind kind)
{
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    if (!n)
        return MEMRA_OK;
    use_device(be);
    MEMRA_CUDA_TRY(be, cudaMemcpyAsync(dst, src, n, kind, c->stream));
    return MEMRA_OK;
}

/* The caller may reuse SRC as soon as this returns. A step's token ids and
 * positions (8 bytes a token) are written by the stream itself
 * (cuStreamWriteValue64: no copy engine, no staging buffer). Other small
 * copies are staged in pinned memory and queued: a decode step then
 * launches its kernels without first waiting for its upload to land (a
 * stream synchronize per token, measured in the ~110 us between tokens). */
#define CU_UP_STAGE 4096
#define CU_UP_WORDS 8

typedef CUresult (*cu_write_value64_fn)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);

static memra_status_t cu_upload(memra__backend_t *be, void *dst, const void *src, size_t n)
{
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    if (c->write_value64 && n > 0 && n % 8 == 0 && n <= 8 * CU_UP_WORDS && (uintptr_t)dst % 8 == 0) {
        use_device(be);
        const cu_write_value64_fn wv = (cu_write_value64_fn)c->write_value64;
        for (size_t i = 0; i < n; i += 8) {
            uint64_t v;
            memcpy(&v, (const uint8_t *)src + i, 8);
            const CUresult r = wv((CUstream)c->stream, (CUdeviceptr)((uint8_t *)dst + i), v, 0);
            if (r != CUDA_SUCCESS)
                return memra__fail(be->err, MEMRA_E_DEVICE, "cuStreamWriteValue64 failed (CUresult %d)", (int)r);
        }
        return MEMRA_OK;
    }
    if (c->up_host && n <= CU_UP_STAGE && n > 0) {
        use_device(be);
        MEMRA_CUDA_TRY(be, cudaEventSynchronize(c->up_done)); /* the previous staged upload has left */
        memcpy(c->up_host, src, n);
        MEMRA_CUDA_TRY(be, cudaMemcpyAsync(dst, c->up_host, n, cudaMemcpyHostToDevice, c->stream));
        MEMRA_CUDA_TRY(be, cudaEventRecord(c->up_done, c->stream));
        return MEMRA_OK;
    }
    memra_status_t st = cu_copy_kind(be, dst, src, n, cudaMemcpyHostToDevice);
    if (!st)
        MEMRA_CUDA_TRY(be, cudaStreamSynchronize(c->stream));
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

/* not an op: no NVTX range or profiler pair (its events would straddle
 * the two streams) */
static memra_status_t cu_side(memra__backend_t *be, memra_side_t what)
{
    use_device(be);
    return memra__cuda_side(be, what);
}

static memra_status_t cu_sync(memra__backend_t *be)
{
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    memra_status_t st = memra__cuda_side_settle(be);
    if (st)
        return st;
    MEMRA_CUDA_TRY(be, cudaStreamSynchronize(c->stream));
    if (c->prof)
        memra__cuda_prof_flush(c);
    return MEMRA_OK;
}

/* ---- pipeline transport: peer copies and cross-device events -------------- */

static memra_status_t cu_copy_peer(memra__backend_t *src_be, void *dst, memra__backend_t *dst_be, const void *src,
                                   size_t n)
{
    memra__cuda_ctx_t *s = memra__cuda_ctx(src_be), *d = memra__cuda_ctx(dst_be);
    if (!n)
        return MEMRA_OK;
    use_device(src_be);
    /* Direct NVLink/PCIe peer access when the pair supports it; otherwise
     * the runtime stages the copy itself. Enabled once per device pair. */
    if (s->device != d->device && d->device < 64 && !(s->peer_tried & (1ull << d->device))) {
        int can = 0;
        s->peer_tried |= 1ull << d->device;
        if (cudaDeviceCanAccessPeer(&can, s->device, d->device) == cudaSuccess && can &&
            cudaDeviceEnablePeerAccess(d->device, 0) != cudaSuccess)
            cudaGetLastError(); /* already enabled is fine */
    }
    MEMRA_CUDA_TRY(src_be, cudaMemcpyPeerAsync(dst, d->device, src, s->device, n, s->stream));
    return MEMRA_OK;
}

static void *cu_event_create(memra__backend_t *be)
{
    cudaEvent_t ev = NULL;
    use_device(be);
    if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess) {
        cudaGetLastError();
        memra__fail(be->err, MEMRA_E_DEVICE, "cuda: cudaEventCreate failed");
        return NULL;
    }
    return ev;
}

static void cu_event_destroy(memra__backend_t *be, void *ev)
{
    if (ev) {
        use_device(be);
        cudaEventDestroy((cudaEvent_t)ev);
    }
}

static memra_status_t cu_event_record(memra__backend_t *be, void *ev)
{
    use_device(be);
    memra_status_t st = memra__cuda_side_settle(be);
    if (st)
        return st;
    MEMRA_CUDA_TRY(be, cudaEventRecord((cudaEvent_t)ev, memra__cuda_ctx(be)->stream));
    return MEMRA_OK;
}

static memra_status_t cu_event_wait(memra__backend_t *be, void *ev)
{
    use_device(be);
    MEMRA_CUDA_TRY(be, cudaStreamWaitEvent(memra__cuda_ctx(be)->stream, (cudaEvent_t)ev, 0));
    return MEMRA_OK;
}

void *memra__cuda_ws(memra__backend_t *be, size_t bytes)
{
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    if (bytes <= c->ws_size)
        return c->ws;
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(c->stream, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone) {
        cudaGetLastError();
        memra__fail(be->err, MEMRA_E_INTERNAL, "cuda: the workspace cannot grow while a step is recorded");
        return NULL; /* the old buffer stays: a direct run grows it */
    }
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
    c->epoch++;
    if (cudaMalloc(&c->ws, want) != cudaSuccess) {
        cudaGetLastError();
        c->ws = NULL;
        memra__fail(be->err, MEMRA_E_NOMEM, "cuda: workspace of %zu bytes: cudaMalloc failed", want);
        return NULL;
    }
    c->ws_size = want;
    return c->ws;
}

bool memra__cuda_pdl(void)
{
    static int v = -1;
    if (v < 0)
        v = memra__cuda_env_long("MEMRA_PDL", 1) != 0;
    return v == 1;
}

/* The CUDA tuning knobs are read once, inside kernels' launch paths, where
 * no call can fail: garbage keeps the default (the knobs that a failing
 * call can report use memra__env_int, lib/internal.h). */
long memra__cuda_env_long(const char *name, long def)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return def;
    char *end;
    long r = strtol(v, &end, 10);
    return *end ? def : r;
}

/* Page-locked memory allocated or registered with the CUDA runtime is
 * mapped (unified addressing). The head's outputs then cross PCIe as the
 * kernel writes them (the Q8_0 fast path's grouped stores: 128 bytes at a
 * time, overlapped with the rest of the head) instead of in a ~1 MB copy
 * after it, which held the host's wait ~25 us past the head's end. Other
 * matvecs into it go through device memory and a copy (run_mmv).
 * MEMRA_MAP_LOGITS=0 answers NULL: the forward downloads. */
static void *cu_host_map(memra__backend_t *be, void *host, size_t n)
{
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    if (!c->map_host || !host || !n)
        return NULL;
    use_device(be);
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, host) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    if (a.type != cudaMemoryTypeHost || !a.devicePointer)
        return NULL;
    c->map_lo = (uintptr_t)a.devicePointer;
    c->map_hi = c->map_lo + n;
    return a.devicePointer;
}

/* ---- recorded steps (CUDA graphs) ---------------------------------------------- */

/* The calling thread's launches on the stream are captured, not run
 * (thread-local mode: a call that cannot be captured, such as a
 * cudaMalloc or a synchronize, fails instead of being run, and the
 * recording with it). */
static memra_status_t cu_graph_begin(memra__backend_t *be)
{
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    if (c->prof)
        return memra__fail(be->err, MEMRA_E_UNSUPPORTED, "graph: the op profiler times every op");
    use_device(be);
    memra_status_t st = memra__cuda_side_settle(be);
    if (st)
        return st;
    MEMRA_CUDA_TRY(be, cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal));
    return MEMRA_OK;
}

/* Ends the capture; updates *graph's executable graph in place when the
 * new recording has its shape (cudaGraphExecUpdate: the launches' new
 * arguments), else instantiates a new one. */
static memra_status_t cu_graph_end(memra__backend_t *be, void **graph)
{
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    use_device(be);
    cudaGraph_t g = NULL;
    const memra_status_t st = memra__cuda_side_settle(be); /* the branch joins inside the capture */
    const cudaError_t e = cudaStreamEndCapture(c->stream, &g);
    if (st && e == cudaSuccess && g) {
        cudaGraphDestroy(g);
        return st;
    }
    if (e != cudaSuccess || !g) {
        cudaGetLastError();
        if (g)
            cudaGraphDestroy(g);
        return memra__fail(be->err, MEMRA_E_DEVICE, "graph: the capture failed: %s", cudaGetErrorString(e));
    }
    cudaGraphExec_t x = (cudaGraphExec_t)*graph;
    if (x) {
        cudaGraphExecUpdateResultInfo info;
        if (cudaGraphExecUpdate(x, g, &info) == cudaSuccess) {
            cudaGraphDestroy(g);
            return MEMRA_OK;
        }
        cudaGetLastError();
    }
    cudaGraphExec_t nx = NULL;
    const cudaError_t ei = cudaGraphInstantiate(&nx, g, 0);
    cudaGraphDestroy(g);
    if (ei != cudaSuccess) {
        cudaGetLastError();
        return memra__fail(be->err, MEMRA_E_DEVICE, "graph: instantiate: %s", cudaGetErrorString(ei));
    }
    if (x)
        cudaGraphExecDestroy(x);
    *graph = nx;
    return MEMRA_OK;
}

static memra_status_t cu_graph_launch(memra__backend_t *be, void *graph)
{
    use_device(be);
    MEMRA_CUDA_TRY(be, cudaGraphLaunch((cudaGraphExec_t)graph, memra__cuda_ctx(be)->stream));
    return MEMRA_OK;
}

static void cu_graph_free(memra__backend_t *be, void *graph)
{
    use_device(be);
    cudaStreamSynchronize(memra__cuda_ctx(be)->stream); /* a replay may still run */
    cudaGraphExecDestroy((cudaGraphExec_t)graph);
}

static uint64_t cu_graph_epoch(memra__backend_t *be)
{
    return memra__cuda_ctx(be)->epoch;
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
    i.host_map = cu_host_map;
    i.vm_granularity = memra__cuda_vm_granularity;
    i.vm_arena_create = memra__cuda_vm_arena_create;
    i.vm_arena_free = memra__cuda_vm_arena_free;
    i.vm_reserve = memra__cuda_vm_reserve;
    i.vm_unreserve = memra__cuda_vm_unreserve;
    i.vm_map = memra__cuda_vm_map;
    i.vm_unmap = memra__cuda_vm_unmap;
    i.matmul = on_device<op_matmul, memra__cuda_matmul>::call;
    i.matmul_ex = on_device<op_matmul_ex, memra__cuda_matmul_ex>::call;
    i.get_rows = on_device<op_get_rows, memra__cuda_get_rows>::call;
    i.norm = on_device<op_norm, memra__cuda_norm>::call;
    i.norm_ex = on_device<op_norm_ex, memra__cuda_norm_ex>::call;
    i.elementwise = on_device<op_elementwise, memra__cuda_elementwise>::call;
    i.rope = on_device<op_rope, memra__cuda_rope>::call;
    i.attention = on_device<op_attention, memra__cuda_attention>::call;
    i.kv_store = on_device<op_kv_store, memra__cuda_kv_store>::call;
    i.conv = on_device<op_conv, memra__cuda_conv>::call;
    i.delta = on_device<op_delta, memra__cuda_delta>::call;
    i.gdn = on_device<op_gdn, memra__cuda_gdn>::call;
    i.attention_batch = on_device<op_attention_batch, memra__cuda_attention_batch>::call;
    i.kv_store_batch = on_device<op_kv_store_batch, memra__cuda_kv_store_batch>::call;
    i.gdn_batch = on_device<op_gdn_batch, memra__cuda_gdn_batch>::call;
    i.qk_norm_rope = on_device<op_qk_norm_rope, memra__cuda_qk_norm_rope>::call;
    i.route = on_device<op_route, memra__cuda_route>::call;
    i.moe = on_device<op_moe, memra__cuda_moe>::call;
    i.moe_fused = on_device<op_moe_fused, memra__cuda_moe_fused>::call;
    i.router = on_device<op_router, memra__cuda_router>::call;
    i.argmax = on_device<op_argmax, memra__cuda_argmax>::call;
    i.copy_peer = cu_copy_peer;
    i.event_create = cu_event_create;
    i.event_destroy = cu_event_destroy;
    i.event_record = cu_event_record;
    i.event_wait = cu_event_wait;
    i.graph_begin = cu_graph_begin;
    i.graph_end = cu_graph_end;
    i.graph_launch = cu_graph_launch;
    i.graph_free = cu_graph_free;
    i.graph_epoch = cu_graph_epoch;
    i.side = cu_side;
    return i;
}

static const memra__backend_i cuda_iface = make_iface();

/* The driver's cuStreamWriteValue64 when DEVICE supports 64-bit stream
 * memory operations, else NULL (through the runtime's entry points: the
 * library links cudart only). */
static void *write_value64_of(int device)
{
    typedef CUresult (*get_fn)(CUdevice *, int);
    typedef CUresult (*attr_fn)(int *, CUdevice_attribute, CUdevice);
    void *wv = NULL, *get = NULL, *attr = NULL;
    cudaDriverEntryPointQueryResult q1, q2, q3;
    CUdevice dev;
    int ok = 0;
    if (cudaGetDriverEntryPointByVersion("cuStreamWriteValue64", &wv, 12000, cudaEnableDefault, &q1) != cudaSuccess ||
        cudaGetDriverEntryPointByVersion("cuDeviceGet", &get, 12000, cudaEnableDefault, &q2) != cudaSuccess ||
        cudaGetDriverEntryPointByVersion("cuDeviceGetAttribute", &attr, 12000, cudaEnableDefault, &q3) != cudaSuccess ||
        q1 != cudaDriverEntryPointSuccess || q2 != cudaDriverEntryPointSuccess || q3 != cudaDriverEntryPointSuccess ||
        ((get_fn)get)(&dev, device) != CUDA_SUCCESS ||
        ((attr_fn)attr)(&ok, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, dev) != CUDA_SUCCESS || !ok) {
        cudaGetLastError();
        return NULL;
    }
    return wv;
}

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
    memra__cuda_side_init(c); /* optional: without it the side slot changes nothing */
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, device) == cudaSuccess)
        c->sm_count = prop.multiProcessorCount;
    /* argmax: 64 (value, index) partials and the answer; pinned host int */
    if (cudaMalloc(&c->argmax_part, 64 * 8 + 16) != cudaSuccess ||
        cudaMallocHost((void **)&c->argmax_host, sizeof(int32_t)) != cudaSuccess) {
        cudaGetLastError();
        cudaFree(c->argmax_part);
        memra__cuda_side_destroy(c);
        cublasDestroy(c->cublas);
        cudaStreamDestroy(c->stream);
        free(be);
        free(c);
        return memra__fail(NULL, MEMRA_E_NOMEM, "cuda device %d: out of memory for the argmax buffers", device);
    }
    /* optional: without it attention merges its splits in a second kernel */
    if (cudaMalloc((void **)&c->fa_count, MEMRA_CUDA_FA_COUNTS * sizeof(int)) != cudaSuccess ||
        cudaMemsetAsync(c->fa_count, 0, MEMRA_CUDA_FA_COUNTS * sizeof(int), c->stream) != cudaSuccess) {
        cudaGetLastError();
        cudaFree(c->fa_count);
        c->fa_count = NULL;
    }
    /* optional: without it the router's route is a launch of its own */
    if (cudaMalloc((void **)&c->route_ticket, sizeof(unsigned)) != cudaSuccess ||
        cudaMemsetAsync(c->route_ticket, 0, sizeof(unsigned), c->stream) != cudaSuccess) {
        cudaGetLastError();
        cudaFree(c->route_ticket);
        c->route_ticket = NULL;
    }
    /* optional: without it uploads synchronize */
    if (cudaMallocHost(&c->up_host, CU_UP_STAGE) != cudaSuccess ||
        cudaEventCreateWithFlags(&c->up_done, cudaEventDisableTiming) != cudaSuccess) {
        cudaGetLastError();
        cudaFreeHost(c->up_host);
        c->up_host = NULL;
    }
    /* optional: without it token uploads go through up_host */
    if (memra__cuda_env_long("MEMRA_UPLOAD_WV", 1))
        c->write_value64 = write_value64_of(device);
    c->map_host = memra__cuda_env_long("MEMRA_MAP_LOGITS", 1) != 0;
    if (memra__cuda_prof_wanted())
        c->prof = memra__cuda_prof_create();
    *out = be;
    return MEMRA_OK;
}

extern "C" void memra__cuda_backend_destroy(memra__backend_t *be)
{
    if (!be)
        return;
    memra__cuda_ctx_t *c = memra__cuda_ctx(be);
    cudaSetDevice(c->device);
    memra__cuda_side_settle(be);
    cudaStreamSynchronize(c->stream);
    memra__cuda_side_destroy(c);
    memra__cuda_prof_destroy(c);
    cublasDestroy(c->cublas);
    cudaStreamDestroy(c->stream);
    cudaFree(c->ws);
    cudaFree(c->argmax_part);
    cudaFreeHost(c->argmax_host);
    cudaFree(c->fa_count);
    cudaFree(c->route_ticket);
    cudaFree(c->gs_count);
    cudaFree(c->map_tmp);
    if (c->up_host) {
        cudaEventDestroy(c->up_done);
        cudaFreeHost(c->up_host);
    }
    free(c);
    free(be);
}

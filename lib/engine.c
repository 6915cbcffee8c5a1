/* Engines: creation, device selection and queries. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine_impl.h"

void memra_engine_params_init(memra_engine_params_t *p, uint32_t size)
{
    if (!p || size < sizeof(uint32_t))
        return;
    const memra_engine_params_t d = {
        .size = sizeof d,
        .backend = MEMRA_BACKEND_CPU,
        .device = 0,
        .n_threads = 0,
        .fast = -1,
    };
    memra__sized_write(p, size, &d, sizeof d);
}

memra_status_t memra_engine_params_set_device(memra_engine_params_t *p, const char *spec)
{
    if (!p || !spec)
        return memra__fail(NULL, MEMRA_E_INVALID, "device spec: NULL argument");
    if (strcmp(spec, "cpu") == 0) {
        p->backend = MEMRA_BACKEND_CPU;
        p->device = 0;
        return MEMRA_OK;
    }
    if (strncmp(spec, "cuda", 4) == 0 && (spec[4] == '\0' || spec[4] == ':')) {
        long dev = 0;
        if (spec[4] == ':') {
            char *end;
            dev = strtol(spec + 5, &end, 10);
            if (end == spec + 5 || *end || dev < 0 || dev > 1024)
                return memra__fail(NULL, MEMRA_E_INVALID, "device spec '%s': bad CUDA ordinal", spec);
        }
        p->backend = MEMRA_BACKEND_CUDA;
        p->device = (int32_t)dev;
        return MEMRA_OK;
    }
    return memra__fail(NULL, MEMRA_E_INVALID, "device spec '%s': expected cpu, cuda or cuda:N", spec);
}

/* Reads the fields a caller of any older header version knows about. */
static memra_engine_params_t effective_params(const memra_engine_params_t *in)
{
    memra_engine_params_t p;
    memra_engine_default_params(&p);
    if (in)
        memra__sized_read(&p, sizeof p, in);
    return p;
}

#ifndef MEMRA_HAVE_CUDA
int memra__cuda_device_count(void) { return 0; }
memra_status_t memra__cuda_backend_create(int device, memra__backend_t **out)
{
    *out = NULL;
    return memra__fail(NULL, MEMRA_E_NO_DEVICE, "CUDA device %d requested, but this libmemra was built without CUDA", device);
}
void memra__cuda_backend_destroy(memra__backend_t *be) { (void)be; }
memra_status_t memra__cuda_device_info(int device, memra_engine_info_t *info)
{
    (void)info;
    return memra__fail(NULL, MEMRA_E_NO_DEVICE, "CUDA device %d: built without CUDA", device);
}
void *memra__cuda_host_alloc(int device, size_t bytes)
{
    (void)device, (void)bytes;
    return NULL;
}
void memra__cuda_host_free(void *p) { (void)p; }
#endif

/* memra_engine_host_alloc's blocks start with this header (a whole
 * alignment unit, so the caller's bytes keep malloc's alignment): how the
 * block was allocated, so that memra_host_free needs no engine. */
#define HOST_HDR 64
enum { HOST_PLAIN = 0x6d656d50, HOST_PINNED = 0x6d656d43 };

void *memra_engine_host_alloc(memra_engine_t *e, size_t bytes)
{
    if (!e || bytes == 0 || bytes > SIZE_MAX - HOST_HDR)
        return NULL;
    uint32_t kind = HOST_PINNED;
    uint8_t *b = e->params.backend == MEMRA_BACKEND_CUDA ? memra__cuda_host_alloc(e->params.device, bytes + HOST_HDR)
                                                          : NULL;
    if (!b) {
        kind = HOST_PLAIN;
        b = aligned_alloc(HOST_HDR, (bytes + 2 * HOST_HDR - 1) / HOST_HDR * HOST_HDR);
    }
    if (!b)
        return NULL;
    memcpy(b, &kind, sizeof kind);
    return b + HOST_HDR;
}

void memra_host_free(void *p)
{
    if (!p)
        return;
    uint8_t *b = (uint8_t *)p - HOST_HDR;
    uint32_t kind;
    memcpy(&kind, b, sizeof kind);
    if (kind == HOST_PINNED)
        memra__cuda_host_free(b);
    else
        free(b);
}

int32_t memra_cuda_device_count(void)
{
    return memra__cuda_device_count();
}

memra_status_t memra_engine_create(const memra_engine_params_t *params, memra_engine_t **out)
{
    if (!out)
        return memra__fail(NULL, MEMRA_E_INVALID, "memra_engine_create: out is NULL");
    *out = NULL;
    if (params && params->size < sizeof(uint32_t) * 2)
        return memra__fail(NULL, MEMRA_E_INVALID, "memra_engine_create: params->size is %u; use memra_engine_default_params()", params->size);
    memra_engine_t *e = calloc(1, sizeof *e);
    if (!e)
        return memra__fail(NULL, MEMRA_E_NOMEM, "memra_engine_create: out of memory");
    e->params = effective_params(params);
    bool fast = true;
    memra_status_t st = memra__engine_fast(e, &fast);
    if (st) {
        free(e); /* the message names the variable */
        return st;
    }
    switch (e->params.backend) {
    case MEMRA_BACKEND_CPU:
        if (e->params.n_threads < 0) {
            st = memra__fail(NULL, MEMRA_E_INVALID, "memra_engine_create: n_threads %d < 0", e->params.n_threads);
            break;
        }
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        int64_t cap = (int64_t)MEMRA_CPU_THREADS_PER_CORE * (cores > 0 ? cores : 1);
        if (e->params.n_threads > cap) {
            st = memra__fail(NULL, MEMRA_E_INVALID,
                             "memra_engine_create: n_threads %d exceeds %lld (%d per online core, %ld cores)",
                             e->params.n_threads, (long long)cap, MEMRA_CPU_THREADS_PER_CORE, cores);
            break;
        }
        st = memra__cpu_backend_create(e->params.n_threads, &e->be);
        break;
    case MEMRA_BACKEND_CUDA:
        if (e->params.device < 0) {
            st = memra__fail(NULL, MEMRA_E_NO_DEVICE, "memra_engine_create: CUDA device %d does not exist", e->params.device);
            break;
        }
        st = memra__cuda_backend_create(e->params.device, &e->be);
        break;
    default:
        st = memra__fail(NULL, MEMRA_E_INVALID, "memra_engine_create: unknown backend %d", e->params.backend);
    }
    if (st) {
        free(e);
        return st;
    }
    e->be->err = &e->err;
    e->be->fast = fast;
    *out = e;
    return MEMRA_OK;
}

memra_status_t memra_engine_destroy(memra_engine_t *e)
{
    if (!e)
        return MEMRA_OK;
    int users = atomic_load(&e->users);
    if (users > 0)
        return memra__fail(&e->err, MEMRA_E_BUSY, "memra_engine_destroy: %d model(s) still use this engine; free them first", users);
    if (e->params.backend == MEMRA_BACKEND_CUDA)
        memra__cuda_backend_destroy(e->be);
    else
        memra__cpu_backend_destroy(e->be);
    free(e);
    return MEMRA_OK;
}

static void cpu_name(char *dst, size_t n)
{
    snprintf(dst, n, "cpu");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0) {
            const char *c = strchr(line, ':');
            if (c) {
                c++;
                while (*c == ' ')
                    c++;
                snprintf(dst, n, "%s", c);
                dst[strcspn(dst, "\n")] = '\0';
            }
            break;
        }
    }
    fclose(f);
}

memra_status_t memra_engine_get_info(const memra_engine_t *e, memra_engine_info_t *info)
{
    if (!e || !info || info->size < sizeof(uint32_t))
        return memra__fail(NULL, MEMRA_E_INVALID, "memra_engine_get_info: NULL engine/info or info->size unset");
    memra_engine_info_t r = {.size = sizeof r};
    r.backend = e->params.backend;
    r.device = e->params.device;
    memra_status_t st = MEMRA_OK;
    if (e->params.backend == MEMRA_BACKEND_CUDA) {
        st = memra__cuda_device_info(e->params.device, &r);
        snprintf(r.backend_name, sizeof r.backend_name, "cuda");
    } else {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        r.n_threads = e->params.n_threads > 0 ? e->params.n_threads : (int32_t)cores;
        r.sm_count = (int32_t)cores;
        r.mem_total = (uint64_t)pages * (uint64_t)psz;
        r.mem_free = (uint64_t)avail * (uint64_t)psz;
        snprintf(r.backend_name, sizeof r.backend_name, "cpu");
        cpu_name(r.device_name, sizeof r.device_name);
    }
    if (st)
        return st;
    memra__sized_write(info, info->size, &r, sizeof r);
    return MEMRA_OK;
}

const char *memra_engine_last_error(const memra_engine_t *e)
{
    return e ? e->err.msg : "";
}

memra_status_t memra__engine_fast(const memra_engine_t *e, bool *fast)
{
    int32_t v = e->params.fast;
    if (v < 0 && memra__env_int("MEMRA_FAST", 0, 1, 1, &v))
        return MEMRA_E_INVALID;
    *fast = v != 0;
    return MEMRA_OK;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

memra_status_t memra_engine_copy_bandwidth(memra_engine_t *e, size_t bytes, int32_t reps, double *bytes_per_s)
{
    if (!e || !bytes_per_s || bytes == 0 || reps < 1 || reps > 1000)
        return memra__fail(e ? &e->err : NULL, MEMRA_E_INVALID, "memra_engine_copy_bandwidth: bad arguments");
    /* two buffers of BYTES must fit in the device: larger is refused, not tried */
    memra_engine_info_t info = {.size = sizeof info};
    memra_status_t ist = memra_engine_get_info(e, &info);
    if (ist)
        return ist;
    if (bytes > info.mem_total / 2)
        return memra__fail(&e->err, MEMRA_E_RANGE, "copy bandwidth: 2 x %zu bytes exceed the device's %llu bytes",
                           bytes, (unsigned long long)info.mem_total);
    memra__backend_t *be = e->be;
    void *a = be->iface->alloc(be, bytes), *b = be->iface->alloc(be, bytes);
    double *t = malloc((size_t)reps * sizeof *t);
    memra_status_t st = a && b && t ? MEMRA_OK : memra__fail(&e->err, MEMRA_E_NOMEM, "copy bandwidth: cannot allocate 2 x %zu bytes", bytes);
    /* first touch (and warm-up) so page faults and clocks do not count */
    if (!st)
        st = be->iface->copy(be, b, a, bytes);
    if (!st)
        st = be->iface->synchronize(be);
    for (int32_t r = 0; r < reps && !st; r++) {
        double t0 = now_s();
        st = be->iface->copy(be, b, a, bytes);
        if (!st)
            st = be->iface->synchronize(be);
        t[r] = now_s() - t0;
    }
    if (!st) {
        qsort(t, (size_t)reps, sizeof *t, cmp_double);
        *bytes_per_s = 2.0 * (double)bytes / t[reps / 2];
    }
    be->iface->free(be, a);
    be->iface->free(be, b);
    free(t);
    return st;
}

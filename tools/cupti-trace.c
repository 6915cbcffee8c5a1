/* A kernel tracer for the device (no Nsight Systems importer there): loaded
 * by the CUDA driver through CUDA_INJECTION64_PATH, it records every
 * kernel's start and end through CUPTI's activity API, without serializing
 * launches, and writes "start end gridX gridY blockX dynsmem name" lines
 * (and "start end -1 copyKind bytes 0 MEMCPY" for copies; with
 * MEMRA_TRACE_API=1 also "start end -2 cbid 0 0 API:name" for every CUDA
 * runtime and driver call, host time on the same clock) to
 * $MEMRA_TRACE_OUT when the process exits. Used by tools/trace-token.sh.
 * Build: gcc -O2 -shared -fPIC -I/usr/local/cuda/include tools/cupti-trace.c \
 *          -L/usr/local/cuda/lib64 -lcupti -o cupti-trace.so */
#include <cupti.h>
#include <stdio.h>
#include <stdlib.h>

#define TRACE_BUF (8u << 20)

static FILE *trace_out;

static void CUPTIAPI trace_request(uint8_t **buf, size_t *size, size_t *max_records)
{
    *buf = aligned_alloc(8, TRACE_BUF);
    *size = *buf ? TRACE_BUF : 0;
    *max_records = 0;
}

static void CUPTIAPI trace_complete(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size, size_t valid)
{
    CUpti_Activity *r = NULL;
    (void)ctx, (void)stream, (void)size;
    while (trace_out && cuptiActivityGetNextRecord(buf, valid, &r) == CUPTI_SUCCESS) {
        if (r->kind == CUPTI_ACTIVITY_KIND_MEMCPY) { /* "start end -1 kind bytes 0 MEMCPY" */
            const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)r;
            fprintf(trace_out, "%llu %llu -1 %d %llu 0 MEMCPY\n", (unsigned long long)m->start,
                    (unsigned long long)m->end, (int)m->copyKind, (unsigned long long)m->bytes);
            continue;
        }
        if (r->kind == CUPTI_ACTIVITY_KIND_RUNTIME || r->kind == CUPTI_ACTIVITY_KIND_DRIVER) {
            const CUpti_ActivityAPI *a = (const CUpti_ActivityAPI *)r;
            const char *name = NULL;
            cuptiGetCallbackName(r->kind == CUPTI_ACTIVITY_KIND_RUNTIME ? CUPTI_CB_DOMAIN_RUNTIME_API
                                                                        : CUPTI_CB_DOMAIN_DRIVER_API,
                                 a->cbid, &name);
            fprintf(trace_out, "%llu %llu -2 %u 0 0 API:%s\n", (unsigned long long)a->start,
                    (unsigned long long)a->end, (unsigned)a->cbid, name ? name : "?");
            continue;
        }
        if (r->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && r->kind != CUPTI_ACTIVITY_KIND_KERNEL)
            continue;
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)r;
        fprintf(trace_out, "%llu %llu %d %d %d %d %s\n", (unsigned long long)k->start, (unsigned long long)k->end,
                k->gridX, k->gridY, k->blockX, k->dynamicSharedMemory, k->name ? k->name : "?");
    }
    free(buf);
}

static void trace_flush(void)
{
    cuptiActivityFlushAll(1);
    if (trace_out)
        fclose(trace_out);
    trace_out = NULL;
}

int InitializeInjection(void)
{
    const char *path = getenv("MEMRA_TRACE_OUT");
    trace_out = fopen(path ? path : "/tmp/cupti-trace.txt", "w");
    if (!trace_out)
        return 0;
    if (cuptiActivityRegisterCallbacks(trace_request, trace_complete) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) != CUPTI_SUCCESS)
        return 0;
    const char *api = getenv("MEMRA_TRACE_API");
    if (api && *api == '1' && (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME) != CUPTI_SUCCESS ||
                               cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER) != CUPTI_SUCCESS))
        return 0;
    atexit(trace_flush);
    return 1;
}

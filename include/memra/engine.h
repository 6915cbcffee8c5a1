/* memra: engines. An engine is one backend on one device: the CPU reference
 * (float32, pthreads) or a CUDA GPU. Models are loaded onto engines. */
#ifndef MEMRA_ENGINE_H
#define MEMRA_ENGINE_H

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum memra_backend {
    MEMRA_BACKEND_CPU = 0,
    MEMRA_BACKEND_CUDA = 1,
} memra_backend_t;

/* A CPU engine runs at most this many threads per online core
 * (memra_engine_info_t.sm_count on CPU); more oversubscribes the cores for
 * no gain, so memra_engine_create refuses it with MEMRA_E_INVALID. */
#define MEMRA_CPU_THREADS_PER_CORE 4

typedef struct memra_engine_params {
    uint32_t size;      /* sizeof(memra_engine_params_t), set by the init macro */
    int32_t backend;    /* memra_backend_t (default MEMRA_BACKEND_CPU) */
    int32_t device;     /* CUDA device ordinal (default 0) */
    int32_t n_threads;  /* CPU threads, at most MEMRA_CPU_THREADS_PER_CORE x online cores (0 = all online cores,
                           default 0) */
    int32_t fast;       /* CUDA: reduced-precision prefill (-1 = env MEMRA_FAST, 0 or 1, else on; 0 off, 1 on;
                           default -1); MEMRA_FAST set to anything else fails memra_engine_create (MEMRA_E_INVALID) */
} memra_engine_params_t;

/* Fills PARAMS with defaults for a struct of SIZE bytes (use the macro).
 * Thread-safety: any thread. */
MEMRA_API void memra_engine_params_init(memra_engine_params_t *params, uint32_t size);
#define memra_engine_default_params(p) memra_engine_params_init((p), MEMRA__SIZEOF32(*(p)))

/* Parses "cpu", "cuda" (= cuda:0) or "cuda:N" into params->backend/device.
 * Thread-safety: any thread (PARAMS is the caller's). */
MEMRA_API memra_status_t memra_engine_params_set_device(memra_engine_params_t *params, const char *spec);

typedef struct memra_engine memra_engine_t;

/* Creates an engine. CUDA on a build without CUDA, on a machine without a
 * GPU, or with a bad ordinal gives MEMRA_E_NO_DEVICE and a message.
 * Thread-safety: any thread. */
MEMRA_API memra_status_t memra_engine_create(const memra_engine_params_t *params, memra_engine_t **out);

/* Destroys the engine; NULL is a no-op. Every model loaded on it must be
 * freed first, that is, models must not outlive their engine (MEMRA_E_BUSY
 * otherwise, and the engine stays alive).
 * Thread-safety: one thread at a time per handle. */
MEMRA_API memra_status_t memra_engine_destroy(memra_engine_t *engine);

typedef struct memra_engine_info {
    uint32_t size;           /* set by the caller: sizeof(memra_engine_info_t) */
    int32_t backend;         /* memra_backend_t */
    int32_t device;          /* device ordinal (CPU: 0) */
    int32_t n_threads;       /* CPU worker threads (CUDA: 0) */
    int32_t sm_count;        /* streaming multiprocessors (CPU: online cores) */
    int32_t cc_major;        /* compute capability (CPU: 0) */
    int32_t cc_minor;
    uint64_t mem_total;      /* bytes of device memory (CPU: physical RAM) */
    uint64_t mem_free;       /* bytes free now (CPU: available RAM) */
    char backend_name[16];   /* "cpu" or "cuda" */
    char device_name[256];   /* GPU name, or the CPU model name */
} memra_engine_info_t;

/* Fills INFO (its size field must be set). Thread-safety: any thread. */
MEMRA_API memra_status_t memra_engine_get_info(const memra_engine_t *engine, memra_engine_info_t *info);

/* Measures the device's memory bandwidth: a device-to-device copy of BYTES
 * bytes, REPS times (after one warm-up); *bytes_per_s receives the median
 * rate counting bytes read plus bytes written. Benchmarks state decode speed
 * as a fraction of this. Two buffers of BYTES larger than the device's
 * memory give MEMRA_E_RANGE. Thread-safety: one thread at a time per handle. */
MEMRA_API memra_status_t memra_engine_copy_bandwidth(memra_engine_t *engine, size_t bytes, int32_t reps,
                                                     double *bytes_per_s);

/* Host memory for what a call copies out of ENGINE's device (logits):
 * page-locked on a CUDA engine, so that the device writes a decode step's
 * n_vocab logits into it directly as it computes them, with no copy after
 * (other outputs cross the bus in one direct copy instead of the driver's
 * staging through its own pinned buffer; memra-bench: docs/PERFORMANCE.md). Plain
 * memory on the CPU engine, and whenever pinned memory is unavailable.
 * Any memra call that writes host memory accepts it; free it with
 * memra_host_free (not free()). NULL for 0 bytes or out of memory.
 * Thread-safety: any thread. */
MEMRA_API void *memra_engine_host_alloc(memra_engine_t *engine, size_t bytes);

/* Frees memory of memra_engine_host_alloc (its engine may be gone); NULL is
 * a no-op. Thread-safety: any thread. */
MEMRA_API void memra_host_free(void *p);

/* Number of CUDA devices usable by this build (0 without CUDA or GPU).
 * Thread-safety: any thread. */
MEMRA_API int32_t memra_cuda_device_count(void);

/* Message of the last failed call on ENGINE (empty if none); valid until
 * the next failing call on ENGINE. Thread-safety: one thread at a time per handle. */
MEMRA_API const char *memra_engine_last_error(const memra_engine_t *engine);

#ifdef __cplusplus
}
#endif
#endif

/* Shared by every .cu file of the CUDA backend. */
#ifndef MEMRA_CUDA_COMMON_CUH
#define MEMRA_CUDA_COMMON_CUH

#include <cublas_v2.h>
#include <cuda_runtime.h>

extern "C" {
#include "backend.h"
}

typedef struct memra__cuda_ctx {
    int device;
    cudaStream_t stream;
    cublasHandle_t cublas;
} memra__cuda_ctx_t;

static inline memra__cuda_ctx_t *memra__cuda_ctx(memra__backend_t *be)
{
    return (memra__cuda_ctx_t *)be->ctx;
}

/* Turns a CUDA error into a status and a message on the engine, then
 * returns from the calling function (never aborts, unlike ggml's CUDA_CHECK). */
#define MEMRA_CUDA_TRY(be, expr)                                                              \
    do {                                                                                      \
        cudaError_t memra_e_ = (expr);                                                        \
        if (memra_e_ != cudaSuccess)                                                          \
            return memra__fail((be) ? (be)->err : NULL, MEMRA_E_DEVICE, "%s:%d: %s: %s",     \
                               __FILE__, __LINE__, #expr, cudaGetErrorString(memra_e_));      \
    } while (0)

#endif

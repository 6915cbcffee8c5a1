/* What the stand-alone labs (tools/mmv-lab.cu, tools/gsw-lab.cu) share:
 * the two library symbols their kernels call, CUDA error checks, event
 * timing over rotated weight copies, f16 decoding and a plain streaming
 * read (the ceiling). Include after the library's CUDA headers. */
#ifndef MEMRA_TOOLS_LAB_CUH
#define MEMRA_TOOLS_LAB_CUH

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

long memra__cuda_env_long(const char *name, long def)
{
    const char *v = getenv(name);
    return v && *v ? strtol(v, NULL, 10) : def;
}
bool memra__cuda_pdl(void) { return memra__cuda_env_long("MEMRA_PDL", 1) != 0; }

#define CK(x)                                                                                                          \
    do {                                                                                                               \
        cudaError_t e_ = (x);                                                                                          \
        if (e_ != cudaSuccess) {                                                                                       \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));                        \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

/* The larger error, NaN winning (a skipped row stays NaN). */
static double worse(double err, double e) { return e <= err ? err : e; }

static float h_f16(uint16_t h)
{
    const uint32_t s = (h >> 15) & 1, e = (h >> 10) & 31, m = h & 1023;
    float v = e == 0 ? ldexpf((float)m, -24) : ldexpf((float)(m | 1024), (int)e - 25);
    return s ? -v : v;
}

template <typename F> static double time_us(F launch, int nbuf, int reps)
{
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int i = 0; i < nbuf; i++)
        launch(i);
    CK(cudaEventRecord(e0));
    for (int i = 0; i < reps; i++)
        launch(i % nbuf);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    CK(cudaGetLastError());
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return 1000.0 * ms / reps;
}

template <int U> __global__ void __launch_bounds__(512) stream_kernel(const uint4 *w, size_t n16, unsigned *sink)
{
    MEMRA_PDL_ENTER();
    unsigned acc = 0;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += stride * U) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; u++)
            if (i + u * stride < n16)
                v[u] = ld_stream(w + i + u * stride);
#pragma unroll
        for (int u = 0; u < U; u++)
            if (i + u * stride < n16)
                acc ^= v[u].x ^ v[u].w;
    }
    if (acc == 0x9e3779b9u)
        sink[0] = acc;
}

/* BYTES of Q8_0 rows for the labs: random quants, scales in [2^-9, 2^-7) */
static std::vector<uint8_t> lab_q8_bytes(size_t bytes)
{
    std::vector<uint8_t> host(bytes);
    uint64_t st = 0x243f6a8885a308d3ull ^ bytes;
    for (size_t i = 0; i < bytes; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        host[i] = (uint8_t)(st >> 33);
    }
    for (size_t b = 0; b < bytes; b += 34) {
        const uint16_t h = (uint16_t)(0x1800 + (host[b] & 0x7) * 0x100 + host[b + 1]);
        memcpy(&host[b], &h, 2);
    }
    return host;
}

#endif

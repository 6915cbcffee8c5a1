/* Bulk-copy rate lab (device only, not part of the library): how fast a
 * grid of warp rings (the matvecs' form: each warp a ring of D slots, lane 0
 * arming a slot's barrier and issuing its bulk copy, the warp waiting on
 * the slot and refilling it) moves HBM into shared memory as a function of
 * the bytes a copy, with no arithmetic. The question it answers: do the
 * short rows' items (the MoE down's 748-byte rows, the 816-byte second
 * segment of a 2816-wide row) stream slower because each copy has a fixed
 * cost, so that fewer, longer copies of the same bytes would be faster?
 *
 *   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Icuda -Ilib -Iinclude tools/tma-rate.cu \
 *        -o /tmp/tma-rate && /tmp/tma-rate
 *
 * Prints, per (bytes a copy, copies an item, ring depth, blocks an SM), the
 * rate in TB/s and copies an SM a microsecond, against a plain 16-byte
 * load stream of the same buffer. The ring is the library's (cuda/mmv.cuh:
 * its barriers, waits and copies). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "mmv.cuh"

#define CK(x)                                                                                                          \
    do {                                                                                                               \
        cudaError_t e_ = (x);                                                                                          \
        if (e_ != cudaSuccess) {                                                                                       \
            fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));                                 \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

#define WARPS 8
#define DMAX 8

/* item i of warp g: NC copies of CB bytes each, from consecutive ranges
 * (the warps' items interleaved: a streaming read of the buffer) */
__global__ void __launch_bounds__(WARPS * 32) ring_kernel(const uint8_t *buf, size_t span, int cb, int nc, int d,
                                                          int64_t n_items, unsigned *sink)
{
    extern __shared__ __align__(128) uint8_t dyn[];
    __shared__ __align__(8) uint64_t bars[WARPS][DMAX];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const uint32_t ib = (uint32_t)cb * nc; /* bytes an item */
    const uint32_t sl = (ib + 127) & ~127u;
    const uint32_t ring0 = mmv_saddr(dyn + (size_t)warp * d * sl), bar0 = mmv_saddr(bars[warp]);
    mmv_bars_init(bars[warp], d, lane);
    const uint64_t policy = mmv_evict_first();
    const int64_t nwt = (int64_t)gridDim.x * WARPS, gw = (int64_t)blockIdx.x * WARPS + warp;
    int64_t issued = 0;
    auto issue = [&](int slot) {
        if (issued == n_items)
            return;
        if (lane == 0) {
            const size_t off = ((size_t)(gw + issued * nwt) * ib) % (span - ib) & ~(size_t)15;
            const uint32_t bar = bar0 + 8 * slot;
            mmv_bar_expect(bar, ib);
            for (int c = 0; c < nc; c++)
                mmv_bulk_copy(ring0 + slot * sl + c * cb, buf + off + (size_t)c * cb, (uint32_t)cb, bar, policy);
        }
        issued++;
    };
    for (int i = 0; i < d - 1; i++)
        issue(i);
    uint32_t phase = 0, acc = 0;
    int slot = 0;
    for (int64_t k = 0; k < n_items; k++) {
        mmv_ring_wait(bar0, slot, phase);
        issue(slot == 0 ? d - 1 : slot - 1);
        acc += mmv_lds32(ring0 + slot * sl + 4 * lane);
        __syncwarp();
        slot = slot == d - 1 ? 0 : slot + 1;
    }
    if (acc == 0x12345678u)
        sink[0] = acc;
}

__global__ void plain_kernel(const uint4 *buf, int64_t n, unsigned *sink)
{
    uint32_t acc = 0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint4 v;
        asm volatile("ld.global.cs.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(buf + i));
        acc += v.x ^ v.w;
    }
    if (acc == 0x12345678u)
        sink[0] = acc;
}

int main(void)
{
    int dev = 0, sms = 0;
    CK(cudaSetDevice(dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    cudaDeviceProp pr;
    CK(cudaGetDeviceProperties(&pr, dev));
    const size_t span = (size_t)2 << 30; /* 2 GiB: far past L2 */
    uint8_t *buf;
    unsigned *sink;
    CK(cudaMalloc(&buf, span));
    CK(cudaMalloc(&sink, 16));
    CK(cudaMemset(buf, 1, span));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const double total = 1.0e9; /* bytes a timed launch */
    printf("device %s, %d SMs\n", pr.name, sms);
    {
        const int64_t n = (int64_t)(total / 16);
        for (int rep = 0; rep < 3; rep++) {
            CK(cudaEventRecord(e0));
            plain_kernel<<<sms * 8, 256>>>((const uint4 *)buf, n, sink);
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            if (rep == 2)
                printf("plain ld.global.v4 stream: %.3f TB/s\n", total / (ms * 1e-3) / 1e12);
        }
    }
    CK(cudaFuncSetAttribute(ring_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
    struct cfg {
        int cb, nc, d, bps;
    } cfgs[] = {
        {544, 1, 3, 3},  {768, 1, 3, 3},  {768, 1, 4, 3},  {768, 1, 8, 2},  {768, 2, 3, 3},  {816, 1, 3, 3},
        {1088, 1, 3, 3}, {1504, 1, 3, 3}, {1536, 1, 3, 3}, {2176, 1, 3, 3}, {2176, 1, 3, 2}, {2176, 1, 4, 2},
        {3008, 1, 3, 3}, {1504, 2, 3, 3}, {4352, 1, 3, 2}, {768, 1, 6, 3},  {1536, 1, 4, 3}, {2176, 2, 3, 2},
    };
    printf("%6s %3s %2s %4s  %8s  %14s\n", "bytes", "nc", "D", "b/SM", "TB/s", "copies/SM/us");
    for (const cfg &c : cfgs) {
        const uint32_t ib = (uint32_t)c.cb * c.nc, sl = (ib + 127) & ~127u;
        const size_t smem = (size_t)WARPS * c.d * sl;
        int occ = 0;
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, ring_kernel, WARPS * 32, smem));
        if (occ < c.bps) {
            printf("%6d %3d %2d %4d  (%d blocks an SM fit)\n", c.cb, c.nc, c.d, c.bps, occ);
            continue;
        }
        const int blocks = sms * c.bps;
        const int64_t items = (int64_t)(total / ib / (blocks * WARPS));
        float best = 1e30f;
        for (int rep = 0; rep < 4; rep++) {
            CK(cudaEventRecord(e0));
            ring_kernel<<<blocks, WARPS * 32, smem>>>(buf, span, c.cb, c.nc, c.d, items, sink);
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            CK(cudaGetLastError());
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            if (rep > 0 && ms < best)
                best = ms;
        }
        const double bytes = (double)items * blocks * WARPS * ib, copies = (double)items * blocks * WARPS * c.nc;
        printf("%6d %3d %2d %4d  %8.3f  %14.2f\n", c.cb, c.nc, c.d, c.bps, bytes / (best * 1e-3) / 1e12,
               copies / sms / (best * 1e3));
    }
    return 0;
}

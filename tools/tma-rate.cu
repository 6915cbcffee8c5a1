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
 * load stream of the same buffer (tools/lab.cuh's stream_kernel). The ring
 * is the library's (cuda/mmv.cuh: its barriers, waits and copies); timings
 * are lab.cuh's time_us (a warm-up launch, then the mean of three). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "mmv.cuh"
#include "lab.cuh"

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
    const double total = 1.0e9; /* bytes a timed launch */
    printf("device %s, %d SMs\n", pr.name, sms);
    const double us_plain =
        time_us([&](int) { stream_kernel<4><<<sms * 4, 512>>>((const uint4 *)buf, (size_t)(total / 16), sink); }, 1, 3);
    printf("plain 16-byte load stream: %.3f TB/s\n", total / (us_plain * 1e-6) / 1e12);
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
        const double us = time_us(
            [&](int) { ring_kernel<<<blocks, WARPS * 32, smem>>>(buf, span, c.cb, c.nc, c.d, items, sink); }, 1, 3);
        const double bytes = (double)items * blocks * WARPS * ib, copies = (double)items * blocks * WARPS * c.nc;
        printf("%6d %3d %2d %4d  %8.3f  %14.2f\n", c.cb, c.nc, c.d, c.bps, bytes / (us * 1e-6) / 1e12,
               copies / sms / us);
    }
    return 0;
}

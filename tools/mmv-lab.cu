/* Matvec design lab (device only, not part of the library): times the
 * library's Q8_0 decode matvec (cuda/mmv.cuh, through mmv_launch) against a
 * plain streaming read (the ceiling), a block-level TMA ring, a warp-ring
 * kernel with bigger items (wr_kernel: the reference the fast path was
 * brought to; a bisect of the fast path's generalities, since removed,
 * found the 128-byte ring alignment), on the same buffers in one run, at
 * the Qwen3.5-9B decode shapes. Weights rotate over copies larger than L2 so that every launch
 * reads HBM, as decode does; outputs are NaN-poisoned before each checked
 * launch. docs/PERFORMANCE.md has the results.
 *
 *   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Icuda -Ilib \
 *        -Iinclude -Ibuild-gpu tools/mmv-lab.cu -o /tmp/mmv-lab && /tmp/mmv-lab
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "mmv_impl.cuh"
#include "lab.cuh"

/* ---- harness ------------------------------------------------------------------- */

static int g_sms;

struct shape {
    const char *name;
    int64_t ne0, rows;
};

/* ---- block-level ring --------------------------------------------------------
 * A block owns the contiguous rows [r0, r1) (balanced to one row), i.e. one
 * contiguous byte range, streamed in chunks of CU units by TMA into NS
 * stages. A unit is a 64-block segment of a row (2176 bytes, the production
 * pair dot); warp w takes units w, w+WARPS, ... of each chunk. The last warp
 * done with a stage refills it. Output: one partial per unit. */
constexpr int UB = 2176;

template <int WARPS, int KPW, int NS, bool MATH>
__global__ void __launch_bounds__(WARPS * 32) ring_kernel(const mmv_args a, float *part)
{
    namespace ptx = cuda::ptx;
    constexpr int CU = WARPS * KPW, CB = CU * UB;
    extern __shared__ __align__(128) uint8_t sm[];
    __shared__ __align__(8) uint64_t full[NS];
    __shared__ int cnt[NS];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t nrows = a.vrow0[1], upr = a.ne0 / 2048;
    const int64_t r0 = blockIdx.x * nrows / gridDim.x, r1 = (blockIdx.x + 1) * nrows / gridDim.x;
    const uint8_t *base = a.W[0] + r0 * a.nb1[0];
    const int64_t nu = (r1 - r0) * upr, nch = (nu + CU - 1) / CU;
    auto issue = [&](int64_t c) {
        const int s = (int)(c % NS);
        const uint32_t bytes = (uint32_t)(min((int64_t)CU, nu - c * CU) * UB);
        ptx::fence_proxy_async(ptx::space_shared);
        ptx::mbarrier_arrive_expect_tx(ptx::sem_release, ptx::scope_cta, ptx::space_shared, &full[s], bytes);
        ptx::cp_async_bulk(ptx::space_cluster, ptx::space_global, (void *)(sm + (size_t)s * CB),
                           (const void *)(base + c * CB), bytes, &full[s]);
    };
    if (threadIdx.x == 0) {
        for (int s = 0; s < NS; s++) {
            ptx::mbarrier_init(&full[s], 1);
            cnt[s] = 0;
        }
        ptx::fence_mbarrier_init(ptx::sem_release, ptx::scope_cluster);
        for (int64_t c = 0; c < NS && c < nch; c++)
            issue(c);
    }
    MEMRA_PDL_ENTER();
    int64_t xl;
    const float *x = mmv_stage_x<true>(a, a.x, 1, (float *)(sm + (size_t)NS * CB), &xl);
    const uint32_t xa = mmv_saddr(x), sa = mmv_saddr(x + xl), ring = mmv_saddr(sm);
    for (int64_t c = 0; c < nch; c++) {
        const int s = (int)(c % NS);
        while (!ptx::mbarrier_try_wait_parity(&full[s], (uint32_t)((c / NS) & 1))) {
        }
#pragma unroll
        for (int k = 0; k < KPW; k++) {
            const int64_t u = c * CU + k * WARPS + warp;
            if (u < nu) {
                float v = 0.0f;
                if (MATH)
                    mmv_q8_pair<1>(ring + (uint32_t)(s * CB + (k * WARPS + warp) * UB), 64, lane, xa, xl, sa,
                                   a.ne0 / 32, (u % upr) * 64, 1, &v);
                else
                    v = (float)sm[s * CB + (k * WARPS + warp) * UB + lane];
                v = warp_sum(v);
                if (lane == 0)
                    part[r0 * upr + u] = v;
            }
        }
        __syncwarp();
        if (lane == 0 && atomicAdd(&cnt[s], 1) == WARPS - 1) {
            cnt[s] = 0;
            if (c + NS < nch)
                issue(c + NS);
        }
    }
}

/* ---- warp rings, bigger items ------------------------------------------------
 * The production structure (each warp streams its own items through a ring
 * of D slots by TMA; the production pair dot) with items of PPL segments
 * (PPL x 2176 contiguous bytes of one row): fewer, larger bulk copies. */
template <int D, int PPL> __global__ void __launch_bounds__(256, 3) wr_kernel(const mmv_args a)
{
    namespace ptx = cuda::ptx;
    extern __shared__ __align__(128) uint8_t sm[];
    __shared__ __align__(8) uint64_t bars[8][D];
    constexpr int SLOT = PPL * UB;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int nseg = (int)(a.ne0 / (2048 * PPL));
    const int64_t nrows = a.vrow0[1];
    const int64_t gstride = (int64_t)gridDim.x * 8, g0 = (int64_t)blockIdx.x * 8 + warp;
    const int64_t n_items = g0 < nrows ? (nrows - g0 + gstride - 1) / gstride * nseg : 0;
    const uint32_t ring = mmv_saddr(sm) + (uint32_t)(warp * D * SLOT);
    uint64_t *bar = bars[warp];
    mmv_bars_init(bar, D, lane);
    int64_t ig = g0;
    int iseg = 0;
    int64_t issued = 0;
    auto issue = [&](int slot) {
        if (issued < n_items) {
            if (lane == 0) {
                ptx::fence_proxy_async(ptx::space_shared);
                ptx::mbarrier_arrive_expect_tx(ptx::sem_release, ptx::scope_cta, ptx::space_shared, &bar[slot], SLOT);
                ptx::cp_async_bulk(ptx::space_cluster, ptx::space_global, (void *)(sm + warp * D * SLOT + slot * SLOT),
                                   (const void *)(a.W[0] + ig * a.nb1[0] + iseg * SLOT), SLOT, &bar[slot]);
            }
            if (++iseg == nseg) {
                iseg = 0;
                ig += gstride;
            }
            issued++;
        }
    };
    for (int d = 0; d < D - 1; d++)
        issue(d);
    MEMRA_PDL_ENTER();
    int64_t xl;
    const float *x = mmv_stage_x<true>(a, a.x, 1, (float *)(sm + 8 * D * SLOT), &xl);
    const uint32_t xa = mmv_saddr(x), sa = mmv_saddr(x + xl);
    uint32_t phase = 0;
    int slot = 0, seg = 0;
    int64_t row = g0;
    float acc = 0.0f;
    for (int64_t k = 0; k < n_items; k++) {
        while (!ptx::mbarrier_try_wait_parity(&bar[slot], (phase >> slot) & 1u)) {
        }
        phase ^= 1u << slot;
        issue(slot == 0 ? D - 1 : slot - 1);
#pragma unroll
        for (int q = 0; q < PPL; q++)
            mmv_q8_pair<1>(ring + slot * SLOT + q * UB, 64, lane, xa, xl, sa, a.ne0 / 32, (seg * PPL + q) * 64, 1,
                           &acc);
        __syncwarp();
        if (++seg == nseg) {
            const float g = warp_sum(acc);
            if (lane == 0)
                a.y[0][row] = g;
            acc = 0.0f;
            seg = 0;
            row += gstride;
        }
        slot = slot == D - 1 ? 0 : slot + 1;
    }
}

template <int D, int PPL>
static void run_wr(const char *tag, const shape &sh, mmv_args a, std::vector<uint8_t *> &bufs, int bps, size_t bytes,
                   const std::vector<double> &ref, bool q8d = false, bool carve = false, void (*kx)(const mmv_args) = nullptr)
{
    if (sh.ne0 % (2048 * PPL))
        return;
    void (*k)(const mmv_args) = kx ? kx : q8d ? mmv_q8d_kernel<MEMRA_TYPE_Q8_0, MMV_Q8D_DEFAULT> : wr_kernel<D, PPL>;
    const size_t smem = (size_t)8 * D * PPL * UB + mmv_x_bytes<MEMRA_TYPE_Q8_0>(sh.ne0, 1);
    CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    CK(cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout,
                            carve ? cudaSharedmemCarveoutMaxShared : cudaSharedmemCarveoutDefault));
    int occ = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, k, 256, smem));
    if (occ < 1) {
        printf("  %-34s skipped: does not fit\n", tag);
        return;
    }
    if (bps > occ)
        bps = occ;
    const unsigned grid = (unsigned)(bps * g_sms);
    auto launch = [&](int i) {
        a.W[0] = bufs[i];
        a.xsm = 1;
        CK(memra__launch(k, dim3(grid), dim3(256), smem, (cudaStream_t)0, a));
    };
    const double us = time_us(launch, (int)bufs.size(), 40);
    std::vector<float> h(sh.rows);
    CK(cudaMemset(a.y[0], 0xff, sh.rows * 4)); /* NaN: rows a variant skips fail the check */
    launch(0);
    CK(cudaMemcpy(h.data(), a.y[0], sh.rows * 4, cudaMemcpyDeviceToHost));
    double err = 0;
    for (int64_t r = 0; r < sh.rows; r++)
        err = worse(err, fabs(h[r] - ref[r]) / (1e-3 + fabs(ref[r])));
    printf("  %-34s %8.2f us %7.0f GB/s  (%d blk/SM of %d, smem %zu)  rel err %.2e\n", tag, us, bytes / us / 1e3, bps,
           occ, smem, err);
}

/* The copy ceiling: each thread U 16-byte streaming loads in flight. */
template <int WARPS, int KPW, int NS, bool MATH>
static void run_ring(const char *tag, const shape &sh, mmv_args a, std::vector<uint8_t *> &bufs, float *part, int bps,
                     size_t bytes, const std::vector<double> *ref)
{
    auto k = ring_kernel<WARPS, KPW, NS, MATH>;
    const size_t smem = (size_t)NS * WARPS * KPW * UB + mmv_x_bytes<MEMRA_TYPE_Q8_0>(sh.ne0, 1);
    CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    int occ = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, k, WARPS * 32, smem));
    if (occ < bps) {
        printf("  %-34s skipped: %d blocks/SM fit\n", tag, occ);
        return;
    }
    a.xsm = 1;
    const unsigned grid = (unsigned)(bps * g_sms);
    auto launch = [&](int i) {
        a.W[0] = bufs[i];
        CK(memra__launch(k, dim3(grid), dim3(WARPS * 32), smem, (cudaStream_t)0, a, part));
    };
    const double us = time_us(launch, (int)bufs.size(), 40);
    double err = 0;
    if (ref && MATH) {
        const int64_t upr = sh.ne0 / 2048;
        std::vector<float> h(sh.rows * upr);
        a.W[0] = bufs[0];
        CK(memra__launch(k, dim3(grid), dim3(WARPS * 32), smem, (cudaStream_t)0, a, part));
        CK(cudaMemcpy(h.data(), part, h.size() * 4, cudaMemcpyDeviceToHost));
        for (int64_t r = 0; r < sh.rows; r++) {
            double s = 0;
            for (int64_t u = 0; u < upr; u++)
                s += h[r * upr + u];
            err = worse(err, fabs(s - (*ref)[r]) / (1e-3 + fabs((*ref)[r])));
        }
    }
    printf("  %-34s %8.2f us %7.0f GB/s  (%d blk/SM, smem %zu)%s", tag, us, bytes / us / 1e3, occ, smem,
           ref && MATH ? "" : "\n");
    if (ref && MATH)
        printf("  rel err %.2e\n", err);
}

int main(void)
{
    CK(cudaDeviceGetAttribute(&g_sms, cudaDevAttrMultiProcessorCount, 0));
    std::vector<shape> shapes = {{"ffn_up 4096x12288", 4096, 12288},
                                 {"ffn_down 12288x4096", 12288, 4096},
                                 {"gate+up 4096x24576", 4096, 24576},
                                 {"out 4096x4096", 4096, 4096},
                                 {"head 4096x248320", 4096, 248320}};
    /* MMV_LAB_SHAPES="NE0xROWS,...": other shapes instead (names kept for the printout) */
    static char names[16][32];
    if (const char *env = getenv("MMV_LAB_SHAPES")) {
        shapes.clear();
        for (const char *p = env; *p && shapes.size() < 16;) {
            long long ne0, rows;
            int used = 0;
            if (sscanf(p, "%lldx%lld%n", &ne0, &rows, &used) != 2)
                break;
            char *nm = names[shapes.size()];
            snprintf(nm, sizeof names[0], "%lldx%lld", ne0, rows);
            shapes.push_back({nm, (int64_t)ne0, (int64_t)rows});
            p += used;
            if (*p == ',')
                p++;
        }
    }
    unsigned *sink;
    CK(cudaMalloc(&sink, 4));
    for (const shape &sh : shapes) {
        const size_t rb = (size_t)sh.ne0 / 32 * 34, bytes = rb * sh.rows;
        const int nbuf = (int)((600u << 20) / bytes) + 1;
        const std::vector<uint8_t> host = lab_q8_bytes(bytes);
        std::vector<float> hx(sh.ne0);
        for (int64_t i = 0; i < sh.ne0; i++)
            hx[i] = (float)((int)(i * 2654435761u % 2001) - 1000) / 1000.0f;
        std::vector<double> ref(sh.rows);
        for (int64_t r = 0; r < sh.rows; r++) {
            double s = 0;
            for (int64_t b = 0; b < sh.ne0 / 32; b++) {
                const uint8_t *p = &host[r * rb + b * 34];
                uint16_t h;
                memcpy(&h, p, 2);
                double t = 0;
                for (int i = 0; i < 32; i++)
                    t += (double)(int8_t)p[2 + i] * hx[b * 32 + i];
                s += t * h_f16(h);
            }
            ref[r] = s;
        }
        std::vector<uint8_t *> bufs(nbuf);
        for (int i = 0; i < nbuf; i++) {
            CK(cudaMalloc(&bufs[i], bytes));
            CK(cudaMemcpy(bufs[i], host.data(), bytes, cudaMemcpyHostToDevice));
        }
        float *x, *y, *part;
        CK(cudaMalloc(&x, sh.ne0 * 4));
        CK(cudaMalloc(&y, sh.rows * 4));
        CK(cudaMalloc(&part, sh.rows * (sh.ne0 / 2048) * 4));
        CK(cudaMemcpy(x, hx.data(), sh.ne0 * 4, cudaMemcpyHostToDevice));
        printf("%s: %.1f MB, %d copies\n", sh.name, bytes / 1e6, nbuf);

        mmv_args a;
        memset(&a, 0, sizeof a);
        a.nb1[0] = rb;
        a.y[0] = y;
        a.ldy[0] = sh.rows;
        a.vrow0[1] = sh.rows;
        a.nw = 1;
        a.ne0 = sh.ne0;
        a.x = x;
        a.ldx = sh.ne0;
        a.n_rows = 1;
        a.xdiv = 1;
        {
            auto launch = [&](int i) {
                a.W[0] = bufs[i];
                if (!mmv_launch<MEMRA_TYPE_Q8_0>(a, 1, 1, g_sms, (cudaStream_t)0, false))
                    exit(1);
            };
            const double us = time_us(launch, nbuf, 40);
            std::vector<float> h(sh.rows);
            a.W[0] = bufs[0];
            CK(cudaMemset(y, 0xff, sh.rows * 4));
            mmv_launch<MEMRA_TYPE_Q8_0>(a, 1, 1, g_sms, (cudaStream_t)0, false);
            CK(cudaMemcpy(h.data(), y, sh.rows * 4, cudaMemcpyDeviceToHost));
            double err = 0;
            for (int64_t r = 0; r < sh.rows; r++)
                err = worse(err, fabs(h[r] - ref[r]) / (1e-3 + fabs(ref[r])));
            printf("  %-34s %8.2f us %7.0f GB/s  rel err %.2e\n", "production (warp rings)", us, bytes / us / 1e3, err);
        }
        for (int U : {4, 8}) {
            auto launch = [&](int i) {
                const size_t n16 = bytes / 16;
                if (U == 4)
                    CK(memra__launch(stream_kernel<4>, dim3(4 * g_sms), dim3(512), 0, (cudaStream_t)0,
                                     (const uint4 *)bufs[i], n16, sink));
                else
                    CK(memra__launch(stream_kernel<8>, dim3(4 * g_sms), dim3(512), 0, (cudaStream_t)0,
                                     (const uint4 *)bufs[i], n16, sink));
            };
            const double us = time_us(launch, nbuf, 40);
            printf("  %-34s %8.2f us %7.0f GB/s\n", U == 4 ? "stream ceiling U4" : "stream ceiling U8", us,
                   bytes / us / 1e3);
        }
        run_wr<3, 1>("wr d3 ppl1", sh, a, bufs, 3, bytes, ref);
        for (uint8_t *b : bufs)
            cudaFree(b);
        cudaFree(x);
        cudaFree(y);
        cudaFree(part);
    }
    return 0;
}

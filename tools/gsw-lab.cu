/* Batched Q8_0 step lab (device only, not part of the library): times the
 * fast tier's Q8_0 kernel of batched decode steps alone at 1-32 x rows of
 * the Qwen3.5-9B shapes: gsw_kernel (cuda/gemm_sw.cu: x in f16, each quant
 * made an f16, mma m16n8k16, 8 weight rows a warp), with the slicing and
 * ring depth its launch in cuda/gemm_s.cu picks, against a plain
 * streaming read of the same bytes (the ceiling). Weights rotate over
 * copies larger than L2; each kernel's error against a double reference is
 * printed, relative to the largest output (x has one element in 64 thirty
 * times the others: the outliers that set a block's scale).
 *
 *   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Icuda -Ilib \
 *        -Iinclude tools/gsw-lab.cu -o /tmp/gsw-lab && /tmp/gsw-lab
 */
#include <string.h>
#include <vector>

#include "gemm_sw.cu" /* the library's kernel, compiled into the lab */
#include "lab.cuh"

__global__ void to_half_kernel(const float *x, __half *h, int64_t n)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        h[i] = __float2half_rn(x[i]);
}

struct shape {
    const char *name;
    int64_t K, rows;
};

/* gsw_run's slicing (cuda/gemm_s.cu): slices of at most
 * GSW_KT_MAX k tiles, enough blocks of 64 rows for three an SM */
static void slices(gs_args &a, int64_t rows, int sms)
{
    const int64_t nkt = a.K / GS_KT, grid = (rows + 63) / 64;
    int64_t split = (nkt + GSW_KT_MAX - 1) / GSW_KT_MAX;
    const int64_t want = (3 * (int64_t)sms + grid - 1) / grid;
    split = split < want ? want : split;
    split = split > nkt ? nkt : split;
    a.kt_per = (int)((nkt + split - 1) / split);
    a.split = (int)((nkt + a.kt_per - 1) / a.kt_per);
}

int main(void)
{
    int sms;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const shape shapes[] = {{"gate+up 4096x24576", 4096, 24576},
                            {"down 12288x4096", 12288, 4096},
                            {"out 4096x4096", 4096, 4096}};
    const int ns[] = {1, 2, 4, 8, 16, 32};
    const int NMAX = 32;
    unsigned *sink;
    CK(cudaMalloc(&sink, 4));
    int *count;
    CK(cudaMalloc(&count, 1 << 20));
    CK(cudaMemset(count, 0, 1 << 20));
    for (const shape &sh : shapes) {
        const size_t rb = (size_t)sh.K / 32 * 34, bytes = rb * sh.rows;
        const int nbuf = (int)((600u << 20) / bytes) + 1;
        const std::vector<uint8_t> host = lab_q8_bytes(bytes);
        std::vector<float> hx((size_t)NMAX * sh.K);
        uint64_t st = 0x9e3779b97f4a7c15ull ^ bytes;
        for (size_t i = 0; i < hx.size(); i++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            hx[i] = ((float)(st >> 40) / (float)(1 << 24) * 2.0f - 1.0f) * ((st >> 20) % 64 == 0 ? 30.0f : 1.0f);
        }
        std::vector<double> ref((size_t)NMAX * sh.rows);
        std::vector<double> rmax(NMAX + 1, 0.0); /* rmax[n]: the largest output of the first n rows */
        for (int n = 0; n < NMAX; n++) {
            for (int64_t r = 0; r < sh.rows; r++) {
                double s = 0;
                for (int64_t b = 0; b < sh.K / 32; b++) {
                    const uint8_t *p = &host[r * rb + b * 34];
                    uint16_t h;
                    memcpy(&h, p, 2);
                    double t = 0;
                    for (int i = 0; i < 32; i++)
                        t += (double)(int8_t)p[2 + i] * hx[(size_t)n * sh.K + b * 32 + i];
                    s += t * h_f16(h);
                }
                ref[(size_t)n * sh.rows + r] = s;
                rmax[n + 1] = fmax(rmax[n + 1], fabs(s));
            }
            rmax[n + 1] = fmax(rmax[n + 1], rmax[n]);
        }
        std::vector<uint8_t *> bufs(nbuf);
        for (int i = 0; i < nbuf; i++) {
            CK(cudaMalloc(&bufs[i], bytes));
            CK(cudaMemcpy(bufs[i], host.data(), bytes, cudaMemcpyHostToDevice));
        }
        float *x, *y, *part;
        __half *xh;
        CK(cudaMalloc(&x, hx.size() * 4));
        CK(cudaMalloc(&xh, hx.size() * 2));
        CK(cudaMalloc(&y, (size_t)NMAX * sh.rows * 4));
        CK(cudaMemcpy(x, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));
        to_half_kernel<<<(unsigned)((hx.size() + 255) / 256), 256>>>(x, xh, (int64_t)hx.size());
        CK(cudaDeviceSynchronize());

        const double ceil_us = time_us(
            [&](int i) { stream_kernel<4><<<sms * 4, 512>>>((const uint4 *)bufs[i], bytes / 16, sink); }, nbuf, 50);
        printf("%s: %.1f MB, %d copies; streaming read %.2f us (%.2f TB/s)\n", sh.name, bytes / 1e6, nbuf, ceil_us,
               bytes / ceil_us / 1e6);

        gs_args a;
        memset(&a, 0, sizeof a);
        a.nb1[0] = rb;
        a.vrow0[1] = sh.rows;
        a.nw = 1;
        a.K = sh.K;
        a.X = xh;
        a.ldx = sh.K;
        a.ldy[0] = sh.rows;
        a.y[0] = y;
        a.epi = MEMRA_MM_STORE;
        a.count = count;
        slices(a, sh.rows, sms);
        CK(cudaMalloc(&part, (size_t)a.split * ((sh.rows + 7) / 8) * NMAX * 8 * 4));
        a.part = part;
        const unsigned grid_w = (unsigned)((sh.rows / GSW_ROWS + GSW_WARPS - 1) / GSW_WARPS);
        for (int n : ns) {
            a.n = n;
            auto run = [&](const char *tag, auto launch) {
                CK(cudaMemset(y, 0xff, (size_t)NMAX * sh.rows * 4)); /* NaN: outputs never written fail */
                a.W[0] = bufs[0];
                if (!launch())
                    printf("  n=%d %s: launch failed\n", n, tag);
                CK(cudaDeviceSynchronize());
                const double us = time_us(
                    [&](int i) {
                        a.W[0] = bufs[i];
                        launch();
                    },
                    nbuf, 50);
                std::vector<float> hy((size_t)n * sh.rows);
                CK(cudaMemcpy(hy.data(), y, hy.size() * 4, cudaMemcpyDeviceToHost));
                double err = 0;
                for (size_t i = 0; i < hy.size(); i++)
                    err = worse(err, fabs(hy[i] - ref[i]) / rmax[n]);
                printf("  n=%2d %-4s ring %d %8.2f us  %.2f TB/s  %3.0f%% of the read  err %.2e\n", n, tag, a.st, us,
                       bytes / us / 1e6, 100.0 * ceil_us / us, err);
            };
            const size_t xs_b = (size_t)n * ((size_t)a.kt_per * GS_KT + 16) * sizeof(__half);
            a.st = 3;
            while (a.st > 2 && (size_t)GSW_WARPS * a.st * GSW_SLOT + xs_b > GSW_SMEM_2)
                a.st--;
            const size_t smem_w = (size_t)GSW_WARPS * a.st * GSW_SLOT + xs_b;
            run("gsw", [&]() { return gsw_launch(a, grid_w, smem_w, 0); });
        }
        for (uint8_t *b : bufs)
            cudaFree(b);
        cudaFree(x);
        cudaFree(xh);
        cudaFree(y);
        cudaFree(part);
    }
    return 0;
}

/* The K-quant matvec's lane arithmetic (cuda/mmv_kq_lane.cuh) on the CPU:
 * the kernel's own decoding, sums and scale factoring, run lane by lane over
 * ring slots laid out as the kernel's bulk copies lay them out (segments
 * from the 16-byte boundary below them), against the float64 reference
 * (memra__dot_row), and the packed MoE walk's slots and butterfly and the
 * dense kernel's packed short segments (their walk, slots and last add)
 * against the one-item walk, bit for bit. Needs nvcc, not a GPU: the device-side
 * orchestration (ring, barriers, stores) is the kernel check's (matmul.kq.*,
 * moe.fused.kq.*). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mmv_kq_lane.cuh"

extern "C" {
#include <cmocka.h> /* no C++ guards in Debian 12's cmocka */

#include "quant.h"
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rng_next(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static float rng_unif(float lo, float hi)
{
    return lo + (hi - lo) * (float)((rng_next() >> 40) * 0x1p-24);
}

static void put_fp16(uint8_t *p, float v)
{
    const __half h = __float2half(v);
    memcpy(p, &h, 2);
}

/* Random bytes with sane scales (the kernel check's weights), NBLK
 * super-blocks (Q4_0: eight blocks each). */
static void fill_blocks(int t, uint8_t *b, int64_t nblk)
{
    const int bb = t == MEMRA_TYPE_Q5_K ? 176 : t == MEMRA_TYPE_Q6_K ? 210 : 144;
    for (int64_t i = 0; i < nblk; i++, b += bb) {
        for (int j = 0; j < bb; j++)
            b[j] = (uint8_t)(rng_next() >> 56);
        const float d = rng_unif(0.002f, 0.02f), m = rng_unif(0.002f, 0.02f);
        if (t == MEMRA_TYPE_Q4_0) {
            for (int j = 0; j < 8; j++)
                put_fp16(b + 18 * j, rng_unif(0.002f, 0.02f) * (j & 1 ? -1.0f : 1.0f));
        } else if (t == MEMRA_TYPE_Q6_K) {
            put_fp16(b + 208, d * 0.05f);
        } else {
            put_fp16(b, d * 0.1f);
            put_fp16(b + 2, m * 0.1f);
        }
    }
}

static int64_t xp64(int64_t i)
{
    return i + (i >> 6) * 4;
}

/* x rows staged as mmv_stage_x<true> stages them: times 2^64, padded after
 * every 64, then the 32-sums of each row times 2^-78, then (Q6_K) the
 * 16-sums. Returns the row stride in floats. */
static int64_t stage(const float *x, int nr, int64_t ne0, float *xs, float **s32, float **s16)
{
    const int64_t xl = xp64((ne0 + 63) & ~(int64_t)63), nbr = ne0 / 32;
    for (int r = 0; r < nr; r++)
        for (int64_t i = 0; i < ne0; i++)
            xs[r * xl + xp64(i)] = x[r * ne0 + i] * 0x1p64f;
    *s32 = xs + nr * xl;
    *s16 = *s32 + nr * nbr;
    for (int r = 0; r < nr; r++) {
        for (int64_t g = 0; g < nbr; g++) {
            float s = 0.0f;
            for (int i = 0; i < 32; i++)
                s += xs[r * xl + xp64(32 * g + i)];
            (*s32)[r * nbr + g] = s * 0x1p-71f * 0x1p-71f;
        }
        for (int64_t g = 0; g < 2 * nbr; g++) {
            float s = 0.0f;
            for (int i = 0; i < 16; i++)
                s += xs[r * xl + xp64(16 * g + i)];
            (*s16)[r * 2 * nbr + g] = s * 0x1p-71f * 0x1p-71f;
        }
    }
    return xl;
}

static float warp_sum_host(const float *v)
{
    float t[32];
    memcpy(t, v, sizeof t);
    for (int o = 16; o > 0; o >>= 1) {
        float n[32];
        for (int l = 0; l < 32; l++)
            n[l] = t[l] + t[l ^ o];
        memcpy(t, n, sizeof t);
    }
    return t[0];
}

/* The kernel's walk for one group of rows (W[m], NULL past the last) and
 * NR x rows: Y[r][m]. */
template <int T, int R>
static void kq_group(const uint8_t *const (&w)[KQ_M], int64_t ne0, const float *xs, int64_t xl, const float *s,
                     int nr, float (&y)[R][KQ_M])
{
    constexpr int bb = kq<T>::bb, seg = KQ_SBS * bb, slot = seg + 32;
    const int nsb = (int)(ne0 / 256), nseg = (nsb + KQ_SBS - 1) / KQ_SBS;
    float lanes[R][KQ_M][32] = {};
    for (int cs = 0; cs < nseg; cs++) {
        const int nb = nsb - cs * KQ_SBS < KQ_SBS ? nsb - cs * KQ_SBS : KQ_SBS;
        static uint8_t buf[KQ_M][slot + 64];
        kq_mem rd[KQ_M];
        uint32_t off[KQ_M] = {0, 0};
        for (int m = 0; m < KQ_M; m++) {
            memset(buf[m], 0xA5, sizeof buf[m]); /* bytes the copy leaves must not matter */
            rd[m].p = buf[m];
            if (!w[m])
                continue;
            const uintptr_t p = (uintptr_t)(w[m] + (size_t)cs * seg);
            off[m] = (uint32_t)(p & 15);
            const uint32_t n = (off[m] + nb * bb + 15) & ~15u;
            memcpy(buf[m], (const uint8_t *)(p & ~(uintptr_t)15), n);
        }
        for (int lane = 0; lane < 32; lane++) {
            if ((lane >> 2) >= nb)
                continue;
            float part[R][KQ_M];
            for (int r = 0; r < R; r++)
                for (int m = 0; m < KQ_M; m++)
                    part[r][m] = lanes[r][m][lane];
            const kq_mem xr = {(const uint8_t *)xs}, sr = {(const uint8_t *)s};
            /* the kernel's three forms of the loop (kq_lane_v1) */
            const uint32_t nbr = (uint32_t)(ne0 / 32);
            kq_lane_v1<T, R>(rd, off, w[1] != NULL, lane, (uint32_t)cs, xr, (uint32_t)xl, sr, nbr, nr, part);
            for (int r = 0; r < R; r++)
                for (int m = 0; m < KQ_M; m++)
                    lanes[r][m][lane] = part[r][m];
        }
    }
    for (int r = 0; r < R; r++)
        for (int m = 0; m < KQ_M; m++)
            y[r][m] = warp_sum_host(lanes[r][m]);
}

/* NROWS weight rows of NE0 elements starting SHIFT bytes past a 16-byte
 * boundary, three x rows of magnitude XMAG: every row against the
 * reference (NMSE), the three x rows in one walk against one walk each and
 * a row paired against the row alone (bit for bit). */
template <int T> static void check(int64_t ne0, int nrows, size_t shift, float xmag)
{
    const int bb = kq<T>::bb;
    const size_t row = (size_t)(ne0 / 256) * bb;
    uint8_t *wbuf = (uint8_t *)aligned_alloc(64, (row * nrows + 256 + 63) & ~(size_t)63);
    assert_non_null(wbuf);
    uint8_t *w0 = wbuf + 64 + shift;
    fill_blocks(T, w0, (ne0 / 256) * nrows);
    enum { NX = 3 };
    float *x = (float *)malloc(sizeof(float) * NX * ne0);
    const int64_t xl = xp64((ne0 + 63) & ~(int64_t)63);
    float *xs = (float *)calloc((size_t)(NX * xl + NX * ne0 / 32 + NX * ne0 / 16), sizeof(float));
    assert_non_null(x);
    assert_non_null(xs);
    for (int64_t i = 0; i < NX * ne0; i++)
        x[i] = rng_unif(-1.0f, 1.0f) * xmag;
    float *s32, *s16;
    stage(x, NX, ne0, xs, &s32, &s16);
    const float *s = kq<T>::s16 ? s16 : s32;
    double err = 0, ref2 = 0;
    for (int g = 0; 2 * g < nrows; g++) {
        const uint8_t *const w[KQ_M] = {w0 + 2 * g * row, 2 * g + 1 < nrows ? w0 + (2 * g + 1) * row : NULL};
        float y[NX][KQ_M];
        kq_group<T, NX>(w, ne0, xs, xl, s, NX, y);
        for (int m = 0; m < KQ_M && w[m]; m++) {
            for (int r = 0; r < NX; r++) {
                const double ref = memra__dot_row((memra_type_t)T, w[m], x + r * ne0, ne0);
                err += (y[r][m] - ref) * (y[r][m] - ref);
                ref2 += ref * ref;
                /* one x row at a time (R = 1), and the row without its pair */
                const float *xsr = xs + r * xl;
                const float *sr1 = s + r * (kq<T>::s16 ? 2 : 1) * (ne0 / 32);
                float y1[1][KQ_M];
                kq_group<T, 1>(w, ne0, xsr, xl, sr1, 1, y1);
                assert_memory_equal(&y1[0][m], &y[r][m], sizeof(float));
                const uint8_t *const alone[KQ_M] = {w[m], NULL};
                kq_group<T, 1>(alone, ne0, xsr, xl, sr1, 1, y1);
                assert_memory_equal(&y1[0][0], &y[r][m], sizeof(float));
            }
        }
    }
    const double nmse = err / (ref2 > 0 ? ref2 : 1);
    if (!(nmse <= 1e-11))
        fail_msg("type %d, %lld wide, shift %zu, |x| %g: NMSE %.3g", T, (long long)ne0, shift, xmag, nmse);
    free(xs);
    free(x);
    free(wbuf);
}

/* A packed item group's sum: its L lanes' parts from 0.0f + part through
 * the xor butterfly over the group, as the kernel adds them (lane 0's). */
static float group_sum(const float *part, int L)
{
    float t[32];
    for (int l = 0; l < L; l++)
        t[l] = 0.0f + part[l];
    for (int o = L >> 1; o > 0; o >>= 1) {
        float n[32];
        for (int l = 0; l < L; l++)
            n[l] = t[l] + t[l ^ o];
        memcpy(t, n, sizeof(float) * L);
    }
    return t[0];
}

/* The packed walk (mmv_moe_kq_kernel<T, DOWN, true>) of rows of NSB super-blocks:
 * one slot of kq_seg<T>::item bytes holding G items (rows 2g and 2g + 1
 * of W against x row g; the last item without its row 1), each row copied
 * into its sub-slot from the 16-byte boundary below it as mmv_issue_sub
 * copies it, item g on lanes [g L, g L + L) running kq_lane as lane
 * l = lane % L, the group's butterfly from 0.0f + part: every dot bit for
 * bit the one-item walk's (kq_group: warp_sum over 32 lanes). */
template <int T> static void check_pack(int nsb, size_t shift)
{
    const int bb = kq<T>::bb, L = kq_pack_lanes(nsb), G = kq_pack_items<T>(nsb, L);
    const int64_t ne0 = 256 * nsb;
    const uint32_t sub = kq_pack_sub<T>(nsb);
    assert_true(G >= 1 && G * L <= 32 && (uint32_t)(G * KQ_M) * sub <= (uint32_t)kq_seg<T>::item);
    const size_t row = (size_t)nsb * bb;
    const int nrows = 2 * G - 1;
    uint8_t *wbuf = (uint8_t *)aligned_alloc(64, (row * nrows + 256 + 63) & ~(size_t)63);
    assert_non_null(wbuf);
    uint8_t *w0 = wbuf + 64 + shift;
    fill_blocks(T, w0, (int64_t)nsb * nrows);
    const int64_t xl = xp64((ne0 + 63) & ~(int64_t)63);
    float *x = (float *)malloc(sizeof(float) * G * ne0);
    float *xs = (float *)calloc((size_t)(G * xl + G * ne0 / 32 + G * ne0 / 16), sizeof(float));
    assert_non_null(x);
    assert_non_null(xs);
    for (int64_t i = 0; i < G * ne0; i++)
        x[i] = rng_unif(-1.0f, 1.0f);
    float *s32, *s16;
    stage(x, G, ne0, xs, &s32, &s16);
    const float *s = kq<T>::s16 ? s16 : s32;
    const int64_t sl = (kq<T>::s16 ? 2 : 1) * (ne0 / 32);

    static uint8_t slot[kq_seg<MEMRA_TYPE_Q6_K>::item + 64];
    memset(slot, 0xA5, sizeof slot);
    uint32_t off[32][KQ_M] = {};
    for (int j = 0; j < KQ_M * G; j++) {
        if (j >= nrows)
            continue; /* the last item's row 1: absent */
        const uintptr_t p = (uintptr_t)(w0 + (size_t)j * row);
        const uint32_t n = ((uint32_t)(p & 15) + (uint32_t)row + 15) & ~15u;
        assert_true(n <= sub);
        off[j / KQ_M][j % KQ_M] = (uint32_t)(p & 15);
        memcpy(slot + (size_t)j * sub, (const uint8_t *)(p & ~(uintptr_t)15), n);
    }
    float lanes[KQ_M][32] = {};
    for (int lane = 0; lane < 32; lane++) {
        const int gi = lane / L, gl = lane % L;
        if (gi >= G || (gl >> 2) >= nsb)
            continue;
        const kq_mem wr[KQ_M] = {{slot + (size_t)gi * KQ_M * sub}, {slot + (size_t)(gi * KQ_M + 1) * sub}};
        const kq_mem xr = {(const uint8_t *)(xs + gi * xl)}, sr = {(const uint8_t *)(s + gi * sl)};
        float part[1][KQ_M] = {{0.0f, 0.0f}};
        kq_lane<T, 1, KQ_ROW1_RUN>(wr, off[gi], 2 * gi + 1 < nrows, gl, 0u, xr, (uint32_t)xl, sr,
                                   (uint32_t)(ne0 / 32), 1, part);
        for (int m = 0; m < KQ_M; m++)
            lanes[m][lane] = part[0][m];
    }
    for (int g = 0; g < G; g++) {
        const uint8_t *const w[KQ_M] = {w0 + 2 * g * row, 2 * g + 1 < nrows ? w0 + (2 * g + 1) * row : NULL};
        float y1[1][KQ_M];
        kq_group<T, 1>(w, ne0, xs + g * xl, xl, s + g * sl, 1, y1);
        for (int m = 0; m < KQ_M && w[m]; m++) {
            const float t = group_sum(&lanes[m][g * L], L);
            if (memcmp(&t, &y1[0][m], sizeof(float)) != 0)
                fail_msg("type %d, %d super-blocks, shift %zu: item %d row %d packed %a, alone %a", T, nsb, shift, g,
                         m, t, y1[0][m]);
        }
    }
    free(xs);
    free(x);
    free(wbuf);
}

/* The group butterfly's claim on its own: lanes past the items' shares
 * hold +0 in the one-item walk, so warp_sum equals 0.0f + part summed over
 * the group's lanes, -0 and all */
static void test_pack_butterfly(void **state)
{
    (void)state;
    for (int L = 4; L <= 16; L *= 2)
        for (int it = 0; it < 2000; it++) {
            float v[32] = {};
            for (int l = 0; l < L; l++) {
                const uint64_t r = rng_next();
                v[l] = r % 7 == 0 ? -0.0f : r % 7 == 1 ? 0.0f : rng_unif(-1.0f, 1.0f) * ldexpf(1.0f, (int)(r % 40) - 20);
            }
            const float t = group_sum(v, L), w = warp_sum_host(v);
            assert_memory_equal(&t, &w, sizeof(float));
        }
}

/* every packed width of every type; Q6_K at every even start */
static void test_pack(void **state)
{
    (void)state;
    for (int nsb = 1; nsb <= 4; nsb++) {
        check_pack<MEMRA_TYPE_Q4_K>(nsb, 0);
        check_pack<MEMRA_TYPE_Q5_K>(nsb, 0);
        check_pack<MEMRA_TYPE_Q4_0>(nsb, 0);
        for (size_t sh = 0; sh < 16; sh += 2)
            check_pack<MEMRA_TYPE_Q6_K>(nsb, sh);
    }
    /* the 35B-A3B's down rows (2 super-blocks) pack four Q4_K or Q5_K items, three Q6_K */
    assert_int_equal(kq_pack_items<MEMRA_TYPE_Q4_K>(2, kq_pack_lanes(2)), 4);
    assert_int_equal(kq_pack_items<MEMRA_TYPE_Q5_K>(2, kq_pack_lanes(2)), 4);
    assert_int_equal(kq_pack_items<MEMRA_TYPE_Q6_K>(2, kq_pack_lanes(2)), 3);
}

/* The short segments' walk (kq_short_at, mmv_kq_pack_kernel): every row
 * pair's full segments once, in order and back to back, after the packed
 * item that holds its short segment, which holds it once; the item count
 * kq_short_items. */
static void test_short_walk(void **state)
{
    (void)state;
    for (int G = 2; G <= 8; G++)
        for (int nf = 0; nf <= 5; nf++)
            for (int nwg = 1; nwg <= 3 * G + 1; nwg++) {
                const int n = kq_short_items(nwg, G, nf);
                int packed[64] = {}, next_s[64] = {}, last = -1;
                for (int k = 0; k < n; k++) {
                    const kq_short_pos p = kq_short_at(k, G, nf);
                    assert_true(p.b % G == 0 && p.b < nwg);
                    if (p.j < 0) {
                        for (int g = p.b; g < p.b + G && g < nwg; g++) {
                            assert_int_equal(packed[g], 0);
                            packed[g] = 1;
                        }
                        continue;
                    }
                    const int g = p.b + p.j;
                    assert_true(p.j < G && g < nwg && nf > 0);
                    assert_int_equal(packed[g], 1);
                    assert_int_equal(p.s, next_s[g]);
                    assert_true(p.s == 0 || last == g);
                    next_s[g]++;
                    last = g;
                }
                for (int g = 0; g < nwg; g++) {
                    assert_int_equal(packed[g], 1);
                    assert_int_equal(next_s[g], nf);
                }
            }
}

/* Rows of NF full segments and NS short super-blocks as mmv_kq_pack_kernel
 * sums them: the full segments on all 32 lanes, the G row pairs' short
 * segments in one slot of sub-slots (copied from the 16-byte boundary
 * below, as mmv_issue_sub copies), row pair g's on lanes [g L, g L + L)
 * from +0, added last into lane l's sum from lane g L + l; then warp_sum:
 * bit for bit the one-item walk (kq_group). */
template <int T> static void check_short(int nf, int ns, size_t shift)
{
    const int bb = kq<T>::bb, nsb = KQ_SBS * nf + ns, L = kq_short_lanes(nsb), G = kq_short_groups<T>(nsb);
    assert_true(L > 0 && G >= 2 && G * L <= 32);
    const int64_t ne0 = 256 * nsb;
    const uint32_t sub = kq_pack_sub<T>(ns);
    const size_t row = (size_t)nsb * bb, seg = (size_t)KQ_SBS * bb;
    const int nrows = 2 * G - 1; /* the last pair without its row 1 */
    uint8_t *wbuf = (uint8_t *)aligned_alloc(64, (row * nrows + 256 + 63) & ~(size_t)63);
    assert_non_null(wbuf);
    uint8_t *w0 = wbuf + 64 + shift;
    fill_blocks(T, w0, (int64_t)nsb * nrows);
    const int64_t xl = xp64((ne0 + 63) & ~(int64_t)63);
    float *x = (float *)malloc(sizeof(float) * ne0);
    float *xs = (float *)calloc((size_t)(xl + ne0 / 32 + ne0 / 16), sizeof(float));
    assert_non_null(x);
    assert_non_null(xs);
    for (int64_t i = 0; i < ne0; i++)
        x[i] = rng_unif(-1.0f, 1.0f);
    float *s32, *s16;
    stage(x, 1, ne0, xs, &s32, &s16);
    const float *s = kq<T>::s16 ? s16 : s32;
    const kq_mem xr = {(const uint8_t *)xs}, sr = {(const uint8_t *)s};
    const uint32_t nbr = (uint32_t)(ne0 / 32);

    /* the packed item: every pair's short segment */
    static uint8_t slot[kq_seg<MEMRA_TYPE_Q6_K>::item + 64];
    memset(slot, 0xA5, sizeof slot);
    for (int j = 0; j < nrows; j++) {
        const uintptr_t p = (uintptr_t)(w0 + (size_t)j * row + (size_t)nf * seg);
        const uint32_t n = ((uint32_t)(p & 15) + (uint32_t)ns * bb + 15) & ~15u;
        assert_true(n <= sub && (uint32_t)(KQ_M * G) * sub <= (uint32_t)kq_seg<T>::item);
        memcpy(slot + (size_t)j * sub, (const uint8_t *)(p & ~(uintptr_t)15), n);
    }
    float ts[32][KQ_M] = {};
    for (int lane = 0; lane < 32; lane++) {
        const int gi = lane / L, gl = lane % L;
        if (gi >= G || (gl >> 2) >= ns)
            continue;
        const uint32_t off[KQ_M] = {(uint32_t)((uintptr_t)(w0 + 2 * gi * row) & 15),
                                    (uint32_t)((uintptr_t)(w0 + (2 * gi + 1) * row) & 15)};
        const kq_mem wr[KQ_M] = {{slot + (size_t)gi * KQ_M * sub}, {slot + (size_t)(gi * KQ_M + 1) * sub}};
        float pt[1][KQ_M] = {{0.0f, 0.0f}};
        kq_lane<T, 1, KQ_ROW1_RUN>(wr, off, 2 * gi + 1 < nrows, gl, (uint32_t)nf, xr, (uint32_t)xl, sr, nbr, 1, pt);
        for (int m = 0; m < KQ_M; m++)
            ts[lane][m] = pt[0][m];
    }
    for (int g = 0; g < G; g++) {
        const uint8_t *const w[KQ_M] = {w0 + 2 * g * row, 2 * g + 1 < nrows ? w0 + (2 * g + 1) * row : NULL};
        const bool v1 = w[1] != NULL;
        float lanes[KQ_M][32] = {};
        static uint8_t buf[KQ_M][kq_seg<MEMRA_TYPE_Q6_K>::slot + 64];
        for (int cs = 0; cs < nf; cs++) {
            kq_mem rd[KQ_M];
            uint32_t off[KQ_M] = {0, 0};
            for (int m = 0; m < KQ_M; m++) {
                memset(buf[m], 0xA5, sizeof buf[m]);
                rd[m].p = buf[m];
                if (!w[m])
                    continue;
                const uintptr_t p = (uintptr_t)(w[m] + (size_t)cs * seg);
                off[m] = (uint32_t)(p & 15);
                memcpy(buf[m], (const uint8_t *)(p & ~(uintptr_t)15), (off[m] + seg + 15) & ~(size_t)15);
            }
            for (int lane = 0; lane < 32; lane++) {
                float part[1][KQ_M] = {{lanes[0][lane], lanes[1][lane]}};
                kq_lane_v1<T, 1>(rd, off, v1, lane, (uint32_t)cs, xr, (uint32_t)xl, sr, nbr, 1, part);
                lanes[0][lane] = part[0][0];
                lanes[1][lane] = part[0][1];
            }
        }
        for (int lane = 0; lane < 32; lane++)
            for (int m = 0; m < KQ_M; m++)
                if ((lane >> 2) < ns && (m == 0 || v1))
                    lanes[m][lane] = kq_add(lanes[m][lane], ts[g * L + (lane & (L - 1))][m]);
        float y1[1][KQ_M];
        kq_group<T, 1>(w, ne0, xs, xl, s, 1, y1);
        for (int m = 0; m < KQ_M && w[m]; m++) {
            const float t = warp_sum_host(lanes[m]);
            if (memcmp(&t, &y1[0][m], sizeof(float)) != 0)
                fail_msg("type %d, %d + %d super-blocks, shift %zu: pair %d row %d packed %a, one-item walk %a", T,
                         KQ_SBS * nf, ns, shift, g, m, t, y1[0][m]);
        }
    }
    free(xs);
    free(x);
    free(wbuf);
}

/* every type at every short length that packs (Q6_K: 1-3 short
 * super-blocks; 4 do not fit two a slot), after 0, 1 and 2 full segments;
 * Q6_K at every even start */
static void test_short(void **state)
{
    (void)state;
    for (int nf = 0; nf <= 2; nf++)
        for (int ns = 1; ns <= 4; ns++) {
            check_short<MEMRA_TYPE_Q4_K>(nf, ns, 0);
            check_short<MEMRA_TYPE_Q5_K>(nf, ns, 0);
            check_short<MEMRA_TYPE_Q4_0>(nf, ns, 0);
            if (ns < 4)
                for (size_t sh = 0; sh < 16; sh += 2)
                    check_short<MEMRA_TYPE_Q6_K>(nf, ns, sh);
        }
    /* the 26B-A4B's 2816-wide rows pair two short segments; the E4B's 2560 four Q4_K, three Q6_K */
    assert_int_equal(kq_short_groups<MEMRA_TYPE_Q6_K>(11), 2);
    assert_int_equal(kq_short_groups<MEMRA_TYPE_Q4_K>(10), 4);
    assert_int_equal(kq_short_groups<MEMRA_TYPE_Q6_K>(10), 3);
    assert_int_equal(kq_short_groups<MEMRA_TYPE_Q6_K>(20), 1);
    assert_int_equal(kq_short_groups<MEMRA_TYPE_Q4_K>(21), 0);
}

/* widths: one super-block, a short segment (9, 10, 21 super-blocks), whole
 * segments (4096), and a long row (12288) */
static const int64_t widths[] = {256, 2304, 2560, 4096, 5376, 12288};

/* every width, then tiny and large x */
template <int T> static void check_widths_and_scales(void)
{
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++)
        check<T>(widths[i], 5, 0, 1.0f);
    check<T>(4096, 4, 0, 1e-6f);
    check<T>(4096, 4, 0, 1e6f);
}

static void test_q4_k(void **state)
{
    (void)state;
    check_widths_and_scales<MEMRA_TYPE_Q4_K>();
}

static void test_q5_k(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++)
        check<MEMRA_TYPE_Q5_K>(widths[i], 5, 0, 1.0f);
    check<MEMRA_TYPE_Q5_K>(2048, 3, 0, 1e-6f);
}

static void test_q4_0(void **state)
{
    (void)state;
    check_widths_and_scales<MEMRA_TYPE_Q4_0>();
}

/* Q6_K rows start anywhere even: every 4-byte alignment of the blocks and
 * every offset in the first 16 bytes */
static void test_q6_k(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++)
        check<MEMRA_TYPE_Q6_K>(widths[i], 5, 0, 1.0f);
    for (size_t sh = 2; sh < 16; sh += 2)
        check<MEMRA_TYPE_Q6_K>(sh & 4 ? 2560 : 768, 3, sh, 1.0f);
    check<MEMRA_TYPE_Q6_K>(4096, 4, 6, 1e-6f);
    check<MEMRA_TYPE_Q6_K>(4096, 4, 0, 1e6f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_q4_k),
        cmocka_unit_test(test_q5_k),
        cmocka_unit_test(test_q6_k),
        cmocka_unit_test(test_q4_0),
        cmocka_unit_test(test_pack_butterfly),
        cmocka_unit_test(test_pack),
        cmocka_unit_test(test_short_walk),
        cmocka_unit_test(test_short),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* memra_check_kernels: the suite (every case in one fixed order) and the
 * entry point. */
#include <stddef.h>

#include "kc.h"

void memra_kernel_check_params_init(memra_kernel_check_params_t *p, uint32_t size)
{
    if (!p || size < sizeof(uint32_t))
        return;
    memra_kernel_check_params_t d = {
        .size = size < sizeof d ? size : (uint32_t)sizeof d,
        .device = 0,
        .seed = 1,
        .test = NULL,
        .bench = 0,
        .bench_iters = 20,
        .big = 1,
    };
    memcpy(p, &d, d.size);
}

/* ---- the suite --------------------------------------------------------------- */

static void kc_case_done(kc *k)
{
    memra__kc_release(k);
}

#define MX_GS 2 /* a matmul_ex case's check: the batched fast rows */
/* a matmul_ex case's check: N rows in one call vs N one-row calls in an exact
 * batched step's rows mode (weights of at most 8 MiB: one x row a block column) */
#define MX_STEP 3

/* One case, then its buffers released. */
#define KC(call)                                                                                   \
    do {                                                                                           \
        call;                                                                                      \
        kc_case_done(k);                                                                           \
    } while (0)

/* The K-quant matvec (cuda/mmv_kq.cuh), per covered type: decode at the
 * 9B's and Gemma 4's shapes, widths that end a 2048-element segment short
 * and odd row counts (a pair's second row missing); several x rows in one
 * pass (up to 8) and in passes of fewer (5376 and 12288 wide); N rows against N
 * one-row calls bit for bit (plain and fused: every row count the kernel
 * is instantiated for); fused matmuls against the CPU and their unfused
 * sequence bit for bit (norm, GLU, ADD, post ops, the conv epilogue);
 * expert ids (moe). */
static void run_kq(kc *k, bool big)
{
    /* Q4_0: its eight blocks a super-block on the same lanes */
    static const memra_type_t kt[] = {MEMRA_TYPE_Q4_K, MEMRA_TYPE_Q5_K, MEMRA_TYPE_Q6_K, MEMRA_TYPE_Q4_0};
    static const struct {
        const char *name;
        int64_t ne0, ne1, rows, pad;
        bool big;
    } mm[] = {
        {"ff", 4096, 12288, 1, 0, true},     /* Qwen3.5-9B gate/up */
        {"down", 12288, 4096, 1, 0, true},   /* ... down */
        {"sq", 4096, 4096, 1, 0, true},      /* ... attention out */
        {"moe", 2048, 512, 1, 0, false},     /* a 35B-A3B expert's gate */
        {"g4_5376", 5376, 3001, 1, 0, false}, /* Gemma 4: 21 super-blocks, a short last segment */
        {"g4_2560", 2560, 2048, 1, 0, false}, /* 10 super-blocks */
        {"w2304", 2304, 1001, 1, 0, false},  /* 9 super-blocks, an odd row count */
        {"rows2", 4096, 1000, 2, 8, false},
        {"rows3", 2560, 777, 3, 8, false},   /* four rows per pass, one absent */
        {"rows8", 2560, 501, 8, 4, false},
        {"rows7_5376", 5376, 300, 7, 0, false}, /* x of 8 rows does not fit: passes of 4 */
    };
    static const int rinv[] = {2, 3, 5, 8};
    /* projo: weights that start at odd virtual rows (row pairs across two weights) */
    static const int64_t glu[2] = {700, 700}, one[1] = {301}, proj[4] = {384, 16, 16, 256},
                         projo[4] = {301, 17, 16, 255}, ff[2] = {12288, 12288}, hid[1] = {4096},
                         gdn[4] = {8192, 32, 32, 4096};
    static const struct {
        const char *name;
        int n_w;
        int64_t ne0;
        const int64_t *ne1;
        int64_t rows;
        bool norm;
        memra_mm_epi_t epi;
        memra_act_t act;
        bool big, conv, rowinv;
    } mx[] = {
        {"glu", 2, 2560, glu, 1, true, MEMRA_MM_GLU, MEMRA_ACT_SILU, false, false, false},
        {"proj4", 4, 4096, projo, 1, true, MEMRA_MM_STORE, MEMRA_ACT_SILU, false, false, false},
        {"geglu_rows3", 2, 2048, glu, 3, true, MEMRA_MM_GLU, MEMRA_ACT_GELU, false, false, false},
        {"add_rows5", 1, 5376, one, 5, false, MEMRA_MM_ADD, MEMRA_ACT_SILU, false, false, false},
        {"proj4_conv", 4, 2048, proj, 1, true, MEMRA_MM_STORE, MEMRA_ACT_SILU, false, true, false},
        {"proj4_rows2", 4, 2304, projo, 2, true, MEMRA_MM_STORE, MEMRA_ACT_SILU, false, false, false},
        {"ffn_glu", 2, 4096, ff, 1, true, MEMRA_MM_GLU, MEMRA_ACT_SILU, true, false, false},
        {"down_add", 1, 12288, hid, 1, false, MEMRA_MM_ADD, MEMRA_ACT_SILU, true, false, false},
        {"gdn_in", 4, 4096, gdn, 1, true, MEMRA_MM_STORE, MEMRA_ACT_SILU, true, false, false},
        {"glu_r2", 2, 4096, glu, 2, true, MEMRA_MM_GLU, MEMRA_ACT_SILU, false, false, true},
        {"add_r3", 1, 5376, one, 3, false, MEMRA_MM_ADD, MEMRA_ACT_SILU, false, false, true},
        {"proj4_r5", 4, 2560, projo, 5, true, MEMRA_MM_STORE, MEMRA_ACT_SILU, false, false, true},
        {"geglu_r8", 2, 2048, glu, 8, true, MEMRA_MM_GLU, MEMRA_ACT_GELU, false, false, true},
    };
    char name[64];
    for (size_t i = 0; i < sizeof kt / sizeof kt[0]; i++) {
        const memra_type_t t = kt[i], tt[4] = {t, t, t, t};
        const char *tn = memra__kc_tname(t);
        for (size_t j = 0; j < sizeof mm / sizeof mm[0]; j++) {
            if (mm[j].big && !big)
                continue;
            snprintf(name, sizeof name, "matmul.kq.%s.%s", tn, mm[j].name);
            KC(memra__kc_matmul(k, name, t, mm[j].ne0, mm[j].ne1, mm[j].rows, false, mm[j].pad, 0));
        }
        for (size_t j = 0; j < sizeof rinv / sizeof rinv[0]; j++) {
            snprintf(name, sizeof name, "matmul.rowinv.kq.%s.r%d", tn, rinv[j]);
            KC(memra__kc_matmul_rowinv(k, name, t, 2560, 777, rinv[j]));
        }
        if (big) {
            snprintf(name, sizeof name, "matmul.rowinv.kq.%s.down_r8", tn);
            KC(memra__kc_matmul_rowinv(k, name, t, 12288, 1024, 8));
        }
        for (size_t j = 0; j < sizeof mx / sizeof mx[0]; j++) {
            if (mx[j].big && !big)
                continue;
            snprintf(name, sizeof name, "matmul_ex.%skq.%s.%s", mx[j].rowinv ? "rowinv." : "", tn, mx[j].name);
            if (mx[j].rowinv)
                KC(memra__kc_matmul_ex_rowinv(k, name, mx[j].n_w, tt, mx[j].ne0, mx[j].ne1, mx[j].rows, mx[j].norm,
                                              mx[j].epi, mx[j].act, MEMRA__ROWS_ANY));
            else
                KC(memra__kc_matmul_ex(k, name, mx[j].n_w, tt, mx[j].ne0, mx[j].ne1, mx[j].rows, mx[j].norm,
                                       mx[j].epi, mx[j].act, false, mx[j].conv));
        }
    }
    if (big) /* Q4_K_M's head is Q6_K */
        KC(memra__kc_matmul(k, "matmul.kq.q6_k.vocab", MEMRA_TYPE_Q6_K, 4096, 248320, 1, false, 0, 0));
    /* expert ids: gate/up and down of other types and widths */
    KC(memra__kc_moe(k, "moe.kq.q4_k_q6_k", MEMRA_TYPE_Q4_K, MEMRA_TYPE_Q6_K, 3, 32, 4, 2048, 512, false, false,
                     MEMRA_ACT_SILU));
    KC(memra__kc_moe(k, "moe.kq.q5_k.gate_up", MEMRA_TYPE_Q5_K, MEMRA_TYPE_Q5_K, 2, 16, 2, 2560, 768, true, true,
                     MEMRA_ACT_GELU));
    KC(memra__kc_moe(k, "moe.kq.q4_0", MEMRA_TYPE_Q4_0, MEMRA_TYPE_Q4_0, 3, 32, 4, 2304, 512, false, false,
                     MEMRA_ACT_SILU));
}

/* The K-quant matvec's packed short segments (cuda/mmv_kq_pack.cuh): rows
 * enough for several row pairs a warp, rows of 1, 2, 3 and 4 short
 * super-blocks, an odd row count, rows of one segment, a normed GeGLU and
 * four weights of odd starts (big only). Run after every other case, so that their
 * seeded inputs stay those of the suite without these. */
static void run_kq_pack(kc *k)
{
    static const memra_type_t kt[] = {MEMRA_TYPE_Q4_K, MEMRA_TYPE_Q5_K, MEMRA_TYPE_Q6_K, MEMRA_TYPE_Q4_0};
    static const struct {
        const char *name;
        int64_t ne0, ne1;
    } mm[] = {
        {"2304", 2304, 24001}, {"2560", 2560, 30000}, {"2816", 2816, 40001},
        {"5120", 5120, 20001}, {"1024", 1024, 30001},
    };
    static const int64_t glu[2] = {20000, 20000}, proj[4] = {10001, 7, 9000, 4001};
    char name[64];
    for (size_t i = 0; i < sizeof kt / sizeof kt[0]; i++) {
        const memra_type_t t = kt[i], tt[4] = {t, t, t, t};
        const char *tn = memra__kc_tname(t);
        for (size_t j = 0; j < sizeof mm / sizeof mm[0]; j++) {
            snprintf(name, sizeof name, "matmul.kq.%s.pack_%s", tn, mm[j].name);
            KC(memra__kc_matmul(k, name, t, mm[j].ne0, mm[j].ne1, 1, false, 0, 0));
        }
        snprintf(name, sizeof name, "matmul_ex.kq.%s.pack_geglu", tn);
        KC(memra__kc_matmul_ex(k, name, 2, tt, 2816, glu, 1, true, MEMRA_MM_GLU, MEMRA_ACT_GELU, false, false));
        snprintf(name, sizeof name, "matmul_ex.kq.%s.pack_proj4", tn);
        KC(memra__kc_matmul_ex(k, name, 4, tt, 2560, proj, 1, true, MEMRA_MM_STORE, MEMRA_ACT_SILU, false, false));
    }
}

static void run_suite(kc *k)
{
    static const memra_type_t types[] = {
        MEMRA_TYPE_F32,  MEMRA_TYPE_F16,    MEMRA_TYPE_BF16, MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q4_0, MEMRA_TYPE_Q4_1,
        MEMRA_TYPE_Q5_0, MEMRA_TYPE_Q5_1,   MEMRA_TYPE_MXFP4, MEMRA_TYPE_IQ4_NL, MEMRA_TYPE_Q2_K, MEMRA_TYPE_Q3_K,
        MEMRA_TYPE_Q4_K, MEMRA_TYPE_Q5_K,   MEMRA_TYPE_Q6_K, MEMRA_TYPE_IQ4_XS,
    };
    const bool big = k->p.big != 0;
    char name[48];
    KC(memra__kc_roofline(k));
    KC(memra__kc_transfer(k));
    /* matmul at fixture shapes, every type: decode, a few rows (matvec),
     * prefill fast (f16 GEMM) and exact */
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        const memra_type_t t = types[i];
        const int64_t ne0 = memra_type_block_size(t) == 256 ? 256 : 64;
        snprintf(name, sizeof name, "matmul.%s.decode", memra__kc_tname(t));
        KC(memra__kc_matmul(k, name, t, ne0, 3000, 1, false, 0, 0));
        snprintf(name, sizeof name, "matmul.%s.rows5", memra__kc_tname(t));
        KC(memra__kc_matmul(k, name, t, ne0, 3000, 5, false, 8, 0));
        snprintf(name, sizeof name, "matmul.%s.prefill_fast", memra__kc_tname(t));
        KC(memra__kc_matmul(k, name, t, ne0, 3000, 40, true, 8, 0));
        snprintf(name, sizeof name, "matmul.%s.prefill_exact", memra__kc_tname(t));
        KC(memra__kc_matmul(k, name, t, ne0, 3000, 40, false, 0, 0));
    }
    /* rows not 16-byte aligned: the staged loads start mid-chunk */
    KC(memra__kc_matmul(k, "matmul.q8_0.nb1_odd", MEMRA_TYPE_Q8_0, 64, 1000, 1, false, 0, 6));
    /* 67 blocks a row: a segment ends on an unpaired block, and rows of
     * 2278 bytes start at every even offset (pairs and the fallback) */
    KC(memra__kc_matmul(k, "matmul.q8_0.odd_blocks", MEMRA_TYPE_Q8_0, 2144, 700, 1, false, 0, 0));
    KC(memra__kc_matmul(k, "matmul.q8_0.odd_blocks_rows3", MEMRA_TYPE_Q8_0, 2144, 700, 3, false, 4, 0));
    /* the Q8_0 fast path's short last segment and rows 4, 8 or 12 bytes off
     * 16 (22 blocks: 748-byte rows, the 26B-A4B's expert down width), and
     * the generic kernel's multi-row pair dots against its one-row calls */
    KC(memra__kc_matmul(k, "matmul.q8_0.w704", MEMRA_TYPE_Q8_0, 704, 1000, 1, false, 0, 0));
    KC(memra__kc_matmul(k, "matmul.q8_0.w2560", MEMRA_TYPE_Q8_0, 2560, 1001, 1, false, 0, 0));
    KC(memra__kc_matmul_rowinv(k, "matmul.rowinv.w704", MEMRA_TYPE_Q8_0, 704, 700, 3));
    KC(memra__kc_matmul_rowinv(k, "matmul.rowinv.w704_r8", MEMRA_TYPE_Q8_0, 704, 700, 8));
    /* the Q8_0 fast path on aligned rows that end in a short segment of 8,
     * 16 or 32 blocks, one row against several */
    KC(memra__kc_matmul(k, "matmul.q8_0.w2304", MEMRA_TYPE_Q8_0, 2304, 1003, 1, false, 0, 0));
    KC(memra__kc_matmul_rowinv(k, "matmul.rowinv.w2560", MEMRA_TYPE_Q8_0, 2560, 1001, 3));
    KC(memra__kc_matmul_rowinv(k, "matmul.rowinv.w5120", MEMRA_TYPE_Q8_0, 5120, 701, 2));
    KC(memra__kc_matmul(k, "matmul.q4_k.nb1_odd", MEMRA_TYPE_Q4_K, 512, 1000, 3, false, 0, 2));
    KC(memra__kc_matmul(k, "matmul.f16.nb1_odd", MEMRA_TYPE_F16, 72, 500, 2, false, 0, 2));
    KC(memra__kc_matmul(k, "matmul.f32.ne0_odd", MEMRA_TYPE_F32, 37, 700, 1, false, 3, 0));
    /* MoE routers in batched steps (the 26B-A4B's and the 35B-A3B's shapes):
     * rows of one call against one-row calls, and the CPU */
    KC(memra__kc_matmul_rowinv(k, "matmul.rowinv.f32.g26_router_r8", MEMRA_TYPE_F32, 2816, 128, 8));
    KC(memra__kc_matmul_rowinv(k, "matmul.rowinv.f32.q35_router_r3", MEMRA_TYPE_F32, 2048, 256, 3));
    KC(memra__kc_matmul(k, "matmul.f32.router_r5", MEMRA_TYPE_F32, 2816, 128, 5, false, 4, 0));
    KC(memra__kc_matmul_rowinv(k, "matmul.rowinv", MEMRA_TYPE_Q8_0, big ? 4096 : 256, 1024, 7));
    KC(memra__kc_matmul_rowinv(k, "matmul.rowinv", MEMRA_TYPE_Q4_K, big ? 4096 : 256, 512, 11));
    if (big) { /* one-row calls: the fast path's default map (out projections), its warp pairs (attention in) */
        KC(memra__kc_matmul_rowinv(k, "matmul.rowinv", MEMRA_TYPE_Q8_0, 4096, 4096, 3));
        KC(memra__kc_matmul_rowinv(k, "matmul.rowinv", MEMRA_TYPE_Q8_0, 4096, 10240, 2));
    }
    /* the grouped fast path (a vocabulary of whole 32-row groups, then a
     * short last group) and a type that goes through device memory */
    KC(memra__kc_matmul_mapped(k, MEMRA_TYPE_Q8_0, 4096, big ? 248320 : 5024, 0.0f));
    KC(memra__kc_matmul_mapped(k, MEMRA_TYPE_Q8_0, 2048, 3001, 0.0f));
    KC(memra__kc_matmul_mapped(k, MEMRA_TYPE_Q4_K, 256, 3000, 0.0f));
    /* gemma4's heads: Q8_0 on the grouped stores, Q6_K through device memory */
    KC(memra__kc_matmul_mapped(k, MEMRA_TYPE_Q8_0, 2816, big ? 262144 : 5024, 4.0f));
    KC(memra__kc_matmul_mapped(k, MEMRA_TYPE_Q6_K, 2560, 3000, 4.0f));
    if (big) {
        /* Qwen3.5-9B shapes: hidden 4096, ff 12288, vocab 248320 */
        static const memra_type_t bt[] = {MEMRA_TYPE_F16, MEMRA_TYPE_BF16, MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q4_0,
                                          MEMRA_TYPE_Q4_K, MEMRA_TYPE_Q5_K, MEMRA_TYPE_Q6_K, MEMRA_TYPE_IQ4_XS};
        for (size_t i = 0; i < sizeof bt / sizeof bt[0]; i++) {
            snprintf(name, sizeof name, "matmul.%s.4096_ff", memra__kc_tname(bt[i]));
            KC(memra__kc_matmul(k, name, bt[i], 4096, 12288, 1, false, 0, 0));
        }
        KC(memra__kc_matmul(k, "matmul.q8_0.ff_down", MEMRA_TYPE_Q8_0, 12288, 4096, 1, false, 0, 0));
        /* widths that are not whole 2048-element segments, on the Q8_0
         * fast path: the 26B-A4B's dense down (2112: rows 4..12 bytes off
         * 16), the 31B's ff up and down, the 27B's ff up */
        KC(memra__kc_matmul(k, "matmul.q8_0.g26_down", MEMRA_TYPE_Q8_0, 2112, 2816, 1, false, 0, 0));
        KC(memra__kc_matmul(k, "matmul.q8_0.g31_ff", MEMRA_TYPE_Q8_0, 5376, 21504, 1, false, 0, 0));
        KC(memra__kc_matmul(k, "matmul.q8_0.g31_down", MEMRA_TYPE_Q8_0, 21504, 5376, 1, false, 0, 0));
        KC(memra__kc_matmul(k, "matmul.q8_0.27b_ff", MEMRA_TYPE_Q8_0, 5120, 17408, 1, false, 0, 0));
        KC(memra__kc_matmul_rowinv(k, "matmul.rowinv.g26_down", MEMRA_TYPE_Q8_0, 2112, 2816, 3));
        KC(memra__kc_matmul(k, "matmul.q8_0.vocab", MEMRA_TYPE_Q8_0, 4096, 248320, 1, false, 0, 0));
        KC(memra__kc_matmul(k, "matmul.q8_0.vocab_rows3", MEMRA_TYPE_Q8_0, 4096, 248320, 3, false, 0, 0));
        KC(memra__kc_matmul(k, "matmul.q8_0.prefill_fast_ff", MEMRA_TYPE_Q8_0, 4096, 12288, 64, true, 0, 0));
        KC(memra__kc_matmul(k, "matmul.q6_k.prefill_fast_ff", MEMRA_TYPE_Q6_K, 4096, 12288, 64, true, 0, 0));
        /* a 35B-A3B router over a whole chunk (fast: one float32 GEMM) */
        KC(memra__kc_matmul(k, "matmul.f32.prefill_fast_router", MEMRA_TYPE_F32, 2048, 256, 512, true, 0, 0));
        /* a whole default chunk at the 9B's gate/up and down shapes */
        KC(memra__kc_matmul(k, "matmul.q8_0.prefill_fast_512", MEMRA_TYPE_Q8_0, 4096, 12288, 512, true, 0, 0));
        KC(memra__kc_matmul(k, "matmul.q8_0.prefill_fast_512_down", MEMRA_TYPE_Q8_0, 12288, 4096, 512, true, 0, 0));
        KC(memra__kc_matmul(k, "matmul.q4_k.prefill_fast_512", MEMRA_TYPE_Q4_K, 4096, 12288, 512, true, 0, 0));
        KC(memra__kc_matmul(k, "matmul.q8_0.prefill_exact_ff", MEMRA_TYPE_Q8_0, 4096, 12288, 16, false, 0, 0));
    }

    /* fused matmuls: norm + projections, gate/up GLU, projection + residual;
     * the last five at Qwen3.5-9B decode shapes (big only) */
    {
        static const memra_type_t q8[4] = {MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q8_0};
        static const memra_type_t mix[3] = {MEMRA_TYPE_Q4_K, MEMRA_TYPE_Q6_K, MEMRA_TYPE_Q4_K};
        static const memra_type_t k4[4] = {MEMRA_TYPE_Q4_K, MEMRA_TYPE_Q4_K, MEMRA_TYPE_Q4_K, MEMRA_TYPE_Q4_K};
        static const memra_type_t q40[2] = {MEMRA_TYPE_Q4_0, MEMRA_TYPE_Q4_0};
        static const memra_type_t f32[2] = {MEMRA_TYPE_F32, MEMRA_TYPE_F32};
        static const memra_type_t k5[2] = {MEMRA_TYPE_Q5_K, MEMRA_TYPE_Q5_K},
                                  k6[4] = {MEMRA_TYPE_Q6_K, MEMRA_TYPE_Q6_K, MEMRA_TYPE_Q6_K, MEMRA_TYPE_Q6_K},
                                  ix[2] = {MEMRA_TYPE_IQ4_XS, MEMRA_TYPE_IQ4_XS};
        static const int64_t proj[4] = {384, 16, 16, 256}, glu[2] = {700, 700}, one[1] = {300},
                             mixr[3] = {256, 96, 512}, gdn[4] = {8192, 32, 32, 4096}, ff[2] = {12288, 12288},
                             hid[1] = {4096}, one301[1] = {301}, e4b[2] = {10240, 10240}, g31[1] = {5376},
                             voc[1] = {248320}, g31q[3] = {8192, 4096, 4096}, g26q[3] = {4096, 2048, 2048},
                             g26f[2] = {2112, 2112}, g26d[1] = {2816}, e4bp[1] = {256}, w2051[1] = {2051},
                             fx128[2] = {128, 128}, fx64[1] = {64};
        static const struct {
            const char *name;
            int n_w;
            const memra_type_t *t;
            int64_t ne0;
            const int64_t *ne1;
            int64_t rows;
            bool norm;
            memra_mm_epi_t epi;
            memra_act_t act;
            bool fast, big, conv;
            /* true: N rows in one call vs N one-row calls, bit for bit; MX_GS:
             * a batched fast step's rows (the skinny tensor-core GEMM, kc_gemm_s.c) */
            int rowinv;
        } mx[] = {
            {"matmul_ex.proj4", 4, q8, 256, proj, 1, true, MEMRA_MM_STORE, MEMRA_ACT_SILU, false, false, false, false},
            {"matmul_ex.swiglu", 2, q8, 256, glu, 1, true, MEMRA_MM_GLU, MEMRA_ACT_SILU, false, false, false, false},
            {"matmul_ex.geglu_rows5", 2, k4, 512, glu, 5, true, MEMRA_MM_GLU, MEMRA_ACT_GELU, false, false, false, false},
            {"matmul_ex.add", 1, q8, 768, one, 1, false, MEMRA_MM_ADD, MEMRA_ACT_SILU, false, false, false, false},
            {"matmul_ex.add_rows3", 1, q40, 512, one, 3, true, MEMRA_MM_ADD, MEMRA_ACT_SILU, false, false, false, false},
            {"matmul_ex.mixed_types", 3, mix, 512, mixr, 2, true, MEMRA_MM_STORE, MEMRA_ACT_SILU, false, false, false, false},
            {"matmul_ex.f32_unfused", 2, f32, 96, glu, 1, true, MEMRA_MM_GLU, MEMRA_ACT_SILU, false, false, false, false},
            {"matmul_ex.prefill_fast", 2, q8, 256, glu, 40, true, MEMRA_MM_GLU, MEMRA_ACT_SILU, true, false, false, false},
            {"matmul_ex.prefill_exact", 4, q8, 256, proj, 24, true, MEMRA_MM_STORE, MEMRA_ACT_SILU, false, false, false, false},
            {"matmul_ex.proj4_conv", 4, q8, 256, proj, 1, true, MEMRA_MM_STORE, MEMRA_ACT_SILU, false, false, true, false},
            {"matmul_ex.proj4_conv_rows3", 4, q8, 256, proj, 3, true, MEMRA_MM_STORE, MEMRA_ACT_SILU, false, false, true, false},
            {"matmul_ex.q8_0.gdn_in", 4, q8, 4096, gdn, 1, true, MEMRA_MM_STORE, MEMRA_ACT_SILU, false, true, true, false},
            {"matmul_ex.q8_0.ffn_glu", 2, q8, 4096, ff, 1, true, MEMRA_MM_GLU, MEMRA_ACT_SILU, false, true, false, false},
            {"matmul_ex.q8_0.down_add", 1, q8, 12288, hid, 1, false, MEMRA_MM_ADD, MEMRA_ACT_SILU, false, true, false, false},
            {"matmul_ex.q8_0.out_add", 1, q8, 4096, hid, 1, false, MEMRA_MM_ADD, MEMRA_ACT_SILU, false, true, false, false},
            {"matmul_ex.q8_0.gdn_in_noconv", 4, q8, 4096, gdn, 1, true, MEMRA_MM_STORE, MEMRA_ACT_SILU, false, true, false, false},
            /* the 26B-A4B's 2816-wide projections on the Q8_0 fast path (a short last segment) */
            {"matmul_ex.q8_0.g26_qkv", 3, q8, 2816, g26q, 1, true, MEMRA_MM_STORE, MEMRA_ACT_SILU, false, true, false, false},
            {"matmul_ex.q8_0.g26_geglu", 2, q8, 2816, g26f, 1, true, MEMRA_MM_GLU, MEMRA_ACT_GELU, false, true, false, false},
            /* batched decode rows (the Q8_0 batched kernel, cuda/mmv_q8b.cuh):
             * every epilogue, odd row counts (a pass's second warp half short
             * or idle), rows past one pass, x too wide for eight staged rows
             * (passes of three), widths that are not whole 2048-element
             * segments (gemma4's 2560 and 5376: a short last segment, and
             * one-row calls on the generic kernel) */
            {"matmul_ex.rowinv.proj4_r2", 4, q8, 256, proj, 2, true, MEMRA_MM_STORE, MEMRA_ACT_SILU, false, false, false, true},
            {"matmul_ex.rowinv.proj4_r7", 4, q8, 512, proj, 7, true, MEMRA_MM_STORE, MEMRA_ACT_SILU, false, false, false, true},
            {"matmul_ex.rowinv.swiglu_r5", 2, q8, 768, glu, 5, true, MEMRA_MM_GLU, MEMRA_ACT_SILU, false, false, false, true},
            {"matmul_ex.rowinv.geglu_r3", 2, q8, 2304, glu, 3, true, MEMRA_MM_GLU, MEMRA_ACT_GELU, false, false, false, true},
            {"matmul_ex.rowinv.add_r19", 1, q8, 256, one301, 19, false, MEMRA_MM_ADD, MEMRA_ACT_SILU, false, false, false, true},
            {"matmul_ex.rowinv.q4_k_glu_r4", 2, k4, 512, glu, 4, true, MEMRA_MM_GLU, MEMRA_ACT_SILU, false, false, false, true},
            {"matmul_ex.rowinv.q8_0.gdn_in_r8", 4, q8, 4096, gdn, 8, true, MEMRA_MM_STORE, MEMRA_ACT_SILU, false, true, false, true},
            {"matmul_ex.rowinv.q8_0.ffn_glu_r8", 2, q8, 4096, ff, 8, true, MEMRA_MM_GLU, MEMRA_ACT_SILU, false, true, false, true},
            {"matmul_ex.rowinv.q8_0.ffn_glu_r13", 2, q8, 4096, ff, 13, true, MEMRA_MM_GLU, MEMRA_ACT_SILU, false, true, false, true},
            {"matmul_ex.rowinv.q8_0.down_add_r8", 1, q8, 12288, hid, 8, false, MEMRA_MM_ADD, MEMRA_ACT_SILU, false, true, false, true},
            {"matmul_ex.rowinv.q8_0.out_add_r32", 1, q8, 4096, hid, 32, false, MEMRA_MM_ADD, MEMRA_ACT_SILU, false, true, false, true},
            {"matmul_ex.rowinv.q8_0.vocab_r6", 1, q8, 4096, voc, 6, true, MEMRA_MM_STORE, MEMRA_ACT_SILU, false, true, false, true},
            {"matmul_ex.rowinv.q8_0.e4b_geglu_r6", 2, q8, 2560, e4b, 6, true, MEMRA_MM_GLU, MEMRA_ACT_GELU, false, true, false, true},
            {"matmul_ex.rowinv.q8_0.g31_qkv_r4", 3, q8, 5376, g31q, 4, true, MEMRA_MM_STORE, MEMRA_ACT_SILU, false, true, false, true},
            {"matmul_ex.rowinv.q8_0.g31_down_r5", 1, q8, 21504, g31, 5, false, MEMRA_MM_ADD, MEMRA_ACT_SILU, false, true, false, true},
            /* steps of two rows (cuda/mmv_q8p.cuh: pairs of weight rows,
             * several weights, a short last segment (2560, 2816), rows off
             * 16 bytes (2112), a head, x too wide for it (21504)), and of
             * three on the batched kernel */
            {"matmul_ex.rowinv.q8_0.ffn_glu_r2", 2, q8, 4096, ff, 2, true, MEMRA_MM_GLU, MEMRA_ACT_SILU, false, true, false, true},
            {"matmul_ex.rowinv.q8_0.ffn_glu_r3", 2, q8, 4096, ff, 3, true, MEMRA_MM_GLU, MEMRA_ACT_SILU, false, true, false, true},
            {"matmul_ex.rowinv.q8_0.gdn_in_r2", 4, q8, 4096, gdn, 2, true, MEMRA_MM_STORE, MEMRA_ACT_SILU, false, true, false, true},
            {"matmul_ex.rowinv.q8_0.down_add_r2", 1, q8, 12288, hid, 2, false, MEMRA_MM_ADD, MEMRA_ACT_SILU, false, true, false, true},
            {"matmul_ex.rowinv.q8_0.out_add_r2", 1, q8, 4096, hid, 2, false, MEMRA_MM_ADD, MEMRA_ACT_SILU, false, true, false, true},
            {"matmul_ex.rowinv.q8_0.vocab_r2", 1, q8, 4096, voc, 2, true, MEMRA_MM_STORE, MEMRA_ACT_SILU, false, true, false, true},
            {"matmul_ex.rowinv.q8_0.e4b_geglu_r2", 2, q8, 2560, e4b, 2, true, MEMRA_MM_GLU, MEMRA_ACT_GELU, false, true, false, true},
            {"matmul_ex.rowinv.q8_0.g26_geglu_r2", 2, q8, 2816, g26f, 2, true, MEMRA_MM_GLU, MEMRA_ACT_GELU, false, true, false, true},
            {"matmul_ex.rowinv.q8_0.g26_down_r2", 1, q8, 2112, g26d, 2, false, MEMRA_MM_ADD, MEMRA_ACT_SILU, false, true, false, true},
            {"matmul_ex.rowinv.q8_0.g31_down_r2", 1, q8, 21504, g31, 2, false, MEMRA_MM_ADD, MEMRA_ACT_SILU, false, true, false, true},
            /* three rows where the batched kernel stages only two (Llama 3 8B's
             * 14336-wide down): passes of two on mmv_q8p_kernel, whose second
             * block column has one row (it reads that row twice, stores it once) */
            {"matmul_ex.rowinv.q8_0.l8_down_r3", 1, q8, 14336, hid, 3, false, MEMRA_MM_ADD, MEMRA_ACT_SILU, false, true, false, true},
            /* rows off 16 bytes and widths of part 8-block groups: the batched
             * kernel's OFF form (MEMRA_MMV_Q8B_OFF=1), else the generic kernel;
             * 1344 is one short segment (42 blocks, 1428-byte rows) */
            {"matmul_ex.rowinv.q8_0.g26_down_r8", 1, q8, 2112, g26d, 8, false, MEMRA_MM_ADD, MEMRA_ACT_SILU, false, true, false, true},
            {"matmul_ex.rowinv.q8_0.g26_down_r5", 1, q8, 2112, g26d, 5, false, MEMRA_MM_ADD, MEMRA_ACT_SILU, false, true, false, true},
            {"matmul_ex.rowinv.q8_0.w1344_geglu_r5", 2, q8, 1344, glu, 5, true, MEMRA_MM_GLU, MEMRA_ACT_GELU, false, false, false, true},
            {"matmul_ex.rowinv.q8_0.w1344_proj4_r8", 4, q8, 1344, proj, 8, true, MEMRA_MM_STORE, MEMRA_ACT_SILU, false, false, false, true},
            /* an exact batched step's small weights, one x row a block
             * column (cuda/ops_matmul.cu batch_cols; on mmv_q8d_kernel,
             * MEMRA_MMV_Q8D_COLS=0 the generic kernel): the 26B-A4B's dense down (rows off 16
             * bytes, a short segment), a norm and four weights with their
             * post ops, a GLU, x of 16384 floats, the E4B's per-layer gate */
            {"matmul_ex.step.q8_0.g26_down_r2", 1, q8, 2112, g26d, 2, false, MEMRA_MM_ADD, MEMRA_ACT_SILU, false, true, false, MX_STEP},
            {"matmul_ex.step.q8_0.g26_down_r5", 1, q8, 2112, g26d, 5, false, MEMRA_MM_ADD, MEMRA_ACT_SILU, false, true, false, MX_STEP},
            {"matmul_ex.step.q8_0.proj4_r3", 4, q8, 256, proj, 3, true, MEMRA_MM_STORE, MEMRA_ACT_SILU, false, false, false, MX_STEP},
            {"matmul_ex.step.q8_0.geglu_r3", 2, q8, 2304, glu, 3, true, MEMRA_MM_GLU, MEMRA_ACT_GELU, false, false, false, MX_STEP},
            {"matmul_ex.step.q8_0.w16384_r4", 1, q8, 16384, one301, 4, false, MEMRA_MM_STORE, MEMRA_ACT_SILU, false, true, false, MX_STEP},
            {"matmul_ex.step.q8_0.e4b_gate_r6", 1, q8, 2560, e4bp, 6, true, MEMRA_MM_STORE, MEMRA_ACT_SILU, false, true, false, MX_STEP},
            /* a batched fast step's matmuls: every epilogue, 2..40 rows (one,
             * two and four n tiles, a second pass), split K (4096-wide
             * outputs) and none (the vocab), the 9B / E4B shapes, K-quants and
             * the legacy formats */
            {"matmul_ex.gs.q8_0.proj4_r5", 4, q8, 256, proj, 5, true, MEMRA_MM_STORE, MEMRA_ACT_SILU, true, false, false, MX_GS},
            {"matmul_ex.gs.iq4_xs.swiglu_r9", 2, ix, 512, glu, 9, true, MEMRA_MM_GLU, MEMRA_ACT_SILU, true, false, false, MX_GS},
            {"matmul_ex.gs.q4_0.add_r3", 1, q40, 768, one, 3, false, MEMRA_MM_ADD, MEMRA_ACT_SILU, true, false, false, MX_GS},
            {"matmul_ex.gs.q8_0.gdn_in_r8", 4, q8, 4096, gdn, 8, true, MEMRA_MM_STORE, MEMRA_ACT_SILU, true, true, false, MX_GS},
            {"matmul_ex.gs.q8_0.ffn_glu_r2", 2, q8, 4096, ff, 2, true, MEMRA_MM_GLU, MEMRA_ACT_SILU, true, true, false, MX_GS},
            {"matmul_ex.gs.q8_0.ffn_glu_r13", 2, q8, 4096, ff, 13, true, MEMRA_MM_GLU, MEMRA_ACT_SILU, true, true, false, MX_GS},
            {"matmul_ex.gs.q8_0.ffn_glu_r32", 2, q8, 4096, ff, 32, true, MEMRA_MM_GLU, MEMRA_ACT_SILU, true, true, false, MX_GS},
            {"matmul_ex.gs.q8_0.gdn_in_r21", 4, q8, 4096, gdn, 21, true, MEMRA_MM_STORE, MEMRA_ACT_SILU, true, true, false, MX_GS},
            {"matmul_ex.gs.q8_0.down_add_r4", 1, q8, 12288, hid, 4, false, MEMRA_MM_ADD, MEMRA_ACT_SILU, true, true, false, MX_GS},
            {"matmul_ex.gs.q8_0.out_add_r40", 1, q8, 4096, hid, 40, false, MEMRA_MM_ADD, MEMRA_ACT_SILU, true, true, false, MX_GS},
            {"matmul_ex.gs.q8_0.vocab_r8", 1, q8, 4096, voc, 8, true, MEMRA_MM_STORE, MEMRA_ACT_SILU, true, true, false, MX_GS},
            {"matmul_ex.gs.q8_0.e4b_geglu_r6", 2, q8, 2560, e4b, 6, true, MEMRA_MM_GLU, MEMRA_ACT_GELU, true, true, false, MX_GS},
            {"matmul_ex.gs.q4_k.ffn_glu_r8", 2, k4, 4096, ff, 8, true, MEMRA_MM_GLU, MEMRA_ACT_SILU, true, true, false, MX_GS},
            {"matmul_ex.gs.q5_k.ffn_glu_r3", 2, k5, 4096, ff, 3, true, MEMRA_MM_GLU, MEMRA_ACT_SILU, true, true, false, MX_GS},
            {"matmul_ex.gs.q6_k.down_add_r5", 1, k6, 12288, hid, 5, false, MEMRA_MM_ADD, MEMRA_ACT_SILU, true, true, false, MX_GS},
            /* Q4_K / Q5_K / Q6_K on gsw_kernel's K-quant form (cuda/gemm_swk.cu,
             * MEMRA_BATCH_GSWK=1; gs_kernel otherwise): every epilogue, 2 to 40 rows
             * (two passes), one k tile, fused weights, the E4B's 2560; Q6_K's
             * tiles 2j mod 16 bytes off 16 (K of 2048 and 4096) */
            {"matmul_ex.gs.q4_k.proj4_r5", 4, k4, 256, proj, 5, true, MEMRA_MM_STORE, MEMRA_ACT_SILU, true, false, false, MX_GS},
            {"matmul_ex.gs.q4_k.swiglu_r2", 2, k4, 512, glu, 2, true, MEMRA_MM_GLU, MEMRA_ACT_SILU, true, false, false, MX_GS},
            {"matmul_ex.gs.q5_k.add_r19", 1, k5, 768, one, 19, false, MEMRA_MM_ADD, MEMRA_ACT_SILU, true, false, false, MX_GS},
            {"matmul_ex.gs.q5_k.geglu_r11", 2, k5, 1024, glu, 11, true, MEMRA_MM_GLU, MEMRA_ACT_GELU, true, false, false, MX_GS},
            {"matmul_ex.gs.q4_k.gdn_in_r4", 4, k4, 4096, gdn, 4, true, MEMRA_MM_STORE, MEMRA_ACT_SILU, true, true, false, MX_GS},
            {"matmul_ex.gs.q4_k.ffn_glu_r32", 2, k4, 4096, ff, 32, true, MEMRA_MM_GLU, MEMRA_ACT_SILU, true, true, false, MX_GS},
            {"matmul_ex.gs.q4_k.out_add_r40", 1, k4, 4096, hid, 40, false, MEMRA_MM_ADD, MEMRA_ACT_SILU, true, true, false, MX_GS},
            {"matmul_ex.gs.q5_k.down_add_r13", 1, k5, 12288, hid, 13, false, MEMRA_MM_ADD, MEMRA_ACT_SILU, true, true, false, MX_GS},
            {"matmul_ex.gs.q4_k.e4b_geglu_r6", 2, k4, 2560, e4b, 6, true, MEMRA_MM_GLU, MEMRA_ACT_GELU, true, true, false, MX_GS},
            {"matmul_ex.gs.q6_k.proj4_r6", 4, k6, 2048, proj, 6, true, MEMRA_MM_STORE, MEMRA_ACT_SILU, true, false, false, MX_GS},
            {"matmul_ex.gs.q6_k.ffn_glu_r17", 2, k6, 4096, ff, 17, true, MEMRA_MM_GLU, MEMRA_ACT_SILU, true, true, false, MX_GS},
            /* Q6_K rows not 16-byte aligned (the K-quant form's row-offset
             * ring): 2560 (2100-byte rows, 4 bytes apart mod 16: the E4B's
             * head), 2816 and 5376 (an odd count of super-blocks: rows 2
             * bytes off a word), fused weights, 5-32 rows */
            {"matmul_ex.gs.q6_k.w2560_r16", 1, k6, 2560, w2051, 16, true, MEMRA_MM_STORE, MEMRA_ACT_SILU, true, false, false, MX_GS},
            {"matmul_ex.gs.q6_k.w2560_proj4_r9", 4, k6, 2560, proj, 9, true, MEMRA_MM_STORE, MEMRA_ACT_SILU, true, false, false, MX_GS},
            {"matmul_ex.gs.q6_k.w2816_geglu_r5", 2, k6, 2816, glu, 5, true, MEMRA_MM_GLU, MEMRA_ACT_GELU, true, false, false, MX_GS},
            {"matmul_ex.gs.q6_k.w5376_add_r32", 1, k6, 5376, one301, 32, false, MEMRA_MM_ADD, MEMRA_ACT_SILU, true, false, false, MX_GS},
            {"matmul_ex.gs.q6_k.e4b_head_r8", 1, k6, 2560, voc, 8, true, MEMRA_MM_STORE, MEMRA_ACT_SILU, true, true, false, MX_GS},
            /* Q8_0 rows 4-12 bytes off 16, K not a multiple of 256
             * (gsw_kernel's ODD form; MEMRA_GSW_ODD=0 the matvecs): the 26B-A4B's dense down at 4 / 8 / 32 / 40 rows
             * (a short last tile of 2 blocks), a normed GeGLU 1344 wide,
             * K = 192 (the one tile short) */
            {"matmul_ex.gs.q8_0.g26_down_r4", 1, q8, 2112, g26d, 4, false, MEMRA_MM_ADD, MEMRA_ACT_SILU, true, false, false, MX_GS},
            {"matmul_ex.gs.q8_0.g26_down_r8", 1, q8, 2112, g26d, 8, false, MEMRA_MM_ADD, MEMRA_ACT_SILU, true, false, false, MX_GS},
            {"matmul_ex.gs.q8_0.g26_down_r32", 1, q8, 2112, g26d, 32, false, MEMRA_MM_ADD, MEMRA_ACT_SILU, true, false, false, MX_GS},
            {"matmul_ex.gs.q8_0.g26_down_r40", 1, q8, 2112, g26d, 40, false, MEMRA_MM_ADD, MEMRA_ACT_SILU, true, true, false, MX_GS},
            {"matmul_ex.gs.q8_0.w1344_geglu_r5", 2, q8, 1344, glu, 5, true, MEMRA_MM_GLU, MEMRA_ACT_GELU, true, false, false, MX_GS},
            {"matmul_ex.gs.q8_0.w192_proj4_r13", 4, q8, 192, proj, 13, true, MEMRA_MM_STORE, MEMRA_ACT_SILU, true, false, false, MX_GS},
            /* the gemma4 fixture's widths (g4-dense.q8_0: 64-wide rows two
             * blocks, 128-wide rows four, every other row off 16 bytes) */
            {"matmul_ex.gs.q8_0.w64_geglu_r6", 2, q8, 64, fx128, 6, true, MEMRA_MM_GLU, MEMRA_ACT_GELU, true, false, false, MX_GS},
            {"matmul_ex.gs.q8_0.w128_add_r12", 1, q8, 128, fx64, 12, false, MEMRA_MM_ADD, MEMRA_ACT_SILU, true, false, false, MX_GS},
        };
        for (size_t i = 0; i < sizeof mx / sizeof mx[0]; i++) {
            if (mx[i].big && !big)
                continue;
            if (mx[i].rowinv == MX_GS) {
                KC(memra__kc_matmul_ex_gs(k, mx[i].name, mx[i].n_w, mx[i].t, mx[i].ne0, mx[i].ne1, mx[i].rows,
                                          mx[i].norm, mx[i].epi, mx[i].act));
            } else if (mx[i].rowinv) {
                KC(memra__kc_matmul_ex_rowinv(k, mx[i].name, mx[i].n_w, mx[i].t, mx[i].ne0, mx[i].ne1, mx[i].rows,
                                              mx[i].norm, mx[i].epi, mx[i].act,
                                              mx[i].rowinv == MX_STEP ? MEMRA__ROWS_EXACT : MEMRA__ROWS_ANY));
            } else {
                KC(memra__kc_matmul_ex(k, mx[i].name, mx[i].n_w, mx[i].t, mx[i].ne0, mx[i].ne1, mx[i].rows, mx[i].norm,
                                       mx[i].epi, mx[i].act, mx[i].fast, mx[i].conv));
            }
        }
    }

    run_kq(k, big);

    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        const int64_t ne0 = memra_type_block_size(types[i]) == 256 ? 256 : 64;
        KC(memra__kc_get_rows(k, types[i], ne0, 3000, 7));
    }
    if (big) {
        KC(memra__kc_get_rows(k, MEMRA_TYPE_Q8_0, 4096, 20000, 5));
    }

    KC(memra__kc_norm(k, "norm.rms", MEMRA_NORM_RMS, 5, 64, true, false, 3));
    KC(memra__kc_norm(k, "norm.rms.noweight", MEMRA_NORM_RMS, 3, 64, false, false, 0));
    KC(memra__kc_norm(k, "norm.rms.inplace", MEMRA_NORM_RMS, 4, 4096, true, true, 0));
    KC(memra__kc_norm(k, "norm.rms.heads", MEMRA_NORM_RMS, 64, 256, true, false, 0));
    KC(memra__kc_norm(k, "norm.rms.5376", MEMRA_NORM_RMS, 2, 5376, true, false, 0));
    KC(memra__kc_norm(k, "norm.rms.inplace.2816", MEMRA_NORM_RMS, 3, 2816, true, true, 0));
    KC(memra__kc_norm(k, "norm.rms.wide", MEMRA_NORM_RMS, 1, 12288, true, false, 0));
    KC(memra__kc_norm(k, "norm.l2", MEMRA_NORM_L2, 48, 128, false, false, 0));
    /* a warp a row up to 1024 wide (cuda/ops_norm.cu norm_warp_kernel):
     * a prefill chunk's head rows, a ragged last chunk, the widest */
    KC(memra__kc_norm(k, "norm.l2.heads_prefill", MEMRA_NORM_L2, 16384, 128, false, false, 0));
    KC(memra__kc_norm(k, "norm.rms.1001", MEMRA_NORM_RMS, 7, 1001, true, true, 0));
    KC(memra__kc_norm(k, "norm.rms.1024", MEMRA_NORM_RMS, 9, 1024, true, false, 5));
    KC(memra__kc_norm(k, "norm.rms.1025", MEMRA_NORM_RMS, 3, 1025, true, false, 0));
    if (big) {
        KC(memra__kc_norm(k, "norm.rms.4096", MEMRA_NORM_RMS, 1, 4096, true, false, 0));
    }

    for (int op = MEMRA_EW_COPY; op <= MEMRA_EW_FILL; op++) {
        KC(memra__kc_ew(k, (memra_ew_op_t)op, 4, 3001, 0));
        if (memra__kc_ew_binary((memra_ew_op_t)op)) {
            KC(memra__kc_ew(k, (memra_ew_op_t)op, 5, 777, 1));
        }
        if (op != MEMRA_EW_FILL) {
            KC(memra__kc_ew(k, (memra_ew_op_t)op, 3, 500, 2));
        }
        /* CUDA's one long row and 16-byte forms (calls of 65536
         * elements and more: cuda/ops_norm.cu, EW4_MIN) */
        KC(memra__kc_ew(k, (memra_ew_op_t)op, 128, 520, 3));
        KC(memra__kc_ew(k, (memra_ew_op_t)op, 66, 1000, 4));
    }
    if (big) {
        KC(memra__kc_ew(k, MEMRA_EW_SWIGLU, 1, 12288, 0));
    }

    KC(memra__kc_rope(k, "rope.norm", MEMRA_ROPE_NORM, 5, 4, 64, 64, false, 4096));
    KC(memra__kc_rope(k, "rope.neox", MEMRA_ROPE_NEOX, 5, 3, 128, 128, false, 32768));
    KC(memra__kc_rope(k, "rope.neox.partial", MEMRA_ROPE_NEOX, 6, 16, 256, 64, false, 262144));
    KC(memra__kc_rope(k, "rope.norm.freq", MEMRA_ROPE_NORM, 4, 4, 128, 128, true, 100000));
    KC(memra__kc_rope(k, "rope.neox.freq512", MEMRA_ROPE_NEOX, 3, 8, 512, 512, true, 8192));
    KC(memra__kc_qk_norm_rope(k, "qk_norm_rope.decode", 1, 16, 4, 256, 64));
    KC(memra__kc_qk_norm_rope(k, "qk_norm_rope.prefill", 7, 16, 4, 256, 64));
    KC(memra__kc_qk_norm_rope(k, "qk_norm_rope.full", 3, 4, 2, 128, 128));

    KC(memra__kc_attention(k, "attention.fixture", 7, 0, 4, 2, 16, 0, false));
    KC(memra__kc_attention(k, "attention.fixture.hd64", 40, 0, 2, 1, 64, 0, false));
    KC(memra__kc_attention(k, "attention.gqa", 5, 17, 4, 1, 32, 0, false));
    KC(memra__kc_attention(k, "attention.odd_hd", 3, 9, 2, 2, 18, 0, false));
    KC(memra__kc_attention(k, "attention.decode.hd256", 1, 3000, 16, 4, 256, 0, false));
    KC(memra__kc_attention(k, "attention.decode.long", 1, 20000, 16, 4, 256, 0, false));
    KC(memra__kc_attention(k, "attention.prefill.hd256", 9, 600, 16, 4, 256, 0, false));
    KC(memra__kc_attention(k, "attention.swa", 9, 500, 8, 4, 256, 128, false));
    KC(memra__kc_attention(k, "attention.swa.decode", 1, 5000, 8, 2, 256, 1024, false));
    KC(memra__kc_attention(k, "attention.hd512", 3, 700, 8, 1, 512, 0, false));
    KC(memra__kc_attention(k, "attention.gated.decode", 1, 3000, 16, 4, 256, 0, true));
    /* up to 16 splits the last split merges in registers (cuda/ops_attn.cu) */
    KC(memra__kc_attention(k, "attention.gated.decode.d600", 1, 600, 16, 4, 256, 0, true));
    KC(memra__kc_attention(k, "attention.decode.16splits", 1, 1023, 16, 4, 256, 0, false));
    KC(memra__kc_attention(k, "attention.gated.short", 3, 40, 4, 2, 64, 0, true));
    KC(memra__kc_attention_rowinv(k, "attention.rowinv", 6, 300, 4, 2, 128));
    /* on CUDA, a call of more (query, head) pairs than the backend keeps
     * split counters for merges its splits in a second kernel, one query
     * in the last split's block: both must give the same bits */
    KC(memra__kc_attention_rowinv(k, "attention.rowinv.merge", 36, 100, 128, 8, 16));
    /* fast prefill on tensor cores (cuda/attn_tc.cu): the archs' head sizes
     * (qwen35 256 gated, qwen3/llama 128, gemma4 256 sliding and 512
     * global, 64), partial query tiles, depths that start mid-tile, windows
     * that start mid-tile; and chunk invariance */
    KC(memra__kc_attention_fast(k, "attention.fast.qwen35", 200, 0, 16, 4, 256, 0, true));
    KC(memra__kc_attention_fast(k, "attention.fast.qwen35.depth", 77, 1000, 24, 4, 256, 0, true));
    KC(memra__kc_attention_fast(k, "attention.fast.hd128", 130, 37, 32, 8, 128, 0, false));
    KC(memra__kc_attention_fast(k, "attention.fast.hd64", 65, 3, 8, 1, 64, 0, false));
    KC(memra__kc_attention_fast(k, "attention.fast.swa", 150, 700, 16, 8, 256, 512, false));
    KC(memra__kc_attention_fast(k, "attention.fast.swa.short", 100, 0, 8, 4, 256, 37, false));
    KC(memra__kc_attention_fast(k, "attention.fast.hd512", 96, 300, 16, 2, 512, 0, false));
    KC(memra__kc_attention_fast(k, "attention.fast.odd_hd", 20, 5, 4, 2, 80, 0, false));
    KC(memra__kc_attention_chunkinv(k, "attention.fast.chunkinv", 300, 100, 50, 8, 2, 256, 0));
    KC(memra__kc_attention_chunkinv(k, "attention.fast.chunkinv.swa", 300, 77, 1000, 8, 4, 512, 300));
    /* 256-wide heads' keys in splits of 4096 (MEMRA_FA_TC_SPLIT): tiles
     * across one split boundary, tiles over three splits (the 27B's 24/4
     * heads), a window across a boundary, and chunkings across one */
    KC(memra__kc_attention_fast(k, "attention.fast.split", 150, 4000, 16, 4, 256, 0, true));
    KC(memra__kc_attention_fast(k, "attention.fast.split.deep", 130, 9000, 24, 4, 256, 0, true));
    KC(memra__kc_attention_fast(k, "attention.fast.split.swa", 100, 4050, 8, 4, 256, 1024, false));
    KC(memra__kc_attention_chunkinv(k, "attention.fast.chunkinv.split", 300, 100, 4000, 8, 2, 256, 0));

    KC(memra__kc_conv(k, "conv.fixture", 7, 96, 4));
    KC(memra__kc_conv(k, "conv.decode", 1, 8192, 4));
    KC(memra__kc_conv(k, "conv.prefill", 9, 8192, 4));
    KC(memra__kc_conv(k, "conv.short", 2, 64, 4));
    /* runs of 16 tokens in parallel: a short last run, and a whole chunk */
    KC(memra__kc_conv(k, "conv.runs", 37, 96, 4));
    if (big)
        KC(memra__kc_conv(k, "conv.chunk512", 512, 8192, 4));

    KC(memra__kc_delta(k, "delta.fixture", 5, 2, 4, 16));
    KC(memra__kc_delta(k, "delta.decode", 1, 16, 32, 128));
    KC(memra__kc_delta(k, "delta.prefill", 6, 16, 32, 128));
    KC(memra__kc_delta(k, "delta.d64", 3, 2, 6, 64));
    /* prefill chunks: several staging rounds, the last one partial */
    KC(memra__kc_delta(k, "delta.prefill.rounds", 100, 16, 32, 128));
    KC(memra__kc_delta(k, "delta.prefill.d256", 40, 4, 8, 256));
    /* fast prefill: float32, a warp per state row (9B and 27B shapes) */
    KC(memra__kc_delta_fast(k, "delta.fast.9b", 100, 16, 32, 128));
    KC(memra__kc_delta_fast(k, "delta.fast.27b", 70, 16, 48, 128));
    KC(memra__kc_delta_fast(k, "delta.fast.d256", 40, 4, 8, 256));
    KC(memra__kc_delta_rowinv(k, 5, 16, 32, 128));
    KC(memra__kc_gdn(k, "gdn.fixture", 5, 2, 4, 16, false));
    KC(memra__kc_gdn(k, "gdn.decode", 1, 16, 32, 128, false));
    KC(memra__kc_gdn(k, "gdn.prefill", 6, 16, 32, 128, false));
    KC(memra__kc_gdn(k, "gdn.d64", 3, 2, 6, 64, false));
    KC(memra__kc_gdn(k, "gdn.prefill.chunk", 70, 16, 32, 128, true));
    /* the conv inside the step, on CUDA a cluster of a key head's value
     * heads, each head in two blocks: clusters of 4 (9B, 35B-A3B), 6
     * (27B), 2; in one block per head when two do not fit (r8: 8) */
    KC(memra__kc_gdn(k, "gdn.conv.decode", 1, 16, 32, 128, true));
    KC(memra__kc_gdn(k, "gdn.conv.27b", 1, 16, 48, 128, true));
    KC(memra__kc_gdn(k, "gdn.conv.fixture", 1, 2, 4, 16, true));
    KC(memra__kc_gdn(k, "gdn.conv.d64", 1, 2, 6, 64, true));
    KC(memra__kc_gdn(k, "gdn.conv.r1", 1, 4, 4, 128, true));
    KC(memra__kc_gdn(k, "gdn.conv.r8", 1, 2, 16, 64, true));
    KC(memra__kc_gdn(k, "gdn.conv.prefill", 6, 16, 32, 128, true));

    KC(memra__kc_route(k, 5, 8, 2, false, false));
    KC(memra__kc_route(k, 5, 128, 8, true, false));
    KC(memra__kc_route(k, 3, 256, 8, true, false));
    KC(memra__kc_route(k, 4, 128, 8, true, true));
    KC(memra__kc_route(k, 3, 1, 1, false, false));
    /* the warp kernel's strided sums past one pass of 256 (the 397B's 512
     * experts, top 10), a whole prefill chunk (tokens over many blocks of
     * four warps), and the block kernel beyond its expert limit */
    KC(memra__kc_route(k, 7, 512, 10, true, false));
    KC(memra__kc_route(k, 513, 200, 6, true, false));
    KC(memra__kc_route(k, 2, 4000, 8, true, false));

    KC(memra__kc_moe(k, "moe.fixture", MEMRA_TYPE_F32, MEMRA_TYPE_F32, 5, 8, 2, 64, 32, false, true, MEMRA_ACT_GELU));
    KC(memra__kc_moe(k, "moe.fixture.gate_up", MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q8_0, 4, 8, 2, 64, 64, true, false, MEMRA_ACT_SILU));
    KC(memra__kc_moe(k, "moe.shared", MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q8_0, 3, 1, 1, 256, 128, false, false, MEMRA_ACT_SILU));
    /* fast prefill: the grouped tensor-core GEMMs (buckets of 0, 1, many) */
#define MOE_FAST(name, tg, td, n, ne, top, e, f, fused, scale, act, dist)                                              \
    KC(memra__kc_moe_ex(k, name, MEMRA_TYPE_##tg, MEMRA_TYPE_##td, n, ne, top, e, f, fused, scale, MEMRA_ACT_##act, true, \
                        KC_MOE_##dist))
    MOE_FAST("moe.fast.fixture", F32, F32, 40, 8, 2, 64, 32, false, true, GELU, UNIFORM); /* float32: matvecs */
    MOE_FAST("moe.fast.f16", F16, BF16, 40, 8, 2, 64, 32, false, true, GELU, UNIFORM);
    MOE_FAST("moe.fast.gate_up", Q8_0, Q8_0, 37, 8, 2, 64, 64, true, false, SILU, UNIFORM);
    MOE_FAST("moe.fast.skewed", Q8_0, Q4_K, 70, 16, 2, 256, 256, false, false, SILU, SKEWED);
    /* Q5_K gate_up; Q6_K down rows of 210 bytes (blocks 2 past 4-byte
     * alignment every other row: gemm_q.cuh's gq_words) */
    MOE_FAST("moe.fast.q5k_q6k", Q5_K, Q6_K, 70, 16, 2, 768, 256, true, false, SILU, SKEWED);
    /* Q4_0 experts of released widths (2304: 72 blocks; rows 2 past 4-byte
     * alignment every other one) */
    MOE_FAST("moe.fast.q4_0", Q4_0, Q4_0, 70, 16, 2, 2304, 256, true, false, GELU, SKEWED);
    /* the g4-moe fixture's shape: 4 experts, top 2, fused gate_up, GELU */
    MOE_FAST("moe.fast.g4fix", F16, F16, 64, 4, 2, 64, 32, true, true, GELU, UNIFORM);
    MOE_FAST("moe.fast.g4fix_sep", BF16, F16, 64, 4, 2, 64, 32, false, true, GELU, UNIFORM);
    MOE_FAST("moe.fast.g4fix_silu", Q4_0, Q8_0, 64, 4, 2, 64, 32, true, false, SILU, UNIFORM);
    MOE_FAST("moe.fast.g4fix_q8", Q8_0, Q8_0, 64, 4, 2, 64, 32, true, true, GELU, UNIFORM);
    MOE_FAST("moe.fast.shared", Q8_0, Q8_0, 130, 1, 1, 256, 128, false, false, SILU, UNIFORM);
    if (big) {
        MOE_FAST("moe.fast.qwen35moe", Q8_0, Q8_0, 512, 256, 8, 2048, 512, false, false, SILU, UNIFORM);
        MOE_FAST("moe.fast.qwen35moe_q4k", Q4_K, Q6_K, 512, 256, 8, 2048, 512, false, false, SILU, UNIFORM);
        MOE_FAST("moe.fast.qwen35moe_q4_0", Q4_0, Q4_0, 512, 256, 8, 2048, 512, false, false, SILU, UNIFORM);
        MOE_FAST("moe.fast.gemma4", Q8_0, Q8_0, 512, 128, 8, 2816, 704, true, true, GELU, UNIFORM);
        MOE_FAST("moe.fast.gemma4_skewed", Q8_0, Q8_0, 300, 128, 8, 2816, 704, true, true, GELU, SKEWED);
        MOE_FAST("moe.fast.shared_qwen", Q8_0, Q8_0, 512, 1, 1, 2048, 512, false, false, SILU, UNIFORM);
    }
#undef MOE_FAST
    if (big) {
        KC(memra__kc_moe(k, "moe.decode", MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q8_0, 1, 128, 8, 2048, 512, true, false, MEMRA_ACT_SILU));
        KC(memra__kc_moe(k, "moe.prefill", MEMRA_TYPE_Q4_K, MEMRA_TYPE_Q6_K, 6, 128, 8, 2048, 512, false, false, MEMRA_ACT_SILU));
        KC(memra__kc_moe(k, "moe.gemma", MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q8_0, 2, 128, 8, 2816, 704, true, true, MEMRA_ACT_GELU));
    }
    /* the fused moe (CUDA: two launches, the shared expert riding along)
     * against the CPU and bit for bit against the GPU's sequence */
    {
#define MF(name, tg, td, tsh, ne, top, e, f, gu, scale, act, fsh, ns)                                                  \
    do {                                                                                                               \
        const kc_moe_shape m = {MEMRA_TYPE_##tg, MEMRA_TYPE_##td, MEMRA_TYPE_##tsh, ne, top, e, f, gu, scale,          \
                                MEMRA_ACT_##act, fsh, 0, 0, false};                                                           \
        KC(memra__kc_moe_fused(k, name, &m, ns, (int)(sizeof ns / sizeof ns[0])));                                     \
    } while (0)
        static const int64_t n1238[] = {1, 2, 3, 8}, n18[] = {1, 8}, n3[] = {3};
        MF("moe.fused.small", Q8_0, Q8_0, Q8_0, 16, 4, 256, 128, false, false, SILU, 128, n1238);
        /* the Gemma 4 26B-A4B's rows (2816-wide gate_up, 704-wide down: two
         * down rows a packed pass), on 16 experts */
        static const int64_t n124[] = {1, 2, 4};
        MF("moe.fused.gemma4", Q8_0, Q8_0, Q8_0, 16, 8, 2816, 704, true, true, GELU, 0, n124);
        /* rows of 3 Q8_0 blocks (102 bytes: starts off 4-byte alignment), Q4_K gate_up, GELU, scale */
        MF("moe.fused.odd", Q4_K, Q8_0, Q8_0, 8, 2, 256, 96, true, true, GELU, 96, n3);
        MF("moe.fused.q5_0", Q4_0, Q5_0, Q5_0, 8, 2, 128, 64, false, true, GELU, 0, n18);
        /* declined (float weights; a shared down of another type): the sequence on both */
        MF("moe.fused.decline_f32", F32, F32, F32, 8, 2, 64, 32, false, true, GELU, 32, n3);
        MF("moe.fused.decline_mixed", Q8_0, Q8_0, Q4_0, 8, 2, 128, 64, false, false, SILU, 64, n3);
        {
            const kc_moe_shape b = {.tg = MEMRA_TYPE_Q8_0, .td = MEMRA_TYPE_Q8_0, .tsh = MEMRA_TYPE_Q8_0,
                                    .n_expert = 16, .top_k = 4, .n_embd = 256, .n_ff = 128, .act = MEMRA_ACT_SILU,
                                    .n_ff_shared = 128};
            KC(memra__kc_moe_fused_bad_id(k, "moe.fused.bad_id", &b));
        }
        /* K-quant experts (cuda/mmv_moe_kq.cuh: the K-quant matvec's lanes,
         * as the sequence's grouped matvecs): widths that end a 2048-element
         * segment short (2304: 9 super-blocks; down 768: 3), every type as
         * gate/up and down, a fused gate_up, 15 slots + the shared expert
         * (16 staged h rows), a bad id; padded rows keep a launch's weights
         * off the K-quant kernel on both sides while the other launch takes it */
        MF("moe.fused.kq.q4k_q6k", Q4_K, Q6_K, Q6_K, 16, 4, 2304, 512, false, false, SILU, 512, n1238);
        MF("moe.fused.kq.q5k_gate_up", Q5_K, Q5_K, Q5_K, 16, 4, 2560, 768, true, true, GELU, 768, n1238);
        MF("moe.fused.kq.q6k_q4k", Q6_K, Q4_K, Q4_K, 16, 3, 2048, 1024, false, true, SILU, 0, n1238);
        MF("moe.fused.kq.q4k_q5k", Q4_K, Q5_K, Q5_K, 32, 8, 2048, 256, true, false, SILU, 256, n1238);
        MF("moe.fused.kq.parts16", Q4_K, Q6_K, Q6_K, 32, 15, 2048, 1024, false, false, SILU, 1024, n3);
        /* packed items (the default; MEMRA_MOE_KQ_PACK=0 the one-item walk: rows of at most 4 super-blocks,
         * several items a slot): Q5_K gate/up rows of 3 super-blocks (two
         * items of 16 lanes) with Q4_K down rows of 2 (four of 8: a slot
         * spans a row pair's 9 parts and the next pair's); Q6_K down rows
         * of one super-block (seven items of 4 lanes, rows at every even
         * offset) */
        MF("moe.fused.kq.pack", Q5_K, Q4_K, Q4_K, 32, 8, 768, 512, false, false, SILU, 512, n1238);
        MF("moe.fused.kq.pack_q6k", Q6_K, Q6_K, Q6_K, 16, 5, 1024, 256, true, true, GELU, 256, n1238);
        /* Q4_0 experts: one-item and packed walks */
        MF("moe.fused.kq.q4_0", Q4_0, Q4_0, Q4_0, 16, 4, 2304, 512, false, false, SILU, 512, n1238);
        MF("moe.fused.kq.q4_0_pack", Q4_0, Q4_0, Q4_0, 32, 8, 768, 512, true, false, GELU, 512, n1238);
        {
            const kc_moe_shape gp = {MEMRA_TYPE_Q4_K, MEMRA_TYPE_Q6_K, MEMRA_TYPE_Q6_K, 16, 4, 2048, 512, false,
                                     false, MEMRA_ACT_SILU, 512, 8, 0, false};
            static const int64_t n13[] = {1, 3};
            KC(memra__kc_moe_fused(k, "moe.fused.kq.gu_unaligned", &gp, n13, 2));
            const kc_moe_shape dp = {MEMRA_TYPE_Q4_K, MEMRA_TYPE_Q4_K, MEMRA_TYPE_Q4_K, 16, 4, 2048, 512, true,
                                     true, MEMRA_ACT_GELU, 0, 0, 8, false};
            KC(memra__kc_moe_fused(k, "moe.fused.kq.down_unaligned", &dp, n13, 2));
            const kc_moe_shape b = {.tg = MEMRA_TYPE_Q4_K, .td = MEMRA_TYPE_Q6_K, .tsh = MEMRA_TYPE_Q6_K,
                                    .n_expert = 16, .top_k = 4, .n_embd = 2048, .n_ff = 512,
                                    .act = MEMRA_ACT_SILU, .n_ff_shared = 512};
            KC(memra__kc_moe_fused_bad_id(k, "moe.fused.kq.bad_id", &b));
        }
        /* packed passes (Q8_0 rows of at most 32 blocks, several items a
         * warp pass): down rows of 3 blocks padded to 104 bytes (an odd
         * block count on 4-byte aligned rows), gate/up rows of 10 blocks;
         * 15 slots + the shared expert at 32-block down rows (two items a
         * pass) */
        {
            static const int64_t n13[] = {1, 3};
            const kc_moe_shape po = {MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q8_0, 12, 3, 320, 96, false, true,
                                     MEMRA_ACT_GELU, 96, 0, 2, false};
            KC(memra__kc_moe_fused(k, "moe.fused.packed_odd", &po, n1238, 4));
            const kc_moe_shape pp = {MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q8_0, 32, 15, 512, 1024, true, false,
                                     MEMRA_ACT_SILU, 1024, 0, 0, false};
            KC(memra__kc_moe_fused(k, "moe.fused.packed_parts16", &pp, n13, 2));
        }
        if (big) { /* the released shapes (docs/real-models.md) */
            MF("moe.fused.qwen35moe", Q8_0, Q8_0, Q8_0, 256, 8, 2048, 512, false, false, SILU, 512, n1238);
            MF("moe.fused.qwen35moe_q4k", Q4_K, Q6_K, Q6_K, 256, 8, 2048, 512, false, false, SILU, 512, n1238);
            /* Q4_K_M's down of Qwen3.6-35B-A3B: Q4_K in most layers */
            MF("moe.fused.qwen35moe_q4k_q4k", Q4_K, Q4_K, Q4_K, 256, 8, 2048, 512, false, false, SILU, 512, n1238);
            MF("moe.fused.gemma4", Q8_0, Q8_0, Q8_0, 128, 8, 2816, 704, true, true, GELU, 0, n1238);
            /* n_ff 704 is no K-quant width: down Q5_0 or Q8_0, the gate_up on the K-quant lanes */
            MF("moe.fused.gemma4_q4k", Q4_K, Q5_0, Q5_0, 128, 8, 2816, 704, true, true, GELU, 0, n1238);
            MF("moe.fused.gemma4_q4k_q8", Q4_K, Q8_0, Q8_0, 128, 8, 2816, 704, true, true, GELU, 0, n1238);
        }
#undef MF
    }

    KC(memra__kc_argmax(k, "argmax.fixture", 3000, 0));
    KC(memra__kc_argmax(k, "argmax.vocab", 248320, 0));
    KC(memra__kc_argmax(k, "argmax.ties", 248320, 1));
    KC(memra__kc_argmax(k, "argmax.nan", 5000, 2));

    /* KV cache types: the conversion's bytes, and attention per K/V type
     * (decode at depth, prefill, a sliding window, mixed types, and an
     * odd head_dim on the kernel's scalar path) */
    KC(memra__kc_kv_store(k, "kv_store.f16", MEMRA_TYPE_F16, 9, 1024));
    KC(memra__kc_kv_store(k, "kv_store.bf16", MEMRA_TYPE_BF16, 9, 1024));
    KC(memra__kc_kv_store(k, "kv_store.q8_0", MEMRA_TYPE_Q8_0, 9, 1024));
    KC(memra__kc_kv_store(k, "kv_store.f32", MEMRA_TYPE_F32, 3, 256));
    /* a decode step recorded once and replayed at later positions (CUDA
     * graphs): the 9B's attention shape within one 256-key bound, a
     * sliding window across splits, q8_0 and f16 rows */
    KC(memra__kc_graph_replay(k, "graph.replay.f16", MEMRA_TYPE_F16, 300, 301, 511, 16, 4, 256, 0));
    KC(memra__kc_graph_replay(k, "graph.replay.q8_0.swa", MEMRA_TYPE_Q8_0, 1030, 1100, 1279, 8, 2, 256, 1024));
    KC(memra__kc_graph_replay(k, "graph.replay.long", MEMRA_TYPE_F16, 16384, 16400, 16639, 16, 4, 256, 0));
    KC(memra__kc_attention_kv(k, "attention.kv.f16.decode", MEMRA_TYPE_F16, MEMRA_TYPE_F16, 1, 3000, 16, 4, 256, 0));
    KC(memra__kc_attention_kv(k, "attention.kv.bf16.decode", MEMRA_TYPE_BF16, MEMRA_TYPE_BF16, 1, 3000, 16, 4, 256, 0));
    KC(memra__kc_attention_kv(k, "attention.kv.q8_0.decode", MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q8_0, 1, 3000, 16, 4, 256, 0));
    KC(memra__kc_attention_kv(k, "attention.kv.q8_0_f16.prefill", MEMRA_TYPE_Q8_0, MEMRA_TYPE_F16, 9, 600, 16, 4, 256, 0));
    KC(memra__kc_attention_kv(k, "attention.kv.f16_q8_0.swa", MEMRA_TYPE_F16, MEMRA_TYPE_Q8_0, 9, 500, 8, 4, 256, 128));
    KC(memra__kc_attention_kv(k, "attention.kv.bf16_f32.hd128", MEMRA_TYPE_BF16, MEMRA_TYPE_F32, 5, 40, 8, 2, 128, 0));
    KC(memra__kc_attention_kv(k, "attention.kv.q8_0.hd512", MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q8_0, 3, 700, 8, 1, 512, 0));
    KC(memra__kc_attention_kv(k, "attention.kv.f16.odd_hd", MEMRA_TYPE_F16, MEMRA_TYPE_BF16, 3, 9, 2, 2, 18, 0));
    /* fast prefill on tensor cores over typed caches (one type for K and V;
     * a mixed pair keeps the flash-decoding kernel) */
    KC(memra__kc_attention_kv_fast(k, "attention.kv.f16.fast", MEMRA_TYPE_F16, MEMRA_TYPE_F16, 200, 300, 16, 4, 256, 0));
    KC(memra__kc_attention_kv_fast(k, "attention.kv.bf16.fast", MEMRA_TYPE_BF16, MEMRA_TYPE_BF16, 100, 0, 8, 8, 128, 0));
    KC(memra__kc_attention_kv_fast(k, "attention.kv.q8_0.fast.swa", MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q8_0, 130, 700, 16, 8, 256, 512));
    KC(memra__kc_attention_kv_fast(k, "attention.kv.f16.fast.hd512", MEMRA_TYPE_F16, MEMRA_TYPE_F16, 96, 300, 16, 2, 512, 0));
    /* the f16 cache's paired blocks (two an SM) over key splits */
    KC(memra__kc_attention_kv_fast(k, "attention.kv.f16.fast.split", MEMRA_TYPE_F16, MEMRA_TYPE_F16, 200, 8100, 16, 4, 256, 0));
    KC(memra__kc_attention_kv_fast(k, "attention.kv.q8_0.fast.split", MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q8_0, 70, 4090, 8, 2, 256, 0));
    KC(memra__kc_attention_kv_fast(k, "attention.kv.f16.fast.split.swa", MEMRA_TYPE_F16, MEMRA_TYPE_F16, 100, 4050, 8, 4, 256,
                                   1024));
    KC(memra__kc_attention_kv_fast(k, "attention.kv.q8_0_f16.fast", MEMRA_TYPE_Q8_0, MEMRA_TYPE_F16, 20, 100, 8, 4, 256, 0));
    /* blocks of two query tiles (the default; MEMRA_FA_TC_M32=0 one): a tile with one split
     * beside one with two, an absent second tile, and windows whose tiles
     * start at different keys; .vs_f32 holds them to the f32 rows' kernel
     * (one tile a block) bit for bit */
    KC(memra__kc_attention_kv_fast(k, "attention.kv.f16.fast.tiles2", MEMRA_TYPE_F16, MEMRA_TYPE_F16, 150, 4000, 16, 4, 256,
                                   0));
    KC(memra__kc_attention_kv_fast(k, "attention.kv.f16.fast.tiles2.swa", MEMRA_TYPE_F16, MEMRA_TYPE_F16, 190, 4000, 8, 2,
                                   256, 200));

    /* gemma4's decode fusions (lib/arch_gemma4_forward.c): the post-norms
     * with the residual add and the layer's output scale, the router's
     * norm and scale, PLE's per-layer rows; q/k norm + rope with v's
     * norm-only part; attn_norm into q/k/v and ffn_norm into GeGLU at the
     * 26B-A4B's widths (hidden 2816, dense ff 2112) */
    KC(memra__kc_norm_ex(k, "norm_ex.plain", 5, 64, true, 0, 1.0f, false));
    KC(memra__kc_norm_ex(k, "norm_ex.add", 3, 2816, true, 1, 1.0f, false));
    KC(memra__kc_norm_ex(k, "norm_ex.add_inplace", 1, 2816, true, 2, 1.0f, false));
    KC(memra__kc_norm_ex(k, "norm_ex.add_inplace_scale", 1, 2816, true, 2, 0.7f, false));
    KC(memra__kc_norm_ex(k, "norm_ex.add_inplace_rows4", 4, 1536, true, 2, 0.37f, false));
    KC(memra__kc_norm_ex(k, "norm_ex.router", 1, 2816, true, 0, 0.018844f, false));
    KC(memra__kc_norm_ex(k, "norm_ex.noweight_add_scale", 2, 640, false, 1, 1.5f, false));
    KC(memra__kc_norm_ex(k, "norm_ex.ple_rows", 35, 256, true, 1, 0.70710677f, false));
    /* 16-byte aligned rows: the kernels hold a row in registers up to 8192 wide */
    KC(memra__kc_norm_ex(k, "norm_ex.aligned_add", 3, 2816, true, 1, 1.0f, true));
    KC(memra__kc_norm_ex(k, "norm_ex.aligned_inplace_scale", 2, 5376, true, 2, 0.5f, true));
    KC(memra__kc_norm_ex(k, "norm_ex.aligned_8192", 2, 8192, true, 1, 0.25f, true));
    KC(memra__kc_norm_ex(k, "norm_ex.aligned_wide", 1, 10240, true, 1, 1.0f, true));
    KC(memra__kc_norm_ex(k, "norm_ex.aligned_router", 1, 2816, true, 0, 0.018844f, true));
    /* the E4B's post-norms (2560: two or three chunks a thread) and its
     * per-layer inputs' rows (256: one chunk, most threads without one) */
    /* the E4B's per-layer gate with its GEGLU as the matmul's post op:
     * decode, a batched step (its fast rows run the sequence) and prefill */
    KC(memra__kc_matmul_ex_post(k, "matmul_ex.g4_ple_gate", MEMRA_EW_GEGLU, MEMRA_TYPE_Q8_0, 2560, 256, 1, false));
    KC(memra__kc_matmul_ex_post(k, "matmul_ex.g4_ple_gate.rows4", MEMRA_EW_GEGLU, MEMRA_TYPE_Q8_0, 2560, 256, 4, false));
    KC(memra__kc_matmul_ex_post(k, "matmul_ex.g4_ple_gate.fast_rows4", MEMRA_EW_GEGLU, MEMRA_TYPE_Q8_0, 2560, 256, 4, true));
    KC(memra__kc_matmul_ex_post(k, "matmul_ex.g4_ple_gate.q4_k_fast_rows12", MEMRA_EW_GEGLU, MEMRA_TYPE_Q4_K, 1536, 256, 12, true));
    /* gemma4's head: norm, matmul, softcap (one row, two exact rows, batched fast rows) */
    KC(memra__kc_matmul_ex_post(k, "matmul_ex.g4_head_softcap", MEMRA_EW_SOFTCAP, MEMRA_TYPE_Q8_0, 2816, 5024, 1, false));
    KC(memra__kc_matmul_ex_post(k, "matmul_ex.g4_head_softcap.rows2", MEMRA_EW_SOFTCAP, MEMRA_TYPE_Q8_0, 2816, 5024, 2, false));
    KC(memra__kc_matmul_ex_post(k, "matmul_ex.g4_head_softcap.q6_k_fast_rows6", MEMRA_EW_SOFTCAP, MEMRA_TYPE_Q6_K, 2560, 3000, 6, true));
    /* gemma4's post-norms as the next matmul's pre step: the E4B's
     * post-attention norm into its GeGLU, its post-FFN norm into the
     * per-layer gate (GEGLU post op), the 31B's width */
    KC(memra__kc_matmul_ex_pre(k, "matmul_ex.g4_pre_geglu", 2560, 1024, true, 1.0f));
    KC(memra__kc_matmul_ex_pre(k, "matmul_ex.g4_pre_ple_gate", 2560, 256, false, 1.0f));
    KC(memra__kc_matmul_ex_pre(k, "matmul_ex.g4_pre_geglu.d5376", 5376, 512, true, 0.5f));
    KC(memra__kc_norm_ex(k, "norm_ex.aligned_e4b_scale", 1, 2560, true, 2, 0.37f, true));
    KC(memra__kc_norm_ex(k, "norm_ex.aligned_ple_rows", 42, 256, true, 1, 0.70710677f, true));
    KC(memra__kc_qk_norm_rope_v(k, "qk_norm_rope.g4.swa", 1, 16, 8, 256, 256, false, false));
    KC(memra__kc_qk_norm_rope_v(k, "qk_norm_rope.g4.full_keqv", 1, 16, 2, 512, 512, true, true));
    KC(memra__kc_qk_norm_rope_v(k, "qk_norm_rope.g4.prefill", 5, 8, 4, 256, 128, false, false));
    KC(memra__kc_qk_norm_rope_v(k, "qk_norm_rope.g4.fixture", 3, 4, 2, 16, 16, true, true));
    /* the step's K and V stores in the same op (gemma4's v part, qwen35's V
     * rows from its projection), f16 and q8_0 caches, a token and three */
    KC(memra__kc_qk_store(k, "qk_norm_rope.store.g4_f16", 1, 8, 2, 256, MEMRA_TYPE_F16, true));
    KC(memra__kc_qk_store(k, "qk_norm_rope.store.g4_q8_0", 3, 8, 2, 256, MEMRA_TYPE_Q8_0, true));
    KC(memra__kc_qk_store(k, "qk_norm_rope.store.q35_f16", 1, 16, 4, 256, MEMRA_TYPE_F16, false));
    KC(memra__kc_qk_store(k, "qk_norm_rope.store.q35_bf16", 3, 16, 4, 256, MEMRA_TYPE_BF16, false));
    {
        static const memra_type_t qkv[3] = {MEMRA_TYPE_Q4_K, MEMRA_TYPE_Q4_K, MEMRA_TYPE_Q6_K};
        static const memra_type_t q8[3] = {MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q8_0};
        static const int64_t swa[3] = {4096, 2048, 2048}, full[2] = {8192, 1024}, ff[2] = {2112, 2112},
                             small[3] = {512, 256, 256}, sff[2] = {640, 640};
        KC(memra__kc_matmul_ex(k, "matmul_ex.g4_qkv", 3, qkv, 512, small, 1, true, MEMRA_MM_STORE, MEMRA_ACT_SILU, false,
                               false));
        KC(memra__kc_matmul_ex(k, "matmul_ex.g4_geglu", 2, q8, 512, sff, 1, true, MEMRA_MM_GLU, MEMRA_ACT_GELU, false,
                               false));
        /* a 35B-A3B router and its shared expert's one-row gate, float32: one float matvec launch */
        static const memra_type_t f32[2] = {MEMRA_TYPE_F32, MEMRA_TYPE_F32};
        static const int64_t router[2] = {256, 1}, router_s[2] = {200, 1};
        KC(memra__kc_matmul_ex(k, "matmul_ex.f32.router_gate", 2, f32, 2048, router, 1, false, MEMRA_MM_STORE,
                               MEMRA_ACT_SILU, false, false));
        KC(memra__kc_matmul_ex(k, "matmul_ex.f32.router_gate.rows3", 2, f32, 515, router_s, 3, false, MEMRA_MM_STORE,
                               MEMRA_ACT_SILU, false, false));
        if (big) {
            KC(memra__kc_matmul_ex(k, "matmul_ex.g4_26b.qkv_swa", 3, qkv, 2816, swa, 1, true, MEMRA_MM_STORE,
                                   MEMRA_ACT_SILU, false, false));
            KC(memra__kc_matmul_ex(k, "matmul_ex.g4_26b.qk_full", 2, q8, 2816, full, 1, true, MEMRA_MM_STORE,
                                   MEMRA_ACT_SILU, false, false));
            KC(memra__kc_matmul_ex(k, "matmul_ex.g4_26b.ffn_geglu", 2, q8, 2816, ff, 1, true, MEMRA_MM_GLU,
                                   MEMRA_ACT_GELU, false, false));
        }
    }

    /* batched per-sequence ops (a step of several sequences: one launch on
     * CUDA for its one-token items), against the CPU and bit for bit
     * against one launch per item: KV rows of one type and of several, a
     * chunk among decodes; attention over caches at different depths
     * (split counts 1..313, the staged merge past 16), typed caches, a
     * window, the output gate, items the batched launch leaves to one-item
     * launches (a chunk, another cache type, an odd head size), 64
     * sequences in launches of 32 (split counters of 128 heads), and on the
     * fast engine beside a 9-query chunk (tensor cores); the Gated DeltaNet
     * step with the conv inside (clusters of 4, 6 and 2 blocks; one block
     * per head), without it, a chunk among decodes, and on the fast engine */
    {
        static const memra_type_t q8[1] = {MEMRA_TYPE_Q8_0}, f16[1] = {MEMRA_TYPE_F16},
                                  mix[4] = {MEMRA_TYPE_F16, MEMRA_TYPE_Q8_0, MEMRA_TYPE_BF16, MEMRA_TYPE_F32};
        static const int64_t one[1] = {1}, some[3] = {1, 1, 5};
        KC(memra__kc_kv_store_batch(k, "kv_store.batch.q8_0", 16, q8, 1, one, 1, 1024));
        KC(memra__kc_kv_store_batch(k, "kv_store.batch.f16", 16, f16, 1, one, 1, 1024));
        KC(memra__kc_kv_store_batch(k, "kv_store.batch.mixed", 12, mix, 4, some, 3, 256));
        KC(memra__kc_kv_store_batch(k, "kv_store.batch.64", 64, q8, 1, one, 1, 256));
    }
#define AT_BATCH(name, n, kt, vt, depth, H, Hkv, hd, swa, gated, prefill, mixed, fast)                                 \
    KC(memra__kc_attention_batch(k, name, n, MEMRA_TYPE_##kt, MEMRA_TYPE_##vt, depth, H, Hkv, hd, swa, gated, prefill, \
                                 mixed, fast))
    AT_BATCH("attention.batch.decode", 16, F32, F32, 3000, 16, 4, 256, 0, false, 0, false, false);
    AT_BATCH("attention.batch.gated", 16, F32, F32, 1500, 16, 4, 256, 0, true, 0, false, false);
    AT_BATCH("attention.batch.f16", 8, F16, F16, 3000, 16, 4, 256, 0, true, 0, false, false);
    AT_BATCH("attention.batch.q8_0", 8, Q8_0, Q8_0, 3000, 16, 4, 256, 0, true, 0, false, false);
    AT_BATCH("attention.batch.q8_0_f16", 6, Q8_0, F16, 2000, 8, 2, 128, 0, false, 0, false, false);
    AT_BATCH("attention.batch.swa", 8, F32, F32, 5000, 8, 2, 256, 1024, false, 0, false, false);
    AT_BATCH("attention.batch.long", 4, F16, F16, 20000, 16, 4, 256, 0, false, 0, false, false);
    AT_BATCH("attention.batch.mixed", 9, F32, F32, 800, 8, 4, 128, 0, true, 5, true, false);
    AT_BATCH("attention.batch.odd_hd", 4, F32, F32, 300, 2, 2, 18, 0, false, 0, false, false);
    AT_BATCH("attention.batch.fixture", 5, F32, F32, 40, 4, 2, 16, 0, false, 0, false, false);
    AT_BATCH("attention.batch.64", 64, F16, F16, 700, 128, 8, 64, 0, false, 0, false, false);
    AT_BATCH("attention.batch.fast", 16, F16, F16, 3000, 16, 4, 256, 0, true, 9, false, true);
#undef AT_BATCH
    KC(memra__kc_gdn_batch(k, "gdn.batch.conv", 16, 16, 32, 128, true, 0, false));
    KC(memra__kc_gdn_batch(k, "gdn.batch.conv.rows2", 2, 16, 32, 128, true, 0, false));
    KC(memra__kc_gdn_batch(k, "gdn.batch.conv.rows4", 4, 16, 32, 128, true, 0, false));
    KC(memra__kc_gdn_batch(k, "gdn.batch.conv.27b", 8, 16, 48, 128, true, 0, false));
    KC(memra__kc_gdn_batch(k, "gdn.batch.conv.27b.rows2", 2, 16, 48, 128, true, 0, false));
    KC(memra__kc_gdn_batch(k, "gdn.batch.conv.r8", 8, 2, 16, 64, true, 0, false));
    KC(memra__kc_gdn_batch(k, "gdn.batch.conv.fixture", 64, 2, 4, 16, true, 0, false));
    KC(memra__kc_gdn_batch(k, "gdn.batch.noconv", 8, 16, 32, 128, false, 0, false));
    KC(memra__kc_gdn_batch(k, "gdn.batch.prefill", 6, 16, 32, 128, true, 5, false));
    KC(memra__kc_gdn_batch(k, "gdn.batch.fast", 16, 16, 32, 128, true, 0, true));

    /* gemma4's MoE layers: the post-attention norm with the router's and
     * the experts' norms of its result, and the three post-FFN norms, each
     * one launch (lib/arch_gemma4_forward.c) */
    KC(memra__kc_norm_chain(k, "norm_chain.post_attn", 1, 2816, false, true));
    KC(memra__kc_norm_chain(k, "norm_chain.post_attn.rows5", 5, 2816, false, false));
    KC(memra__kc_norm_chain(k, "norm_chain.post_ffn", 1, 2816, true, true));
    KC(memra__kc_norm_chain(k, "norm_chain.post_ffn.rows8", 8, 1536, true, false));
    KC(memra__kc_norm_chain(k, "norm_chain.post_attn.rows4.aligned", 4, 2816, false, true));
    KC(memra__kc_norm_chain(k, "norm_chain.post_ffn.rows4.aligned", 4, 2816, true, true));

    /* qwen35moe's MoE added into the residual (carry) rows by its down
     * launch: the 35B-A3B's shape, generic and K-quant lanes, and one the
     * fused launches decline (float weights: the sequence on both) */
    {
        static const int64_t n128[] = {1, 2, 8}, n3[] = {3};
        const kc_moe_shape q = {.tg = MEMRA_TYPE_Q8_0, .td = MEMRA_TYPE_Q8_0, .tsh = MEMRA_TYPE_Q8_0, .n_expert = 256,
                                .top_k = 8, .n_embd = 2048, .n_ff = 512, .act = MEMRA_ACT_SILU, .n_ff_shared = 512,
                                .accumulate = true};
        KC(memra__kc_moe_fused(k, "moe.fused.acc.35b", &q, n128, 3));
        kc_moe_shape kq = q;
        kq.tg = kq.tsh = MEMRA_TYPE_Q4_K;
        kq.td = MEMRA_TYPE_Q6_K;
        kq.n_expert = 32;
        KC(memra__kc_moe_fused(k, "moe.fused.acc.kq", &kq, n128, 3));
        kc_moe_shape f = q;
        f.tg = f.td = f.tsh = MEMRA_TYPE_F32;
        f.n_expert = 8;
        f.n_embd = 256;
        f.n_ff = 64;
        f.n_ff_shared = 64;
        f.top_k = 2;
        KC(memra__kc_moe_fused(k, "moe.fused.acc.decline", &f, n3, 1));
    }
    /* route's picks by one warp: more picks than lanes, with ties */
    KC(memra__kc_route(k, 3, 96, 40, true, true));
    /* norm chains at the 31B's width (rows in registers, six of the eight
     * chunks a thread), and rows off 16 bytes (the element path) mixed in */
    KC(memra__kc_norm_chain(k, "norm_chain.post_attn.d5376", 1, 5376, false, true));
    KC(memra__kc_norm_chain(k, "norm_chain.post_ffn.d5376.rows3", 3, 5376, true, true));
    KC(memra__kc_norm_chain(k, "norm_chain.post_attn.d4100.rows3", 3, 4100, false, false));
    /* the router and its route (on CUDA one launch with MEMRA_ROUTE_FUSE=1):
     * the 35B-A3B's with its shared gate, the 26B-A4B's, and more experts
     * than the block's threads */
    KC(memra__kc_router(k, "router.35b", 2048, 256, 8, true));
    KC(memra__kc_router(k, "router.26b", 2816, 128, 8, false));
    KC(memra__kc_router(k, "router.e512_k10", 1000, 512, 10, true));
    /* CUDA: the heads of a GQA group in one block beyond 1024 keys
     * (cuda/ops_attn.cu's fa_heads): four (16/2 and 32/4 heads), three
     * (24/4, 12/2) or two (32/16) a block, merged by the combine kernel;
     * decode and exact prefill, each KV type */
    KC(memra__kc_attention(k, "attention.heads4.35b.gated", 1, 9000, 16, 2, 256, 0, true));
    KC(memra__kc_attention(k, "attention.heads3.27b.gated", 1, 5000, 24, 4, 256, 0, true));
    KC(memra__kc_attention(k, "attention.heads3.27b.prefill", 5, 1500, 24, 4, 256, 0, true));
    KC(memra__kc_attention(k, "attention.heads4.31b.hd512", 1, 3000, 32, 4, 512, 0, false));
    KC(memra__kc_attention(k, "attention.heads2.swa4096", 1, 6000, 32, 16, 256, 4096, false));
    KC(memra__kc_attention_kv(k, "attention.heads4.kv.f16.long", MEMRA_TYPE_F16, MEMRA_TYPE_F16, 1, 16384, 16, 4, 256, 0));
    KC(memra__kc_attention_kv(k, "attention.heads4.kv.q8_0.long", MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q8_0, 1, 16384, 16, 4, 256, 0));
    KC(memra__kc_attention_kv(k, "attention.heads3.kv.bf16", MEMRA_TYPE_BF16, MEMRA_TYPE_BF16, 3, 2000, 12, 2, 128, 0));
    KC(memra__kc_attention_rowinv(k, "attention.heads4.rowinv", 6, 1100, 16, 4, 256));
    /* the grouped GEMM with raw tiles by asynchronous copies (cuda/gemm_q.cuh's
     * gq2_kernel) on its other block formats, experts with 1..64+ entries */
    KC(memra__kc_moe_ex(k, "moe.fast.gq2.q5_1_q5_0", MEMRA_TYPE_Q5_1, MEMRA_TYPE_Q5_0, 70, 8, 2, 128, 128, false, false,
                        MEMRA_ACT_SILU, true, KC_MOE_SKEWED));
    KC(memra__kc_moe_ex(k, "moe.fast.gq2.q4_1_iq4_nl", MEMRA_TYPE_Q4_1, MEMRA_TYPE_IQ4_NL, 90, 16, 4, 192, 128, true, true,
                        MEMRA_ACT_GELU, true, KC_MOE_UNIFORM));
    /* Q4_0 V rows (under Q8_0 or F16 K): the store against lib/quant.c's
     * bits, decode on one head a block and on a GQA group's heads a block
     * (bf16 K: one head a block at any length),
     * prefill, a window, 512-wide heads, the batched step and the fast
     * engine (no tensor-core pair: it takes K and V of one type) */
    KC(memra__kc_kv_store(k, "kv_store.q4_0", MEMRA_TYPE_Q4_0, 9, 1024));
    KC(memra__kc_attention_kv(k, "attention.kv.q8_0_q4_0.decode", MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q4_0, 1, 3000, 16, 4, 256, 0));
    KC(memra__kc_attention_kv(k, "attention.kv.f16_q4_0.prefill", MEMRA_TYPE_F16, MEMRA_TYPE_Q4_0, 9, 600, 16, 4, 256, 0));
    KC(memra__kc_attention_kv(k, "attention.kv.q8_0_q4_0.swa", MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q4_0, 9, 500, 8, 4, 256, 128));
    KC(memra__kc_attention_kv(k, "attention.kv.q8_0_q4_0.hd512", MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q4_0, 3, 700, 8, 1, 512, 0));
    KC(memra__kc_attention_kv(k, "attention.heads4.kv.q8_0_q4_0.long", MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q4_0, 1, 16384, 16, 4,
                              256, 0));
    KC(memra__kc_attention_kv(k, "attention.heads3.kv.f16_q4_0", MEMRA_TYPE_F16, MEMRA_TYPE_Q4_0, 3, 2000, 12, 2, 128, 0));
    KC(memra__kc_attention_kv(k, "attention.heads2.kv.q8_0_q4_0", MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q4_0, 1, 4000, 8, 4, 256, 0));
    KC(memra__kc_attention_kv(k, "attention.kv.bf16_q4_0.long", MEMRA_TYPE_BF16, MEMRA_TYPE_Q4_0, 1, 4000, 8, 4, 256, 0));
    KC(memra__kc_attention_kv_fast(k, "attention.kv.q8_0_q4_0.fast", MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q4_0, 20, 100, 8, 4, 256,
                                   0));
    {
        static const memra_type_t q4[2] = {MEMRA_TYPE_Q4_0, MEMRA_TYPE_Q8_0};
        static const int64_t one[1] = {1};
        KC(memra__kc_kv_store_batch(k, "kv_store.batch.q4_0", 16, q4, 2, one, 1, 1024));
    }
    KC(memra__kc_attention_batch(k, "attention.batch.q8_0_q4_0", 8, MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q4_0, 3000, 16, 4, 256, 0,
                                 true, 0, false, false));
    KC(memra__kc_attention_batch(k, "attention.batch.f16_q4_0", 6, MEMRA_TYPE_F16, MEMRA_TYPE_Q4_0, 2000, 8, 2, 128, 0,
                                 false, 0, false, false));
    if (big) {
        /* the fast path's wide blocks (one 8-warp block fills an SM's
         * shared memory: x of 16384 floats and more): the 27B's ff down,
         * gemma4 31B's global attention out (32 heads of 512), both
         * downs with the residual add, and a row count no block divides */
        static const memra_type_t q8[1] = {MEMRA_TYPE_Q8_0};
        static const int64_t h27[1] = {5120}, h31[1] = {5376};
        KC(memra__kc_matmul(k, "matmul.q8_0.27b_down", MEMRA_TYPE_Q8_0, 17408, 5120, 1, false, 0, 0));
        KC(memra__kc_matmul(k, "matmul.q8_0.g31_attn_out", MEMRA_TYPE_Q8_0, 16384, 5376, 1, false, 0, 0));
        KC(memra__kc_matmul(k, "matmul.q8_0.wide_odd_rows", MEMRA_TYPE_Q8_0, 16384, 1999, 1, false, 0, 0));
        KC(memra__kc_matmul_ex(k, "matmul_ex.q8_0.27b_down_add", 1, q8, 17408, h27, 1, false, MEMRA_MM_ADD,
                               MEMRA_ACT_SILU, false, false));
        KC(memra__kc_matmul_ex(k, "matmul_ex.q8_0.g31_down_add", 1, q8, 21504, h31, 1, false, MEMRA_MM_ADD,
                               MEMRA_ACT_SILU, false, false));
        /* the fast path on rows with a short last segment at released
         * shapes: gemma4 E4B's 2560-wide GeGLU, qkv (three weights) and
         * 262144-row head, its per-layer projection (256 wide: one short
         * segment, with the add), the 27B's 5120-wide SwiGLU, a
         * 1024-wide odd row count */
        static const memra_type_t q8x3[3] = {MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q8_0, MEMRA_TYPE_Q8_0};
        static const int64_t e4b_ff[2] = {10240, 10240}, e4b_qkv[3] = {2048, 512, 512}, e4b_h[1] = {2560},
                             f27[2] = {17408, 17408};
        KC(memra__kc_matmul_ex(k, "matmul_ex.q8_0.e4b_geglu", 2, q8x3, 2560, e4b_ff, 1, true, MEMRA_MM_GLU,
                               MEMRA_ACT_GELU, false, false));
        KC(memra__kc_matmul_ex(k, "matmul_ex.q8_0.e4b_qkv", 3, q8x3, 2560, e4b_qkv, 1, true, MEMRA_MM_STORE,
                               MEMRA_ACT_SILU, false, false));
        KC(memra__kc_matmul_ex(k, "matmul_ex.q8_0.e4b_ple_add", 1, q8, 256, e4b_h, 1, false, MEMRA_MM_ADD,
                               MEMRA_ACT_SILU, false, false));
        KC(memra__kc_matmul_ex(k, "matmul_ex.q8_0.27b_swiglu", 2, q8x3, 5120, f27, 1, true, MEMRA_MM_GLU,
                               MEMRA_ACT_SILU, false, false));
        KC(memra__kc_matmul(k, "matmul.q8_0.e4b_head", MEMRA_TYPE_Q8_0, 2560, 262144, 1, false, 0, 0));
        KC(memra__kc_matmul(k, "matmul.q8_0.w1024_odd_rows", MEMRA_TYPE_Q8_0, 1024, 999, 1, false, 0, 0));
    }
    if (big)
        run_kq_pack(k);
}

memra_status_t memra_check_kernels(const memra_kernel_check_params_t *params, memra_kernel_check_report_t *report)
{
    if (!report || report->size < sizeof(uint32_t))
        return memra__fail(NULL, MEMRA_E_INVALID, "memra_check_kernels: NULL report or report->size unset");
    const size_t head = offsetof(memra_kernel_check_report_t, lines);
    if (report->size < head + sizeof report->lines[0])
        return memra__fail(NULL, MEMRA_E_INVALID, "memra_check_kernels: report->size %u holds no line (%zu + %zu a line)",
                           report->size, head, sizeof report->lines[0]);
    /* as many lines as the caller's report holds (check.h) */
    const uint32_t rsize = report->size;
    const size_t cap = (rsize - head) / sizeof report->lines[0];
    memset(report, 0, head + cap * sizeof report->lines[0]);
    report->size = rsize;
    kc k;
    memset(&k, 0, sizeof k);
    k.cap = cap > INT32_MAX ? INT32_MAX : (int32_t)cap;
    memra_kernel_check_default_params(&k.p);
    if (params) {
        const size_t n = params->size < sizeof k.p ? params->size : sizeof k.p;
        memcpy(&k.p, params, n);
        k.p.size = sizeof k.p;
    }
    k.rep = report;
    k.rng = k.p.seed * 0x2545F4914F6CDD1Dull + 1;
    /* MEMRA_KERNEL_CHECK_CPU=1 checks the harness itself: the "device"
     * side is a second CPU engine, so every case must come out exact. */
    int32_t self = 0;
    if (memra__env_int("MEMRA_KERNEL_CHECK_CPU", 0, 1, 0, &self))
        return MEMRA_E_INVALID;
    const bool cpu_only = self == 1;
    if (!cpu_only && memra_cuda_device_count() <= 0)
        return memra__fail(NULL, MEMRA_E_NO_DEVICE, "kernel check: no CUDA device (or a build without CUDA)");
    memra_engine_params_t ep;
    memra_engine_default_params(&ep);
    memra_status_t st = memra_engine_create(&ep, &k.e_cpu);
    if (!st) {
        ep.backend = cpu_only ? MEMRA_BACKEND_CPU : MEMRA_BACKEND_CUDA;
        ep.device = k.p.device;
        ep.fast = 0;
        st = memra_engine_create(&ep, &k.e_gpu);
    }
    if (!st) {
        ep.fast = 1;
        st = memra_engine_create(&ep, &k.e_fast);
    }
    if (!st) {
        memra_engine_info_t info = {.size = sizeof info};
        if (memra_engine_get_info(k.e_gpu, &info) == MEMRA_OK)
            snprintf(report->device_name, sizeof report->device_name, "%s", info.device_name);
        k.cpu = k.e_cpu->be;
        k.gpu = k.e_gpu->be;
        k.fast = k.e_fast->be;
        if (!k.cpu->iface->matmul || !k.gpu->iface->matmul)
            st = memra__fail(NULL, MEMRA_E_UNSUPPORTED, "kernel check: a backend lacks its ops");
    }
    if (!st) {
        run_suite(&k);
        memra__kc_release(&k);
        st = k.err;
    }
    memra_engine_destroy(k.e_fast);
    memra_engine_destroy(k.e_gpu);
    memra_engine_destroy(k.e_cpu);
    if (st)
        return st;
    if (report->n_lines == 0 && !report->truncated && k.p.test && *k.p.test)
        return memra__fail(NULL, MEMRA_E_NOT_FOUND, "kernel check: no case name starts with '%s'", k.p.test);
    report->all_green = report->n_lines > 0 && report->n_failed == 0;
    if (!report->all_green)
        return memra__fail(NULL, MEMRA_E_MISMATCH, "kernel check: %d of %d cases failed", report->n_failed,
                           report->n_lines);
    return MEMRA_OK;
}

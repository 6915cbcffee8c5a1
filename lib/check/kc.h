/* memra_check_kernels: every CUDA op against the CPU reference.
 *
 * Both backends are reached the way forwards reach them, through engines
 * and the backend interface (lib/backend.h). Each case draws seeded random
 * inputs, uploads the same bytes to both sides, poisons the outputs with a
 * NaN sentinel inside guard zones (and in the gaps of strided rows), runs
 * the op on both, and compares: unwritten elements and stray writes fail
 * whatever the numbers say. Bounds per op class:
 *   exact  bit-identical (get_rows, argmax, route ids, row invariance);
 *   ulp    max error in units in the last place of the reference (ops both
 *          sides compute in float64 and round once: norm, elementwise,
 *          conv, route weights);
 *   nmse   sum (got-ref)^2 / sum ref^2 (float32 reductions: matmul,
 *          attention, delta, moe: 1e-7; rope: 1e-12; fast f16 prefill:
 *          1e-6, bf16: 5e-5).
 *
 * Layout: kc_core.c holds the case runner (buffers, sentinels, compare,
 * report lines, bench) and the random inputs; one file per op family
 * (kc_matmul.c, kc_gemm_s.c, kc_norm.c, kc_attn.c, kc_ssm.c, kc_moe.c,
 * kc_transfer.c, kc_batch.c)
 * holds its cases; kc_suite.c runs them in one fixed order. The seeded
 * stream runs on from case to case: a case added (or drawing differently)
 * anywhere but at the end changes the inputs of every later case under the
 * same --seed, so a reported seed replays only on the same suite. */
#ifndef MEMRA_CHECK_KC_H
#define MEMRA_CHECK_KC_H

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "engine_impl.h"
#include "internal.h"
#include "memra/check.h"
#include "quant.h"

#define KC_SENTINEL 0x7FA5A5A5u
#define KC_GUARD 64 /* floats of guard zone before and after every output */
#define KC_MAX_MEM 256

#define TOL_F32 1e-7  /* float32 reductions */
#define TOL_F16 1e-6  /* fast prefill, f16 inputs */
#define TOL_BF16 5e-5 /* fast prefill, bf16 inputs (MEMRA_FAST_GEMM=bf16) */
#define TOL_MOE_F16 4e-6 /* fast MoE prefill: x, weights and h rounded to f16 */
#define TOL_ATTN_F16 1e-6 /* fast prefill attention: q, k, v and the softmax weights rounded to f16 */
#define TOL_ULP 2.0   /* float64 both sides, one rounding */

typedef struct kc_mem {
    memra__backend_t *be; /* NULL: host malloc */
    void *p;
} kc_mem;

typedef struct kc {
    memra_kernel_check_params_t p;
    memra_kernel_check_report_t *rep;
    int32_t cap; /* lines the caller's report holds (its size) */
    memra_engine_t *e_cpu, *e_gpu, *e_fast;
    memra__backend_t *cpu, *gpu, *fast;
    uint64_t rng;
    memra_status_t err; /* first hard (non-mismatch) error */
    kc_mem mem[KC_MAX_MEM];
    int n_mem;
} kc;

/* An output inside its guard zones. */
typedef struct kc_out {
    int64_t rows, cols, ld; /* the written region: rows x cols, rows ld floats apart */
} kc_out;

/* Differences accumulated over one or more outputs of a case. */
typedef struct kc_acc {
    double max_abs, se, sr, max_ulp;
    int64_t n_diff_bits;
    bool guard_ok;
    char note[64];
} kc_acc;

/* One output compared: REF (the reference side) and GOT, layout O, WHAT
 * names it in the note. */
typedef struct kc_pair {
    const float *ref, *got;
    const kc_out *o;
    const char *what;
} kc_pair;

/* One output of a fused case: REF on the CPU engine, GOT from the fused
 * op and SEQ from the plain sequence (both on the GPU engine). */
/* REF NULL: compared with the sequence (SEQ) alone, bit for bit (a KV
 * cache's bytes, whose floats from the CPU may round to other bytes). */
typedef struct kc_fused_out {
    const float *ref, *got, *seq;
    const kc_out *o;
    const char *what;
} kc_fused_out;

/* The op of one case on one side (0 = cpu, 1 = cuda pointers) on BE. */
typedef memra_status_t (*kc_run_fn)(void *c, memra__backend_t *be, int side);

/* ---- kc_core.c: random inputs and buffers (all freed by memra__kc_release) */

uint64_t memra__kc_next(kc *k);
float memra__kc_unif(kc *k, float lo, float hi);
int64_t memra__kc_int(kc *k, int64_t n);
double memra__kc_now(void);
void *memra__kc_track(kc *k, memra__backend_t *be, void *p);
void *memra__kc_host(kc *k, size_t bytes);
void memra__kc_release(kc *k);
void *memra__kc_put(kc *k, memra__backend_t *be, const void *host, size_t bytes);
float *memra__kc_randf(kc *k, size_t n, float lo, float hi);
bool memra__kc_both(kc *k, const void *host, size_t bytes, void *p[2]);
const char *memra__kc_tname(memra_type_t t);
bool memra__kc_weight(kc *k, memra_type_t t, int64_t ne0, int64_t ne1, int64_t ne2, size_t nb1_pad,
                      memra_weight_t w[2]);

/* ---- kc_core.c: outputs, compare, report lines ----------------------------- */

size_t memra__kc_total(const kc_out *o);
float *memra__kc_out_new(kc *k, memra__backend_t *be, const kc_out *o, const float *init);
float *memra__kc_out_get(kc *k, memra__backend_t *be, const float *d, const kc_out *o);
void memra__kc_acc_init(kc_acc *a);
void memra__kc_cmp(kc_acc *a, const float *ref, const float *got, const kc_out *o, const char *what);
memra_kernel_check_line_t *memra__kc_line(kc *k, const char *name, const char *kind, double tol, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
void memra__kc_finish(kc *k, memra_kernel_check_line_t *L, const kc_acc *a);
void memra__kc_op_failed(kc *k, memra_kernel_check_line_t *L, const char *side, memra_status_t st);

/* ---- kc_core.c: the case runner ------------------------------------------- */

bool memra__kc_run2(kc *k, memra_kernel_check_line_t *L, kc_run_fn run, void *c, memra__backend_t *gpu_be);
bool memra__kc_mm_post(kc *k, int64_t n, void *pb[2], void *pa[2]);
bool memra__kc_mm_inputs(kc *k, int64_t n_rows, int64_t ldx, int64_t ne0, void *xp[2], void *np[2]);
/* Compares each pair's REF (on the CPU engine) with GOT (on GB) and
 * finishes L (no run, no bench). */
void memra__kc_finish_cpu_pairs(kc *k, memra_kernel_check_line_t *L, memra__backend_t *gb, const kc_pair *p, int n);
void memra__kc_check_vs_cpu(kc *k, memra_kernel_check_line_t *L, memra__backend_t *gb, const kc_pair *p, int n,
                            kc_run_fn run, void *c, double bytes);
void memra__kc_finish_exact(kc *k, memra_kernel_check_line_t *L, memra_status_t st, const kc_pair *p, int n);
void memra__kc_check_fused(kc *k, memra_kernel_check_line_t *L, memra__backend_t *gb, const kc_fused_out *f, int n,
                           kc_run_fn run, void *c, double bytes);
/* The tail of a batched case (attention_batch, kv_store_batch, gdn_batch):
 * side 0 on the CPU, side 1 on GB (the batched slot), side 2 on GB with
 * the batched slots removed (each item its one-item launch); F[i].got
 * against F[i].ref within the bound and bit for bit against F[i].seq. */
void memra__kc_check_batch(kc *k, memra_kernel_check_line_t *L, memra__backend_t *gb, const kc_fused_out *f, int n,
                           kc_run_fn run, void *c, double bytes);
void memra__kc_bench(kc *k, memra_kernel_check_line_t *L, kc_run_fn run, void *c, memra__backend_t *be, double bytes);

/* ---- the cases, one file per op family ------------------------------------- */

/* kc_matmul.c */
void memra__kc_matmul(kc *k, const char *name, memra_type_t t, int64_t ne0, int64_t ne1, int64_t n_rows, bool fast,
                      int64_t pad, size_t nb1_pad);
void memra__kc_matmul_rowinv(kc *k, const char *name, memra_type_t t, int64_t ne0, int64_t ne1, int64_t n_rows);
void memra__kc_matmul_mapped(kc *k, memra_type_t t, int64_t ne0, int64_t ne1, float cap);
void memra__kc_matmul_ex_rowinv(kc *k, const char *name, int n_w, const memra_type_t *t, int64_t ne0,
                                const int64_t *ne1, int64_t n_rows, bool norm, memra_mm_epi_t epi, memra_act_t act,
                                int rows_mode);
void memra__kc_matmul_ex_gs(kc *k, const char *name, int n_w, const memra_type_t *t, int64_t ne0, const int64_t *ne1,
                            int64_t n_rows, bool norm, memra_mm_epi_t epi, memra_act_t act);
void memra__kc_matmul_ex(kc *k, const char *name, int n_w, const memra_type_t *t, int64_t ne0, const int64_t *ne1,
                         int64_t n_rows, bool norm, memra_mm_epi_t epi, memra_act_t act, bool fast, bool conv);
void memra__kc_matmul_ex_post(kc *k, const char *name, memra_ew_op_t op, memra_type_t t, int64_t ne0, int64_t ne1,
                              int64_t n_rows, bool fast);
void memra__kc_matmul_ex_pre(kc *k, const char *name, int64_t ne0, int64_t ne1, bool glu, float scale);
void memra__kc_get_rows(kc *k, memra_type_t t, int64_t ne0, int64_t ne1, int64_t n);

/* kc_norm.c: norm, elementwise, rope, per-head norm + rope, norm + add + scale and chains of it, argmax */
void memra__kc_norm(kc *k, const char *name, memra_norm_kind_t kind, int64_t rows, int64_t dim, bool weight,
                    bool in_place, int64_t pad);
bool memra__kc_ew_binary(memra_ew_op_t op);
void memra__kc_ew(kc *k, memra_ew_op_t op, int64_t rows, int64_t cols, int mode);
void memra__kc_rope(kc *k, const char *name, memra_rope_mode_t mode, int64_t n_tokens, int64_t n_heads, int64_t hd,
                    int64_t n_rot, bool ff, int32_t max_pos);
void memra__kc_qk_norm_rope(kc *k, const char *name, int64_t n, int64_t H, int64_t Hkv, int64_t hd, int64_t n_rot);
void memra__kc_qk_store(kc *k, const char *name, int64_t n, int64_t H, int64_t Hkv, int64_t hd, memra_type_t type,
                        bool v_part);
void memra__kc_qk_norm_rope_v(kc *k, const char *name, int64_t n, int64_t H, int64_t Hkv, int64_t hd, int64_t n_rot,
                              bool ff, bool v_is_k);
void memra__kc_norm_ex(kc *k, const char *name, int64_t rows, int64_t dim, bool weight, int add, float scale,
                       bool aligned);
void memra__kc_norm_chain(kc *k, const char *name, int64_t rows, int64_t dim, bool post_ffn, bool aligned);
void memra__kc_argmax(kc *k, const char *name, int64_t n, int kind);

/* kc_attn.c */
void memra__kc_attention(kc *k, const char *name, int64_t n_tokens, int64_t pos0, int64_t n_head, int64_t n_kv,
                         int64_t hd, int64_t n_swa, bool gated);
void memra__kc_attention_fast(kc *k, const char *name, int64_t n_tokens, int64_t pos0, int64_t n_head, int64_t n_kv,
                              int64_t hd, int64_t n_swa, bool gated);
void memra__kc_attention_chunkinv(kc *k, const char *name, int64_t n_tokens, int64_t split, int64_t pos0, int64_t n_head,
                                  int64_t n_kv, int64_t hd, int64_t n_swa);
void memra__kc_attention_rowinv(kc *k, const char *name, int64_t n_tokens, int64_t pos0, int64_t n_head,
                                int64_t n_kv, int64_t hd);
void memra__kc_kv_store(kc *k, const char *name, memra_type_t type, int64_t rows, int64_t cols);
void memra__kc_graph_replay(kc *k, const char *name, memra_type_t type, int64_t pos_rec, int64_t pos_a, int64_t pos_b,
                            int64_t n_head, int64_t n_kv, int64_t hd, int64_t n_swa);
void memra__kc_attention_kv_fast(kc *k, const char *name, memra_type_t kt, memra_type_t vt, int64_t n_tokens,
                                 int64_t pos0, int64_t n_head, int64_t n_kv, int64_t hd, int64_t n_swa);
void memra__kc_attention_kv(kc *k, const char *name, memra_type_t kt, memra_type_t vt, int64_t n_tokens, int64_t pos0,
                            int64_t n_head, int64_t n_kv, int64_t hd, int64_t n_swa);

/* kc_ssm.c: conv, delta, the fused Gated DeltaNet step */
void memra__kc_conv(kc *k, const char *name, int64_t n_tokens, int64_t channels, int64_t K);
void memra__kc_delta(kc *k, const char *name, int64_t n, int64_t n_k, int64_t n_v, int64_t d);
void memra__kc_delta_fast(kc *k, const char *name, int64_t n, int64_t n_k, int64_t n_v, int64_t d);
void memra__kc_delta_rowinv(kc *k, int64_t n, int64_t n_k, int64_t n_v, int64_t d);
void memra__kc_gdn(kc *k, const char *name, int64_t n, int64_t n_k, int64_t n_v, int64_t d, bool conv_on);

/* kc_batch.c: the batched per-sequence ops */
void memra__kc_kv_store_batch(kc *k, const char *name, int n, const memra_type_t *types, int n_types,
                              const int64_t *rows, int n_rows, int64_t cols);
void memra__kc_attention_batch(kc *k, const char *name, int n, memra_type_t kt, memra_type_t vt, int64_t max_pos,
                               int64_t n_head, int64_t n_kv, int64_t hd, int64_t n_swa, bool gated, int64_t prefill,
                               bool mixed, bool fast);
void memra__kc_gdn_batch(kc *k, const char *name, int n, int64_t n_k, int64_t n_v, int64_t d, bool conv_on,
                         int64_t prefill, bool fast);

/* kc_moe.c */
void memra__kc_route(kc *k, int64_t n, int64_t n_expert, int64_t top_k, bool norm, bool ties);
void memra__kc_router(kc *k, const char *name, int64_t n_embd, int64_t n_expert, int64_t top_k, bool shared);
/* Expert choice of the MoE cases: uniform, or skewed (every token's first
 * slot on expert 0, the rest among the next top_k + 2 experts: most
 * experts get no token, a few nearly all: ragged buckets). fast runs the
 * GPU side on the fast engine (grouped tensor-core GEMMs from 9 tokens). */
enum { KC_MOE_UNIFORM, KC_MOE_SKEWED };
void memra__kc_moe_ex(kc *k, const char *name, memra_type_t tg, memra_type_t td, int64_t n, int64_t n_expert,
                      int64_t top_k, int64_t n_embd, int64_t n_ff, bool fused, bool scale, memra_act_t act, bool fast,
                      int dist);
void memra__kc_moe(kc *k, const char *name, memra_type_t tg, memra_type_t td, int64_t n, int64_t n_expert,
                   int64_t top_k, int64_t n_embd, int64_t n_ff, bool fused, bool scale, memra_act_t act);
/* The fused moe (memra__moe: the moe_fused slot, the shared expert
 * included) at one shape: against the CPU within TOL_F32 and against the
 * GPU's own sequence (moe_fused removed) bit for bit, one line NAME.nN per
 * token count of NS on the same weights. */
typedef struct kc_moe_shape {
    memra_type_t tg, td, tsh; /* gate/up (the shared expert's too), down, the shared expert's down */
    int64_t n_expert, top_k, n_embd, n_ff;
    bool gate_up, scale;      /* fused gate_up weight; expert_scale */
    memra_act_t act;
    int64_t n_ff_shared;      /* 0: no shared expert */
    size_t gu_pad, down_pad;  /* bytes after each row of the gate/up (the shared expert's too) and down
                               * weights: rows off 16 bytes keep K-quants off the K-quant kernel */
    bool accumulate;          /* out += the sum, out rows strided (a carry row's) */
} kc_moe_shape;
void memra__kc_moe_fused(kc *k, const char *name, const kc_moe_shape *m, const int64_t *ns, int n_ns);
/* A token's expert id out of range at shape M (3 tokens, token 1's last
 * slot): its row NaN, the others the sequence's bits (GPU only; NaN
 * payloads not compared). */
void memra__kc_moe_fused_bad_id(kc *k, const char *name, const kc_moe_shape *m);

/* kc_transfer.c */
void memra__kc_transfer(kc *k);
void memra__kc_roofline(kc *k);

#endif

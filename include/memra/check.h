/* memra: exported checks. Each fills a caller-owned report struct, returns a
 * status and prints nothing; the programs in probes/ parse arguments and
 * print the reports. Thread-safety: any thread (each call uses its own
 * engines and models). */
#ifndef MEMRA_CHECK_H
#define MEMRA_CHECK_H

#include "common.h"
#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- kernel check (CUDA ops vs the CPU reference) ---------------------- */

/* Runs every backend op on a CUDA engine and on the CPU reference with the
 * same seeded random inputs, at fixture shapes and real-model shapes, and
 * compares. Outputs are poisoned (a NaN sentinel) with guard zones around
 * them and in row-stride gaps, so unwritten elements and stray writes fail.
 * Each case states its bound: "exact" (bit-identical), "ulp" (max error in
 * units in the last place of the reference), or "nmse" (sum (got-ref)^2 /
 * sum ref^2). Matmul runs on an exact-mode engine and, for prefill shapes,
 * on a fast-mode engine (f16 inputs) with a looser NMSE bound. */
typedef struct memra_kernel_check_params {
    uint32_t size;          /* set by the init macro */
    int32_t device;         /* CUDA ordinal (default 0) */
    uint64_t seed;          /* random inputs (default 1) */
    const char *test;       /* only cases whose name starts with this, e.g. "matmul" or "attention.swa"
                               (NULL or "" = all) */
    int32_t bench;          /* 1 = also time each case's CUDA op (default 0) */
    int32_t bench_iters;    /* calls timed per case (default 20) */
    int32_t big;            /* 1 = include the real-model shapes (default 1) */
} memra_kernel_check_params_t;

/* Fills PARAMS with defaults for a struct of SIZE bytes (use the macro).
 * Thread-safety: any thread. */
MEMRA_API void memra_kernel_check_params_init(memra_kernel_check_params_t *params, uint32_t size);
#define memra_kernel_check_default_params(p) memra_kernel_check_params_init((p), MEMRA__SIZEOF32(*(p)))

/* Lines of this header's report. A report may be larger or smaller: the
 * library fills as many lines as report->size holds (a program built with
 * an older header, 320 or 512 lines, keeps working; cases past the last line
 * count in truncated). */
#define MEMRA_KERNEL_CHECK_MAX_LINES 1024

typedef struct memra_kernel_check_line {
    char name[48];          /* op.variant, e.g. "matmul.q8_0.decode" */
    char shape[96];         /* the case's shape, human-readable */
    double max_abs_err;     /* max |got - ref| over the written elements */
    double nmse;            /* sum (got - ref)^2 / sum ref^2 */
    double max_ulp;         /* max |got - ref| / ulp(ref) */
    double tol;             /* the bound of tol_kind */
    char tol_kind[8];       /* "exact", "ulp" or "nmse" */
    int32_t guard_ok;       /* every output written, nothing outside it touched */
    int32_t pass;
    double bench_us;        /* mean CUDA time per call (bench), else 0 */
    double bench_gbs;       /* bytes the op must move / bench_us, where counted, else 0 */
    char note[64];          /* why it failed, or "" */
} memra_kernel_check_line_t;

typedef struct memra_kernel_check_report {
    uint32_t size;          /* set by the caller: sizeof(memra_kernel_check_report_t) */
    char device_name[256];
    int32_t n_lines, n_failed;
    int32_t truncated;      /* cases that ran past the lines report->size holds */
    int32_t all_green;      /* every case passed (and at least one ran) */
    memra_kernel_check_line_t lines[MEMRA_KERNEL_CHECK_MAX_LINES];
} memra_kernel_check_report_t;

/* Fills REPORT (its size field must be set). MEMRA_OK when all green,
 * MEMRA_E_MISMATCH when a case failed (the report says which),
 * MEMRA_E_NO_DEVICE without a CUDA build or GPU, MEMRA_E_NOT_FOUND when no
 * case name starts with params->test, other errors (out of
 * memory, device) with the message in memra_last_error(). Prints nothing.
 * Thread-safety: any thread. */
MEMRA_API memra_status_t memra_check_kernels(const memra_kernel_check_params_t *params,
                                             memra_kernel_check_report_t *report);

/* ---- pipeline parity ---------------------------------------------------- */

/* Runs P prompt tokens (prefill, every row's logits) plus N greedy decode
 * steps on the unsplit model, then replays the same tokens on the model split
 * into n_stages stages, once per arm: "serial" (streams 0, plain decode
 * steps) and "pipelined" (streams 1, deferred steps with a window of
 * `window` in flight); with extra_arms also "single-slot" (overlap 0) and
 * "unsharded" (shard 0). Every float32 bit of every logit row is compared. */
typedef struct memra_pp_parity_params {
    uint32_t size;          /* set by the init macro */
    int32_t n_stages;       /* stages of the split arms (default 2) */
    int32_t n_prompt;       /* P: prompt tokens (default 16) */
    int32_t n_steps;        /* N: greedy decode steps (default 32); P, N >= 1 and P + N <= INT32_MAX, else
                               MEMRA_E_INVALID before anything is loaded */
    int32_t window;         /* deferred steps in flight in the pipelined arms (default 3) */
    const char *devices;    /* per-stage devices of the split arms, as MEMRA_PP_DEVICES; the reference runs on
                               the first (NULL = env MEMRA_PP_DEVICES, else "cpu") */
    int32_t splits[MEMRA_MAX_PP_STAGES - 1]; /* cuts (all 0 = env MEMRA_PP_SPLITS, else even by weight bytes) */
    const int32_t *prompt;  /* n_prompt token ids (NULL = a fixed pseudo-random prompt) */
    int32_t extra_arms;     /* 1 = also the single-slot and unsharded arms (default 0) */
} memra_pp_parity_params_t;

/* Fills PARAMS with defaults for a struct of SIZE bytes (use the macro).
 * Thread-safety: any thread. */
MEMRA_API void memra_pp_parity_params_init(memra_pp_parity_params_t *params, uint32_t size);
#define memra_pp_parity_default_params(p) memra_pp_parity_params_init((p), MEMRA__SIZEOF32(*(p)))

#define MEMRA_PP_PARITY_MAX_ARMS 4

typedef struct memra_pp_parity_arm {
    char name[16];          /* "serial", "pipelined", "single-slot", "unsharded" */
    int32_t streams, overlap, shard, window; /* the knobs the arm ran with (window 0: plain decode steps) */
    int32_t steps_compared; /* logit rows compared: P prompt rows + N decode steps */
    int32_t steps_mismatched; /* rows with at least one differing bit */
    int32_t first_step;     /* first mismatching row (0..P-1 prompt, P+i decode step i), -1 if none */
    int32_t first_index;    /* its first differing vocabulary index */
    float first_ref, first_got; /* unsplit and split values there */
    uint32_t first_ref_bits, first_got_bits;
    double decode_tok_s;    /* decode steps per second in this arm */
} memra_pp_parity_arm_t;

typedef struct memra_pp_parity_report {
    uint32_t size;          /* set by the caller: sizeof(memra_pp_parity_report_t) */
    char arch[32];
    int32_t n_layers, n_vocab;
    int32_t n_stages, n_prompt, n_steps;
    int32_t fence[MEMRA_MAX_PP_STAGES + 1]; /* stage s runs layers [fence[s], fence[s+1]) */
    uint64_t stage_bytes[MEMRA_MAX_PP_STAGES]; /* weight bytes per stage (sharded arms) */
    char ref_device[16];    /* where the unsplit reference ran */
    char devices[160];      /* the split arms' stage devices, comma-separated */
    double ref_decode_tok_s; /* unsplit decode steps per second */
    int32_t n_arms;
    memra_pp_parity_arm_t arms[MEMRA_PP_PARITY_MAX_ARMS];
    int32_t pass;           /* 1 when every arm matched every bit */
} memra_pp_parity_report_t;

/* Fills REPORT (its size field must be set). MEMRA_OK when every arm is
 * bit-identical, MEMRA_E_MISMATCH when some row differs (the report says
 * where); other errors (load, bad stage spec, device) leave the report
 * partly filled, with the message in memra_last_error(). Prints nothing.
 * Thread-safety: any thread. */
MEMRA_API memra_status_t memra_check_pipeline_parity(const char *path, const memra_pp_parity_params_t *params,
                                                     memra_pp_parity_report_t *report);

/* ---- argmax margin ------------------------------------------------------ */

/* Compares two configs over the last WINDOW positions of a prompt: logits
 * from token-by-token decode and from batched prefill. Per position: both
 * configs' top-1/top-2 ids and margins, the spread between the configs at
 * those contending ids, agreement; then where the decision position (the
 * last one, whose top-1 is the next token) ranks among the window's margins,
 * and a verdict. BUDGET is the config difference accepted as numerical noise. */
typedef struct memra_margin_params {
    uint32_t size;          /* set by the init macro */
    const char *device;     /* "cpu" or "cuda:N" (NULL = "cpu") */
    float budget;           /* accepted |decode - prefill| logit difference (0 = 1e-3, default 0) */
    int32_t prefill_chunk;  /* tokens per prefill chunk (0 = the model's default) */
} memra_margin_params_t;

/* Fills PARAMS with defaults for a struct of SIZE bytes (use the macro).
 * Thread-safety: any thread. */
MEMRA_API void memra_margin_params_init(memra_margin_params_t *params, uint32_t size);
#define memra_margin_default_params(p) memra_margin_params_init((p), MEMRA__SIZEOF32(*(p)))

typedef enum memra_margin_verdict {
    MEMRA_MARGIN_STABLE = 0,           /* top-1 agrees everywhere; every margin > 2 x budget */
    MEMRA_MARGIN_NEAR_TIE_EXPOSED = 1, /* agrees everywhere, but some margin <= 2 x budget could flip */
    MEMRA_MARGIN_NEAR_TIE_FLIPS = 2,   /* top-1 differs, only at margins <= 2 x budget, spread <= budget */
    MEMRA_MARGIN_SYSTEMATIC = 3,       /* the configs differ by more than the budget */
    MEMRA_MARGIN_UNEXPLAINED = 4,      /* a flip the spread does not explain (non-finite logits, tie rule) */
} memra_margin_verdict_t;

/* "stable", "near-tie exposed", "near-tie flips within budget", "systematic",
 * "unexplained" ("?" otherwise). Thread-safety: any thread. */
MEMRA_API const char *memra_margin_verdict_name(int32_t verdict);

#define MEMRA_MARGIN_MAX_WINDOW 256

typedef struct memra_margin_row {
    int32_t pos;                       /* prompt position */
    int32_t top1_decode, top2_decode;  /* ids, token-by-token decode */
    int32_t top1_prefill, top2_prefill;/* ids, batched prefill */
    float margin_decode, margin_prefill; /* top-1 minus top-2 logit */
    float spread;                      /* max |decode - prefill| over the four ids above */
    int32_t agree;                     /* top1_decode == top1_prefill */
} memra_margin_row_t;

typedef struct memra_margin_report {
    uint32_t size;          /* set by the caller: sizeof(memra_margin_report_t) */
    char arch[32];
    int32_t n_tokens, n_vocab, window;
    float budget;
    int32_t n_agree, n_flips;
    float max_spread;       /* largest row spread */
    float max_abs_diff;     /* largest |decode - prefill| over every id of the window */
    float min_margin;       /* smallest min(margin_decode, margin_prefill) of the window */
    int32_t decision_pos;   /* the last position */
    float decision_margin;  /* its min(margin_decode, margin_prefill) */
    int32_t decision_rank;  /* 1 = the smallest margin of the window */
    float decision_percentile; /* % of the window's positions with a smaller margin */
    int32_t verdict;        /* memra_margin_verdict_t */
    char reason[192];       /* one line: why this verdict */
    memra_margin_row_t rows[MEMRA_MARGIN_MAX_WINDOW]; /* window rows, oldest first */
} memra_margin_report_t;

/* Fills REPORT (its size field must be set) for the N_TOKENS of PROMPT
 * (window clamped to [1, min(n_tokens, MEMRA_MARGIN_MAX_WINDOW)]). Returns
 * MEMRA_OK whatever the verdict; errors (load, bad token, device) leave the
 * report partly filled, with the message in memra_last_error(). Prints
 * nothing. Thread-safety: any thread. */
MEMRA_API memra_status_t memra_check_argmax_margin(const char *path, const int32_t *prompt, int32_t n_tokens,
                                                   int32_t window, const memra_margin_params_t *params,
                                                   memra_margin_report_t *report);

#ifdef __cplusplus
}
#endif
#endif

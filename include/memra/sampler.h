/* memra: token samplers.
 *
 * A sampler turns one row of logits into a token. It applies, in the order
 * of llama.cpp's common sampler chain:
 *   repetition penalty -> top-k -> top-p -> min-p -> temperature -> draw
 * With temperature <= 0 it is greedy: the argmax of the penalized logits
 * (ties go to the lowest id), and top-k/top-p/min-p do not matter.
 *
 * Draws use the sampler's own PRNG (xoshiro256** seeded by splitmix64), so
 * the same seed, the same accepted tokens and the same logits give the same
 * tokens on every platform and run. */
#ifndef MEMRA_SAMPLER_H
#define MEMRA_SAMPLER_H

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct memra_sampler memra_sampler_t;

/* The repetition penalty's range (MEMRA_E_INVALID outside it). Within it,
 * a penalized logit that would leave float's range saturates at +-FLT_MAX. */
#define MEMRA_SAMPLER_PENALTY_MIN 1e-4f
#define MEMRA_SAMPLER_PENALTY_MAX 1e4f

typedef struct memra_sampler_params {
    uint32_t size;          /* sizeof(memra_sampler_params_t), set by the init macro */
    float temperature;      /* logits / temperature, finite; <= 0 = greedy (default 0.8) */
    int32_t top_k;          /* keep the K most likely tokens; 0 = off (default 40) */
    float top_p;            /* keep the smallest set with probability >= P, in (0, 1]; 1 = off (default 0.95) */
    float min_p;            /* keep tokens with p >= MIN_P * p_max, in [0, 1); 0 = off (default 0.05) */
    float repeat_penalty;   /* in [MEMRA_SAMPLER_PENALTY_MIN, _MAX]; a recent token's logit l becomes l / R if
                               l > 0, else l * R; 1 = off (default 1.0) */
    int32_t repeat_last_n;  /* accepted tokens the penalty looks back on; 0 = off (default 64) */
    uint64_t seed;          /* PRNG seed (default 0x6d656d7261, "memra") */
} memra_sampler_params_t;

/* Fills PARAMS with defaults for a struct of SIZE bytes (use the macro).
 * Thread-safety: any thread. */
MEMRA_API void memra_sampler_params_init(memra_sampler_params_t *params, uint32_t size);
#define memra_sampler_default_params(p) memra_sampler_params_init((p), MEMRA__SIZEOF32(*(p)))

/* Creates a sampler (PARAMS NULL = defaults). A parameter outside the
 * ranges above gives MEMRA_E_INVALID and a message naming it.
 * Thread-safety: any thread (distinct samplers are independent). */
MEMRA_API memra_status_t memra_sampler_create(const memra_sampler_params_t *params, memra_sampler_t **out);

/* Frees the sampler; NULL is a no-op.
 * Thread-safety: one thread at a time per handle. */
MEMRA_API void memra_sampler_free(memra_sampler_t *sampler);

/* Forgets the accepted tokens and restarts the PRNG from the seed.
 * Thread-safety: one thread at a time per handle. */
MEMRA_API void memra_sampler_reset(memra_sampler_t *sampler);

/* Records TOKEN (>= 0) as part of the sequence, for the repetition
 * penalty. Call it for every prompt token the penalty should see and for
 * every generated token: memra_sampler_sample does not accept by itself.
 * Thread-safety: one thread at a time per handle. */
MEMRA_API memra_status_t memra_sampler_accept(memra_sampler_t *sampler, int32_t token);

/* Picks a token from LOGITS[0..N_VOCAB) (host memory, left unchanged) into
 * *TOKEN. A non-finite logit gives MEMRA_E_RANGE.
 * Thread-safety: one thread at a time per handle. */
MEMRA_API memra_status_t memra_sampler_sample(memra_sampler_t *sampler, const float *logits, int32_t n_vocab,
                                              int32_t *token);

/* Message of the last failed call on SAMPLER (empty if none).
 * Thread-safety: one thread at a time per handle. */
MEMRA_API const char *memra_sampler_last_error(const memra_sampler_t *sampler);

#ifdef __cplusplus
}
#endif
#endif

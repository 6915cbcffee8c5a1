/* memra-bench --batch: llama-batched-bench-like aggregate throughput of B
 * sequences advanced together through memra_forward_batch. */
#ifndef MEMRA_EXAMPLES_BENCH_BATCH_H
#define MEMRA_EXAMPLES_BENCH_BATCH_H

#include <stdint.h>

#include <memra/memra.h>

/* For each B of BL[0..N_B) and each prompt length P of PL[0..N_P): B
 * fresh caches; pp: one memra_forward_batch of B items of P tokens
 * (last-row logits; the library chunks them); tg: N steps of B one-token
 * items, each returning B rows of logits to the host. Aggregate rates
 * (B*P and B*N tokens over the time), median and standard deviation over
 * REPS runs after one warm-up; a table, or with JSON one object per B on
 * its own line. TOK holds at least max(P) + N tokens. Returns the first
 * failing status (printed with the model's message). */
memra_status_t bench_batch(memra_engine_t *e, memra_model_t *m, const char *path, const int *bl, int n_b,
                           const int *pl, int n_p, int n, int reps, int json, const int32_t *tok);

#endif

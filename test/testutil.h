/* Small helpers shared by the cmocka tests. */
#ifndef MEMRA_TESTUTIL_H
#define MEMRA_TESTUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "memra/engine.h"

/* Fixture folder: $MEMRA_FIXTURES, else the build-time default
 * (../shared/fixtures). Returns NULL if it does not exist. */
const char *tu_fixtures(void);
/* tu_fixtures()/REL into a static buffer, or NULL when the file is absent
 * (the caller then skips with a message naming it). */
const char *tu_fixture_path(const char *rel);
/* Bundled small files under test/data. */
const char *tu_data_path(const char *rel);
/* Reads a whole file (malloc'ed, with a NUL after the last byte), NULL on failure. */
void *tu_read_file(const char *path, size_t *size);
/* Writes bytes to a fresh temp file; returns its path (static buffer per call slot 0..3). */
const char *tu_write_temp(const void *data, size_t size, int slot);

/* Seeded xorshift64* stream (the state must not be 0): fixed seeds make
 * every failure reproducible. */
uint64_t tu_rng_next(uint64_t *state);
double tu_rng_unit(uint64_t *state);     /* uniform in (0, 1) */
float tu_rng_gauss(uint64_t *state);     /* standard normal (Box-Muller) */
int64_t tu_rng_int(uint64_t *state, int64_t n); /* in [0, n) */

/* The bits of a float and back. */
uint32_t tu_f2u(float f);
float tu_u2f(uint32_t u);

/* Skips the current cmocka test with a reason printed to stderr. */
#define TU_SKIP(...)                                     \
    do {                                                 \
        fprintf(stderr, "[  SKIPPED ] " __VA_ARGS__);   \
        fprintf(stderr, "\n");                           \
        skip();                                          \
    } while (0)


/* The fixture models' names (every <name>.gguf under tu_fixtures()/models,
 * sorted), at most MAX, into NAMES (NAME_SIZE bytes each); the count. */
int tu_fixture_models(char *names, size_t name_size, int max);
/* The engine of the fixture tests: MEMRA_TEST_DEVICE (cuda:0 runs the
 * checks on a GPU; default cpu), 2 CPU threads. NULL on failure, the
 * library's message on stderr after WHO. */
memra_engine_t *tu_test_engine(const char *who);
/* Skips (saying why) a case of STAGES > 1 pipeline stages of fixture NAME
 * when MEMRA_TEST_DEVICE names a GPU: the tests' second stage is a private
 * CPU engine on the CPU, a second device on a GPU. True when skipped. */
bool tu_skip_stages_on_gpu(const char *name, int32_t stages);
/* Fixture model NAME (models/NAME.gguf) loaded on ENGINE with
 * prefill_chunk CHUNK (0: the default) in STAGES pipeline stages (0: one);
 * fails the current test with the library's message (or when fewer stages
 * were loaded than asked). */
struct memra_model;
struct memra_cache;
struct memra_model *tu_load_fixture(const char *name, memra_engine_t *engine, int32_t chunk, int32_t stages);
/* The same with a paged KV pool of POOL_BYTES per stage in pages of
 * PAGE_BYTES (model.h: kv_pool_bytes, kv_page_bytes). */
struct memra_model *tu_load_fixture_pool(const char *name, memra_engine_t *engine, int32_t chunk, int32_t stages,
                                         int64_t pool_bytes, int64_t page_bytes);
/* A cache of N_CTX tokens whose K and V rows are of TYPE (a memra_type_t,
 * or TU_KV_Q8_Q4: q8_0 K rows and q4_0 V rows), or NULL when the model
 * cannot store it (q8_0 or q4_0 with KV heads that are not whole blocks of
 * 32); any other failure fails the current test. tu_kv_name names TYPE. */
#define TU_KV_Q8_Q4 (-2)
struct memra_cache *tu_cache_typed(struct memra_model *m, int type, int32_t n_ctx);
const char *tu_kv_name(int type);

/* Fails the current test unless N rows of V logits are the same bits
 * (memcmp), naming WHAT and the first row that differs. */
void tu_same_rows(const char *what, const float *got, const float *want, int32_t n, size_t v);

/* A cmocka test that skips, saying no fixture models were found. */
void tu_no_fixture_models(void **state);

/* One test of a fixture-model suite: FN runs on every fixture model with
 * a tu_fixture_case_t as its state. */
typedef struct tu_kind {
    const char *name;
    void (*fn)(void **state);
    int32_t stages;  /* 0: one stage; 2: two pipeline stages */
    int32_t streams; /* params.streams of a pipelined load (1 workers, 0 serial) */
} tu_kind_t;

/* A test's fixture (its file stem) and how its kind loads it. */
typedef struct tu_fixture_case {
    const char *name;
    int32_t stages, streams;
} tu_fixture_case_t;

/* Runs each of the N_KINDS kinds on each fixture model (tu_fixture_models)
 * as the cmocka group GROUP, tests named KIND/MODEL; one skipping test
 * when there is no fixture model. *ENGINE holds tu_test_engine's engine
 * while the group runs. The group's return value. */
int tu_run_fixture_kinds(const char *group, const tu_kind_t *kinds, size_t n_kinds, memra_engine_t **engine);

#endif

/* The forward driver: validates a request (one sequence, or a batch of
 * items each with its own cache) and splits it into steps, each walked
 * through the stages by memra__run_step (lib/stage.c). A step holds every
 * item's next chunk of at most prefill_chunk tokens, so memra_forward is
 * the one-item case of memra_forward_batch. Arch code never sees chunking
 * or stages, so decode, any chunk size, any batch and any stage split run
 * the same ops on the same rows (docs/BATCHING.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline_impl.h" /* struct memra__pp: deferred steps in flight */

/* Set on the calling thread while a step of several decode rows runs
 * (backend.h). A thread-local, not a backend field: two models may share
 * an engine from two threads. */
static _Thread_local int g_rows_mode;

bool memra__rows_exact(void)
{
    return g_rows_mode == MEMRA__ROWS_EXACT;
}

bool memra__rows_batch(void)
{
    return g_rows_mode == MEMRA__ROWS_BATCH;
}

void memra__set_rows_mode(int mode)
{
    g_rows_mode = mode;
}

/* A fast engine runs a step of at least MEMRA_BATCH_FAST_MIN decode rows
 * (default 3) on the fast tier's batched kernels, a smaller one on the
 * per-row-exact decode kernels: at two rows the batched Q8_0 matvec reads
 * the weights faster than the fast tier's GEMM, at three no longer (H200,
 * 2026-12-03, aggregate tok/s at 2 / 3 rows, decode kernels against the
 * fast tier: Qwen3.5-9B Q8_0 427 / 385 against 386 / 558, Gemma-4-26B-A4B
 * 352 / 365 against 344 / 440, Qwen3.6-35B-A3B 426 / 471 against 389 /
 * 530; since 189475a two rows run on mmv_q8p_kernel: the 9B 481). Unset,
 * a model whose trunk's matmul weights are mostly K-quants and whose rows
 * end in a short segment of the K-quant matvec (n_embd not a multiple of
 * its 8-super-block segments, 2048: the Gemma 4 and 27B widths) runs two
 * rows on the fast tier too: steps of two rows on it against the decode
 * kernels, H100, 2026-12-07: the E4B Q4_K +17.8 %, the 31B +8.3 %, the 27B
 * +6.5 %, the 26B-A4B +2.8 %; the 9B Q4_K (4096 wide) -4.7 %; Q8_0 files
 * the 9B -18.6 %, the 26B-A4B -6.3 %, the 31B +6.1 %). MEMRA_BATCH_FAST=0 keeps every step on the decode kernels. One
 * row, or an exact engine: the decode kernels. Both knobs are read once
 * per process. */
int32_t memra__batch_fast_min(const memra_model_t *m)
{
    static int32_t batch_min = -1;
    if (batch_min < 0 && memra__env_int("MEMRA_BATCH_FAST_MIN", 2, MEMRA_MAX_BATCH + 1, 0, &batch_min))
        batch_min = 0;
    return batch_min > 0 ? batch_min : m && m->fast_min2 ? 2 : 3;
}

int memra__decode_rows_mode(const memra_model_t *m, int32_t n_rows)
{
    static int32_t batch_fast = -1;
    if (batch_fast < 0 && memra__env_int("MEMRA_BATCH_FAST", 0, 1, 1, &batch_fast))
        batch_fast = 1;
    if (!memra__model_fast(m))
        return MEMRA__ROWS_ANY;
    return n_rows >= memra__batch_fast_min(m) && batch_fast ? MEMRA__ROWS_BATCH : MEMRA__ROWS_EXACT;
}

int32_t memra_model_max_batch(const memra_model_t *m)
{
    return m ? MEMRA_MAX_BATCH : 0;
}


/* Checks one item; FN names it in messages ("memra_forward" or
 * "memra_forward_batch: item I"). Reads nothing but the item. DEFERRED:
 * a queued step (memra_forward_batch_deferred) may follow steps in flight,
 * takes one token and gives its logits through its pending. */
static memra_status_t check_item(memra_model_t *m, const char *fn, const memra_batch_item_t *it, bool deferred)
{
    memra_cache_t *c = it->cache;
    const int32_t n = it->n_tokens;
    if (!c || (!it->tokens && n > 0))
        return memra__model_fail(m, MEMRA_E_INVALID, "%s: NULL cache or tokens", fn);
    if (c->model != m)
        return memra__model_fail(m, MEMRA_E_MISUSE, "%s: the cache belongs to another model", fn);
    if (n <= 0)
        return memra__model_fail(m, MEMRA_E_INVALID, "%s: n = %d (need at least one token)", fn, n);
    if (it->flags & ~MEMRA_FORWARD_ALL_ROWS)
        return memra__model_fail(m, MEMRA_E_INVALID, "%s: unknown flags 0x%x", fn, it->flags);
    if (deferred && n != 1)
        return memra__model_fail(m, MEMRA_E_INVALID, "%s: n_tokens = %d (a deferred step takes one token an item; "
                                 "prompts go through memra_forward_batch)", fn, n);
    if (deferred && it->logits)
        return memra__model_fail(m, MEMRA_E_INVALID, "%s: logits must be NULL (memra_pending_wait gives them)", fn);
    if (!deferred && atomic_load(&c->in_flight) > 0)
        return memra__model_fail(m, MEMRA_E_BUSY, "%s: pipelined steps are in flight on this cache", fn);
    if (!deferred && m->pp && atomic_load(&m->pp->unconsumed) > 0)
        return memra__model_fail(m, MEMRA_E_BUSY, "%s: pipelined steps of this model are in flight "
                                 "(wait on or free their pendings first)", fn);
    /* the capacity first: an N beyond it is refused before TOKENS is read */
    if ((int64_t)c->pos + n > c->n_ctx)
        return memra__model_fail(m, MEMRA_E_FULL, "%s: %d token(s) at position %d exceed the cache capacity %d", fn,
                                 n, c->pos, c->n_ctx);
    for (int32_t i = 0; i < n; i++)
        if (it->tokens[i] < 0 || it->tokens[i] >= m->n_vocab)
            return memra__model_fail(m, MEMRA_E_RANGE, "%s: token %d at index %d is outside the vocabulary [0, %d)",
                                     fn, it->tokens[i], i, m->n_vocab);
    /* the rows' pages (paged KV pool), last: nothing else can fail after it */
    memra_status_t st = memra__cache_ensure(c, n);
    if (st)
        return memra__model_fail(m, st, "%s: %s", fn, c->err.msg);
    return MEMRA_OK;
}

/* Whether any stage runs a fast engine (backend.h: fast prefill kernels
 * whose rows depend on the row count). */
bool memra__model_fast(const memra_model_t *m)
{
    for (int32_t s = 0; s < m->n_stages; s++)
        if (m->stages[s].be->fast)
            return true;
    return false;
}

/* The buffers of one batch run: per item how many tokens are done, and a
 * step's segments and tokens. */
typedef struct batch_run {
    int32_t done[MEMRA_MAX_BATCH];
    memra__seg_t seg[MEMRA_MAX_BATCH];
    int32_t *tokens;
} batch_run_t;

/* Adds item I's next chunk (at most prefill_chunk tokens) as a segment of
 * the step being built: rows from *N_ROWS on. */
static void add_chunk(const memra_model_t *m, const memra_batch_item_t *it, batch_run_t *b, int32_t i, int32_t *n_seg,
                      int32_t *n_rows)
{
    const int32_t left = it->n_tokens - b->done[i];
    const int32_t k = left < m->prefill_chunk ? left : m->prefill_chunk;
    const bool final = b->done[i] + k == it->n_tokens, all = (it->flags & MEMRA_FORWARD_ALL_ROWS) != 0;
    memra__seg_t *s = &b->seg[(*n_seg)++];
    *s = (memra__seg_t){.c = it->cache, .row0 = *n_rows, .n = k, .pos0 = it->cache->pos};
    if (it->logits && (all || final)) {
        s->out0 = all ? 0 : k - 1;
        s->n_out = all ? k : 1;
        s->host_logits = all ? it->logits + (size_t)b->done[i] * (size_t)m->n_vocab : it->logits;
    }
    memcpy(b->tokens + *n_rows, it->tokens + b->done[i], (size_t)k * sizeof(int32_t));
    *n_rows += k;
}

/* Runs the segments [s0, s0+n_seg) of B (rows back to back from the first
 * one's row0) and advances their caches. */
static memra_status_t run_segs(memra_model_t *m, batch_run_t *b, int32_t s0, int32_t n_seg, int rows_mode)
{
    memra__seg_t *seg = b->seg + s0;
    const int32_t base = seg[0].row0;
    int32_t n_rows = 0;
    for (int32_t i = 0; i < n_seg; i++) {
        seg[i].row0 -= base;
        n_rows += seg[i].n;
    }
    g_rows_mode = rows_mode;
    memra_status_t s = memra__run_step(m, seg, n_seg, b->tokens + base, n_rows);
    g_rows_mode = MEMRA__ROWS_ANY;
    for (int32_t i = 0; i < n_seg; i++)
        seg[i].row0 += base;
    if (s)
        return s;
    for (int32_t i = 0; i < n_seg; i++)
        seg[i].c->pos += seg[i].n;
    return MEMRA_OK;
}

/* Runs validated ITEMS to the end, one step per round of chunks. A fast
 * engine's prefill kernels make a row depend on the rows beside it, so
 * there a round runs its one-row segments (decodes) together (in the mode
 * of memra__decode_rows_mode), and each longer chunk alone, as
 * memra_forward runs it. */
static memra_status_t run_items(memra_model_t *m, const memra_batch_item_t *items, int32_t n_items)
{
    int64_t rows = 0;
    for (int32_t i = 0; i < n_items; i++)
        rows += items[i].n_tokens < m->prefill_chunk ? items[i].n_tokens : m->prefill_chunk;
    batch_run_t run = {0}, *b = &run;
    int32_t *tokens = malloc((size_t)rows * sizeof *tokens);
    if (!tokens)
        return memra__model_fail(m, MEMRA_E_NOMEM, "out of memory");
    b->tokens = tokens;
    const bool fast = memra__model_fast(m);
    memra_status_t s = MEMRA_OK;
    for (bool more = true; more && !s;) {
        /* the round's one-row chunks first, then the longer ones */
        int32_t n_seg = 0, n_rows = 0, n1 = 0, idx[MEMRA_MAX_BATCH];
        for (int pass = 0; pass < 2; pass++)
            for (int32_t i = 0; i < n_items; i++) {
                const int32_t left = items[i].n_tokens - b->done[i];
                if (left > 0 && (left == 1 || m->prefill_chunk == 1) == (pass == 0)) {
                    idx[n_seg] = i;
                    add_chunk(m, &items[i], b, i, &n_seg, &n_rows);
                }
            }
        for (int32_t j = 0; j < n_seg; j++)
            n1 += b->seg[j].n == 1;
        if (!fast) {
            s = run_segs(m, b, 0, n_seg, MEMRA__ROWS_ANY);
        } else {
            if (n1 > 0)
                s = run_segs(m, b, 0, n1, memra__decode_rows_mode(m, n1));
            for (int32_t j = n1; j < n_seg && !s; j++)
                s = run_segs(m, b, j, 1, MEMRA__ROWS_ANY);
        }
        more = false;
        for (int32_t j = 0; j < n_seg && !s; j++) {
            b->done[idx[j]] += b->seg[j].n;
            more = more || b->done[idx[j]] < items[idx[j]].n_tokens;
        }
    }
    free(tokens);
    return s;
}

memra_status_t memra__check_batch(memra_model_t *m, const char *fn, const memra_batch_item_t *items, int32_t n_items,
                                  uint32_t flags, bool deferred)
{
    if (!items || n_items <= 0 || n_items > MEMRA_MAX_BATCH)
        return memra__model_fail(m, MEMRA_E_INVALID, "%s: %s (need 1..%d items)", fn,
                                 !items ? "items is NULL" : n_items <= 0 ? "no items" : "too many items",
                                 MEMRA_MAX_BATCH);
    if (flags)
        return memra__model_fail(m, MEMRA_E_INVALID, "%s: unknown flags 0x%x", fn, flags);
    for (int32_t i = 0; i < n_items; i++) {
        char name[64];
        snprintf(name, sizeof name, "%s: item %d", fn, i);
        MEMRA__TRY(check_item(m, name, &items[i], deferred));
        for (int32_t j = 0; j < i; j++)
            if (items[j].cache == items[i].cache)
                return memra__model_fail(m, MEMRA_E_INVALID, "%s: items %d and %d use the same cache", fn, j, i);
    }
    return MEMRA_OK;
}

static memra_status_t forward_batch(memra_model_t *m, const memra_batch_item_t *items, int32_t n_items,
                                    uint32_t flags)
{
    static const char fn[] = "memra_forward_batch";
    if (!m)
        return memra__fail(NULL, MEMRA_E_INVALID, "%s: NULL model", fn);
    MEMRA__TRY(memra__check_batch(m, fn, items, n_items, flags, false));
    memra__err_clear(&m->err);
    return run_items(m, items, n_items);
}

memra_status_t memra_forward_batch(memra_model_t *m, const memra_batch_item_t *items, int32_t n_items, uint32_t flags)
{
    if (!m)
        return forward_batch(m, items, n_items, flags);
    MEMRA__MODEL_GUARDED(m, "memra_forward_batch", forward_batch(m, items, n_items, flags));
}

static memra_status_t forward(memra_model_t *m, memra_cache_t *c, const int32_t *tokens, int32_t n, uint32_t flags,
                              float *logits)
{
    static const char fn[] = "memra_forward";
    if (!m || !c || (!tokens && n > 0))
        return memra__fail(m ? &m->err : NULL, MEMRA_E_INVALID, "%s: NULL model, cache or tokens", fn);
    const memra_batch_item_t it = {.cache = c, .tokens = tokens, .n_tokens = n, .flags = flags, .logits = logits};
    MEMRA__TRY(check_item(m, fn, &it, false));
    memra__err_clear(&m->err);
    return run_items(m, &it, 1);
}

memra_status_t memra_forward(memra_model_t *m, memra_cache_t *c, const int32_t *tokens, int32_t n, uint32_t flags,
                             float *logits)
{
    if (!m)
        return forward(m, c, tokens, n, flags, logits);
    MEMRA__MODEL_GUARDED(m, "memra_forward", forward(m, c, tokens, n, flags, logits));
}

memra_status_t memra_decode_step(memra_model_t *m, memra_cache_t *c, int32_t token, float *logits)
{
    return memra_forward(m, c, &token, 1, 0, logits);
}

/* Model loading: open the GGUF, pick the arch, let it bind config and
 * weights, check that every tensor was consumed, and free it all again on
 * any failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memra/tokenizer.h"
#include "kv_pool.h"
#include "pipeline_impl.h"


static const memra__arch_t *const k_archs[] = {
    &memra__arch_llama, &memra__arch_qwen3, &memra__arch_qwen35, &memra__arch_qwen35moe, &memra__arch_gemma4,
};

void memra_model_params_init(memra_model_params_t *p, uint32_t size)
{
    if (!p || size < sizeof(uint32_t))
        return;
    memra_model_params_t d = {
        .size = (uint32_t)sizeof d,
        .shard = -1, .streams = -1, .overlap = -1, .share_device = -1, /* -1: env MEMRA_PP_*, then default */
    };
    memra__sized_write(p, size, &d, sizeof d);
}

static void destroy(memra_model_t *m)
{
    if (m->arch && m->arch->unbind)
        m->arch->unbind(m);
    memra__pp_stop(m); /* workers and boundary slots go before the stages they use */
    for (int32_t s = 0; s < m->n_stages; s++)
        memra__stage_free(&m->stages[s]);
    memra__pp_free(m); /* private stage engines, once no stage uses them */
    memra_tokenizer_free(m->tok);
    memra_gguf_close(m->gguf);
    free(m->tensor_used);
    free(m);
}

memra_status_t memra__model_enter(memra_model_t *m, const char *fn)
{
    if (atomic_exchange_explicit(&m->in_call, true, memory_order_acquire))
        return memra__fail(NULL, MEMRA_E_BUSY, "%s: the model is in use by another thread (one thread at a time per model)",
                           fn);
    return MEMRA_OK;
}

memra_status_t memra_model_free(memra_model_t *m)
{
    if (!m)
        return MEMRA_OK;
    memra_status_t st = memra__model_enter(m, "memra_model_free");
    if (st)
        return st;
    int n = atomic_load(&m->n_caches), ns = atomic_load(&m->n_snapshots);
    if (n > 0 || ns > 0) {
        memra__model_leave(m);
        return memra__model_fail(m, MEMRA_E_BUSY,
                                 "memra_model_free: %d cache(s) and %d snapshot(s) of this model still exist; free them first",
                                 n, ns);
    }
    destroy(m);
    return MEMRA_OK;
}

static memra_model_params_t effective_params(const memra_model_params_t *in)
{
    memra_model_params_t p;
    memra_model_default_params(&p);
    if (in)
        memra__sized_read(&p, sizeof p, in);
    return p;
}

static memra_status_t chunk_size(const memra_model_params_t *p, int32_t *out)
{
    if (p->prefill_chunk < 0 || p->prefill_chunk > (1 << 20))
        return memra__fail(NULL, MEMRA_E_INVALID,
                           "memra_model_load: prefill_chunk %d is outside 1..1048576 (0 = MEMRA_PRIME_CHUNK or %d)",
                           p->prefill_chunk, MEMRA_PREFILL_CHUNK_DEFAULT);
    if (p->prefill_chunk > 0) {
        *out = p->prefill_chunk;
        return MEMRA_OK;
    }
    return memra__env_int("MEMRA_PRIME_CHUNK", 1, 1 << 20, MEMRA_PREFILL_CHUNK_DEFAULT, out);
}

static memra_status_t pick_arch(memra_model_t *m)
{
    int64_t i = memra_gguf_find_kv(m->gguf, "general.architecture");
    const char *arch = NULL;
    if (i < 0 || memra_gguf_kv_str(m->gguf, i, &arch, NULL) != MEMRA_OK)
        return memra__model_fail(m, MEMRA_E_FORMAT, "the file has no general.architecture string");
    for (size_t k = 0; k < MEMRA__ARRAY_LEN(k_archs); k++) {
        if (strcmp(k_archs[k]->name, arch) == 0) {
            m->arch = k_archs[k];
            snprintf(m->arch_name, sizeof m->arch_name, "%s", arch);
            return MEMRA_OK;
        }
    }
    return memra__model_fail(m, MEMRA_E_UNSUPPORTED,
                             "unsupported architecture '%s' (memra runs llama, qwen3, qwen35, qwen35moe, gemma4)", arch);
}

static memra_status_t check_all_used(memra_model_t *m)
{
    int64_t n = memra_gguf_n_tensors(m->gguf), unused = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
        if (!m->tensor_used[i] && unused++ == 0)
            first = i;
    if (unused)
        return memra__model_fail(m, MEMRA_E_FORMAT,
                                 "%lld tensor(s) of the file are not used by arch '%s' (first: '%s'); wrong number of tensors",
                                 (long long)unused, m->arch_name, memra_gguf_tensor_name(m->gguf, first));
    return MEMRA_OK;
}

/* Whether two-row decode steps run on the fast tier (memra__batch_fast_min,
 * lib/forward.c): the bytes of the trunk's matrices ("blk." tensors of two
 * or more dimensions) mostly Q4_K, Q5_K or Q6_K, and n_embd not a multiple
 * of the K-quant matvec's 8-super-block segment (2048 elements), so that
 * its rows end in a short segment. */
static bool fast_min2(const memra_model_t *m)
{
    uint64_t kq = 0, all = 0;
    const int64_t n = memra_gguf_n_tensors(m->gguf);
    for (int64_t i = 0; i < n; i++) {
        int64_t ne[4];
        if (strncmp(memra_gguf_tensor_name(m->gguf, i), "blk.", 4) != 0 ||
            memra_gguf_tensor_shape(m->gguf, i, ne) < 2)
            continue;
        const memra_type_t t = memra_gguf_tensor_type(m->gguf, i);
        const uint64_t b = memra_gguf_tensor_nbytes(m->gguf, i);
        all += b;
        if (t == MEMRA_TYPE_Q4_K || t == MEMRA_TYPE_Q5_K || t == MEMRA_TYPE_Q6_K)
            kq += b;
    }
    return kq > all / 2 && m->n_embd % 2048 != 0;
}

static memra_status_t load(memra_model_t *m, const char *path)
{
    memra_status_t st = memra_gguf_open(path, &m->gguf);
    if (st)
        return memra__model_fail(m, st, "%s", memra_last_error());
    int64_t nt = memra_gguf_n_tensors(m->gguf);
    m->tensor_used = calloc(nt ? (size_t)nt : 1, sizeof *m->tensor_used);
    if (!m->tensor_used)
        return memra__model_fail(m, MEMRA_E_NOMEM, "out of memory");
    if ((st = pick_arch(m)))
        return st;
    if (m->params.progress && m->params.progress(0.0f, m->params.progress_user))
        return memra__model_fail(m, MEMRA_E_AGAIN, "load cancelled by the progress callback");

    /* Stages: count, engines and layer ranges from params and MEMRA_PP_*
     * env (one stage on params.engine, or a private CPU engine, by default),
     * known before bind so each binder places a weight on its layer's stage. */
    if ((st = memra__pp_setup(m)))
        return st;

    if ((st = m->arch->bind(m)))
        return st;
    if (m->n_layer <= 0 || m->n_layer > MEMRA_MAX_LAYERS || m->n_embd <= 0 || m->n_vocab <= 0 || m->carry_floats < m->n_embd)
        return memra__model_fail(m, MEMRA_E_INTERNAL, "arch '%s' bound an inconsistent config", m->arch_name);
    if (m->params.n_layers > m->n_layer) /* the binders run min(n_layers, the file's) */
        return memra__model_fail(m, MEMRA_E_INVALID, "params.n_layers is %d, but the file has %d trunk layer(s)",
                                 m->params.n_layers, m->n_layer);
    if ((st = memra__pp_finish(m)))
        return st;
    if ((st = check_all_used(m)))
        return st;
    m->fast_min2 = fast_min2(m);
    if (m->params.kv_pool_bytes < 0 || m->params.kv_page_bytes < 0)
        return memra__model_fail(m, MEMRA_E_INVALID, "params.kv_pool_bytes %lld / kv_page_bytes %lld < 0",
                                 (long long)m->params.kv_pool_bytes, (long long)m->params.kv_page_bytes);
    for (int32_t s = 0; s < m->n_stages && m->params.kv_pool_bytes > 0; s++)
        if ((st = memra__kv_pool_create(m->stages[s].be, m->params.kv_pool_bytes, m->params.kv_page_bytes,
                                        &m->stages[s].kv_pool)))
            return memra__model_fail(m, st, "stage %d: %s", s, m->stages[s].be->err->msg);

    if (memra_gguf_find_kv(m->gguf, "tokenizer.ggml.model") >= 0) {
        if ((st = memra_tokenizer_from_gguf(m->gguf, &m->tok)))
            return memra__relay(&m->err, st, "tokenizer: ");
    }
    if (m->params.progress && m->params.progress(1.0f, m->params.progress_user))
        return memra__model_fail(m, MEMRA_E_AGAIN, "load cancelled by the progress callback");
    return MEMRA_OK;
}

memra_status_t memra_model_load(const char *path, const memra_model_params_t *params, memra_model_t **out)
{
    if (!out)
        return memra__fail(NULL, MEMRA_E_INVALID, "memra_model_load: out is NULL");
    *out = NULL;
    if (!path)
        return memra__fail(NULL, MEMRA_E_INVALID, "memra_model_load: path is NULL");
    if (params && params->size < sizeof(uint32_t) * 2)
        return memra__fail(NULL, MEMRA_E_INVALID, "memra_model_load: params->size is %u; use memra_model_default_params()",
                           params->size);
    memra_model_t *m = calloc(1, sizeof *m);
    if (!m)
        return memra__fail(NULL, MEMRA_E_NOMEM, "memra_model_load: out of memory");
    m->params = effective_params(params);
    if (m->params.n_layers < 0) {
        int32_t bad = m->params.n_layers;
        free(m);
        return memra__fail(NULL, MEMRA_E_INVALID, "memra_model_load: n_layers %d < 0", bad);
    }
    if (chunk_size(&m->params, &m->prefill_chunk)) {
        free(m); /* the message names the variable */
        return MEMRA_E_INVALID;
    }
    memra_status_t st = load(m, path);
    if (st) {
        /* keep the message: destroy() may log or overwrite the thread's copy */
        char msg[MEMRA__ERRMSG_MAX + 1024];
        snprintf(msg, sizeof msg, "%s: %s", path, memra__skip_prefix(m->err.msg, path)); /* gguf errors name it */
        destroy(m);
        return memra__fail(NULL, st, "%s", msg);
    }
    *out = m;
    return MEMRA_OK;
}

const char *memra_model_arch(const memra_model_t *m) { return m ? m->arch_name : NULL; }
int32_t memra_model_n_layers(const memra_model_t *m) { return m ? m->n_layer : 0; }
int32_t memra_model_n_vocab(const memra_model_t *m) { return m ? m->n_vocab : 0; }
int32_t memra_model_n_embd(const memra_model_t *m) { return m ? m->n_embd : 0; }
int32_t memra_model_n_ctx_train(const memra_model_t *m) { return m ? m->n_ctx_train : 0; }
int32_t memra_model_n_mtp_layers(const memra_model_t *m) { return m ? m->n_mtp : 0; }
const memra_gguf_t *memra_model_gguf(const memra_model_t *m) { return m ? m->gguf : NULL; }
const memra_tokenizer_t *memra_model_tokenizer(const memra_model_t *m) { return m ? m->tok : NULL; }
const char *memra_model_last_error(const memra_model_t *m) { return m ? m->err.msg : ""; }

uint64_t memra_model_weight_bytes(const memra_model_t *m)
{
    uint64_t n = 0;
    for (int32_t s = 0; m && s < m->n_stages; s++)
        n += m->stages[s].weight_bytes;
    return n;
}

void memra_model_kv_pool_bytes(const memra_model_t *m, uint64_t *used, uint64_t *total)
{
    uint64_t u = 0, t = 0;
    for (int32_t s = 0; m && s < m->n_stages; s++) {
        const memra__kv_pool_t *p = m->stages[s].kv_pool;
        u += (uint64_t)memra__kv_pool_used(p) * (p ? p->page : 0);
        t += p ? (uint64_t)p->n_pages * p->page : 0;
    }
    if (used)
        *used = u;
    if (total)
        *total = t;
}

uint64_t memra_model_kv_page_bytes(const memra_model_t *m)
{
    uint64_t page = 0;
    for (int32_t s = 0; m && s < m->n_stages; s++) {
        const memra__kv_pool_t *p = m->stages[s].kv_pool;
        if (p && p->page > page)
            page = p->page;
    }
    return page;
}

int32_t memra_model_layer_kind(const memra_model_t *m, int32_t il)
{
    if (!m || il < 0 || il >= m->n_layer)
        return -1;
    return m->layer_kind[il];
}

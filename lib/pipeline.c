/* The stage plan, made at load before the arch binds its weights: how many
 * stages, which engine each runs on, where the layer ranges are cut. Params
 * fields win, env MEMRA_PP_* fills in what the params leave at default, and
 * the built-in defaults come last. Also the introspection API. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipeline_impl.h"

/* ---- spec parsing ----------------------------------------------------------- */

/* Splits SPEC at commas into at most CAP trimmed items in BUF. */
static int split_list(const char *spec, char *buf, size_t bufcap, char **items, int cap)
{
    snprintf(buf, bufcap, "%s", spec);
    int n = 0;
    for (char *p = buf;;) {
        char *comma = strchr(p, ',');
        if (comma)
            *comma = '\0';
        while (*p == ' ')
            p++;
        for (char *e = p + strlen(p); e > p && e[-1] == ' ';)
            *--e = '\0';
        if (n < cap)
            items[n] = p;
        n++;
        if (!comma)
            break;
        p = comma + 1;
    }
    return n;
}

memra_status_t memra__pp_parse_devices(const char *what, const char *spec, int32_t n, memra_engine_params_t *out)
{
    char buf[1024], *items[MEMRA_MAX_STAGES];
    if (!spec || !*spec)
        return memra__fail(NULL, MEMRA_E_INVALID, "%s is empty: expected cpu or cuda:N per stage", what);
    if (strlen(spec) >= sizeof buf)
        return memra__fail(NULL, MEMRA_E_INVALID, "%s is too long", what);
    int k = split_list(spec, buf, sizeof buf, items, MEMRA_MAX_STAGES);
    if (k != 1 && k != n)
        return memra__fail(NULL, MEMRA_E_INVALID,
                           "%s='%s' names %d devices for %d stages (give one name for all, or one per stage)",
                           what, spec, k, n);
    for (int32_t s = 0; s < n; s++) {
        const char *item = items[k == 1 ? 0 : s];
        memra_engine_default_params(&out[s]);
        if (memra_engine_params_set_device(&out[s], item) != MEMRA_OK)
            return memra__fail(NULL, MEMRA_E_INVALID, "%s='%s': stage %d device '%s' is not cpu, cuda or cuda:N",
                               what, spec, s, item);
    }
    return MEMRA_OK;
}

memra_status_t memra__pp_parse_splits(const char *what, const char *spec, int32_t n_stages, int32_t *cuts)
{
    char buf[1024], *items[MEMRA_MAX_STAGES];
    if (!spec || !*spec)
        return memra__fail(NULL, MEMRA_E_INVALID, "%s is empty: expected the first layer of stages 2..N", what);
    if (strlen(spec) >= sizeof buf)
        return memra__fail(NULL, MEMRA_E_INVALID, "%s is too long", what);
    int k = split_list(spec, buf, sizeof buf, items, MEMRA_MAX_STAGES);
    if (k != n_stages - 1)
        return memra__fail(NULL, MEMRA_E_INVALID, "%s='%s' lists %d cut(s); %d stages need %d", what, spec, k,
                           n_stages, n_stages - 1);
    for (int i = 0; i < k; i++) {
        char w[96];
        snprintf(w, sizeof w, "%s entry %d", what, i + 1);
        memra_status_t st = memra__parse_int(w, items[i], 0, MEMRA_MAX_LAYERS, &cuts[i]);
        if (st)
            return st;
    }
    return MEMRA_OK;
}

memra_status_t memra__pp_check_cuts(const char *what, const int32_t *cuts, int32_t n_stages, int32_t n_layer,
                                    const bool *ok)
{
    int32_t prev = 0;
    for (int32_t i = 0; i < n_stages - 1; i++) {
        int32_t c = cuts[i];
        if (c <= prev || c >= n_layer)
            return memra__fail(NULL, MEMRA_E_INVALID,
                               "%s: stage %d would start at layer %d; cuts must increase strictly within [1, %d) "
                               "so that every stage of the %d layers has at least one",
                               what, i + 1, c, n_layer, n_layer);
        if (ok && !ok[c])
            return memra__fail(NULL, MEMRA_E_INVALID,
                               "%s: the architecture cannot start a stage at layer %d",
                               what, c);
        prev = c;
    }
    return MEMRA_OK;
}

typedef struct cost {
    uint64_t max;
    double sumsq;   /* tie-break: the most even among the splits with the same largest stage */
    bool set;
} cost_t;

static bool better(cost_t a, cost_t b)
{
    if (!b.set)
        return a.set;
    if (!a.set)
        return false;
    return a.max < b.max || (a.max == b.max && a.sumsq < b.sumsq);
}

memra_status_t memra__pp_even_cuts(const uint64_t *layer_bytes, int32_t n_layer, uint64_t first_extra,
                                   uint64_t last_extra, int32_t n_stages, const bool *ok, int32_t *cuts)
{
    if (n_stages < 1 || n_stages > MEMRA_MAX_STAGES || n_layer < n_stages)
        return memra__fail(NULL, MEMRA_E_INVALID, "%d stages cannot split %d layers", n_stages, n_layer);
    if (n_stages == 1)
        return MEMRA_OK;
    size_t L = (size_t)n_layer;
    uint64_t *pre = calloc(L + 1, sizeof *pre);
    cost_t *best = calloc((size_t)n_stages * (L + 1), sizeof *best);
    int32_t *from = calloc((size_t)n_stages * (L + 1), sizeof *from);
    if (!pre || !best || !from) {
        free(pre);
        free(best);
        free(from);
        return memra__fail(NULL, MEMRA_E_NOMEM, "out of memory planning stage cuts");
    }
    for (size_t i = 0; i < L; i++)
        pre[i + 1] = pre[i] + layer_bytes[i];
#define B(k, j) best[(size_t)(k) * (L + 1) + (size_t)(j)]
#define F(k, j) from[(size_t)(k) * (L + 1) + (size_t)(j)]
    /* B(k, j): stages 0..k cover layers [0, j), stage k ends at j */
    for (size_t j = 1; j <= L; j++) {
        uint64_t c = pre[j] + first_extra + (j == L ? last_extra : 0);
        B(0, j) = (cost_t){c, (double)c * (double)c, true};
    }
    for (int32_t k = 1; k < n_stages; k++) {
        for (size_t j = (size_t)k + 1; j <= L; j++) {
            if (k == n_stages - 1 && j != L)
                continue;
            for (size_t i = (size_t)k; i < j; i++) {
                if (!B(k - 1, i).set || (ok && !ok[i]))
                    continue;
                uint64_t c = pre[j] - pre[i] + (j == L ? last_extra : 0);
                cost_t prev = B(k - 1, i);
                cost_t cand = {prev.max > c ? prev.max : c, prev.sumsq + (double)c * (double)c, true};
                if (better(cand, B(k, j))) {
                    B(k, j) = cand;
                    F(k, j) = (int32_t)i;
                }
            }
        }
    }
    memra_status_t st = MEMRA_OK;
    if (!B(n_stages - 1, L).set) {
        st = memra__fail(NULL, MEMRA_E_INVALID,
                         "no split of %d layers into %d stages is accepted by the architecture; use fewer stages",
                         n_layer, n_stages);
    } else {
        size_t j = L;
        for (int32_t k = n_stages - 1; k >= 1; k--) {
            cuts[k - 1] = F(k, j);
            j = (size_t)F(k, j);
        }
    }
#undef B
#undef F
    free(pre);
    free(best);
    free(from);
    return st;
}

/* ---- knobs ----------------------------------------------------------------- */

/* A 0/1 knob: the param unless -1, else the env variable, else DEF. */
static memra_status_t knob(memra_model_t *m, const char *name, int32_t param, const char *env, int32_t def,
                           int32_t *out)
{
    if (param == 0 || param == 1) {
        *out = param;
        return MEMRA_OK;
    }
    if (param != -1)
        return memra__model_fail(m, MEMRA_E_INVALID, "params.%s = %d: expected -1 (env/default), 0 or 1", name,
                                 param);
    if (memra__env_int(env, 0, 1, def, out))
        return memra__relay(&m->err, MEMRA_E_INVALID, NULL);
    return MEMRA_OK;
}

static const char *dev_name(int32_t backend, int32_t device, char *buf, size_t cap)
{
    if (backend == MEMRA_BACKEND_CUDA)
        snprintf(buf, cap, "cuda:%d", device);
    else
        snprintf(buf, cap, "cpu");
    return buf;
}

/* ---- engines ---------------------------------------------------------------- */

static int32_t cpu_threads_per_stage(int32_t n_stages, bool pipelined)
{
    if (n_stages <= 1 || !pipelined)
        return 0; /* all cores */
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    int32_t t = (int32_t)((n > 0 ? n : 1) / n_stages);
    return t > 0 ? t : 1;
}

/* Resolves each stage's engine: borrowed (params.engine, params.stage_engines)
 * or private (created here, owned by pp). */
static memra_status_t place_stages(memra_model_t *m, memra__pp_t *pp, int32_t n)
{
    const memra_model_params_t *p = &m->params;
    memra_engine_params_t want[MEMRA_MAX_STAGES];
    bool have_spec = false;
    const char *devs = p->devices;
    const char *what = "params.devices";
    /* the env names stage devices; an unsplit load keeps params.engine */
    if ((!devs || !*devs) && n > 1) {
        devs = getenv("MEMRA_PP_DEVICES");
        what = "MEMRA_PP_DEVICES";
    }
    if (devs && *devs) {
        if (memra__pp_parse_devices(what, devs, n, want))
            return memra__relay(&m->err, MEMRA_E_INVALID, NULL);
        have_spec = true;
    }
    int32_t n_place = pp->shard ? n : 1; /* unsharded: every stage on stage 0's engine */
    memra_engine_t *eng[MEMRA_MAX_STAGES] = {0};
    bool caller_used = false;
    int32_t threads = cpu_threads_per_stage(n_place, pp->streams != 0);

    /* Stage 0 first: later stages default to stage 0's backend. */
    for (int32_t s = 0; s < n_place; s++) {
        if (p->stage_engines[s]) {
            eng[s] = p->stage_engines[s];
            continue;
        }
        memra_engine_params_t ep;
        if (have_spec) {
            ep = want[s];
        } else if (s == 0) {
            if (p->engine) {
                eng[0] = p->engine;
                caller_used = true;
                continue;
            }
            memra_engine_default_params(&ep);
        } else {
            const memra_engine_params_t *e0 = eng[0] ? &eng[0]->params : &want[0];
            memra_engine_default_params(&ep);
            ep.backend = e0->backend;
            ep.device = e0->backend == MEMRA_BACKEND_CUDA ? e0->device + s : 0;
        }
        /* the caller's engine serves the first stage that asks for its device */
        if (p->engine && !caller_used && p->engine->params.backend == ep.backend &&
            (ep.backend == MEMRA_BACKEND_CPU || p->engine->params.device == ep.device)) {
            eng[s] = p->engine;
            caller_used = true;
            continue;
        }
        want[s] = ep;
        eng[s] = NULL; /* created below, once the plan is known to be valid */
    }

    /* Two pipelined stages on one GPU contend for it; refuse unless asked. */
    if (pp->streams && pp->shard && !pp->share_device) {
        for (int32_t a = 0; a < n_place; a++) {
            for (int32_t b = a + 1; b < n_place; b++) {
                int32_t ba = eng[a] ? eng[a]->params.backend : want[a].backend;
                int32_t bb = eng[b] ? eng[b]->params.backend : want[b].backend;
                int32_t da = eng[a] ? eng[a]->params.device : want[a].device;
                int32_t db = eng[b] ? eng[b]->params.device : want[b].device;
                if (ba == MEMRA_BACKEND_CUDA && bb == MEMRA_BACKEND_CUDA && da == db)
                    return memra__model_fail(m, MEMRA_E_INVALID,
                                             "pipeline stages %d and %d are both on cuda:%d; pipelined stages need "
                                             "distinct GPUs (share_device=1 or MEMRA_PP_SHARE_DEVICE=1 allows it, "
                                             "MEMRA_PP_SHARD=0 keeps every stage on the first GPU, "
                                             "MEMRA_PP_STREAMS=0 runs them serially)",
                                             a, b, da);
            }
        }
    }

    for (int32_t s = 0; s < n_place; s++) {
        if (eng[s])
            continue;
        if (want[s].backend == MEMRA_BACKEND_CPU)
            want[s].n_threads = threads;
        memra_status_t st = memra_engine_create(&want[s], &pp->own[s]);
        if (st) {
            char dn[32];
            return memra__relay(&m->err, st, "pipeline stage %d (%s): ", s,
                                dev_name(want[s].backend, want[s].device, dn, sizeof dn));
        }
        eng[s] = pp->own[s];
    }
    for (int32_t s = n_place; s < n; s++)
        eng[s] = eng[0];

    for (int32_t s = 0; s < n; s++) {
        memra__stage_t *st = &m->stages[s];
        st->engine = eng[s];
        st->be = eng[s]->be;
        atomic_fetch_add(&eng[s]->users, 1);
        pp->group[s] = s;
        for (int32_t t = 0; t < s; t++) {
            if (eng[t] == eng[s]) {
                pp->group[s] = t;
                break;
            }
        }
    }
    m->n_stages = n;
    return MEMRA_OK;
}

/* ---- cuts ------------------------------------------------------------------- */

static bool has_prefix(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

/* Weight bytes per trunk layer and of the globals on the first and last
 * stages, from the GGUF directory (the arch has not bound anything yet). */
static memra_status_t weigh(memra_model_t *m, int32_t n_layer, uint64_t *layer_bytes, uint64_t *first,
                            uint64_t *last)
{
    const memra_gguf_t *g = m->gguf;
    int64_t nt = memra_gguf_n_tensors(g);
    bool tied = memra_gguf_find_tensor(g, "output.weight") < 0;
    *first = *last = 0;
    for (int64_t i = 0; i < nt; i++) {
        const char *name = memra_gguf_tensor_name(g, i);
        uint64_t b = memra_gguf_tensor_nbytes(g, i);
        if (has_prefix(name, "blk.")) {
            long il = strtol(name + 4, NULL, 10);
            if (il >= 0 && il < n_layer)
                layer_bytes[il] += b;
            else if (m->params.load_mtp)
                *last += b; /* MTP layers sit next to the head */
        } else if (has_prefix(name, "token_embd") || has_prefix(name, "per_layer_")) {
            *first += b;
            if (tied && strcmp(name, "token_embd.weight") == 0)
                *last += b; /* the tied head is a second copy on the last stage */
        } else {
            *last += b;
        }
    }
    return MEMRA_OK;
}

static memra_status_t plan_cuts(memra_model_t *m, memra__pp_t *pp, int32_t n, int32_t *cuts)
{
    uint32_t blocks = 0, nextn = 0;
    memra_status_t st = memra__cfg_u32(m, "block_count", &blocks);
    if (!st)
        st = memra__cfg_u32_or(m, "nextn_predict_layers", 0, &nextn);
    if (st)
        return st;
    int32_t nl = (int32_t)blocks - (nextn < blocks ? (int32_t)nextn : 0);
    if (m->params.n_layers > 0 && m->params.n_layers < nl)
        nl = m->params.n_layers;
    if (nl < 1 || nl > MEMRA_MAX_LAYERS)
        return memra__model_fail(m, MEMRA_E_FORMAT, "%s.block_count = %u is out of range", m->arch_name, blocks);
    pp->n_est = nl;
    if (n > nl)
        return memra__model_fail(m, MEMRA_E_INVALID, "%d pipeline stages, but the model runs only %d layer(s)", n,
                                 nl);

    bool ok[MEMRA_MAX_LAYERS];
    bool any_bad = false;
    for (int32_t il = 0; il < nl; il++) {
        ok[il] = il > 0 && (!m->arch->cut_ok || m->arch->cut_ok(m, il));
        any_bad |= il > 0 && !ok[il];
    }

    const memra_model_params_t *p = &m->params;
    int32_t given = 0;
    for (int32_t i = 0; i < MEMRA_MAX_STAGES - 1; i++)
        given += p->splits[i] != 0;
    const char *env = getenv("MEMRA_PP_SPLITS");
    if (given) {
        for (int32_t i = 0; i < MEMRA_MAX_STAGES - 1; i++) {
            bool inside = i < n - 1;
            if (inside != (p->splits[i] != 0))
                return memra__model_fail(m, MEMRA_E_INVALID,
                                         "params.splits: %d stages need exactly %d cut(s) in splits[0..%d] "
                                         "(splits[%d] = %d)",
                                         n, n - 1, n - 2, i, p->splits[i]);
            if (inside)
                cuts[i] = p->splits[i];
        }
        if (memra__pp_check_cuts("params.splits", cuts, n, nl, ok))
            return memra__relay(&m->err, MEMRA_E_INVALID, NULL);
        return MEMRA_OK;
    }
    if (env && *env) {
        if (memra__pp_parse_splits("MEMRA_PP_SPLITS", env, n, cuts) ||
            memra__pp_check_cuts("MEMRA_PP_SPLITS", cuts, n, nl, ok))
            return memra__relay(&m->err, MEMRA_E_INVALID, NULL);
        return MEMRA_OK;
    }
    uint64_t *lb = calloc((size_t)nl, sizeof *lb);
    if (!lb)
        return memra__model_fail(m, MEMRA_E_NOMEM, "out of memory planning stage cuts");
    uint64_t first, last;
    weigh(m, nl, lb, &first, &last);
    st = memra__pp_even_cuts(lb, nl, first, last, n, any_bad ? ok : NULL, cuts);
    free(lb);
    if (st)
        return memra__relay(&m->err, st, NULL);
    return MEMRA_OK;
}

/* ---- load hooks -------------------------------------------------------------- */

memra_status_t memra__pp_setup(memra_model_t *m)
{
    memra__pp_t *pp = calloc(1, sizeof *pp);
    if (!pp)
        return memra__model_fail(m, MEMRA_E_NOMEM, "out of memory");
    m->pp = pp;
    atomic_init(&pp->unconsumed, 0);
    pthread_mutex_init(&pp->mu, NULL);
    pthread_cond_init(&pp->cv, NULL);
    for (int32_t s = 0; s < MEMRA_MAX_STAGES; s++)
        pthread_mutex_init(&pp->eng_mu[s], NULL);
    pp->sync_init = true;
    const memra_model_params_t *p = &m->params;

    int32_t n = p->n_stages;
    if (n < 0 || n > MEMRA_MAX_STAGES)
        return memra__model_fail(m, MEMRA_E_INVALID, "params.n_stages = %d: expected 0 (env/default) or 1..%d", n,
                                 MEMRA_MAX_STAGES);
    if (n == 0) {
        if (memra__env_int("MEMRA_PP_STAGES", 1, MEMRA_MAX_STAGES, 1, &n))
            return memra__relay(&m->err, MEMRA_E_INVALID, NULL);
    }
    memra_status_t st;
    if ((st = knob(m, "shard", p->shard, "MEMRA_PP_SHARD", 1, &pp->shard)) ||
        (st = knob(m, "streams", p->streams, "MEMRA_PP_STREAMS", 1, &pp->streams)) ||
        (st = knob(m, "overlap", p->overlap, "MEMRA_PP_OVERLAP", 1, &pp->overlap)) ||
        (st = knob(m, "share_device", p->share_device, "MEMRA_PP_SHARE_DEVICE", 0, &pp->share_device)))
        return st;

    int32_t cuts[MEMRA_MAX_STAGES];
    if (n > 1 && (st = plan_cuts(m, pp, n, cuts)))
        return st;
    if ((st = place_stages(m, pp, n)))
        return st;
    for (int32_t s = 0; s < n; s++) {
        m->stages[s].layer0 = s == 0 ? 0 : cuts[s - 1];
        /* the last stage also owns layers past the trunk (MTP) */
        m->stages[s].layer1 = s == n - 1 ? MEMRA_MAX_LAYERS : cuts[s];
    }
    return MEMRA_OK;
}

memra_status_t memra__pp_finish(memra_model_t *m)
{
    memra__pp_t *pp = m->pp;
    if (m->n_stages > 1 && m->n_layer != pp->n_est)
        return memra__model_fail(m, MEMRA_E_INTERNAL,
                                 "arch '%s' bound %d layers, but the stage plan assumed %d", m->arch_name,
                                 m->n_layer, pp->n_est);
    m->stages[m->n_stages - 1].layer1 = m->n_layer;
    return MEMRA_OK;
}

void memra__pp_free(memra_model_t *m)
{
    memra__pp_t *pp = m->pp;
    if (!pp)
        return;
    for (int32_t s = 0; s < MEMRA_MAX_STAGES; s++)
        memra_engine_destroy(pp->own[s]);
    if (pp->sync_init) {
        pthread_mutex_destroy(&pp->mu);
        pthread_cond_destroy(&pp->cv);
        for (int32_t s = 0; s < MEMRA_MAX_STAGES; s++)
            pthread_mutex_destroy(&pp->eng_mu[s]);
    }
    free(pp);
    m->pp = NULL;
}

/* ---- introspection ------------------------------------------------------------ */

int32_t memra_model_n_stages(const memra_model_t *m)
{
    return m ? m->n_stages : 0;
}

memra_status_t memra_model_stage_info(const memra_model_t *m, int32_t stage, memra_stage_info_t *info)
{
    if (!m || !info || info->size < sizeof(uint32_t))
        return memra__fail(NULL, MEMRA_E_INVALID, "memra_model_stage_info: NULL argument or info->size unset");
    if (stage < 0 || stage >= m->n_stages)
        return memra__fail(NULL, MEMRA_E_RANGE, "memra_model_stage_info: stage %d outside [0, %d)", stage,
                           m->n_stages);
    const memra__stage_t *st = &m->stages[stage];
    memra_stage_info_t d = {
        .size = info->size < sizeof d ? info->size : (uint32_t)sizeof d,
        .layer0 = st->layer0,
        .layer1 = st->layer1,
        .backend = st->engine->params.backend,
        .device = st->engine->params.backend == MEMRA_BACKEND_CUDA ? st->engine->params.device : 0,
        .engine_index = m->pp ? m->pp->group[stage] : stage,
        .weight_bytes = st->weight_bytes,
    };
    memcpy(info, &d, d.size);
    return MEMRA_OK;
}

memra_status_t memra_model_pipeline_info(const memra_model_t *m, memra_pipeline_info_t *info)
{
    if (!m || !info || info->size < sizeof(uint32_t))
        return memra__fail(NULL, MEMRA_E_INVALID, "memra_model_pipeline_info: NULL argument or info->size unset");
    const memra__pp_t *pp = m->pp;
    memra_pipeline_info_t d = {
        .size = info->size < sizeof d ? info->size : (uint32_t)sizeof d,
        .n_stages = m->n_stages,
        .shard = pp ? pp->shard : 1,
        .streams = pp ? pp->streams : 0,
        .overlap = pp ? pp->overlap : 0,
        .share_device = pp ? pp->share_device : 0,
    };
    for (int32_t s = 0; s < m->n_stages; s++) {
        d.fence[s] = m->stages[s].layer0;
        d.fence[s + 1] = m->stages[s].layer1;
    }
    memcpy(info, &d, d.size);
    return MEMRA_OK;
}

/* memra_check_argmax_margin: token-by-token decode against batched prefill
 * over the last positions of a prompt, seen through the top-2 margins.
 * A top-1 flip between two configs needs their spread at the two contending
 * ids to cover both margins (A[i]-A[j] >= mA and B[j]-B[i] >= mB give
 * 2 * spread >= mA + mB), so flips are judged against the margins, and the
 * spread against the budget of numerical noise the configs may differ by. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline_impl.h"

void memra_margin_params_init(memra_margin_params_t *p, uint32_t size)
{
    if (!p || size < sizeof(uint32_t))
        return;
    memra_margin_params_t d = {.size = size < sizeof d ? size : (uint32_t)sizeof d};
    memcpy(p, &d, d.size);
}

const char *memra_margin_verdict_name(int32_t v)
{
    switch (v) {
    case MEMRA_MARGIN_STABLE: return "stable";
    case MEMRA_MARGIN_NEAR_TIE_EXPOSED: return "near-tie exposed";
    case MEMRA_MARGIN_NEAR_TIE_FLIPS: return "near-tie flips within budget";
    case MEMRA_MARGIN_SYSTEMATIC: return "systematic";
    case MEMRA_MARGIN_UNEXPLAINED: return "unexplained";
    default: return "?";
    }
}

/* Top-2 ids, lowest id on ties (memra's argmax rule). */
static void top2(const float *x, int32_t n, int32_t *t1, int32_t *t2)
{
    int32_t a = 0, b = -1;
    for (int32_t i = 1; i < n; i++) {
        if (x[i] > x[a]) {
            b = a;
            a = i;
        } else if (b < 0 || x[i] > x[b]) {
            b = i;
        }
    }
    *t1 = a;
    *t2 = b < 0 ? a : b;
}

static bool finite_row(const float *x, int32_t n)
{
    for (int32_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return false;
    return true;
}

static float fminf_(float a, float b) { return a < b ? a : b; }

static void judge(memra_margin_report_t *r, bool finite)
{
    const float b = r->budget;
    int32_t bad = -1;
    for (int32_t i = 0; i < r->window && bad < 0; i++) {
        const memra_margin_row_t *w = &r->rows[i];
        /* a flip must be covered by the spread (see the top comment) */
        if (!w->agree && (double)w->margin_decode + w->margin_prefill > 2.0 * w->spread * (1 + 1e-6) + 1e-30)
            bad = i;
    }
    if (!finite) {
        r->verdict = MEMRA_MARGIN_UNEXPLAINED;
        snprintf(r->reason, sizeof r->reason, "non-finite logits in the window");
    } else if (bad >= 0) {
        r->verdict = MEMRA_MARGIN_UNEXPLAINED;
        snprintf(r->reason, sizeof r->reason,
                 "position %d flips with margins %.3g/%.3g larger than twice the spread %.3g (tie rule?)",
                 r->rows[bad].pos, r->rows[bad].margin_decode, r->rows[bad].margin_prefill, r->rows[bad].spread);
    } else if (r->max_spread > b) {
        r->verdict = MEMRA_MARGIN_SYSTEMATIC;
        snprintf(r->reason, sizeof r->reason,
                 "decode and prefill differ by %.3g at contending ids (budget %.3g): the configs compute different "
                 "logits, %d flip(s)",
                 r->max_spread, b, r->n_flips);
    } else if (r->n_flips > 0) {
        r->verdict = MEMRA_MARGIN_NEAR_TIE_FLIPS;
        snprintf(r->reason, sizeof r->reason,
                 "%d flip(s), each at a margin <= 2 x spread <= 2 x budget %.3g; smallest margin %.3g", r->n_flips,
                 b, r->min_margin);
    } else if (r->min_margin <= 2 * b) {
        r->verdict = MEMRA_MARGIN_NEAR_TIE_EXPOSED;
        snprintf(r->reason, sizeof r->reason,
                 "no flip, but the smallest margin %.3g is within 2 x budget %.3g: a config change within budget "
                 "could flip it (max spread %.3g)",
                 r->min_margin, b, r->max_spread);
    } else {
        r->verdict = MEMRA_MARGIN_STABLE;
        snprintf(r->reason, sizeof r->reason, "no flip; smallest margin %.3g > 2 x budget %.3g; max spread %.3g",
                 r->min_margin, b, r->max_spread);
    }
}

/* Loads the model and fills *DEC and *PRE with the window's logits rows
 * ([W][n_vocab] each, malloc'ed) from decode and from prefill. */
static memra_status_t run(const char *path, const int32_t *tok, int32_t n, int32_t W, const memra_margin_params_t *p,
                          memra_margin_report_t *r, float **dec_out, float **pre_out)
{
    memra_model_params_t mp;
    memra_model_default_params(&mp);
    mp.n_stages = 1;
    mp.streams = 0;
    mp.prefill_chunk = p->prefill_chunk;
    mp.devices = p->device && *p->device ? p->device : "cpu";
    memra_model_t *m = NULL;
    memra_status_t st = memra_model_load(path, &mp, &m);
    if (st)
        return memra__relay(NULL, st, "argmax margin: ");
    const int32_t V = memra_model_n_vocab(m);
    snprintf(r->arch, sizeof r->arch, "%s", memra_model_arch(m));
    r->n_vocab = V;
    memra_cache_t *c = NULL;
    st = memra_cache_create(m, n, &c);
    /* prefill with every row in one call when that is affordable (the
     * production shape); else the prefix without logits, then the window */
    bool one = (uint64_t)n * (uint64_t)V <= (64u << 20);
    float *dec = malloc((size_t)W * (size_t)V * sizeof *dec);
    float *pre = malloc((size_t)(one ? n : W) * (size_t)V * sizeof *pre);
    if (!st && (!dec || !pre))
        st = memra__fail(NULL, MEMRA_E_NOMEM, "argmax margin: out of memory");
    for (int32_t i = 0; i < n && !st; i++) {
        bool keep = i >= n - W;
        st = memra_decode_step(m, c, tok[i], keep ? dec + (size_t)(i - (n - W)) * V : NULL);
    }
    if (!st)
        st = memra_cache_clear(c);
    if (!st && one) {
        st = memra_forward(m, c, tok, n, MEMRA_FORWARD_ALL_ROWS, pre);
        if (!st)
            memmove(pre, pre + (size_t)(n - W) * V, (size_t)W * (size_t)V * sizeof *pre);
    } else if (!st) {
        if (n > W)
            st = memra_forward(m, c, tok, n - W, 0, NULL);
        if (!st)
            st = memra_forward(m, c, tok + (n - W), W, MEMRA_FORWARD_ALL_ROWS, pre);
    }
    if (st)
        memra__relay(NULL, st, "argmax margin: ");
    memra_cache_free(c);
    memra_model_free(m);
    *dec_out = dec;
    *pre_out = pre;
    return st;
}

void memra__margin_fill(memra_margin_report_t *r, const float *dec, const float *pre)
{
    const int32_t W = r->window, V = r->n_vocab;
    bool finite = true;
    r->min_margin = INFINITY;
    r->max_spread = r->max_abs_diff = 0.0f;
    r->n_agree = 0;
    for (int32_t i = 0; i < W; i++) {
        const float *a = dec + (size_t)i * V, *b = pre + (size_t)i * V;
        memra_margin_row_t *w = &r->rows[i];
        memset(w, 0, sizeof *w);
        finite &= finite_row(a, V) && finite_row(b, V);
        w->pos = r->n_tokens - W + i;
        top2(a, V, &w->top1_decode, &w->top2_decode);
        top2(b, V, &w->top1_prefill, &w->top2_prefill);
        w->margin_decode = a[w->top1_decode] - a[w->top2_decode];
        w->margin_prefill = b[w->top1_prefill] - b[w->top2_prefill];
        const int32_t ids[4] = {w->top1_decode, w->top2_decode, w->top1_prefill, w->top2_prefill};
        for (int k = 0; k < 4; k++) {
            float d = fabsf(a[ids[k]] - b[ids[k]]);
            if (!(d <= w->spread))
                w->spread = d;
        }
        for (int32_t v = 0; v < V; v++) {
            float d = fabsf(a[v] - b[v]);
            if (!(d <= r->max_abs_diff))
                r->max_abs_diff = d;
        }
        w->agree = w->top1_decode == w->top1_prefill;
        r->n_agree += w->agree;
        if (!(w->spread <= r->max_spread))
            r->max_spread = w->spread;
        float mm = fminf_(w->margin_decode, w->margin_prefill);
        if (mm < r->min_margin)
            r->min_margin = mm;
    }
    r->n_flips = W - r->n_agree;
    const memra_margin_row_t *d = &r->rows[W - 1];
    r->decision_pos = d->pos;
    r->decision_margin = fminf_(d->margin_decode, d->margin_prefill);
    int32_t below = 0;
    for (int32_t i = 0; i < W; i++)
        below += fminf_(r->rows[i].margin_decode, r->rows[i].margin_prefill) < r->decision_margin;
    r->decision_rank = below + 1;
    r->decision_percentile = 100.0f * (float)below / (float)W;
    judge(r, finite);
}

memra_status_t memra_check_argmax_margin(const char *path, const int32_t *prompt, int32_t n_tokens, int32_t window,
                                         const memra_margin_params_t *params, memra_margin_report_t *report)
{
    if (!path || !prompt || !report || report->size < sizeof(uint32_t))
        return memra__fail(NULL, MEMRA_E_INVALID,
                           "memra_check_argmax_margin: NULL path/prompt/report or report->size unset");
    if (n_tokens < 1)
        return memra__fail(NULL, MEMRA_E_INVALID, "memra_check_argmax_margin: n_tokens = %d", n_tokens);
    memra_margin_params_t p;
    memra_margin_default_params(&p);
    if (params) {
        if (params->size < sizeof(uint32_t))
            return memra__fail(NULL, MEMRA_E_INVALID, "memra_check_argmax_margin: params->size unset");
        memcpy(&p, params, params->size < sizeof p ? params->size : sizeof p);
    }
    if (!(p.budget >= 0) || !isfinite(p.budget))
        return memra__fail(NULL, MEMRA_E_INVALID, "memra_check_argmax_margin: budget %g", (double)p.budget);
    int32_t W = window < 1 ? 1 : window;
    if (W > n_tokens)
        W = n_tokens;
    if (W > MEMRA_MARGIN_MAX_WINDOW)
        W = MEMRA_MARGIN_MAX_WINDOW;

    memra_margin_report_t *r = calloc(1, sizeof *r);
    if (!r)
        return memra__fail(NULL, MEMRA_E_NOMEM, "memra_check_argmax_margin: out of memory");
    r->size = sizeof *r;
    r->n_tokens = n_tokens;
    r->window = W;
    r->budget = p.budget > 0 ? p.budget : 1e-3f;
    float *dec = NULL, *pre = NULL;
    memra_status_t st = run(path, prompt, n_tokens, W, &p, r, &dec, &pre);
    if (!st)
        memra__margin_fill(r, dec, pre);
    free(dec);
    free(pre);
    uint32_t n = report->size < sizeof *r ? report->size : (uint32_t)sizeof *r;
    memcpy(report, r, n);
    report->size = n;
    free(r);
    return st;
}

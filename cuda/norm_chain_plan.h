/* The plan of a norm_ex chain for norm_chain_smem_kernel (cuda/norm_chain.cu):
 * which rows of shared memory ("slots") each step reads and writes, which
 * steps share a scale and which stores are dead. Host code only, C++ (the
 * kernel's launcher and test/test_norm_chain.cu, which runs a plan on the
 * CPU against the reference's chain bit for bit). */
#ifndef MEMRA_CUDA_NORM_CHAIN_PLAN_H
#define MEMRA_CUDA_NORM_CHAIN_PLAN_H

#include <stdint.h>
#include <string.h>

#include "backend.h"

#define NCS_CHUNKS 2048 /* 4-float chunks of a row at most (8192 floats: 8 a thread of 256) */
#define NCS_MAX_ROWS 256
#define NCS_MAX_SLOTS 16
#define NCS_SMEM_MAX (200u * 1024u)

/* A row of shared memory a block fills from global memory: rows r of
 * P + r * STRIDE (STRIDE 0: a weight, the same for every row). */
struct ncs_src {
    const float *p;
    int64_t stride;
};

/* A step: its rows by slot (-1: none), the slot its output goes to when a
 * later step reads it (-1: none), the step whose scale it reuses (-1: its
 * own reduction), whether it stores its output. */
struct ncs_step {
    int8_t x, w, add, y_slot, share, store;
    float eps, scale;
    float *y;
    int64_t ys;
};

struct ncs_plan {
    ncs_src src[NCS_MAX_SLOTS];
    ncs_step s[MEMRA_NORM_CHAIN_MAX];
    int n, n_w, n_load, n_slots; /* steps; weight slots 0 .. n_w-1, row slots n_w .. n_load-1, output slots
                                  * n_load .. n_slots-1 */
    int64_t rows, dim, ld; /* ld: float4s between slots */
};

/* The slot of a row source (P, STRIDE) among PL's slots FROM .. n_load-1
 * (weights and rows apart), added when new (false when the slots are
 * full). */
static inline bool ncs_slot(ncs_plan *pl, int from, const float *p, int64_t stride, int8_t *out)
{
    for (int s = from; s < pl->n_load; s++)
        if (pl->src[s].p == p) {
            *out = (int8_t)s;
            return true;
        }
    if (pl->n_load == NCS_MAX_SLOTS)
        return false;
    pl->src[pl->n_load].p = p;
    pl->src[pl->n_load].stride = stride;
    *out = (int8_t)pl->n_load++;
    return true;
}

static inline bool ncs_aligned(const void *p, int64_t stride, int64_t rows)
{
    return (uintptr_t)p % 16 == 0 && (rows == 1 || stride % 4 == 0);
}

/* The plan of A's N steps; false when the chain does not fit this kernel. */
static inline bool ncs_make_plan(const memra_norm_args_t *a, int n, ncs_plan *pl)
{
    memset(pl, 0, sizeof *pl);
    const int64_t rows = a[0].rows, dim = a[0].dim;
    if (n < 1 || n > MEMRA_NORM_CHAIN_MAX || rows < 1 || rows > NCS_MAX_ROWS || dim % 4 || dim < 4 ||
        dim > 4 * NCS_CHUNKS)
        return false;
    for (int i = 0; i < n; i++) {
        const memra_norm_args_t *s = &a[i];
        if (s->rows != rows || s->dim != dim || !ncs_aligned(s->x, s->xs, rows) || !ncs_aligned(s->y, s->ys, rows) ||
            (s->w && !ncs_aligned(s->w, 0, 1)) || (s->add && !ncs_aligned(s->add, s->adds, rows)))
            return false;
    }
    /* weight slots first (copied before the PDL wait) */
    for (int i = 0; i < n; i++) {
        pl->s[i].w = -1;
        if (a[i].w && !ncs_slot(pl, 0, a[i].w, 0, &pl->s[i].w))
            return false;
    }
    pl->n_w = pl->n_load;
    /* a read of P by step I: the latest earlier step that wrote P (its
     * output slot, numbered after every copied row), else P's own rows
     * (copied when the wait returns) */
    auto writer = [&](const float *p, int i) {
        for (int j = i - 1; j >= 0; j--)
            if (a[j].y == p)
                return j;
        return -1;
    };
    int wx[MEMRA_NORM_CHAIN_MAX], wa[MEMRA_NORM_CHAIN_MAX];
    for (int i = 0; i < n; i++) {
        wx[i] = writer(a[i].x, i);
        wa[i] = a[i].add ? writer(a[i].add, i) : -1;
        pl->s[i].add = -1;
        if ((wx[i] < 0 && !ncs_slot(pl, pl->n_w, a[i].x, a[i].xs, &pl->s[i].x)) ||
            (a[i].add && wa[i] < 0 && !ncs_slot(pl, pl->n_w, a[i].add, a[i].adds, &pl->s[i].add)))
            return false;
    }
    int8_t yslot[MEMRA_NORM_CHAIN_MAX] = {-1, -1, -1, -1};
    int n_out = 0;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 2; k++) {
            const int j = k ? wa[i] : wx[i];
            if (j < 0)
                continue;
            if (yslot[j] < 0) {
                if (pl->n_load + n_out == NCS_MAX_SLOTS)
                    return false;
                yslot[j] = (int8_t)(pl->n_load + n_out++);
            }
            (k ? pl->s[i].add : pl->s[i].x) = yslot[j];
        }
    for (int i = 0; i < n; i++) {
        ncs_step *st = &pl->s[i];
        st->y_slot = yslot[i];
        st->eps = a[i].eps;
        st->scale = a[i].scale;
        st->y = a[i].y;
        st->ys = a[i].ys;
        /* a later step that writes the same rows makes this store dead */
        st->store = 1;
        for (int j = i + 1; j < n; j++)
            if (a[j].y == a[i].y)
                st->store = 0;
        /* the scale of an earlier step with the same x slot (slots are
         * written once) and eps */
        st->share = -1;
        for (int k = 0; k < i && st->share < 0; k++)
            if (pl->s[k].x == st->x && pl->s[k].eps == st->eps)
                st->share = (int8_t)(pl->s[k].share >= 0 ? pl->s[k].share : k);
    }
    pl->n = n;
    pl->rows = rows;
    pl->dim = dim;
    pl->ld = (dim / 4 + 3) & ~(int64_t)3; /* 64-byte rows */
    pl->n_slots = pl->n_load + n_out;
    return (size_t)pl->n_slots * (size_t)pl->ld * 16 <= NCS_SMEM_MAX;
}

#endif

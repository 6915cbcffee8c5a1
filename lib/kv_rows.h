/* KV cache rows as the forwards see them: a row is one token's K (or V)
 * of one layer, k_floats (v_floats) elements of the cache's type, rows a
 * byte stride apart (lib/backend.h, memra_kv_store_args_t). An F32 cache
 * is written in place exactly as before the types existed (the forwards
 * compute straight into its rows); any other type is computed into float
 * scratch and converted by the backend's kv_store. */
#ifndef MEMRA_KV_ROWS_H
#define MEMRA_KV_ROWS_H

#include "model_impl.h"

/* Which of a layer's two row sets. */
typedef enum memra__kv_part {
    MEMRA__KV_K,
    MEMRA__KV_V,
} memra__kv_part_t;

/* Storage type and bytes per row of layer IL's K or V in cache C. */
memra_type_t memra__kv_type(const memra_cache_t *c, memra__kv_part_t part);
size_t memra__kv_row_bytes(const memra_cache_t *c, int32_t il, memra__kv_part_t part);

/* Where this step's float rows of layer IL's K (V) are computed, with
 * row stride k_floats: with one segment and an F32 cache, that cache's
 * rows pos0.. themselves; else SCRATCH (n * k_floats floats of the
 * caller's workspace), which memra__kv_put then stores into each
 * segment's cache. */
float *memra__kv_dst(memra__run_t *r, int32_t il, memra__kv_part_t part, float *scratch);

/* Stores each segment's float rows of SRC (the step's rows, SRC_STRIDE
 * floats apart) of layer IL's K (V) into its own cache from its position
 * on: nothing when they are what memra__kv_dst gave for an F32 cache, else
 * the backend's kv_store (a copy for F32, a conversion for other types),
 * every segment in one memra__kv_store_batch call. */
memra_status_t memra__kv_put(memra__run_t *r, int32_t il, memra__kv_part_t part, const float *src,
                             int64_t src_stride);

/* memra__kv_put of layer IL's K rows (K, K_STRIDE) and V rows (V,
 * V_STRIDE), every segment's of both in one memra__kv_store_batch call
 * while they fit one (2 * segments <= MEMRA_MAX_BATCH). */
memra_status_t memra__kv_put_kv(memra__run_t *r, int32_t il, const float *k, int64_t k_stride, const float *v,
                                int64_t v_stride);

/* memra__kv_put_kv as one qk_norm_rope's stores where they fit its
 * MEMRA_QK_MAX_STORES (one segment: one K and one V item, or none for an
 * F32 cache computed in place): sets QK's store and n_store to them (in
 * ITEMS, MEMRA_QK_MAX_STORES entries) and returns true; false when they
 * do not fit, or with MEMRA_KV_PAIR=0 (memra__kv_put_kv after the step
 * then). */
bool memra__kv_put_kv_with(memra__run_t *r, int32_t il, const float *k, int64_t k_stride, const float *v,
                           int64_t v_stride, memra_qk_args_t *qk, memra_kv_store_args_t *items);

/* Fills A's k_cache, v_cache, types, kv_stride and row strides with layer
 * IL's rows of cache C. */
void memra__kv_attn(const memra_cache_t *c, int32_t il, memra_attn_args_t *a);

#endif

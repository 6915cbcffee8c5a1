/* Internal layout of an open GGUF file, shared by the reader and its
 * accessors. */
#ifndef MEMRA_GGUF_IMPL_H
#define MEMRA_GGUF_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "internal.h"
#include "memra/gguf.h"

typedef struct gguf_kv {
    char *key;
    memra_gguf_type_t type;
    memra_gguf_type_t arr_type; /* element type when type == ARRAY */
    uint64_t n;                 /* element count of an array */
    const uint8_t *data;        /* value bytes (array: first element) */
    char *str;                  /* NUL-terminated copy of a STRING scalar */
    size_t str_len;
    const uint8_t **strs;       /* string arrays: each element's length prefix */
} gguf_kv;

typedef struct gguf_tensor {
    char *name;
    memra_type_t type;
    uint32_t n_dims;
    int64_t ne[4];
    uint64_t offset;
    uint64_t nbytes;
    uint32_t shard;
    const uint8_t *data;
} gguf_tensor;

typedef struct gguf_shard {
    const uint8_t *base;
    size_t size;
    bool mapped;
} gguf_shard;

/* Open-addressing name index (power-of-two slots, -1 = empty). */
typedef struct gguf_index {
    int64_t *slots;
    uint64_t mask;
} gguf_index;

struct memra_gguf {
    uint32_t version;
    uint32_t alignment;
    gguf_kv *kv;
    int64_t n_kv;
    gguf_tensor *tensors;
    int64_t n_tensors;
    gguf_shard *shards;
    uint32_t n_shards;
    gguf_index kv_index;
    gguf_index tensor_index;
};

/* Index lookup by key (TENSORS false) or tensor name; -1 if absent. */
int64_t memra__gguf_find(const memra_gguf_t *g, bool tensors, const char *name);

#endif

/* memra: reading and writing GGUF files.
 *
 * The reader maps the file read-only and validates every count, size,
 * offset and string before anything is trusted; a bad file gives
 * MEMRA_E_FORMAT with a message naming the problem and the byte offset.
 * Split models (NAME-00001-of-0000N.gguf) open as one file: keys come from
 * the first shard, tensors from all of them. */
#ifndef MEMRA_GGUF_H
#define MEMRA_GGUF_H

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ggml tensor type ids, as stored in GGUF files. */
typedef enum memra_type {
    MEMRA_TYPE_F32 = 0,
    MEMRA_TYPE_F16 = 1,
    MEMRA_TYPE_Q4_0 = 2,
    MEMRA_TYPE_Q4_1 = 3,
    MEMRA_TYPE_Q5_0 = 6,
    MEMRA_TYPE_Q5_1 = 7,
    MEMRA_TYPE_Q8_0 = 8,
    MEMRA_TYPE_Q8_1 = 9,
    MEMRA_TYPE_Q2_K = 10,
    MEMRA_TYPE_Q3_K = 11,
    MEMRA_TYPE_Q4_K = 12,
    MEMRA_TYPE_Q5_K = 13,
    MEMRA_TYPE_Q6_K = 14,
    MEMRA_TYPE_Q8_K = 15,
    MEMRA_TYPE_IQ2_XXS = 16,
    MEMRA_TYPE_IQ2_XS = 17,
    MEMRA_TYPE_IQ3_XXS = 18,
    MEMRA_TYPE_IQ1_S = 19,
    MEMRA_TYPE_IQ4_NL = 20,
    MEMRA_TYPE_IQ3_S = 21,
    MEMRA_TYPE_IQ2_S = 22,
    MEMRA_TYPE_IQ4_XS = 23,
    MEMRA_TYPE_I8 = 24,
    MEMRA_TYPE_I16 = 25,
    MEMRA_TYPE_I32 = 26,
    MEMRA_TYPE_I64 = 27,
    MEMRA_TYPE_F64 = 28,
    MEMRA_TYPE_IQ1_M = 29,
    MEMRA_TYPE_BF16 = 30,
    MEMRA_TYPE_TQ1_0 = 34,
    MEMRA_TYPE_TQ2_0 = 35,
    MEMRA_TYPE_MXFP4 = 39,
    MEMRA_TYPE_NVFP4 = 40,
    MEMRA_TYPE_Q1_0 = 41,
    MEMRA_TYPE_COUNT = 42,
} memra_type_t;

/* "Q8_0", "F32", ...; NULL for ids that name no type. Thread-safety: any thread. */
MEMRA_API const char *memra_type_name(memra_type_t type);
/* Elements per block and bytes per block (0 for ids that name no type).
 * Thread-safety: any thread. */
MEMRA_API int64_t memra_type_block_size(memra_type_t type);
MEMRA_API size_t memra_type_block_bytes(memra_type_t type);

/* GGUF metadata value types. */
typedef enum memra_gguf_type {
    MEMRA_GGUF_UINT8 = 0,
    MEMRA_GGUF_INT8 = 1,
    MEMRA_GGUF_UINT16 = 2,
    MEMRA_GGUF_INT16 = 3,
    MEMRA_GGUF_UINT32 = 4,
    MEMRA_GGUF_INT32 = 5,
    MEMRA_GGUF_FLOAT32 = 6,
    MEMRA_GGUF_BOOL = 7,
    MEMRA_GGUF_STRING = 8,
    MEMRA_GGUF_ARRAY = 9,
    MEMRA_GGUF_UINT64 = 10,
    MEMRA_GGUF_INT64 = 11,
    MEMRA_GGUF_FLOAT64 = 12,
    MEMRA_GGUF_TYPE_COUNT = 13,
} memra_gguf_type_t;

/* "UINT32", "STRING", ...; NULL if out of range. Thread-safety: any thread. */
MEMRA_API const char *memra_gguf_type_name(memra_gguf_type_t type);

typedef struct memra_gguf memra_gguf_t;

/* ---- reader ------------------------------------------------------------ */

/* Opens and validates PATH (and its sibling shards if it is a split file).
 * On failure *out is NULL and memra_last_error() says why.
 * Thread-safety: any thread. */
MEMRA_API memra_status_t memra_gguf_open(const char *path, memra_gguf_t **out);

/* Same for a file image in memory. The bytes are borrowed: they must outlive
 * the handle. Split files cannot be opened this way. Thread-safety: any thread. */
MEMRA_API memra_status_t memra_gguf_open_memory(const void *data, size_t size, memra_gguf_t **out);

/* Unmaps and frees; NULL is a no-op. Pointers obtained from the handle die
 * with it. Thread-safety: one thread at a time per handle. */
MEMRA_API void memra_gguf_close(memra_gguf_t *gguf);

/* Everything below only reads an open handle; errors go to the calling
 * thread's memra_last_error() only. */

/* Format version, data alignment and number of shard files.
 * Thread-safety: any thread, concurrently on one handle. */
MEMRA_API uint32_t memra_gguf_version(const memra_gguf_t *gguf);
MEMRA_API uint32_t memra_gguf_alignment(const memra_gguf_t *gguf);
MEMRA_API uint32_t memra_gguf_n_shards(const memra_gguf_t *gguf);

/* Keys: index 0..n_kv-1 in file order. find returns -1 when absent.
 * Thread-safety: any thread, concurrently on one handle. */
MEMRA_API int64_t memra_gguf_n_kv(const memra_gguf_t *gguf);
MEMRA_API int64_t memra_gguf_find_kv(const memra_gguf_t *gguf, const char *key);
MEMRA_API const char *memra_gguf_kv_key(const memra_gguf_t *gguf, int64_t i);
MEMRA_API memra_gguf_type_t memra_gguf_kv_type(const memra_gguf_t *gguf, int64_t i);

/* Scalar reads. Integer getters accept any integer or bool type whose value
 * fits (else MEMRA_E_RANGE); float getters accept FLOAT32/FLOAT64. A value of
 * another type gives MEMRA_E_TYPE. Strings are NUL-terminated copies owned by
 * the handle; *len (optional) excludes the NUL.
 * Thread-safety: any thread, concurrently on one handle. */
MEMRA_API memra_status_t memra_gguf_kv_u64(const memra_gguf_t *gguf, int64_t i, uint64_t *out);
MEMRA_API memra_status_t memra_gguf_kv_i64(const memra_gguf_t *gguf, int64_t i, int64_t *out);
MEMRA_API memra_status_t memra_gguf_kv_f64(const memra_gguf_t *gguf, int64_t i, double *out);
MEMRA_API memra_status_t memra_gguf_kv_bool(const memra_gguf_t *gguf, int64_t i, int *out);
MEMRA_API memra_status_t memra_gguf_kv_str(const memra_gguf_t *gguf, int64_t i, const char **out,
                                           size_t *len);

/* Arrays: element type, count, and element access. Numeric elements are
 * read with the same widening rules as scalars; string elements are
 * pointers into the file, NOT NUL-terminated, with their byte length.
 * Nested arrays are rejected at open (llama.cpp's reader refuses them too).
 * Thread-safety: any thread, concurrently on one handle. */
MEMRA_API memra_gguf_type_t memra_gguf_arr_type(const memra_gguf_t *gguf, int64_t i);
MEMRA_API uint64_t memra_gguf_arr_n(const memra_gguf_t *gguf, int64_t i);
MEMRA_API memra_status_t memra_gguf_arr_u64(const memra_gguf_t *gguf, int64_t i, uint64_t j,
                                            uint64_t *out);
MEMRA_API memra_status_t memra_gguf_arr_i64(const memra_gguf_t *gguf, int64_t i, uint64_t j,
                                            int64_t *out);
MEMRA_API memra_status_t memra_gguf_arr_f64(const memra_gguf_t *gguf, int64_t i, uint64_t j,
                                            double *out);
MEMRA_API memra_status_t memra_gguf_arr_str(const memra_gguf_t *gguf, int64_t i, uint64_t j,
                                            const char **out, size_t *len);
/* Raw little-endian element bytes of a numeric array (NULL for strings).
 * Thread-safety: any thread, concurrently on one handle. */
MEMRA_API const void *memra_gguf_arr_data(const memra_gguf_t *gguf, int64_t i);

/* Tensors: index 0..n_tensors-1 (shard order, then file order).
 * Thread-safety: any thread, concurrently on one handle. */
MEMRA_API int64_t memra_gguf_n_tensors(const memra_gguf_t *gguf);
MEMRA_API int64_t memra_gguf_find_tensor(const memra_gguf_t *gguf, const char *name);
MEMRA_API const char *memra_gguf_tensor_name(const memra_gguf_t *gguf, int64_t i);
MEMRA_API memra_type_t memra_gguf_tensor_type(const memra_gguf_t *gguf, int64_t i);
/* Number of dims as stored (1..4); ne[] receives 4 values, missing ones = 1.
 * Thread-safety: any thread, concurrently on one handle. */
MEMRA_API uint32_t memra_gguf_tensor_shape(const memra_gguf_t *gguf, int64_t i, int64_t ne[4]);
/* Offset relative to its shard's data section, byte size, and shard index.
 * Thread-safety: any thread, concurrently on one handle. */
MEMRA_API uint64_t memra_gguf_tensor_offset(const memra_gguf_t *gguf, int64_t i);
MEMRA_API uint64_t memra_gguf_tensor_nbytes(const memra_gguf_t *gguf, int64_t i);
MEMRA_API uint32_t memra_gguf_tensor_shard(const memra_gguf_t *gguf, int64_t i);
/* Pointer to the tensor bytes inside the mapping (lives as long as the handle).
 * Thread-safety: any thread, concurrently on one handle. */
MEMRA_API const void *memra_gguf_tensor_data(const memra_gguf_t *gguf, int64_t i);

/* ---- writer ------------------------------------------------------------ */

typedef struct memra_gguf_writer memra_gguf_writer_t;

/* Called at write time for a tensor added with data == NULL: fill DST with
 * NBYTES bytes of tensor INDEX (in add order). Return MEMRA_OK or an error
 * status, which aborts the write with that status and a message naming the
 * tensor (a positive value counts as MEMRA_E_INVALID). */
typedef memra_status_t (*memra_gguf_fill_fn)(void *user, int64_t index, const char *name,
                                              void *dst, size_t nbytes);

/* A writer collects keys and tensors, then writes one file. It writes
 * version 3 with alignment 32 unless told otherwise. destroy(NULL) is a
 * no-op. Thread-safety (this and every writer call below): one thread at a
 * time per handle. */
MEMRA_API memra_status_t memra_gguf_writer_create(memra_gguf_writer_t **out);
MEMRA_API void memra_gguf_writer_destroy(memra_gguf_writer_t *w);
/* Tests use these to make odd files: any version number is written as given.
 * Alignment also adds the general.alignment key (UINT32) if not 32.
 * Thread-safety: one thread at a time per handle. */
MEMRA_API memra_status_t memra_gguf_writer_set_version(memra_gguf_writer_t *w, uint32_t version);
MEMRA_API memra_status_t memra_gguf_writer_set_alignment(memra_gguf_writer_t *w, uint32_t alignment);
MEMRA_API void memra_gguf_writer_set_fill(memra_gguf_writer_t *w, memra_gguf_fill_fn fn, void *user);

/* Scalar of TYPE read from VALUE (its natural C type: uint8_t .. double;
 * bool is one byte). Keys and values are copied. Duplicate keys are allowed
 * here so that tests can write them; the reader rejects them.
 * Thread-safety: one thread at a time per handle. */
MEMRA_API memra_status_t memra_gguf_writer_add_scalar(memra_gguf_writer_t *w, const char *key,
                                                      memra_gguf_type_t type, const void *value);
MEMRA_API memra_status_t memra_gguf_writer_add_u32(memra_gguf_writer_t *w, const char *key, uint32_t v);
MEMRA_API memra_status_t memra_gguf_writer_add_i32(memra_gguf_writer_t *w, const char *key, int32_t v);
MEMRA_API memra_status_t memra_gguf_writer_add_f32(memra_gguf_writer_t *w, const char *key, float v);
MEMRA_API memra_status_t memra_gguf_writer_add_bool(memra_gguf_writer_t *w, const char *key, int v);
MEMRA_API memra_status_t memra_gguf_writer_add_str(memra_gguf_writer_t *w, const char *key,
                                                   const char *v);
/* Numeric array: N elements of ELEM_TYPE packed in DATA. More than 2^48
 * bytes is MEMRA_E_INVALID; a key that fails (also MEMRA_E_NOMEM) is not
 * added and the writer stays usable. Thread-safety: one thread at a time
 * per handle. */
MEMRA_API memra_status_t memra_gguf_writer_add_array(memra_gguf_writer_t *w, const char *key,
                                                     memra_gguf_type_t elem_type, const void *data,
                                                     uint64_t n);
/* String array; LENS may be NULL (strings are then NUL-terminated). A NULL
 * string is MEMRA_E_INVALID; failures add nothing, as for add_array.
 * Thread-safety: one thread at a time per handle. */
MEMRA_API memra_status_t memra_gguf_writer_add_str_array(memra_gguf_writer_t *w, const char *key,
                                                         const char *const *strs,
                                                         const size_t *lens, uint64_t n);

/* Adds a tensor. NE has N_DIMS entries (1..4). DATA (nbytes of the shape and
 * type) is borrowed until the write, or NULL to use the fill callback.
 * Thread-safety: one thread at a time per handle. */
MEMRA_API memra_status_t memra_gguf_writer_add_tensor(memra_gguf_writer_t *w, const char *name,
                                                      memra_type_t type, uint32_t n_dims,
                                                      const int64_t *ne, const void *data);

/* Writes the file (created or truncated).
 * Thread-safety: one thread at a time per handle. */
MEMRA_API memra_status_t memra_gguf_writer_write(memra_gguf_writer_t *w, const char *path);
/* Writes into a malloc'ed buffer that the caller frees with memra_free().
 * Thread-safety: one thread at a time per handle. */
MEMRA_API memra_status_t memra_gguf_writer_write_memory(memra_gguf_writer_t *w, void **data,
                                                        size_t *size);

/* Frees memory the library handed to the caller; NULL is a no-op.
 * Thread-safety: any thread. */
MEMRA_API void memra_free(void *p);

#ifdef __cplusplus
}
#endif
#endif

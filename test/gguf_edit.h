/* Test helper: copies a GGUF file through the public reader and writer,
 * with small edits, to make broken or extended variants of fixtures, and
 * checks that broken models fail to load. */
#ifndef MEMRA_TEST_GGUF_EDIT_H
#define MEMRA_TEST_GGUF_EDIT_H

#include "memra/gguf.h"

typedef struct tu_gguf_edit {
    const char *drop_key;        /* key to leave out */
    const char *drop_tensor;     /* tensor to leave out */
    const char *retype_key_i32;  /* UINT32 key written as INT32 instead */
    const char *set_arch;        /* new general.architecture value */
    const char *extra_tensor;    /* an extra F32 tensor {16} to add */
    const char *reshape_tensor;  /* tensor whose ne0 is doubled (data repeated) */
    const char *set_f32_key;     /* FLOAT32 key set to set_f32 (added if absent) */
    float set_f32;
} tu_gguf_edit;

/* Adds every KV of SRC (except edits) to W; returns MEMRA_OK or an error. */
memra_status_t tu_gguf_copy_kvs(const memra_gguf_t *src, memra_gguf_writer_t *w, const tu_gguf_edit *e);
/* Adds every tensor of SRC (except edits); the data is borrowed from SRC,
 * except for reshaped tensors, whose buffers are returned in *owned (free them). */
memra_status_t tu_gguf_copy_tensors(const memra_gguf_t *src, memra_gguf_writer_t *w, const tu_gguf_edit *e,
                                    void **owned);
/* Whole copy SRC_PATH -> DST_PATH with the edits. */
memra_status_t tu_gguf_rewrite(const char *src_path, const char *dst_path, const tu_gguf_edit *e);

/* cmocka check: a copy of the model SRC_PATH with the edits E must fail to
 * load with STATUS and a message that contains NEEDLE, leaving no model. */
void tu_expect_bad_model(const char *src_path, const tu_gguf_edit *e, memra_status_t status, const char *needle);

#endif

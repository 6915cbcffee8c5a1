/* memra: tokenizers built from GGUF metadata, the way llama.cpp builds them.
 *
 * Supported `tokenizer.ggml.model` values:
 *   "gpt2"   byte-level BPE; `tokenizer.ggml.pre` picks the pre-tokenizer
 *            (qwen2, qwen35, llama-bpe, smaug-bpe, gpt-2, deepseek-coder,
 *            deepseek-llm, falcon, starcoder, refact, mpt, default and their
 *            llama.cpp aliases; anything else is MEMRA_E_UNSUPPORTED);
 *   "llama"  SentencePiece-style (scores, byte fallback, space prefix);
 *   "gemma4" BPE over raw UTF-8 with spaces written as U+2581, byte fallback.
 *
 * A tokenizer copies everything it needs out of the GGUF: the file can be
 * closed right after memra_tokenizer_from_gguf(). After loading it is never
 * modified, so every function below except memra_tokenizer_free() may be
 * called from any number of threads at once on one handle (each call
 * allocates its own scratch memory).
 *
 * Buffer convention: functions that fill a caller buffer take its capacity
 * and an out-count. They write the count they produced (or would produce)
 * through the out pointer; if the buffer is too small they return
 * MEMRA_E_RANGE with that needed count, and the buffer contents are
 * unspecified. (llama.cpp returns minus the size instead.) Pass a NULL
 * buffer with capacity 0 to ask for the size. */
#ifndef MEMRA_TOKENIZER_H
#define MEMRA_TOKENIZER_H

#include "common.h"
#include "gguf.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct memra_tokenizer memra_tokenizer_t;

/* Flags of memra_tokenize(). */
#define MEMRA_TOKENIZE_ADD_SPECIAL (1u << 0)   /* add BOS/EOS as the GGUF (or llama.cpp's default) says */
#define MEMRA_TOKENIZE_PARSE_SPECIAL (1u << 1) /* text like "<|im_start|>" becomes its control token */

/* Flags of memra_detokenize(). */
#define MEMRA_DETOKENIZE_REMOVE_SPECIAL (1u << 0)  /* drop a leading BOS / trailing EOS the model adds */
#define MEMRA_DETOKENIZE_UNPARSE_SPECIAL (1u << 1) /* write control/unknown tokens as their text */
/* Apply llama.cpp's clean_up_tokenization_spaces passes (" ." -> ".", " 's" -> "'s", ...)
 * when the vocabulary asks for them (gpt-2, llama-bpe, gemma4, ...). Off by default: the
 * passes lose information and Hugging Face transformers 5 does not apply them. */
#define MEMRA_DETOKENIZE_CLEAN_SPACES (1u << 2)

/* Flags of memra_token_to_piece(). */
#define MEMRA_PIECE_SPECIAL (1u << 0) /* write control/unknown tokens as their text (else nothing) */
#define MEMRA_PIECE_LSTRIP (1u << 1)  /* drop one leading space of the piece */

/* Token attributes (bit set; values as in llama.cpp's llama_token_attr). */
#define MEMRA_TOKEN_ATTR_UNKNOWN (1u << 0)
#define MEMRA_TOKEN_ATTR_UNUSED (1u << 1)
#define MEMRA_TOKEN_ATTR_NORMAL (1u << 2)
#define MEMRA_TOKEN_ATTR_CONTROL (1u << 3)
#define MEMRA_TOKEN_ATTR_USER_DEFINED (1u << 4)
#define MEMRA_TOKEN_ATTR_BYTE (1u << 5)
#define MEMRA_TOKEN_ATTR_LSTRIP (1u << 7)
#define MEMRA_TOKEN_ATTR_RSTRIP (1u << 8)

/* Special token roles for memra_tokenizer_special(). */
typedef enum memra_special_token {
    MEMRA_SPECIAL_BOS = 0,
    MEMRA_SPECIAL_EOS = 1,
    MEMRA_SPECIAL_EOT = 2,
    MEMRA_SPECIAL_EOM = 3,
    MEMRA_SPECIAL_UNK = 4,
    MEMRA_SPECIAL_SEP = 5,
    MEMRA_SPECIAL_PAD = 6,
    MEMRA_SPECIAL_MASK = 7,
    MEMRA_SPECIAL_NL = 8, /* first token of "\n" */
    MEMRA_SPECIAL_FIM_PRE = 9,
    MEMRA_SPECIAL_FIM_SUF = 10,
    MEMRA_SPECIAL_FIM_MID = 11,
    MEMRA_SPECIAL_FIM_PAD = 12,
    MEMRA_SPECIAL_FIM_REP = 13,
    MEMRA_SPECIAL_FIM_SEP = 14,
    MEMRA_SPECIAL_COUNT = 15,
} memra_special_token_t;

/* ---- construction ---------------------------------------------------------- */

/* Builds the tokenizer of PATH (a vocab-only GGUF or a whole model; tensor
 * data is not read). On failure *out is NULL and memra_last_error() says why.
 * Thread-safety: any thread. */
MEMRA_API memra_status_t memra_tokenizer_load(const char *path, memra_tokenizer_t **out);

/* Builds the tokenizer from the `tokenizer.*` keys of an open GGUF. Everything
 * is copied: GGUF may be closed afterwards. MEMRA_E_NOT_FOUND if the file has
 * no tokenizer, MEMRA_E_UNSUPPORTED for an unknown model or pre-tokenizer,
 * MEMRA_E_FORMAT for malformed keys. Thread-safety: any thread. */
MEMRA_API memra_status_t memra_tokenizer_from_gguf(const memra_gguf_t *gguf, memra_tokenizer_t **out);

/* Frees; NULL is a no-op. Thread-safety: one thread at a time per handle
 * (no other call on the handle may be in flight). */
MEMRA_API void memra_tokenizer_free(memra_tokenizer_t *tok);

/* ---- encoding and decoding -------------------------------------------------- */

/* Tokenizes TEXT (TEXT_LEN bytes of UTF-8; NUL bytes are ordinary text) into
 * IDS (capacity N_MAX) with MEMRA_TOKENIZE_* FLAGS. *N_OUT = number of ids.
 * MEMRA_E_RANGE (with *N_OUT = the count needed) when N_MAX is too small;
 * MEMRA_E_INVALID for invalid UTF-8 (the message gives the byte offset).
 * Thread-safety: any thread, concurrently on one handle. */
MEMRA_API memra_status_t memra_tokenize(const memra_tokenizer_t *tok, const char *text, size_t text_len,
                                        int32_t *ids, int32_t n_max, uint32_t flags, int32_t *n_out);

/* Turns N ids back into text with MEMRA_DETOKENIZE_* FLAGS, handling the
 * model's spaces (SentencePiece's leading space is removed). Writes at most
 * CAP bytes to BUF, no NUL terminator; *N_OUT = byte count. MEMRA_E_RANGE
 * with the size needed; MEMRA_E_RANGE also for an id outside [0, n_vocab)
 * (the message names it; *N_OUT is then 0). The result is bytes: ids cut in
 * the middle of a UTF-8 sequence give invalid UTF-8.
 * Thread-safety: any thread, concurrently on one handle. */
MEMRA_API memra_status_t memra_detokenize(const memra_tokenizer_t *tok, const int32_t *ids, int32_t n,
                                          char *buf, size_t cap, uint32_t flags, size_t *n_out);

/* The bytes one token stands for (MEMRA_PIECE_* FLAGS), same convention.
 * Control and unknown tokens give 0 bytes unless MEMRA_PIECE_SPECIAL.
 * Thread-safety: any thread, concurrently on one handle. */
MEMRA_API memra_status_t memra_token_to_piece(const memra_tokenizer_t *tok, int32_t id, char *buf,
                                              size_t cap, uint32_t flags, size_t *n_out);

/* ---- vocabulary ------------------------------------------------------------- */
/* Everything below only reads the handle. */

/* Number of tokens (ids are 0..n_vocab-1). Thread-safety: any thread,
 * concurrently on one handle. */
MEMRA_API int32_t memra_tokenizer_n_vocab(const memra_tokenizer_t *tok);

/* "gpt2", "llama" or "gemma4", and the pre-tokenizer name in use ("qwen2",
 * "default", "gemma4", ...). Owned by the handle.
 * Thread-safety: any thread, concurrently on one handle. */
MEMRA_API const char *memra_tokenizer_model(const memra_tokenizer_t *tok);
MEMRA_API const char *memra_tokenizer_pre(const memra_tokenizer_t *tok);

/* Id of a special token role, -1 if the vocabulary has none. Ids follow
 * llama.cpp, including its defaults when the GGUF has no key: "llama" uses
 * bos 1, eos 2, unk 0; "gpt2" uses bos = eos = 11 (harmless unless BOS is
 * added); EOT/EOM/FIM ids not in the GGUF are found from the token texts
 * ("<|im_end|>", "<end_of_turn>", "<|fim_prefix|>", ...).
 * Thread-safety: any thread, concurrently on one handle. */
MEMRA_API int32_t memra_tokenizer_special(const memra_tokenizer_t *tok, memra_special_token_t which);
MEMRA_API int32_t memra_tokenizer_bos(const memra_tokenizer_t *tok);
MEMRA_API int32_t memra_tokenizer_eos(const memra_tokenizer_t *tok);
MEMRA_API int32_t memra_tokenizer_eot(const memra_tokenizer_t *tok);

/* Whether MEMRA_TOKENIZE_ADD_SPECIAL adds BOS / EOS: the GGUF key
 * (`tokenizer.ggml.add_bos_token`), else the model's default (llama: yes;
 * gpt2: only for pre = llama-bpe and its aliases); gemma4 always adds BOS.
 * Thread-safety: any thread, concurrently on one handle. */
MEMRA_API int memra_tokenizer_add_bos(const memra_tokenizer_t *tok);
MEMRA_API int memra_tokenizer_add_eos(const memra_tokenizer_t *tok);

/* End of generation: eos, eot, eom, FIM pad/repo/sep and the tokens whose
 * text is one of llama.cpp's end markers ("<|im_end|>", "<|endoftext|>",
 * "<end_of_turn>", "<eos>", ...).
 * Thread-safety: any thread, concurrently on one handle. */
MEMRA_API int memra_tokenizer_is_eog(const memra_tokenizer_t *tok, int32_t id);
/* The whole set, ascending, with the buffer convention above.
 * Thread-safety: any thread, concurrently on one handle. */
MEMRA_API memra_status_t memra_tokenizer_eog_ids(const memra_tokenizer_t *tok, int32_t *ids,
                                                 int32_t n_max, int32_t *n_out);

/* `tokenizer.chat_template` (NUL-terminated, owned by the handle), NULL if none.
 * Thread-safety: any thread, concurrently on one handle. */
MEMRA_API const char *memra_tokenizer_chat_template(const memra_tokenizer_t *tok);

/* Token text as stored in the GGUF (byte-level BPE texts use the GPT-2
 * alphabet: "Ġthe"), NUL-terminated and owned by the handle; NULL if ID is
 * out of range. An empty stored text reads "[EMPTY_<id>]", as in llama.cpp.
 * Thread-safety: any thread, concurrently on one handle. */
MEMRA_API const char *memra_tokenizer_token_text(const memra_tokenizer_t *tok, int32_t id);
/* Score (0 when the GGUF has none) and MEMRA_TOKEN_ATTR_* bits (0 if out of range).
 * Thread-safety: any thread, concurrently on one handle. */
MEMRA_API float memra_tokenizer_token_score(const memra_tokenizer_t *tok, int32_t id);
MEMRA_API uint32_t memra_tokenizer_token_attr(const memra_tokenizer_t *tok, int32_t id);
/* Id of the token whose stored text is exactly TEXT (LEN bytes), -1 if none.
 * Thread-safety: any thread, concurrently on one handle. */
MEMRA_API int32_t memra_tokenizer_token_id(const memra_tokenizer_t *tok, const char *text, size_t len);

/* Message of the last failed call on TOK (empty if none). The string is a
 * per-thread copy, valid until the calling thread's next call to this
 * function. Thread-safety: any thread. */
MEMRA_API const char *memra_tokenizer_last_error(const memra_tokenizer_t *tok);

#ifdef __cplusplus
}
#endif
#endif

/* Where the examples find the bundled default model (test/data/default.gguf,
 * a tiny random-weight qwen3 with a real tokenizer) when no -m is given. */
#ifndef MEMRA_EXAMPLES_DEFAULT_MODEL_H
#define MEMRA_EXAMPLES_DEFAULT_MODEL_H

/* $MEMRA_DEFAULT_MODEL; else default.gguf next to the executable or in
 * ../share/memra/ (installed); else the source tree path compiled in.
 * Returns a static string, or NULL when none of them exists. */
const char *default_model_path(void);

#endif

/* CPU reference implementations of the ggml block formats: dequantize,
 * dot product against float32, and quantize (for the types tests need to
 * build models). Layouts follow ggml-common.h exactly (the types:
 * docs/MODELS.md). */
#ifndef MEMRA_QUANT_H
#define MEMRA_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "memra/gguf.h"

/* True when dequantize/dot below handle TYPE: F32, F16, BF16, Q4_0, Q4_1,
 * Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4. */
bool memra__quant_can_compute(memra_type_t type);
/* True when memra__quantize_row handles TYPE (at least F32, F16, BF16, Q8_0, Q4_0). */
bool memra__quant_can_quantize(memra_type_t type);

/* Bytes taken by N elements of TYPE (N a multiple of the block size). */
size_t memra__row_bytes(memra_type_t type, int64_t n);

/* Dequantizes N elements (a multiple of the block size) from SRC into DST.
 * Bit-exact with ggml's dequantize_row_*. Returns false for a type it
 * cannot compute. */
bool memra__dequantize_row(memra_type_t type, const void *src, float *dst, int64_t n);

/* Dot product of one quantized row of N elements with float32 X, accumulated
 * in double (the reference must be at least as exact as any fast path). */
double memra__dot_row(memra_type_t type, const void *row, const float *x, int64_t n);

/* Quantizes N floats into DST the way ggml's quantize_row_*_ref does. */
bool memra__quantize_row(memra_type_t type, const float *src, void *dst, int64_t n);

#endif

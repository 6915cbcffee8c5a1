/* gq2_kernel instances (cuda/gemm_q.cuh): the 32-element block formats
 * whose raw k tiles are whole 4-byte words, in their own unit so that they
 * build beside gemm_q.cu. */
#include "gemm_q.cuh"

GQ2_TYPES(GQ2_INSTANTIATE)

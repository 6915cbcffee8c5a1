/* gq2_kernel instances (cuda/gemm_q.cuh): the 32-element block formats
 * whose raw k tiles are whole 4-byte words, in their own unit so that they
 * build beside gemm_q.cu. */
#include "gemm_q.cuh"

GQ2_INSTANTIATE(MEMRA_TYPE_F16, _)
GQ2_INSTANTIATE(MEMRA_TYPE_BF16, _)
GQ2_INSTANTIATE(MEMRA_TYPE_Q8_0, _)
GQ2_INSTANTIATE(MEMRA_TYPE_Q4_0, _)
GQ2_INSTANTIATE(MEMRA_TYPE_Q4_1, _)
GQ2_INSTANTIATE(MEMRA_TYPE_Q5_0, _)
GQ2_INSTANTIATE(MEMRA_TYPE_Q5_1, _)
GQ2_INSTANTIATE(MEMRA_TYPE_IQ4_NL, _)

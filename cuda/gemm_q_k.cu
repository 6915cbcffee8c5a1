/* Tensor-core GEMM instances (cuda/gemm_q.cuh) for the 256-element
 * super-block formats, in their own unit so the two halves build in
 * parallel. */
#include "gemm_q.cuh"

GQ_INSTANTIATE(MEMRA_TYPE_Q2_K, _)
GQ_INSTANTIATE(MEMRA_TYPE_Q3_K, _)
GQ_INSTANTIATE(MEMRA_TYPE_Q4_K, _)
GQ_INSTANTIATE(MEMRA_TYPE_Q5_K, _)
GQ_INSTANTIATE(MEMRA_TYPE_Q6_K, _)
GQ_INSTANTIATE(MEMRA_TYPE_IQ4_XS, _)

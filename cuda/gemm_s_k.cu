/* Skinny GEMM instances (cuda/gemm_s.cuh) for the 256-element super-block
 * formats, in their own unit so the two halves build in parallel. */
#include "gemm_s.cuh"

#define GS_INST_K(T) GS_INSTANTIATE(T, _)
GS_TYPES_256(GS_INST_K)

/* Matvec and fast-prefill dequantizer instances (cuda/mmv.cuh) for: Q2_K Q3_K Q4_K. */
#include "mmv_impl.cuh"

MMV_INSTANTIATE(MEMRA_TYPE_Q2_K, _)
MMV_INSTANTIATE(MEMRA_TYPE_Q3_K, _)
MMV_INSTANTIATE(MEMRA_TYPE_Q4_K, _)

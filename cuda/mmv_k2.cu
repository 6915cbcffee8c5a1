/* Matvec and fast-prefill dequantizer instances (cuda/mmv.cuh) for: Q5_K Q6_K IQ4_XS. */
#include "mmv_impl.cuh"

MMV_INSTANTIATE(MEMRA_TYPE_Q5_K, _)
MMV_INSTANTIATE(MEMRA_TYPE_Q6_K, _)
MMV_INSTANTIATE(MEMRA_TYPE_IQ4_XS, _)

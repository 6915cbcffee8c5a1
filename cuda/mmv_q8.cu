/* Matvec and fast-prefill dequantizer instances (cuda/mmv.cuh) for: Q8_0. */
#include "mmv_impl.cuh"

MMV_INSTANTIATE(MEMRA_TYPE_Q8_0, _)

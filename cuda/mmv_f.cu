/* Matvec and fast-prefill dequantizer instances (cuda/mmv.cuh) for: F32 F16 BF16. */
#include "mmv_impl.cuh"

MMV_INSTANTIATE(MEMRA_TYPE_F32, _)
MMV_INSTANTIATE(MEMRA_TYPE_F16, _)
MMV_INSTANTIATE(MEMRA_TYPE_BF16, _)

/* The ggml type table: name, elements per block and bytes per block of every
 * id a GGUF file can carry, including types memra cannot compute, so that
 * any valid file can be sized and validated. */
#include "memra/gguf.h"

typedef struct type_info {
    const char *name;
    int64_t blck;
    size_t bytes;
} type_info;

static const type_info k_types[MEMRA_TYPE_COUNT] = {
    [MEMRA_TYPE_F32] = {"F32", 1, 4},
    [MEMRA_TYPE_F16] = {"F16", 1, 2},
    [MEMRA_TYPE_Q4_0] = {"Q4_0", 32, 18},
    [MEMRA_TYPE_Q4_1] = {"Q4_1", 32, 20},
    [MEMRA_TYPE_Q5_0] = {"Q5_0", 32, 22},
    [MEMRA_TYPE_Q5_1] = {"Q5_1", 32, 24},
    [MEMRA_TYPE_Q8_0] = {"Q8_0", 32, 34},
    [MEMRA_TYPE_Q8_1] = {"Q8_1", 32, 36},
    [MEMRA_TYPE_Q2_K] = {"Q2_K", 256, 84},
    [MEMRA_TYPE_Q3_K] = {"Q3_K", 256, 110},
    [MEMRA_TYPE_Q4_K] = {"Q4_K", 256, 144},
    [MEMRA_TYPE_Q5_K] = {"Q5_K", 256, 176},
    [MEMRA_TYPE_Q6_K] = {"Q6_K", 256, 210},
    [MEMRA_TYPE_Q8_K] = {"Q8_K", 256, 292},
    [MEMRA_TYPE_IQ2_XXS] = {"IQ2_XXS", 256, 66},
    [MEMRA_TYPE_IQ2_XS] = {"IQ2_XS", 256, 74},
    [MEMRA_TYPE_IQ3_XXS] = {"IQ3_XXS", 256, 98},
    [MEMRA_TYPE_IQ1_S] = {"IQ1_S", 256, 50},
    [MEMRA_TYPE_IQ4_NL] = {"IQ4_NL", 32, 18},
    [MEMRA_TYPE_IQ3_S] = {"IQ3_S", 256, 110},
    [MEMRA_TYPE_IQ2_S] = {"IQ2_S", 256, 82},
    [MEMRA_TYPE_IQ4_XS] = {"IQ4_XS", 256, 136},
    [MEMRA_TYPE_I8] = {"I8", 1, 1},
    [MEMRA_TYPE_I16] = {"I16", 1, 2},
    [MEMRA_TYPE_I32] = {"I32", 1, 4},
    [MEMRA_TYPE_I64] = {"I64", 1, 8},
    [MEMRA_TYPE_F64] = {"F64", 1, 8},
    [MEMRA_TYPE_IQ1_M] = {"IQ1_M", 256, 56},
    [MEMRA_TYPE_BF16] = {"BF16", 1, 2},
    [MEMRA_TYPE_TQ1_0] = {"TQ1_0", 256, 54},
    [MEMRA_TYPE_TQ2_0] = {"TQ2_0", 256, 66},
    [MEMRA_TYPE_MXFP4] = {"MXFP4", 32, 17},
    [MEMRA_TYPE_NVFP4] = {"NVFP4", 64, 36},
    [MEMRA_TYPE_Q1_0] = {"Q1_0", 128, 18},
};

const char *memra_type_name(memra_type_t type)
{
    return (unsigned)type < MEMRA_TYPE_COUNT ? k_types[type].name : NULL;
}

int64_t memra_type_block_size(memra_type_t type)
{
    return (unsigned)type < MEMRA_TYPE_COUNT ? k_types[type].blck : 0;
}

size_t memra_type_block_bytes(memra_type_t type)
{
    return (unsigned)type < MEMRA_TYPE_COUNT ? k_types[type].bytes : 0;
}

const char *memra_gguf_type_name(memra_gguf_type_t type)
{
    static const char *names[MEMRA_GGUF_TYPE_COUNT] = {
        "UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32",
        "BOOL",  "STRING", "ARRAY", "UINT64", "INT64", "FLOAT64",
    };
    return (unsigned)type < MEMRA_GGUF_TYPE_COUNT ? names[type] : NULL;
}

"""The C ABI of libmemra through ctypes: structs, callback types, constants and
one prototype per exported function (lib/libmemra.sym).

This module is the low level: every function keeps its C name and C calling
convention (status codes, out pointers, caller buffers). The classes in the
rest of the package wrap it. The library is loaded on first use by
:func:`lib` (see :mod:`memra._loader` for where it is looked for).
"""

from __future__ import annotations

import ctypes
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_char,
    c_char_p,
    c_double,
    c_float,
    c_int,
    c_int32,
    c_int64,
    c_size_t,
    c_uint32,
    c_uint64,
    c_void_p,
)
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import _loader

# ---- constants (include/memra/*.h) -------------------------------------------

ABI_MAJOR = 0  # the MEMRA_VERSION_MAJOR these structs were written for

# engine.h
BACKEND_CPU = 0
BACKEND_CUDA = 1
CPU_THREADS_PER_CORE = 4

# common.h
LOG_DEBUG = 0
LOG_INFO = 1
LOG_WARN = 2
LOG_ERROR = 3

# model.h
MAX_PP_STAGES = 16
FORWARD_ALL_ROWS = 1
MAX_BATCH = 64  # MEMRA_MAX_BATCH: items per memra_forward_batch call
LAYER_ATTENTION = 0
LAYER_SLIDING = 1
LAYER_RECURRENT = 2

# tokenizer.h
TOKENIZE_ADD_SPECIAL = 1 << 0
TOKENIZE_PARSE_SPECIAL = 1 << 1
DETOKENIZE_REMOVE_SPECIAL = 1 << 0
DETOKENIZE_UNPARSE_SPECIAL = 1 << 1
DETOKENIZE_CLEAN_SPACES = 1 << 2
PIECE_SPECIAL = 1 << 0
PIECE_LSTRIP = 1 << 1
TOKEN_ATTR_UNKNOWN = 1 << 0
TOKEN_ATTR_UNUSED = 1 << 1
TOKEN_ATTR_NORMAL = 1 << 2
TOKEN_ATTR_CONTROL = 1 << 3
TOKEN_ATTR_USER_DEFINED = 1 << 4
TOKEN_ATTR_BYTE = 1 << 5
TOKEN_ATTR_LSTRIP = 1 << 7
TOKEN_ATTR_RSTRIP = 1 << 8

# sampler.h
SAMPLER_PENALTY_MIN = 1e-4
SAMPLER_PENALTY_MAX = 1e4

# check.h
KERNEL_CHECK_MAX_LINES = 1024
PP_PARITY_MAX_ARMS = 4
MARGIN_MAX_WINDOW = 256

# ---- structs -----------------------------------------------------------------


class EngineParams(Structure):
    """memra_engine_params_t (engine.h)."""

    _fields_ = [
        ("size", c_uint32),
        ("backend", c_int32),
        ("device", c_int32),
        ("n_threads", c_int32),
        ("fast", c_int32),
    ]


class EngineInfo(Structure):
    """memra_engine_info_t (engine.h)."""

    _fields_ = [
        ("size", c_uint32),
        ("backend", c_int32),
        ("device", c_int32),
        ("n_threads", c_int32),
        ("sm_count", c_int32),
        ("cc_major", c_int32),
        ("cc_minor", c_int32),
        ("mem_total", c_uint64),
        ("mem_free", c_uint64),
        ("backend_name", c_char * 16),
        ("device_name", c_char * 256),
    ]


# int (*memra_progress_fn)(float progress, void *user)
PROGRESS_FN: Any = CFUNCTYPE(c_int, c_float, c_void_p)
# void (*memra_log_fn)(memra_log_level_t level, const char *text, void *user)
LOG_FN: Any = CFUNCTYPE(None, c_int, c_char_p, c_void_p)
# memra_status_t (*memra_gguf_fill_fn)(void *user, int64_t index, const char *name, void *dst, size_t nbytes)
GGUF_FILL_FN: Any = CFUNCTYPE(c_int, c_void_p, c_int64, c_char_p, c_void_p, c_size_t)


class ModelParams(Structure):
    """memra_model_params_t (model.h)."""

    _fields_ = [
        ("size", c_uint32),
        ("engine", c_void_p),
        ("n_layers", c_int32),
        ("load_mtp", c_int32),
        ("prefill_chunk", c_int32),
        ("progress", PROGRESS_FN),
        ("progress_user", c_void_p),
        ("n_stages", c_int32),
        ("devices", c_char_p),
        ("stage_engines", c_void_p * MAX_PP_STAGES),
        ("splits", c_int32 * (MAX_PP_STAGES - 1)),
        ("shard", c_int32),
        ("streams", c_int32),
        ("overlap", c_int32),
        ("share_device", c_int32),
        ("kv_pool_bytes", c_int64),
        ("kv_page_bytes", c_int64),
    ]


class CacheParams(Structure):
    """memra_cache_params_t (model.h)."""

    _fields_ = [
        ("size", c_uint32),
        ("n_ctx", c_int32),
        ("type_k", c_int),
        ("type_v", c_int),
    ]


class StageInfo(Structure):
    """memra_stage_info_t (pipeline.h)."""

    _fields_ = [
        ("size", c_uint32),
        ("layer0", c_int32),
        ("layer1", c_int32),
        ("backend", c_int32),
        ("device", c_int32),
        ("engine_index", c_int32),
        ("reserved", c_int32),
        ("weight_bytes", c_uint64),
    ]


class PipelineInfo(Structure):
    """memra_pipeline_info_t (pipeline.h)."""

    _fields_ = [
        ("size", c_uint32),
        ("n_stages", c_int32),
        ("shard", c_int32),
        ("streams", c_int32),
        ("overlap", c_int32),
        ("share_device", c_int32),
        ("fence", c_int32 * (MAX_PP_STAGES + 1)),
    ]


class SamplerParams(Structure):
    """memra_sampler_params_t (sampler.h)."""

    _fields_ = [
        ("size", c_uint32),
        ("temperature", c_float),
        ("top_k", c_int32),
        ("top_p", c_float),
        ("min_p", c_float),
        ("repeat_penalty", c_float),
        ("repeat_last_n", c_int32),
        ("seed", c_uint64),
    ]


class KernelCheckParams(Structure):
    """memra_kernel_check_params_t (check.h)."""

    _fields_ = [
        ("size", c_uint32),
        ("device", c_int32),
        ("seed", c_uint64),
        ("test", c_char_p),
        ("bench", c_int32),
        ("bench_iters", c_int32),
        ("big", c_int32),
    ]


class KernelCheckLine(Structure):
    """memra_kernel_check_line_t (check.h)."""

    _fields_ = [
        ("name", c_char * 48),
        ("shape", c_char * 96),
        ("max_abs_err", c_double),
        ("nmse", c_double),
        ("max_ulp", c_double),
        ("tol", c_double),
        ("tol_kind", c_char * 8),
        ("guard_ok", c_int32),
        ("pass_", c_int32),  # "pass" in C
        ("bench_us", c_double),
        ("bench_gbs", c_double),
        ("note", c_char * 64),
    ]


class KernelCheckReport(Structure):
    """memra_kernel_check_report_t (check.h)."""

    _fields_ = [
        ("size", c_uint32),
        ("device_name", c_char * 256),
        ("n_lines", c_int32),
        ("n_failed", c_int32),
        ("truncated", c_int32),
        ("all_green", c_int32),
        ("lines", KernelCheckLine * KERNEL_CHECK_MAX_LINES),
    ]


class PpParityParams(Structure):
    """memra_pp_parity_params_t (check.h)."""

    _fields_ = [
        ("size", c_uint32),
        ("n_stages", c_int32),
        ("n_prompt", c_int32),
        ("n_steps", c_int32),
        ("window", c_int32),
        ("devices", c_char_p),
        ("splits", c_int32 * (MAX_PP_STAGES - 1)),
        ("prompt", POINTER(c_int32)),
        ("extra_arms", c_int32),
    ]


class PpParityArm(Structure):
    """memra_pp_parity_arm_t (check.h)."""

    _fields_ = [
        ("name", c_char * 16),
        ("streams", c_int32),
        ("overlap", c_int32),
        ("shard", c_int32),
        ("window", c_int32),
        ("steps_compared", c_int32),
        ("steps_mismatched", c_int32),
        ("first_step", c_int32),
        ("first_index", c_int32),
        ("first_ref", c_float),
        ("first_got", c_float),
        ("first_ref_bits", c_uint32),
        ("first_got_bits", c_uint32),
        ("decode_tok_s", c_double),
    ]


class PpParityReport(Structure):
    """memra_pp_parity_report_t (check.h)."""

    _fields_ = [
        ("size", c_uint32),
        ("arch", c_char * 32),
        ("n_layers", c_int32),
        ("n_vocab", c_int32),
        ("n_stages", c_int32),
        ("n_prompt", c_int32),
        ("n_steps", c_int32),
        ("fence", c_int32 * (MAX_PP_STAGES + 1)),
        ("stage_bytes", c_uint64 * MAX_PP_STAGES),
        ("ref_device", c_char * 16),
        ("devices", c_char * 160),
        ("ref_decode_tok_s", c_double),
        ("n_arms", c_int32),
        ("arms", PpParityArm * PP_PARITY_MAX_ARMS),
        ("pass_", c_int32),  # "pass" in C
    ]


class MarginParams(Structure):
    """memra_margin_params_t (check.h)."""

    _fields_ = [
        ("size", c_uint32),
        ("device", c_char_p),
        ("budget", c_float),
        ("prefill_chunk", c_int32),
    ]


class MarginRow(Structure):
    """memra_margin_row_t (check.h)."""

    _fields_ = [
        ("pos", c_int32),
        ("top1_decode", c_int32),
        ("top2_decode", c_int32),
        ("top1_prefill", c_int32),
        ("top2_prefill", c_int32),
        ("margin_decode", c_float),
        ("margin_prefill", c_float),
        ("spread", c_float),
        ("agree", c_int32),
    ]


class MarginReport(Structure):
    """memra_margin_report_t (check.h)."""

    _fields_ = [
        ("size", c_uint32),
        ("arch", c_char * 32),
        ("n_tokens", c_int32),
        ("n_vocab", c_int32),
        ("window", c_int32),
        ("budget", c_float),
        ("n_agree", c_int32),
        ("n_flips", c_int32),
        ("max_spread", c_float),
        ("max_abs_diff", c_float),
        ("min_margin", c_float),
        ("decision_pos", c_int32),
        ("decision_margin", c_float),
        ("decision_rank", c_int32),
        ("decision_percentile", c_float),
        ("verdict", c_int32),
        ("reason", c_char * 192),
        ("rows", MarginRow * MARGIN_MAX_WINDOW),
    ]


class ChatParams(Structure):
    """memra_chat_params_t (chat.h)."""

    _fields_ = [
        ("size", c_uint32),
        ("max_depth", c_uint32),
        ("now", c_char_p),
        ("max_output", c_uint64),
        ("max_steps", c_uint64),
    ]


class BatchItem(Structure):
    """memra_batch_item_t (model.h): one sequence's part of memra_forward_batch."""

    _fields_ = [
        ("cache", c_void_p),
        ("tokens", POINTER(c_int32)),
        ("n_tokens", c_int32),
        ("flags", c_uint32),
        ("logits", POINTER(c_float)),
    ]


# Every public struct, with its C name (the ABI test compares the layouts).
STRUCTS: Dict[str, Any] = {
    "memra_chat_params_t": ChatParams,
    "memra_batch_item_t": BatchItem,
    "memra_engine_params_t": EngineParams,
    "memra_engine_info_t": EngineInfo,
    "memra_model_params_t": ModelParams,
    "memra_cache_params_t": CacheParams,
    "memra_stage_info_t": StageInfo,
    "memra_pipeline_info_t": PipelineInfo,
    "memra_sampler_params_t": SamplerParams,
    "memra_kernel_check_params_t": KernelCheckParams,
    "memra_kernel_check_line_t": KernelCheckLine,
    "memra_kernel_check_report_t": KernelCheckReport,
    "memra_pp_parity_params_t": PpParityParams,
    "memra_pp_parity_arm_t": PpParityArm,
    "memra_pp_parity_report_t": PpParityReport,
    "memra_margin_params_t": MarginParams,
    "memra_margin_row_t": MarginRow,
    "memra_margin_report_t": MarginReport,
}

# ---- prototypes --------------------------------------------------------------

_st = c_int  # memra_status_t and the other enums
_h = c_void_p  # any opaque handle
_hp = POINTER(c_void_p)  # handle out pointer
_i32p = POINTER(c_int32)
_i64p = POINTER(c_int64)
_u64p = POINTER(c_uint64)
_f64p = POINTER(c_double)
_fp = POINTER(c_float)
_szp = POINTER(c_size_t)
_intp = POINTER(c_int)
_strp = POINTER(c_void_p)  # const char ** read back with ctypes.string_at

# name: (restype, argtypes), in the order of lib/libmemra.sym
PROTOTYPES: Dict[str, Tuple[Any, Sequence[Any]]] = {
    "memra_cache_capacity": (c_int32, [_h]),
    "memra_cache_clear": (_st, [_h]),
    "memra_cache_create": (_st, [_h, c_int32, _hp]),
    "memra_cache_create_ex": (_st, [_h, POINTER(CacheParams), _hp]),
    "memra_cache_kv_bytes": (c_uint64, [_h, c_int64]),
    "memra_cache_kv_bytes_per_token": (c_uint64, [_h]),
    "memra_cache_params_init": (None, [POINTER(CacheParams), c_uint32]),
    "memra_cache_type_k": (c_int, [_h]),
    "memra_cache_type_v": (c_int, [_h]),
    "memra_cache_fork": (_st, [_h, c_int32, _hp]),
    "memra_cache_free": (_st, [_h]),
    "memra_cache_pos": (c_int32, [_h]),
    "memra_cache_restore": (_st, [_h, _h]),
    "memra_cache_snapshot": (_st, [_h, _hp]),
    "memra_cache_snapshot_free": (None, [_h]),
    "memra_cache_state_bytes": (c_uint64, [_h]),
    "memra_chat_params_init": (None, [POINTER(ChatParams), c_uint32]),
    "memra_chat_render": (_st, [c_char_p, c_char_p, POINTER(ChatParams), c_void_p, c_size_t, _szp]),
    "memra_chat_render_alloc": (_st, [c_char_p, c_char_p, POINTER(ChatParams), POINTER(c_void_p), _szp]),
    "memra_chat_render_tokenizer": (_st, [_h, c_char_p, POINTER(ChatParams), POINTER(c_void_p), _szp]),
    "memra_check_argmax_margin": (
        _st,
        [c_char_p, _i32p, c_int32, c_int32, POINTER(MarginParams), POINTER(MarginReport)],
    ),
    "memra_check_kernels": (_st, [POINTER(KernelCheckParams), POINTER(KernelCheckReport)]),
    "memra_check_pipeline_parity": (_st, [c_char_p, POINTER(PpParityParams), POINTER(PpParityReport)]),
    "memra_cuda_device_count": (c_int32, []),
    "memra_decode_step": (_st, [_h, _h, c_int32, _fp]),
    "memra_decode_step_deferred": (_st, [_h, _h, c_int32, _hp]),
    "memra_detokenize": (_st, [_h, _i32p, c_int32, c_void_p, c_size_t, c_uint32, _szp]),
    "memra_engine_copy_bandwidth": (_st, [_h, c_size_t, c_int32, _f64p]),
    "memra_engine_create": (_st, [POINTER(EngineParams), _hp]),
    "memra_engine_destroy": (_st, [_h]),
    "memra_engine_get_info": (_st, [_h, POINTER(EngineInfo)]),
    "memra_engine_host_alloc": (c_void_p, [_h, c_size_t]),
    "memra_engine_last_error": (c_char_p, [_h]),
    "memra_engine_params_init": (None, [POINTER(EngineParams), c_uint32]),
    "memra_engine_params_set_device": (_st, [POINTER(EngineParams), c_char_p]),
    "memra_forward": (_st, [_h, _h, _i32p, c_int32, c_uint32, _fp]),
    "memra_forward_batch": (_st, [_h, POINTER(BatchItem), c_int32, c_uint32]),
    "memra_forward_batch_deferred": (_st, [_h, POINTER(BatchItem), c_int32, c_uint32, _hp]),
    "memra_free": (None, [c_void_p]),
    "memra_gguf_alignment": (c_uint32, [_h]),
    "memra_gguf_arr_data": (c_void_p, [_h, c_int64]),
    "memra_gguf_arr_f64": (_st, [_h, c_int64, c_uint64, _f64p]),
    "memra_gguf_arr_i64": (_st, [_h, c_int64, c_uint64, _i64p]),
    "memra_gguf_arr_n": (c_uint64, [_h, c_int64]),
    "memra_gguf_arr_str": (_st, [_h, c_int64, c_uint64, _strp, _szp]),
    "memra_gguf_arr_type": (_st, [_h, c_int64]),
    "memra_gguf_arr_u64": (_st, [_h, c_int64, c_uint64, _u64p]),
    "memra_gguf_close": (None, [_h]),
    "memra_gguf_find_kv": (c_int64, [_h, c_char_p]),
    "memra_gguf_find_tensor": (c_int64, [_h, c_char_p]),
    "memra_gguf_kv_bool": (_st, [_h, c_int64, _intp]),
    "memra_gguf_kv_f64": (_st, [_h, c_int64, _f64p]),
    "memra_gguf_kv_i64": (_st, [_h, c_int64, _i64p]),
    "memra_gguf_kv_key": (c_char_p, [_h, c_int64]),
    "memra_gguf_kv_str": (_st, [_h, c_int64, _strp, _szp]),
    "memra_gguf_kv_type": (_st, [_h, c_int64]),
    "memra_gguf_kv_u64": (_st, [_h, c_int64, _u64p]),
    "memra_gguf_n_kv": (c_int64, [_h]),
    "memra_gguf_n_shards": (c_uint32, [_h]),
    "memra_gguf_n_tensors": (c_int64, [_h]),
    "memra_gguf_open": (_st, [c_char_p, _hp]),
    "memra_gguf_open_memory": (_st, [c_void_p, c_size_t, _hp]),
    "memra_gguf_tensor_data": (c_void_p, [_h, c_int64]),
    "memra_gguf_tensor_name": (c_char_p, [_h, c_int64]),
    "memra_gguf_tensor_nbytes": (c_uint64, [_h, c_int64]),
    "memra_gguf_tensor_offset": (c_uint64, [_h, c_int64]),
    "memra_gguf_tensor_shape": (c_uint32, [_h, c_int64, _i64p]),
    "memra_gguf_tensor_shard": (c_uint32, [_h, c_int64]),
    "memra_gguf_tensor_type": (_st, [_h, c_int64]),
    "memra_gguf_type_name": (c_char_p, [_st]),
    "memra_gguf_version": (c_uint32, [_h]),
    "memra_gguf_writer_add_array": (_st, [_h, c_char_p, _st, c_void_p, c_uint64]),
    "memra_gguf_writer_add_bool": (_st, [_h, c_char_p, c_int]),
    "memra_gguf_writer_add_f32": (_st, [_h, c_char_p, c_float]),
    "memra_gguf_writer_add_i32": (_st, [_h, c_char_p, c_int32]),
    "memra_gguf_writer_add_scalar": (_st, [_h, c_char_p, _st, c_void_p]),
    "memra_gguf_writer_add_str": (_st, [_h, c_char_p, c_char_p]),
    "memra_gguf_writer_add_str_array": (_st, [_h, c_char_p, POINTER(c_char_p), _szp, c_uint64]),
    "memra_gguf_writer_add_tensor": (_st, [_h, c_char_p, _st, c_uint32, _i64p, c_void_p]),
    "memra_gguf_writer_add_u32": (_st, [_h, c_char_p, c_uint32]),
    "memra_gguf_writer_create": (_st, [_hp]),
    "memra_gguf_writer_destroy": (None, [_h]),
    "memra_gguf_writer_set_alignment": (_st, [_h, c_uint32]),
    "memra_gguf_writer_set_fill": (None, [_h, GGUF_FILL_FN, c_void_p]),
    "memra_gguf_writer_set_version": (_st, [_h, c_uint32]),
    "memra_gguf_writer_write": (_st, [_h, c_char_p]),
    "memra_gguf_writer_write_memory": (_st, [_h, _hp, _szp]),
    "memra_host_free": (None, [c_void_p]),
    "memra_kernel_check_params_init": (None, [POINTER(KernelCheckParams), c_uint32]),
    "memra_last_error": (c_char_p, []),
    "memra_log_set": (None, [LOG_FN, c_void_p, c_int]),
    "memra_log_stderr": (None, [c_int, c_char_p, c_void_p]),
    "memra_margin_params_init": (None, [POINTER(MarginParams), c_uint32]),
    "memra_margin_verdict_name": (c_char_p, [c_int32]),
    "memra_model_arch": (c_char_p, [_h]),
    "memra_model_free": (_st, [_h]),
    "memra_model_gguf": (c_void_p, [_h]),
    "memra_model_last_error": (c_char_p, [_h]),
    "memra_model_kv_pool_bytes": (None, [_h, POINTER(c_uint64), POINTER(c_uint64)]),
    "memra_model_kv_page_bytes": (c_uint64, [_h]),
    "memra_model_layer_kind": (c_int32, [_h, c_int32]),
    "memra_model_load": (_st, [c_char_p, POINTER(ModelParams), _hp]),
    "memra_model_max_batch": (c_int32, [_h]),
    "memra_model_n_ctx_train": (c_int32, [_h]),
    "memra_model_n_embd": (c_int32, [_h]),
    "memra_model_n_layers": (c_int32, [_h]),
    "memra_model_n_mtp_layers": (c_int32, [_h]),
    "memra_model_n_stages": (c_int32, [_h]),
    "memra_model_n_vocab": (c_int32, [_h]),
    "memra_model_params_init": (None, [POINTER(ModelParams), c_uint32]),
    "memra_model_pipeline_info": (_st, [_h, POINTER(PipelineInfo)]),
    "memra_model_stage_info": (_st, [_h, c_int32, POINTER(StageInfo)]),
    "memra_model_tokenizer": (c_void_p, [_h]),
    "memra_model_weight_bytes": (c_uint64, [_h]),
    "memra_pending_free": (_st, [_h]),
    "memra_pending_poll": (_st, [_h]),
    "memra_pending_wait": (_st, [_h, _fp]),
    "memra_pp_parity_params_init": (None, [POINTER(PpParityParams), c_uint32]),
    "memra_sampler_accept": (_st, [_h, c_int32]),
    "memra_sampler_create": (_st, [POINTER(SamplerParams), _hp]),
    "memra_sampler_free": (None, [_h]),
    "memra_sampler_last_error": (c_char_p, [_h]),
    "memra_sampler_params_init": (None, [POINTER(SamplerParams), c_uint32]),
    "memra_sampler_reset": (None, [_h]),
    "memra_sampler_sample": (_st, [_h, _fp, c_int32, _i32p]),
    "memra_status_name": (c_char_p, [_st]),
    "memra_strerror": (c_char_p, [_st]),
    "memra_token_to_piece": (_st, [_h, c_int32, c_void_p, c_size_t, c_uint32, _szp]),
    "memra_tokenize": (_st, [_h, c_char_p, c_size_t, _i32p, c_int32, c_uint32, _i32p]),
    "memra_tokenizer_add_bos": (c_int, [_h]),
    "memra_tokenizer_add_eos": (c_int, [_h]),
    "memra_tokenizer_bos": (c_int32, [_h]),
    "memra_tokenizer_chat_template": (c_char_p, [_h]),
    "memra_tokenizer_eog_ids": (_st, [_h, _i32p, c_int32, _i32p]),
    "memra_tokenizer_eos": (c_int32, [_h]),
    "memra_tokenizer_eot": (c_int32, [_h]),
    "memra_tokenizer_free": (None, [_h]),
    "memra_tokenizer_from_gguf": (_st, [_h, _hp]),
    "memra_tokenizer_is_eog": (c_int, [_h, c_int32]),
    "memra_tokenizer_last_error": (c_char_p, [_h]),
    "memra_tokenizer_load": (_st, [c_char_p, _hp]),
    "memra_tokenizer_model": (c_char_p, [_h]),
    "memra_tokenizer_n_vocab": (c_int32, [_h]),
    "memra_tokenizer_pre": (c_char_p, [_h]),
    "memra_tokenizer_special": (c_int32, [_h, _st]),
    "memra_tokenizer_token_attr": (c_uint32, [_h, c_int32]),
    "memra_tokenizer_token_id": (c_int32, [_h, c_char_p, c_size_t]),
    "memra_tokenizer_token_score": (c_float, [_h, c_int32]),
    "memra_tokenizer_token_text": (c_char_p, [_h, c_int32]),
    "memra_type_block_bytes": (c_size_t, [_st]),
    "memra_type_block_size": (c_int64, [_st]),
    "memra_type_name": (c_char_p, [_st]),
    "memra_version": (c_char_p, []),
    "memra_version_number": (c_uint32, []),
}


class Lib:
    """The loaded library: one attribute per exported function, prototyped."""

    def __init__(self, cdll: ctypes.CDLL, path: str) -> None:
        self.cdll = cdll
        self.path = path
        missing: List[str] = []
        for name, (restype, argtypes) in PROTOTYPES.items():
            try:
                f = getattr(cdll, name)
            except AttributeError:
                missing.append(name)
                continue
            f.restype = restype
            f.argtypes = list(argtypes)
            setattr(self, name, f)
        if missing:
            raise OSError("%s lacks %d memra function(s): %s" % (path, len(missing), ", ".join(missing)))
        major = int(self.memra_version_number()) // 10000
        if major != ABI_MAJOR:
            raise OSError(
                "%s is memra %s (ABI %d); this package speaks ABI %d"
                % (path, self.memra_version().decode(), major, ABI_MAJOR)
            )
        # the log callback must stay alive as long as the library may call it
        self.log_callback: Optional[Any] = None

    def __getattr__(self, name: str) -> Any:  # only reached for names not set above
        raise AttributeError("memra: %r is not a libmemra function" % name)


_lib: Optional[Lib] = None


def load(path: Optional[str] = None) -> Lib:
    """Loads libmemra (once per process) and prototypes every function.

    PATH wins over MEMRA_LIBRARY, pkg-config and the loader. Calling it again
    after a successful load returns the loaded library (a different PATH is
    an error: one process holds one libmemra)."""
    global _lib
    if _lib is not None:
        if path is not None and _loader.same_file(path, _lib.path) is False:
            raise OSError("memra: %s is already loaded; cannot switch to %s" % (_lib.path, path))
        return _lib
    cdll, where = _loader.open_library(path)
    _lib = Lib(cdll, where)
    return _lib


def lib() -> Lib:
    """The loaded library, loading it on first use."""
    return _lib if _lib is not None else load()

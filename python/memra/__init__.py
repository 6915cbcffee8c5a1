"""memra: Python bindings of libmemra, an LLM inference engine for GGUF models.

    import memra
    with memra.Model("model.gguf") as model:
        for text in model.generate("The quick brown fox", max_tokens=32, temperature=0):
            print(text, end="", flush=True)

libmemra.so is found through $MEMRA_LIBRARY, then pkg-config, then the system
loader (memra.load_library() takes an explicit path). Every exported C
function is reachable through ``memra.capi.lib()`` with its C prototype; the
classes here wrap them. Failed calls raise MemraError subclasses carrying the
library's message.
"""

from __future__ import annotations

from typing import Optional

from . import _capi as capi
from ._arrays import HAVE_NUMPY
from ._capi import (
    FORWARD_ALL_ROWS,
    MAX_BATCH,
    MAX_PP_STAGES,
    TOKEN_ATTR_BYTE,
    TOKEN_ATTR_CONTROL,
    TOKEN_ATTR_LSTRIP,
    TOKEN_ATTR_NORMAL,
    TOKEN_ATTR_RSTRIP,
    TOKEN_ATTR_UNKNOWN,
    TOKEN_ATTR_UNUSED,
    TOKEN_ATTR_USER_DEFINED,
)
from ._chat import chat_default_params, render_chat, render_chat_alloc
from ._core import (
    Backend,
    Cache,
    Engine,
    HostBuffer,
    LayerKind,
    Model,
    Pending,
    Sampler,
    Snapshot,
    SpecialToken,
    Tokenizer,
    cache_default_params,
    engine_default_params,
    model_default_params,
    sampler_default_params,
)
from ._errors import (
    AgainError,
    BusyError,
    CacheFullError,
    DeviceError,
    FormatError,
    InputOutputError,
    InternalError,
    InvalidArgumentError,
    MemraError,
    MismatchError,
    MisuseError,
    NoDeviceError,
    NotFoundError,
    OutOfMemoryError,
    RangeError,
    Status,
    TypeMismatchError,
    UnsupportedError,
    last_error,
    status_name,
    strerror,
)
from ._gguf import Gguf, GgufType, GgufWriter, TensorType, gguf_type_name, type_block_bytes, type_block_size, type_name
from ._misc import (
    LogLevel,
    check_argmax_margin,
    check_kernels,
    check_pipeline_parity,
    cuda_device_count,
    free,
    host_free,
    kernel_check_default_params,
    log_stderr,
    log_to_stderr,
    margin_default_params,
    margin_verdict_name,
    pp_parity_default_params,
    set_logger,
    version,
    version_number,
)

__version__ = "0.1.0"


def load_library(path: Optional[str] = None) -> str:
    """Loads libmemra now (PATH, else $MEMRA_LIBRARY, pkg-config, the loader)
    and returns where it came from. Other calls load it on first use."""
    return capi.load(path).path


__all__ = [
    "chat_default_params",
    "render_chat",
    "render_chat_alloc",
    "AgainError",
    "Backend",
    "BusyError",
    "Cache",
    "CacheFullError",
    "DeviceError",
    "Engine",
    "FORWARD_ALL_ROWS",
    "MAX_BATCH",
    "FormatError",
    "Gguf",
    "GgufType",
    "GgufWriter",
    "HAVE_NUMPY",
    "HostBuffer",
    "InputOutputError",
    "InternalError",
    "InvalidArgumentError",
    "LayerKind",
    "LogLevel",
    "MAX_PP_STAGES",
    "MemraError",
    "MismatchError",
    "MisuseError",
    "Model",
    "NoDeviceError",
    "NotFoundError",
    "OutOfMemoryError",
    "Pending",
    "RangeError",
    "Sampler",
    "Snapshot",
    "SpecialToken",
    "Status",
    "TOKEN_ATTR_BYTE",
    "TOKEN_ATTR_CONTROL",
    "TOKEN_ATTR_LSTRIP",
    "TOKEN_ATTR_NORMAL",
    "TOKEN_ATTR_RSTRIP",
    "TOKEN_ATTR_UNKNOWN",
    "TOKEN_ATTR_UNUSED",
    "TOKEN_ATTR_USER_DEFINED",
    "TensorType",
    "Tokenizer",
    "TypeMismatchError",
    "UnsupportedError",
    "capi",
    "check_argmax_margin",
    "check_kernels",
    "check_pipeline_parity",
    "cuda_device_count",
    "engine_default_params",
    "free",
    "gguf_type_name",
    "host_free",
    "kernel_check_default_params",
    "last_error",
    "load_library",
    "log_stderr",
    "log_to_stderr",
    "margin_default_params",
    "margin_verdict_name",
    "model_default_params",
    "cache_default_params",
    "pp_parity_default_params",
    "sampler_default_params",
    "set_logger",
    "status_name",
    "strerror",
    "type_block_bytes",
    "type_block_size",
    "type_name",
    "version",
    "version_number",
]

"""Process-wide functions: version, logging, device count, memory, and the
exported checks (memra_check_*)."""

from __future__ import annotations

import ctypes
import enum
from typing import Any, Callable, Optional, Sequence

from . import _arrays, _capi
from ._capi import lib
from ._core import PathLike, _path
from ._errors import Status, check, error


class LogLevel(enum.IntEnum):
    """memra_log_level_t."""

    DEBUG = 0
    INFO = 1
    WARN = 2
    ERROR = 3


def version() -> str:
    """memra_version of the loaded library, e.g. "0.1.0"."""
    return str(lib().memra_version().decode())


def version_number() -> int:
    """memra_version_number: MAJOR*10000 + MINOR*100 + PATCH."""
    return int(lib().memra_version_number())


def cuda_device_count() -> int:
    """memra_cuda_device_count: CUDA devices usable by this build (0 without CUDA)."""
    return int(lib().memra_cuda_device_count())


def free(address: Optional[int]) -> None:
    """memra_free: frees memory the library handed out (e.g. a raw
    memra_gguf_writer_write_memory buffer). NULL/None is a no-op."""
    lib().memra_free(address)


def host_free(address: Optional[int]) -> None:
    """memra_host_free: frees raw memra_engine_host_alloc memory (HostBuffer does this itself)."""
    lib().memra_host_free(address)


LogFn = Callable[[LogLevel, str], None]


def set_logger(fn: Optional[LogFn], min_level: int = LogLevel.WARN) -> None:
    """memra_log_set: FN(level, text) receives the library's log lines of
    MIN_LEVEL and above (None = silent, the default). Call it before other calls."""
    L = lib()
    if fn is None:
        L.memra_log_set(_capi.LOG_FN(), None, int(min_level))
        L.log_callback = None
        return

    user_fn = fn

    def _log(level: int, text: bytes, _user: Any) -> None:
        try:
            user_fn(LogLevel(level), text.decode(errors="replace") if text else "")
        except Exception:
            pass  # a logger must not unwind through C

    cb = _capi.LOG_FN(_log)
    L.memra_log_set(cb, None, int(min_level))
    L.log_callback = cb


def log_to_stderr(min_level: int = LogLevel.WARN) -> None:
    """memra_log_set with memra_log_stderr: "memra: LEVEL: text" lines on stderr."""
    L = lib()
    cb = _capi.LOG_FN(("memra_log_stderr", L.cdll))
    L.memra_log_set(cb, None, int(min_level))
    L.log_callback = cb


def log_stderr(level: int, text: str) -> None:
    """memra_log_stderr called directly: writes one "memra: LEVEL: text" line."""
    lib().memra_log_stderr(int(level), text.encode(), None)


# ---- checks -----------------------------------------------------------------------


def kernel_check_default_params() -> _capi.KernelCheckParams:
    """memra_kernel_check_default_params."""
    p = _capi.KernelCheckParams()
    lib().memra_kernel_check_params_init(ctypes.byref(p), ctypes.sizeof(p))
    return p


def pp_parity_default_params() -> _capi.PpParityParams:
    """memra_pp_parity_default_params."""
    p = _capi.PpParityParams()
    lib().memra_pp_parity_params_init(ctypes.byref(p), ctypes.sizeof(p))
    return p


def margin_default_params() -> _capi.MarginParams:
    """memra_margin_default_params."""
    p = _capi.MarginParams()
    lib().memra_margin_params_init(ctypes.byref(p), ctypes.sizeof(p))
    return p


def margin_verdict_name(verdict: int) -> str:
    """memra_margin_verdict_name."""
    return str(lib().memra_margin_verdict_name(verdict).decode())


def check_kernels(params: Optional[_capi.KernelCheckParams] = None) -> _capi.KernelCheckReport:
    """memra_check_kernels: CUDA ops vs the CPU reference. Returns the report
    (report.all_green, report.lines[:report.n_lines]) when the check ran, a
    mismatch included; raises for other errors (NoDeviceError without CUDA)."""
    p = params if params is not None else kernel_check_default_params()
    report = _capi.KernelCheckReport()
    report.size = ctypes.sizeof(report)
    st = int(lib().memra_check_kernels(ctypes.byref(p), ctypes.byref(report)))
    if st not in (0, Status.E_MISMATCH):
        raise error(st, None, "memra_check_kernels")
    return report


def check_pipeline_parity(path: PathLike, params: Optional[_capi.PpParityParams] = None) -> _capi.PpParityReport:
    """memra_check_pipeline_parity: the report (report.pass_) when the check ran."""
    p = params if params is not None else pp_parity_default_params()
    report = _capi.PpParityReport()
    report.size = ctypes.sizeof(report)
    st = int(lib().memra_check_pipeline_parity(_path(path), ctypes.byref(p), ctypes.byref(report)))
    if st not in (0, Status.E_MISMATCH):
        raise error(st, None, "memra_check_pipeline_parity")
    return report


def check_argmax_margin(
    path: PathLike, prompt: Sequence[int], window: int = 32, params: Optional[_capi.MarginParams] = None
) -> _capi.MarginReport:
    """memra_check_argmax_margin over the tokens of PROMPT: the report
    (report.verdict, margin_verdict_name(report.verdict), report.rows)."""
    p = params if params is not None else margin_default_params()
    ids = _arrays.int32s(prompt)
    report = _capi.MarginReport()
    report.size = ctypes.sizeof(report)
    check(
        lib().memra_check_argmax_margin(_path(path), ids, len(prompt), window, ctypes.byref(p), ctypes.byref(report)),
        "memra_check_argmax_margin",
    )
    return report

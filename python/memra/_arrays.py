"""Float and int buffers for ctypes calls: numpy arrays when numpy is
importable, else array.array (rows of all-row logits as a list of them)."""

from __future__ import annotations

import array
import ctypes
from typing import Any, List, Optional, Sequence, Tuple

_np: Any
try:  # numpy is optional
    import numpy

    _np = numpy
    HAVE_NUMPY = True
except ImportError:  # pragma: no cover - depends on the machine
    _np = None
    HAVE_NUMPY = False

_FP = ctypes.POINTER(ctypes.c_float)
INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1


def new_floats(n: int) -> Tuple[Any, Any]:
    """A fresh float32 buffer of N elements and a float* to it."""
    if _np is not None:
        a = _np.empty(n, dtype=_np.float32)
        return a, a.ctypes.data_as(_FP)
    b = array.array("f", bytes(4 * n))
    return b, ctypes.cast(b.buffer_info()[0], _FP)


def _is_f32(mv: memoryview) -> bool:
    # "f", or "<f"/"=f" as ctypes and numpy views spell native float32 (a little-endian host)
    return mv.format.lstrip("@=<") == "f" and mv.itemsize == 4


def out_floats(out: Any, n: int) -> Any:
    """A float* into the caller's writable float32 buffer OUT of at least N
    elements, and the ctypes object that must stay alive during the call."""
    mv = memoryview(out)
    if not _is_f32(mv) or not mv.c_contiguous or mv.readonly:
        raise TypeError("memra: out must be a writable C-contiguous float32 buffer (format 'f')")
    if mv.nbytes < 4 * n:
        raise ValueError("memra: out holds %d floats, %d needed" % (mv.nbytes // 4, n))
    arr = (ctypes.c_float * (mv.nbytes // 4)).from_buffer(mv.cast("B"))
    return ctypes.cast(arr, _FP), arr


def in_floats(values: Any) -> Tuple[Any, int, Any]:
    """A float* to VALUES (any float32 buffer without a copy, else converted),
    its element count, and the object that keeps the memory alive."""
    try:
        mv = memoryview(values)
    except TypeError:
        mv = None
    if mv is not None and _is_f32(mv) and mv.c_contiguous:
        n = mv.nbytes // 4
        raw = mv.cast("B")
        if mv.readonly:
            arr = (ctypes.c_float * n).from_buffer_copy(raw)
        else:
            arr = (ctypes.c_float * n).from_buffer(raw)
        return ctypes.cast(arr, _FP), n, arr
    if _np is not None and isinstance(values, _np.ndarray):
        a = _np.ascontiguousarray(values, dtype=_np.float32).reshape(-1)
        return a.ctypes.data_as(_FP), int(a.size), a
    seq = [float(v) for v in values]
    arr = (ctypes.c_float * len(seq))(*seq)
    return ctypes.cast(arr, _FP), len(seq), arr


def int32s(values: Sequence[int], what: str = "token") -> Any:
    """A ctypes int32 array of VALUES (each checked to fit int32)."""
    vals = [int(v) for v in values]
    for v in vals:
        if v < INT32_MIN or v > INT32_MAX:
            from ._errors import RangeError, Status

            raise RangeError(Status.E_RANGE, "memra: %s %d does not fit int32" % (what, v))
    return (ctypes.c_int32 * max(len(vals), 1))(*vals)


def rows(flat: Any, n_rows: int, n_cols: int) -> Any:
    """FLAT (n_rows * n_cols floats) as rows: a 2-D numpy array, or a list of array.array."""
    if _np is not None and isinstance(flat, _np.ndarray):
        return flat.reshape(n_rows, n_cols)
    out: List[Any] = [flat[i * n_cols : (i + 1) * n_cols] for i in range(n_rows)]
    return out


def floats_at(address: int, n: int, owner: Optional[Any] = None) -> Any:
    """N float32 values at ADDRESS without a copy: numpy view, else a ctypes array."""
    carr = (ctypes.c_float * n).from_address(address)
    if _np is not None:
        view = _np.ctypeslib.as_array(carr)
        return view
    return carr

"""GGUF files: the reader (Gguf), the writer (GgufWriter) and the type tables."""

from __future__ import annotations

import ctypes
import enum
import os
import struct
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from . import _capi
from ._capi import lib
from ._core import PathLike, _Handle, _path, _s
from ._errors import NotFoundError, Status, check, error


class TensorType(enum.IntEnum):
    """memra_type_t: ggml tensor type ids."""

    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q4_1 = 3
    Q5_0 = 6
    Q5_1 = 7
    Q8_0 = 8
    Q8_1 = 9
    Q2_K = 10
    Q3_K = 11
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14
    Q8_K = 15
    IQ2_XXS = 16
    IQ2_XS = 17
    IQ3_XXS = 18
    IQ1_S = 19
    IQ4_NL = 20
    IQ3_S = 21
    IQ2_S = 22
    IQ4_XS = 23
    I8 = 24
    I16 = 25
    I32 = 26
    I64 = 27
    F64 = 28
    IQ1_M = 29
    BF16 = 30
    TQ1_0 = 34
    TQ2_0 = 35
    MXFP4 = 39
    NVFP4 = 40
    Q1_0 = 41


class GgufType(enum.IntEnum):
    """memra_gguf_type_t: metadata value types."""

    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


# struct formats of the numeric value types (little-endian, as GGUF stores them)
_FORMATS: Dict[int, str] = {
    GgufType.UINT8: "B",
    GgufType.INT8: "b",
    GgufType.UINT16: "H",
    GgufType.INT16: "h",
    GgufType.UINT32: "I",
    GgufType.INT32: "i",
    GgufType.FLOAT32: "f",
    GgufType.BOOL: "?",
    GgufType.UINT64: "Q",
    GgufType.INT64: "q",
    GgufType.FLOAT64: "d",
}
_UNSIGNED = {GgufType.UINT8, GgufType.UINT16, GgufType.UINT32, GgufType.UINT64}
_FLOATS = {GgufType.FLOAT32, GgufType.FLOAT64}


def type_name(t: int) -> Optional[str]:
    """memra_type_name: "Q8_0", "F32", ...; None for ids that name no type."""
    n = lib().memra_type_name(int(t))
    return n.decode() if n is not None else None


def type_block_size(t: int) -> int:
    """memra_type_block_size: elements per block (0 for ids that name no type)."""
    return int(lib().memra_type_block_size(int(t)))


def type_block_bytes(t: int) -> int:
    """memra_type_block_bytes: bytes per block (0 for ids that name no type)."""
    return int(lib().memra_type_block_bytes(int(t)))


def gguf_type_name(t: int) -> Optional[str]:
    """memra_gguf_type_name: "UINT32", "STRING", ...; None if out of range."""
    n = lib().memra_gguf_type_name(int(t))
    return n.decode() if n is not None else None


GgufValue = Union[int, float, bool, str, List[Any]]


class Gguf(_Handle):
    """memra_gguf_t: a validated, mapped GGUF file (split files open as one).
    ``gguf["general.architecture"]`` reads a value; ``keys()`` lists them."""

    _kind = "gguf"

    def __init__(self, path: Optional[PathLike] = None) -> None:
        super().__init__()
        self._data: Any = None
        if path is not None:
            h = ctypes.c_void_p()
            check(lib().memra_gguf_open(_path(path), ctypes.byref(h)), "memra_gguf_open")
            self._ptr = h.value

    @classmethod
    def from_memory(cls, data: bytes) -> "Gguf":
        """memra_gguf_open_memory (a private copy of DATA lives with the handle)."""
        g = cls()
        buf = ctypes.create_string_buffer(bytes(data), len(data))
        h = ctypes.c_void_p()
        check(lib().memra_gguf_open_memory(buf, len(data), ctypes.byref(h)), "memra_gguf_open_memory")
        g._data = buf
        g._ptr = h.value
        return g

    @classmethod
    def _borrow(cls, ptr: int, owner: _Handle) -> "Gguf":
        g = cls()
        g._ptr = ptr
        g._owner = owner
        return g

    def _release(self, ptr: int) -> int:
        lib().memra_gguf_close(ptr)
        return 0

    @property
    def version(self) -> int:
        return int(lib().memra_gguf_version(self.handle))

    @property
    def alignment(self) -> int:
        return int(lib().memra_gguf_alignment(self.handle))

    @property
    def n_shards(self) -> int:
        return int(lib().memra_gguf_n_shards(self.handle))

    # keys
    @property
    def n_kv(self) -> int:
        return int(lib().memra_gguf_n_kv(self.handle))

    def find_kv(self, key: str) -> int:
        """memra_gguf_find_kv: index of KEY, -1 when absent."""
        return int(lib().memra_gguf_find_kv(self.handle, key.encode()))

    def kv_key(self, i: int) -> str:
        return _s(lib().memra_gguf_kv_key(self.handle, i))

    def kv_type(self, i: int) -> GgufType:
        return GgufType(int(lib().memra_gguf_kv_type(self.handle, i)))

    def _scalar(self, func: str, ctype: Any, i: int) -> Any:
        out = ctype()
        check(getattr(lib(), func)(self.handle, i, ctypes.byref(out)), func)
        return out.value

    def kv_u64(self, i: int) -> int:
        return int(self._scalar("memra_gguf_kv_u64", ctypes.c_uint64, i))

    def kv_i64(self, i: int) -> int:
        return int(self._scalar("memra_gguf_kv_i64", ctypes.c_int64, i))

    def kv_f64(self, i: int) -> float:
        return float(self._scalar("memra_gguf_kv_f64", ctypes.c_double, i))

    def kv_bool(self, i: int) -> bool:
        return bool(self._scalar("memra_gguf_kv_bool", ctypes.c_int, i))

    def kv_bytes(self, i: int) -> bytes:
        """memra_gguf_kv_str as the stored bytes."""
        p, n = ctypes.c_void_p(), ctypes.c_size_t(0)
        check(lib().memra_gguf_kv_str(self.handle, i, ctypes.byref(p), ctypes.byref(n)), "memra_gguf_kv_str")
        return ctypes.string_at(p.value, n.value) if p.value else b""

    def kv_str(self, i: int) -> str:
        return self.kv_bytes(i).decode(errors="replace")

    # arrays
    def arr_type(self, i: int) -> GgufType:
        return GgufType(int(lib().memra_gguf_arr_type(self.handle, i)))

    def arr_n(self, i: int) -> int:
        return int(lib().memra_gguf_arr_n(self.handle, i))

    def _elem(self, func: str, ctype: Any, i: int, j: int) -> Any:
        out = ctype()
        check(getattr(lib(), func)(self.handle, i, j, ctypes.byref(out)), func)
        return out.value

    def arr_u64(self, i: int, j: int) -> int:
        return int(self._elem("memra_gguf_arr_u64", ctypes.c_uint64, i, j))

    def arr_i64(self, i: int, j: int) -> int:
        return int(self._elem("memra_gguf_arr_i64", ctypes.c_int64, i, j))

    def arr_f64(self, i: int, j: int) -> float:
        return float(self._elem("memra_gguf_arr_f64", ctypes.c_double, i, j))

    def arr_bytes(self, i: int, j: int) -> bytes:
        """memra_gguf_arr_str: element J of string array I, as bytes."""
        p, n = ctypes.c_void_p(), ctypes.c_size_t(0)
        check(
            lib().memra_gguf_arr_str(self.handle, i, j, ctypes.byref(p), ctypes.byref(n)), "memra_gguf_arr_str"
        )
        return ctypes.string_at(p.value, n.value) if p.value else b""

    def arr_str(self, i: int, j: int) -> str:
        return self.arr_bytes(i, j).decode(errors="replace")

    def arr_data(self, i: int) -> bytes:
        """memra_gguf_arr_data: the raw little-endian bytes of numeric array I (a copy)."""
        p = lib().memra_gguf_arr_data(self.handle, i)
        if not p:
            raise error(Status.E_TYPE, "memra_gguf_arr_data: key %d is not a numeric array" % i, "memra_gguf_arr_data")
        size = struct.calcsize("<" + _FORMATS[self.arr_type(i)])
        return ctypes.string_at(p, size * self.arr_n(i))

    def value(self, key: Union[str, int]) -> GgufValue:
        """The value of KEY (name or index) as a Python value; arrays as lists."""
        i = key if isinstance(key, int) else self.find_kv(key)
        if i < 0:
            raise NotFoundError(Status.E_NOT_FOUND, "memra: no key %r" % key)
        t = self.kv_type(i)
        if t == GgufType.STRING:
            return self.kv_str(i)
        if t == GgufType.BOOL:
            return self.kv_bool(i)
        if t in _FLOATS:
            return self.kv_f64(i)
        if t == GgufType.ARRAY:
            et, n = self.arr_type(i), self.arr_n(i)
            if et == GgufType.STRING:
                return [self.arr_str(i, j) for j in range(n)]
            fmt = _FORMATS[et]
            return list(struct.unpack("<%d%s" % (n, fmt), self.arr_data(i)))
        return self.kv_u64(i) if t in _UNSIGNED else self.kv_i64(i)

    def __getitem__(self, key: Union[str, int]) -> GgufValue:
        return self.value(key)

    def __contains__(self, key: str) -> bool:
        return self.find_kv(key) >= 0

    def keys(self) -> List[str]:
        return [self.kv_key(i) for i in range(self.n_kv)]

    # tensors
    @property
    def n_tensors(self) -> int:
        return int(lib().memra_gguf_n_tensors(self.handle))

    def find_tensor(self, name: str) -> int:
        """memra_gguf_find_tensor: index of NAME, -1 when absent."""
        return int(lib().memra_gguf_find_tensor(self.handle, name.encode()))

    def tensor_name(self, i: int) -> str:
        return _s(lib().memra_gguf_tensor_name(self.handle, i))

    def tensor_type(self, i: int) -> int:
        """memra_gguf_tensor_type (a TensorType value)."""
        return int(lib().memra_gguf_tensor_type(self.handle, i))

    def tensor_shape(self, i: int) -> Tuple[int, ...]:
        """memra_gguf_tensor_shape: the stored dims (ne[0] first)."""
        ne = (ctypes.c_int64 * 4)()
        n = int(lib().memra_gguf_tensor_shape(self.handle, i, ne))
        return tuple(ne[:n])

    def tensor_offset(self, i: int) -> int:
        return int(lib().memra_gguf_tensor_offset(self.handle, i))

    def tensor_nbytes(self, i: int) -> int:
        return int(lib().memra_gguf_tensor_nbytes(self.handle, i))

    def tensor_shard(self, i: int) -> int:
        return int(lib().memra_gguf_tensor_shard(self.handle, i))

    def tensor_data(self, i: int) -> memoryview:
        """memra_gguf_tensor_data: a read-only view into the mapping, valid
        until the handle closes (copy it with bytes() to keep it longer)."""
        p = lib().memra_gguf_tensor_data(self.handle, i)
        if not p:
            raise error(Status.E_RANGE, "memra_gguf_tensor_data: no tensor %d" % i, "memra_gguf_tensor_data")
        arr = (ctypes.c_char * self.tensor_nbytes(i)).from_address(p)
        return memoryview(arr).cast("B").toreadonly()

    def tensors(self) -> Iterator[Tuple[str, int, Tuple[int, ...]]]:
        """(name, type, shape) of every tensor."""
        for i in range(self.n_tensors):
            yield self.tensor_name(i), self.tensor_type(i), self.tensor_shape(i)


FillFn = Callable[[int, str, memoryview], None]


class GgufWriter(_Handle):
    """memra_gguf_writer_t: collects keys and tensors, then writes one file."""

    _kind = "gguf writer"

    def __init__(self) -> None:
        super().__init__()
        self._keep: List[Any] = []  # tensor data borrowed until the write, callbacks
        h = ctypes.c_void_p()
        check(lib().memra_gguf_writer_create(ctypes.byref(h)), "memra_gguf_writer_create")
        self._ptr = h.value

    def _release(self, ptr: int) -> int:
        lib().memra_gguf_writer_destroy(ptr)
        self._keep = []
        return 0

    def set_version(self, version: int) -> None:
        check(lib().memra_gguf_writer_set_version(self.handle, version), "memra_gguf_writer_set_version")

    def set_alignment(self, alignment: int) -> None:
        check(lib().memra_gguf_writer_set_alignment(self.handle, alignment), "memra_gguf_writer_set_alignment")

    def set_fill(self, fn: Optional[FillFn]) -> None:
        """memra_gguf_writer_set_fill: FN(index, name, dst) fills the bytes of a
        tensor added without data (an exception aborts the write with MEMRA_E_INVALID)."""
        if fn is None:
            lib().memra_gguf_writer_set_fill(self.handle, _capi.GGUF_FILL_FN(), None)
            return

        user_fn = fn

        def _fill(_user: Any, index: int, name: bytes, dst: int, nbytes: int) -> int:
            try:
                view = memoryview((ctypes.c_char * nbytes).from_address(dst)).cast("B")
                user_fn(index, _s(name), view)
                return 0
            except Exception:
                return int(Status.E_INVALID)

        cb = _capi.GGUF_FILL_FN(_fill)
        self._keep.append(cb)
        lib().memra_gguf_writer_set_fill(self.handle, cb, None)

    def add_scalar(self, key: str, type: int, value: Union[int, float, bool]) -> None:
        """memra_gguf_writer_add_scalar: VALUE packed as numeric TYPE (a GgufType)."""
        fmt = _FORMATS.get(int(type))
        if fmt is None:
            raise error(Status.E_INVALID, "gguf writer: key '%s': not a scalar type (%d)" % (key, type))
        data = ctypes.create_string_buffer(struct.pack("<" + fmt, value), 8)
        check(lib().memra_gguf_writer_add_scalar(self.handle, key.encode(), int(type), data),
              "memra_gguf_writer_add_scalar")

    def add_u32(self, key: str, v: int) -> None:
        check(lib().memra_gguf_writer_add_u32(self.handle, key.encode(), v), "memra_gguf_writer_add_u32")

    def add_i32(self, key: str, v: int) -> None:
        check(lib().memra_gguf_writer_add_i32(self.handle, key.encode(), v), "memra_gguf_writer_add_i32")

    def add_f32(self, key: str, v: float) -> None:
        check(lib().memra_gguf_writer_add_f32(self.handle, key.encode(), v), "memra_gguf_writer_add_f32")

    def add_bool(self, key: str, v: bool) -> None:
        check(lib().memra_gguf_writer_add_bool(self.handle, key.encode(), int(bool(v))), "memra_gguf_writer_add_bool")

    def add_str(self, key: str, v: Union[str, bytes]) -> None:
        data = v.encode() if isinstance(v, str) else bytes(v)
        check(lib().memra_gguf_writer_add_str(self.handle, key.encode(), data), "memra_gguf_writer_add_str")

    def add_array(self, key: str, elem_type: int, values: Union[bytes, Sequence[Union[int, float, bool]]]) -> None:
        """memra_gguf_writer_add_array: numeric VALUES (a sequence, or packed little-endian bytes)."""
        fmt = _FORMATS.get(int(elem_type))
        if fmt is None:
            raise error(Status.E_INVALID, "gguf writer: key '%s': not a numeric element type (%d)" % (key, elem_type))
        size = struct.calcsize("<" + fmt)
        if isinstance(values, (bytes, bytearray, memoryview)):
            raw = bytes(values)
        else:
            raw = struct.pack("<%d%s" % (len(values), fmt), *values)
        if len(raw) % size:
            raise error(Status.E_INVALID, "gguf writer: key '%s': %d bytes is not whole elements" % (key, len(raw)))
        buf = ctypes.create_string_buffer(raw, max(len(raw), 1))
        check(
            lib().memra_gguf_writer_add_array(self.handle, key.encode(), int(elem_type), buf, len(raw) // size),
            "memra_gguf_writer_add_array",
        )

    def add_str_array(self, key: str, strs: Sequence[Union[str, bytes]]) -> None:
        """memra_gguf_writer_add_str_array (strings may hold NUL bytes)."""
        data = [s.encode() if isinstance(s, str) else bytes(s) for s in strs]
        n = len(data)
        ptrs = (ctypes.c_char_p * max(n, 1))(*data)
        lens = (ctypes.c_size_t * max(n, 1))(*[len(d) for d in data])
        check(
            lib().memra_gguf_writer_add_str_array(self.handle, key.encode(), ptrs, lens, n),
            "memra_gguf_writer_add_str_array",
        )

    def add_tensor(self, name: str, type: int, shape: Sequence[int], data: Any = None) -> None:
        """memra_gguf_writer_add_tensor: SHAPE is ne[0..n_dims); DATA any buffer of
        the tensor's bytes (kept until the write), or None for the fill callback."""
        ne = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        ptr: Any = None
        if data is not None:
            raw = bytes(memoryview(data).cast("B"))
            buf = ctypes.create_string_buffer(raw, max(len(raw), 1))
            self._keep.append(buf)
            ptr = buf
        check(
            lib().memra_gguf_writer_add_tensor(self.handle, name.encode(), int(type), len(shape), ne, ptr),
            "memra_gguf_writer_add_tensor",
        )

    def write(self, path: PathLike) -> None:
        """memra_gguf_writer_write."""
        check(lib().memra_gguf_writer_write(self.handle, _path(path)), "memra_gguf_writer_write")

    def write_memory(self) -> bytes:
        """memra_gguf_writer_write_memory: the file image (the library buffer is freed with memra_free)."""
        p, n = ctypes.c_void_p(), ctypes.c_size_t(0)
        check(lib().memra_gguf_writer_write_memory(self.handle, ctypes.byref(p), ctypes.byref(n)),
              "memra_gguf_writer_write_memory")
        try:
            return ctypes.string_at(p.value, n.value) if p.value else b""
        finally:
            lib().memra_free(p)

"""The GGUF reader and writer."""

from __future__ import annotations

import os
import struct

import pytest

import memra
from memra import GgufType, TensorType


def test_read_default_model(model_path: str, lib_path: str) -> None:
    with memra.Gguf(model_path) as g:
        assert g.version == 3 and g.alignment > 0 and g.n_shards == 1
        assert "general.architecture" in g and "no.such.key" not in g
        i = g.find_kv("general.architecture")
        assert g.kv_key(i) == "general.architecture" and g.kv_type(i) == GgufType.STRING
        assert g.kv_str(i) == "qwen3"
        keys = g.keys()
        assert len(keys) == g.n_kv
        tokens = g["tokenizer.ggml.tokens"]
        assert isinstance(tokens, list) and len(tokens) > 100
        j = g.find_kv("tokenizer.ggml.tokens")
        assert g.arr_type(j) == GgufType.STRING and g.arr_n(j) == len(tokens)
        assert g.arr_str(j, 0) == tokens[0]
        assert g.n_tensors > 0
        names = [n for n, _, _ in g.tensors()]
        t = g.find_tensor(names[0])
        assert t == 0 and g.find_tensor("no.such.tensor") == -1
        shape = g.tensor_shape(t)
        assert 1 <= len(shape) <= 4
        assert len(g.tensor_data(t)) == g.tensor_nbytes(t)
        assert g.tensor_offset(t) >= 0 and g.tensor_shard(t) == 0
        assert memra.type_name(g.tensor_type(t)) is not None
        with pytest.raises(memra.TypeMismatchError):
            g.kv_u64(i)  # a string


def test_write_and_read_back(lib_path: str, tmp_path: "os.PathLike[str]") -> None:
    data = struct.pack("<6f", 1, 2, 3, 4, 5, 6)
    with memra.GgufWriter() as w:
        w.add_str("general.name", "tiny")
        w.add_u32("a.u32", 7)
        w.add_i32("a.i32", -7)
        w.add_f32("a.f32", 0.5)
        w.add_bool("a.bool", True)
        w.add_scalar("a.u64", GgufType.UINT64, 2**40)
        w.add_scalar("a.f64", GgufType.FLOAT64, 0.25)
        w.add_array("a.arr", GgufType.INT32, [1, -2, 3])
        w.add_array("a.raw", GgufType.UINT8, b"\x01\x02")
        w.add_array("a.f32s", GgufType.FLOAT32, [0.5, 1.5])
        w.add_str_array("a.strs", ["x", "y\x00z", "ü"])
        w.add_tensor("t.data", TensorType.F32, [3, 2], data)
        w.add_tensor("t.fill", TensorType.F32, [4], None)
        w.set_fill(lambda index, name, dst: dst.__setitem__(slice(None), struct.pack("<4f", 9, 9, 9, index)))
        image = w.write_memory()
        path = os.path.join(str(tmp_path), "tiny.gguf")
        w.write(path)
    with open(path, "rb") as f:
        assert f.read() == image
    with memra.Gguf.from_memory(image) as g:
        assert g["general.name"] == "tiny"
        assert (g["a.u32"], g["a.i32"], g["a.f32"], g["a.bool"]) == (7, -7, 0.5, True)
        assert (g["a.u64"], g["a.f64"]) == (2**40, 0.25)
        assert g["a.arr"] == [1, -2, 3] and g["a.raw"] == [1, 2]
        assert g.arr_i64(g.find_kv("a.arr"), 1) == -2
        assert g.arr_u64(g.find_kv("a.raw"), 1) == 2
        assert g.arr_f64(g.find_kv("a.f32s"), 1) == 1.5 and g["a.f32s"] == [0.5, 1.5]
        with pytest.raises(memra.TypeMismatchError):
            g.arr_f64(g.find_kv("a.arr"), 0)
        assert g.kv_i64(g.find_kv("a.i32")) == -7 and g.kv_f64(g.find_kv("a.f32")) == 0.5
        assert g["a.strs"] == ["x", "y\x00z", "ü"]
        t = g.find_tensor("t.data")
        assert g.tensor_shape(t) == (3, 2) and bytes(g.tensor_data(t)) == data
        f = g.find_tensor("t.fill")
        assert struct.unpack("<4f", bytes(g.tensor_data(f))) == (9, 9, 9, 1)


def test_writer_errors(lib_path: str) -> None:
    with memra.GgufWriter() as w:
        w.set_version(2)
        w.set_alignment(64)
        with pytest.raises(memra.InvalidArgumentError):
            w.add_scalar("k", GgufType.STRING, 1)
        w.add_tensor("t", TensorType.F32, [2], None)
        w.set_fill(lambda index, name, dst: dst.__setitem__(0, 1 // 0))
        with pytest.raises(memra.MemraError) as ei:
            w.write_memory()
        assert "t" in ei.value.message
    with pytest.raises(memra.FormatError) as ei2:
        memra.Gguf.from_memory(b"GGUF" + b"\x00" * 20)
    assert ei2.value.message

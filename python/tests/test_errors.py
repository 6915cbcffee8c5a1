"""Failures raise MemraError subclasses carrying the library's own message."""

from __future__ import annotations

import os

import pytest

import memra


def test_bad_path(lib_path: str, tmp_path: "os.PathLike[str]") -> None:
    path = os.path.join(str(tmp_path), "missing.gguf")
    with pytest.raises(memra.InputOutputError) as ei:
        memra.Model(path)
    e = ei.value
    assert e.status == memra.Status.E_IO and e.func == "memra_model_load"
    assert path in e.message and e.message == memra.last_error()
    assert e.message in str(e) and "E_IO" in str(e)
    assert isinstance(e, OSError) and isinstance(e, memra.MemraError)


def test_not_a_gguf(lib_path: str, tmp_path: "os.PathLike[str]") -> None:
    path = os.path.join(str(tmp_path), "junk.gguf")
    with open(path, "wb") as f:
        f.write(b"not a gguf file at all" * 10)
    with pytest.raises(memra.FormatError) as ei:
        memra.Model(path)
    assert ei.value.message == memra.last_error() and ei.value.message


def test_token_out_of_range(model: memra.Model) -> None:
    with model.cache() as c:
        with pytest.raises(memra.RangeError) as ei:
            model.forward(c, [model.n_vocab])
        assert str(model.n_vocab) in ei.value.message and ei.value.message == model.last_error
        assert c.pos == 0  # unchanged
        with pytest.raises(memra.RangeError):
            model.decode(c, -1)
        with pytest.raises(memra.RangeError):
            model.forward(c, [2**40])  # does not fit int32
    with pytest.raises(memra.RangeError) as ei:
        model.detokenize([model.n_vocab + 5])
    assert str(model.n_vocab + 5) in ei.value.message


def test_cache_full(model: memra.Model) -> None:
    with model.cache(4) as c:
        with pytest.raises(memra.CacheFullError) as ei:
            model.forward(c, list(range(5)))
        assert "capacity 4" in ei.value.message


def test_invalid_arguments(lib_path: str, model: memra.Model) -> None:
    with pytest.raises(memra.InvalidArgumentError) as ei:
        memra.Sampler(top_p=2.0)
    assert "top_p" in ei.value.message and isinstance(ei.value, ValueError)
    with pytest.raises(memra.InvalidArgumentError):
        memra.Engine("tpu")
    with pytest.raises(memra.InvalidArgumentError):
        model.cache(-1)
    with pytest.raises(memra.InvalidArgumentError):
        list(model.generate([], max_tokens=2))


def test_no_device(lib_path: str) -> None:
    if memra.cuda_device_count() > 0:
        pytest.skip("a CUDA device is present")
    with pytest.raises(memra.NoDeviceError) as ei:
        memra.Engine("cuda:0")
    assert ei.value.message


def test_invalid_utf8(model: memra.Model) -> None:
    with pytest.raises(memra.InvalidArgumentError) as ei:
        model.tokenize(b"ok \xff\xfe bad")
    assert ei.value.message


def test_status_texts(lib_path: str) -> None:
    assert memra.strerror(memra.Status.E_FULL) == "cache is full"
    assert memra.status_name(memra.Status.E_FORMAT) == "E_FORMAT"
    for st in memra.Status:
        assert memra.status_name(st) == st.name
    e = memra.MemraError(-999, "")
    assert e.status == -999


def test_logger_receives_failures(lib_path: str, tmp_path: "os.PathLike[str]") -> None:
    lines = []
    memra.set_logger(lambda level, text: lines.append((level, text)), memra.LogLevel.DEBUG)
    try:
        with pytest.raises(memra.MemraError):
            memra.Model(os.path.join(str(tmp_path), "nope.gguf"))
    finally:
        memra.set_logger(None)
    assert any("nope.gguf" in text for _, text in lines)
    assert all(isinstance(level, memra.LogLevel) for level, _ in lines)
    memra.log_stderr(memra.LogLevel.INFO, "log_stderr from the Python tests")

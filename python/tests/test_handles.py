"""Context managers and close() free handles; the library's lifetime rules hold."""

from __future__ import annotations

import gc

import pytest

import memra


def test_context_managers_close(model_path: str, lib_path: str) -> None:
    with memra.Model(model_path) as m:
        with m.cache(32) as c, memra.Sampler() as s:
            assert not c.closed and not s.closed
            with c.snapshot() as snap:
                assert not snap.closed
            assert snap.closed
        assert c.closed and s.closed
        tok = m.tokenizer
        assert not tok.closed
    assert m.closed and tok.closed  # a borrowed handle dies with its owner
    with pytest.raises(memra.MisuseError):
        m.n_layers  # noqa: B018
    with pytest.raises(memra.MisuseError):
        tok.tokenize("x")
    with pytest.raises(memra.MisuseError):
        c.pos  # noqa: B018
    m.close()  # closing twice is a no-op


def test_model_refuses_to_free_with_live_cache(model_path: str, lib_path: str) -> None:
    m = memra.Model(model_path)
    c = m.cache(8)
    with pytest.raises(memra.BusyError) as ei:
        m.close()
    assert "cache" in ei.value.message
    assert not m.closed and m.n_vocab > 0  # still usable
    snap = c.snapshot()
    c.close()
    with pytest.raises(memra.BusyError):
        m.close()  # the snapshot keeps the model
    snap.close()
    m.close()
    assert m.closed


def test_engine_outlives_models(model_path: str, lib_path: str) -> None:
    e = memra.Engine()
    m = memra.Model(model_path, e)
    with pytest.raises(memra.BusyError):
        e.close()
    m.close()
    e.close()
    assert e.closed


def test_private_engine_by_device(model_path: str, lib_path: str) -> None:
    with memra.Model(model_path, device="cpu") as m:
        assert m._own_engine is not None
        eng = m._own_engine
    assert eng.closed


def test_garbage_collection_frees(model_path: str, lib_path: str) -> None:
    m = memra.Model(model_path)
    c = m.cache(8)
    s = c.snapshot()
    del m, c, s
    gc.collect()  # no crash, nothing left to free by hand


def test_cache_of_closed_model_refused(model_path: str, lib_path: str) -> None:
    m = memra.Model(model_path)
    m.close()
    with pytest.raises(memra.MisuseError):
        m.cache()


def test_restore_into_other_cache(model: memra.Model) -> None:
    with model.cache(8) as a, model.cache(8) as b, a.snapshot() as snap:
        with pytest.raises(memra.MisuseError) as ei:
            b.restore(snap)
        assert ei.value.message


def test_pending_blocks_cache_free(model: memra.Model) -> None:
    with model.cache(8) as c:
        p = model.decode_deferred(c, 1)
        p.wait()
        with pytest.raises(memra.MisuseError):
            p.wait()  # consumed

"""Loading, tokenizer round trips, forward and decode on the default model."""

from __future__ import annotations

import array
import ctypes
import math
from typing import Any, List

import pytest

import memra
from memra import _arrays


def _values(row: Any) -> List[float]:
    return [float(x) for x in row]


def _argmax(row: Any) -> int:
    vals = _values(row)
    return max(range(len(vals)), key=lambda i: (vals[i], -i))


def test_load_and_introspect(model: memra.Model) -> None:
    assert model.arch == "qwen3"
    assert model.n_vocab > 0 and model.n_layers > 0 and model.n_embd > 0
    assert model.n_ctx_train > 0
    assert model.n_stages == 1
    assert model.weight_bytes > 0
    assert model.n_mtp_layers == 0
    assert model.layer_kind(0) in set(memra.LayerKind)
    with pytest.raises(IndexError):
        model.layer_kind(model.n_layers)
    info = model.stage_info(0)
    assert (info.layer0, info.layer1) == (0, model.n_layers)
    assert model.pipeline_info().n_stages == 1
    assert model.gguf["general.architecture"] == "qwen3"
    assert model.tokenizer.n_vocab == model.n_vocab
    assert model.last_error == ""


def test_tokenize_detokenize_round_trip(model: memra.Model) -> None:
    tok = model.tokenizer
    for text in ["The quick brown fox", "Hello, world!\n  indented", "naïve café ☕ 日本語", ""]:
        ids = tok.tokenize(text, add_special=False)
        assert all(0 <= i < model.n_vocab for i in ids)
        assert tok.detokenize(ids) == text
        assert b"".join(tok.piece(i) for i in ids) == text.encode()
    long_text = "word " * 500
    assert tok.detokenize(tok.tokenize(long_text, add_special=False)) == long_text
    assert tok.tokenize(b"bytes too", add_special=False) == tok.tokenize("bytes too", add_special=False)


def test_vocabulary(model: memra.Model) -> None:
    tok = model.tokenizer
    assert tok.model == "gpt2" and tok.pre
    eog = tok.eog_ids()
    assert eog and all(tok.is_eog(i) for i in eog)
    assert eog == sorted(eog)
    ids = tok.tokenize("hello", add_special=False)
    text = tok.token_text(ids[0])
    assert text is not None and tok.token_id(text) == ids[0]
    assert tok.token_text(model.n_vocab) is None
    assert tok.token_attr(ids[0]) & memra.TOKEN_ATTR_NORMAL
    assert isinstance(tok.token_score(ids[0]), float)
    assert tok.special(memra.SpecialToken.EOS) == tok.eos
    assert isinstance(tok.bos, int) and isinstance(tok.eot, int)
    assert isinstance(tok.add_bos, bool) and isinstance(tok.add_eos, bool)
    template = model.chat_template
    assert template is None or isinstance(template, str)


def test_forward_logits(model: memra.Model) -> None:
    ids = model.tokenize("The quick brown fox")
    with model.cache() as cache:
        logits = model.forward(cache, ids)
        assert cache.pos == len(ids)
    assert len(logits) == model.n_vocab
    assert all(math.isfinite(x) for x in _values(logits))
    if memra.HAVE_NUMPY:
        import numpy as np

        assert isinstance(logits, np.ndarray) and logits.dtype == np.float32
        assert logits.shape == (model.n_vocab,)
    else:
        assert isinstance(logits, array.array) and logits.typecode == "f"


def test_forward_all_rows(model: memra.Model) -> None:
    ids = model.tokenize("one two three")
    with model.cache() as c1, model.cache() as c2:
        rows = model.forward(c1, ids, all_rows=True)
        last = model.forward(c2, ids)
    assert len(rows) == len(ids)
    assert all(len(r) == model.n_vocab for r in rows)
    assert _values(rows[-1]) == pytest.approx(_values(last), rel=1e-4, abs=1e-4)


def test_decode_step_matches_prefill(model: memra.Model) -> None:
    ids = model.tokenize("The quick brown fox jumps")
    with model.cache() as c1, model.cache() as c2:
        full = model.forward(c1, ids)
        model.forward(c2, ids[:-1], logits=False)
        step = model.decode(c2, ids[-1])
        assert c2.pos == len(ids)
        assert len(step) == model.n_vocab
        assert _values(step) == pytest.approx(_values(full), rel=1e-3, abs=1e-3)
        # into a caller buffer
        out = _arrays.new_floats(model.n_vocab)[0]
        again = model.decode(c2, _argmax(step), out=out)
        assert again is out and all(math.isfinite(x) for x in _values(out))


def test_forward_batch_equals_alone(model: memra.Model) -> None:
    """memra_forward_batch: a prompt and two decodes in one step, each bit for
    bit what forward/decode give alone; bad input raises and moves nothing."""
    prompts = [model.tokenize("The quick brown fox"), model.tokenize("Once upon"), model.tokenize("Hi")]
    assert model.max_batch == memra.MAX_BATCH == 64
    with model.cache() as a1, model.cache() as a2, model.cache() as b1, model.cache() as b2, model.cache() as b3:
        model.forward(a1, prompts[1], logits=False)
        model.forward(a2, prompts[2], logits=False)
        want = [model.forward(b1, prompts[0], all_rows=True)]
        model.forward(b2, prompts[1], logits=False)
        model.forward(b3, prompts[2], logits=False)
        want += [model.decode(b2, 7), model.decode(b3, 9)]
        with model.cache() as c0:
            got = model.forward_batch([(c0, prompts[0]), (a1, [7]), (a2, [9])], all_rows=True)
            assert c0.pos == len(prompts[0]) and a1.pos == b2.pos and a2.pos == b3.pos
        assert len(got[0]) == len(prompts[0])
        assert [_values(r) for r in got[0]] == [_values(r) for r in want[0]]
        assert _values(got[1][0]) == _values(want[1])
        assert _values(got[2][0]) == _values(want[2])
        last = model.forward_batch([(a1, [3]), (a2, [4])])
        assert _values(last[0]) == _values(model.decode(b2, 3))
        pos = (a1.pos, a2.pos)
        with pytest.raises(memra.MemraError):
            model.forward_batch([(a1, [1]), (a1, [2])])  # one cache twice
        with pytest.raises(memra.MemraError):
            model.forward_batch([(a1, [1]), (a2, [model.n_vocab])])  # a token out of range
        with pytest.raises(memra.MemraError):
            model.forward_batch([])
        assert (a1.pos, a2.pos) == pos


def test_forward_batch_deferred_equals_batch(model: memra.Model) -> None:
    """memra_forward_batch_deferred: each pending's logits are bit for bit the
    synchronous batched step's; bad input raises and moves nothing."""
    ids = [model.tokenize("The quick brown fox"), model.tokenize("Once upon")]
    with model.cache() as a1, model.cache() as a2, model.cache() as b1, model.cache() as b2:
        for c, p in ((a1, ids[0]), (a2, ids[1]), (b1, ids[0]), (b2, ids[1])):
            model.forward(c, p, logits=False)
        want = model.forward_batch([(b1, [7]), (b2, [9])])
        pend = model.forward_batch_deferred([(a1, 7), (a2, 9)])
        assert (a1.pos, a2.pos) == (b1.pos, b2.pos)  # advanced at queue time
        got = [p.wait() for p in reversed(pend)][::-1]
        assert [_values(g) for g in got] == [_values(w) for w in want]
        pos = (a1.pos, a2.pos)
        with pytest.raises(memra.MemraError):
            model.forward_batch_deferred([(a1, 1), (a1, 2)])  # one cache twice
        with pytest.raises(memra.MemraError):
            model.forward_batch_deferred([(a1, 1), (a2, model.n_vocab)])  # a token out of range
        with pytest.raises(memra.MemraError):
            model.forward_batch_deferred([])
        assert (a1.pos, a2.pos) == pos
        for p in model.forward_batch_deferred([(a1, 3), (a2, 4)]):
            p.close()  # freed without a wait
        assert (a1.pos, a2.pos) == (pos[0] + 1, pos[1] + 1)


def test_deferred_step(model: memra.Model) -> None:
    ids = model.tokenize("The quick brown fox")
    with model.cache() as c1, model.cache() as c2:
        model.forward(c1, ids[:-1], logits=False)
        model.forward(c2, ids[:-1], logits=False)
        sync = model.decode(c1, ids[-1])
        with model.decode_deferred(c2, ids[-1]) as pending:
            assert c2.pos == len(ids)
            logits = pending.wait()
            assert pending.closed
        assert _values(logits) == pytest.approx(_values(sync), rel=1e-5, abs=1e-5)
        pending2 = model.decode_deferred(c2, 1)
        while not pending2.poll():
            pass
        pending2.close()  # cancel: drained and freed
        assert pending2.closed


def test_snapshot_restore(model: memra.Model) -> None:
    ids = model.tokenize("alpha beta gamma")
    with model.cache() as c:
        model.forward(c, ids, logits=False)
        with c.snapshot() as snap:
            a = model.decode(c, 10)
            model.decode(c, 11)
            c.restore(snap)
            assert c.pos == len(ids)
            b = model.decode(c, 10)
        assert _values(a) == _values(b)
        c.clear()
        assert c.pos == 0


def test_cache_fork(model: memra.Model) -> None:
    ids = model.tokenize("alpha beta gamma")
    with model.cache(32) as parent:
        model.forward(parent, ids, logits=False)
        with parent.fork() as child, parent.fork(48) as wide:
            assert child.pos == wide.pos == len(ids)
            assert child.capacity == 32 and wide.capacity == 48
            a = model.decode(child, 10)
            model.decode(child, 11)  # the child's writes leave the parent as it was
            b = model.decode(wide, 10)
            c = model.decode(parent, 10)
        assert _values(a) == _values(b) == _values(c)
        with pytest.raises(memra.InvalidArgumentError):
            parent.fork(len(ids))  # below the parent's position (len(ids) + 1)


def test_kv_pool(model_path: str, model: memra.Model) -> None:
    ids = model.tokenize("alpha beta gamma delta")
    with model.cache(32) as c:
        want = model.forward(c, ids)
    assert model.kv_pool_bytes == (0, 0) and model.kv_page_bytes == 0
    with memra.Model(model_path, kv_pool_bytes=64 << 20, kv_page_bytes=100000) as m:
        used, total = m.kv_pool_bytes
        page = m.kv_page_bytes
        assert used == 0 and total > 0
        assert page >= 100000 and total % page == 0  # the request rounded up to the granularity
        with m.cache(32) as c:
            assert _values(m.forward(c, ids)) == _values(want)  # the same bits as without a pool
            used = m.kv_pool_bytes[0]
            assert 0 < used <= c.kv_bytes(len(ids)) and used % page == 0
        assert m.kv_pool_bytes[0] == 0  # the pages went back with the cache


def test_sampler(model: memra.Model) -> None:
    ids = model.tokenize("The quick brown fox")
    with model.cache() as c:
        logits = model.forward(c, ids)
    with memra.Sampler(temperature=0) as greedy:
        assert greedy.sample(logits) == _argmax(logits)
        assert greedy.sample(list(_values(logits))) == _argmax(logits)
        greedy.accept(3)
        greedy.reset()
    draws = []
    for _ in range(2):
        with memra.Sampler(temperature=1.0, seed=42) as s:
            draws.append([s.sample(logits) for _ in range(5)])
    assert draws[0] == draws[1]
    p = memra.sampler_default_params()
    assert p.size == ctypes.sizeof(p) and p.top_k == 40


def test_without_numpy(model: memra.Model, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_arrays, "_np", None)
    ids = model.tokenize("The quick")
    with model.cache() as c:
        rows = model.forward(c, ids, all_rows=True)
        last = model.decode(c, ids[0])
    assert isinstance(rows, list) and len(rows) == len(ids)
    assert isinstance(rows[0], array.array) and len(rows[0]) == model.n_vocab
    assert isinstance(last, array.array) and len(last) == model.n_vocab
    with memra.Sampler(temperature=0) as s:
        assert s.sample(last) == _argmax(last)


def test_engine(model_path: str) -> None:
    with memra.Engine("cpu", n_threads=1) as engine:
        info = engine.info()
        assert engine.backend == memra.Backend.CPU and info.n_threads == 1
        assert info.backend_name == b"cpu" and engine.device_name
        assert engine.copy_bandwidth(1 << 20, 2) > 0
        with memra.Model(model_path, engine) as m, m.cache(16) as c, engine.host_alloc(m.n_vocab) as buf:
            out = m.forward(c, m.tokenize("hi"), out=buf.array)
            assert out is buf.array
            assert all(math.isfinite(float(x)) for x in buf.array)
        assert engine.last_error == ""
    assert memra.cuda_device_count() >= 0


def test_load_progress(model_path: str) -> None:
    seen: List[float] = []
    with memra.Model(model_path, progress=seen.append):
        pass
    assert seen and 0 <= min(seen) and max(seen) <= 1
    with pytest.raises(memra.AgainError):
        memra.Model(model_path, progress=lambda f: True)  # cancelled
    with pytest.raises(ZeroDivisionError):
        memra.Model(model_path, progress=lambda f: 1 // 0 == 0)  # the callback's own error


def test_standalone_tokenizer(model_path: str, model: memra.Model) -> None:
    with memra.Tokenizer(model_path) as tok:
        assert tok.tokenize("The quick brown fox") == model.tokenize("The quick brown fox")
    with memra.Gguf(model_path) as g, memra.Tokenizer.from_gguf(g) as tok2:
        pass
    assert tok2.n_vocab == model.n_vocab if not tok2.closed else True


def test_pipeline_stages_on_cpu(model_path: str, model: memra.Model) -> None:
    ids = model.tokenize("The quick brown fox")
    with model.cache() as c:
        ref = model.forward(c, ids)
    cut = model.n_layers // 2
    with memra.Model(model_path, n_stages=2, devices="cpu", splits=[cut], streams=0) as split:
        assert split.n_stages == 2
        info = split.pipeline_info()
        assert info.n_stages == 2 and info.streams == 0 and list(info.fence[:3]) == [0, cut, split.n_layers]
        assert (split.stage_info(1).layer0, split.stage_info(1).layer1) == (cut, split.n_layers)
        with pytest.raises(memra.RangeError):
            split.stage_info(2)
        with split.cache() as c:
            assert _values(split.forward(c, ids)) == _values(ref)  # bit-identical to the unsplit model


def test_model_params_struct(model_path: str, lib_path: str) -> None:
    p = memra.model_default_params()
    p.n_layers = 1
    with memra.Model(model_path, params=p) as m:
        assert m.n_layers == 1
    with pytest.raises(memra.InvalidArgumentError) as ei:
        memra.Model(model_path, n_stages=memra.MAX_PP_STAGES + 1)
    assert ei.value.message


def test_generate_cache_too_small(model: memra.Model) -> None:
    with pytest.raises(memra.CacheFullError):
        list(model.generate_tokens("Hello there", max_tokens=20, n_ctx=4, stop_at_eog=False))

"""Model.generate / generate_tokens: prefill, sampling, decode steps, text pieces."""

from __future__ import annotations

import memra


def test_generate_yields_text(model: memra.Model) -> None:
    pieces = list(model.generate("The quick brown fox", max_tokens=12, temperature=0))
    assert pieces and all(isinstance(p, str) for p in pieces)
    assert "".join(pieces)


def test_generate_stops_at_max_tokens(model: memra.Model) -> None:
    for n in (1, 5, 17):
        toks = list(model.generate_tokens("Hello", max_tokens=n, temperature=0, stop_at_eog=False))
        assert len(toks) == n
    assert list(model.generate_tokens("Hello", max_tokens=0)) == []
    toks = list(model.generate_tokens("Hello", max_tokens=9, temperature=0.8, seed=1))
    assert len(toks) <= 9 and not any(model.is_eog(t) for t in toks)


def test_generate_text_is_the_tokens_text(model: memra.Model) -> None:
    toks = list(model.generate_tokens("The quick brown fox", max_tokens=10, temperature=0.0, stop_at_eog=False))
    text = "".join(model.generate("The quick brown fox", max_tokens=10, temperature=0.0, stop_at_eog=False))
    assert text == b"".join(model.piece(t) for t in toks).decode(errors="replace")


def test_generate_greedy_matches_manual_loop(model: memra.Model) -> None:
    ids = model.tokenize("The quick brown fox", parse_special=True)
    manual = []
    with model.cache() as c, memra.Sampler(temperature=0) as s:
        logits = model.forward(c, ids)
        for _ in range(6):
            t = s.sample(logits)
            manual.append(t)
            logits = model.decode(c, t)
    assert list(model.generate_tokens(ids, max_tokens=6, temperature=0, stop_at_eog=False)) == manual


def test_generate_with_caller_sampler_and_early_stop(model: memra.Model) -> None:
    with memra.Sampler(temperature=0.7, seed=7) as s:
        gen = model.generate("Once upon a time", max_tokens=50, sampler=s, stop_at_eog=False)
        first = next(gen)
        assert isinstance(first, str)
        gen.close()  # frees the generator's cache
        assert not s.closed  # the caller's sampler stays open
    model.close()  # no cache left behind: the model frees
    assert model.closed


def test_generate_seeded_is_reproducible(model: memra.Model) -> None:
    a = list(model.generate_tokens("Hi", max_tokens=8, temperature=1.0, seed=3, stop_at_eog=False))
    b = list(model.generate_tokens("Hi", max_tokens=8, temperature=1.0, seed=3, stop_at_eog=False))
    assert a == b

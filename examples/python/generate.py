#!/usr/bin/env python3
"""Greedy generation through the ctypes binding: loads a model (argument 1, else the
bundled default), tokenizes a prompt, prefills it and decodes 8 greedy tokens.

    MEMRA_LIB=build/libmemra.so python3 examples/python/generate.py [MODEL] [PROMPT]
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import memra  # noqa: E402


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else memra.default_model_path()
    prompt = sys.argv[2] if len(sys.argv) > 2 else "The quick brown fox"
    n_gen = 8
    with memra.Model(path) as model, model.cache() as cache, memra.Sampler(temperature=0.0) as sampler:
        ids = model.tokenize(prompt)
        print("memra %s, %s model %s: prompt %r -> %d tokens %s" % (
            memra.version(), model.arch, os.path.basename(path), prompt, len(ids), ids))
        logits = model.forward(cache, ids)
        out = []
        for _ in range(n_gen):
            t = sampler.sample(logits)
            if model.is_eog(t):
                break
            sampler.accept(t)
            out.append(t)
            logits = model.decode(cache, t)
        text = b"".join(model.piece(t) for t in out).decode(errors="replace")
        print("generated %d tokens: %s" % (len(out), out))
        print("text: %r" % text)
        if not out:
            print("no token generated", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Greedy generation through the memra Python package (python/): loads a model
(argument 1, else the bundled default), then streams 8 greedy tokens of a
prompt (argument 2) with Model.generate.

    pip install ./python        # or run from this tree as it is
    MEMRA_LIBRARY=build/libmemra.so python3 examples/python/generate.py [MODEL] [PROMPT]

Without the package installed, the python/ folder of this tree is used; without
MEMRA_LIBRARY, a build/libmemra.so of this tree, else pkg-config and the loader.
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
try:
    import memra
except ImportError:
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import memra  # noqa: E402

if not os.environ.get("MEMRA_LIBRARY") and os.path.exists(os.path.join(ROOT, "build", "libmemra.so")):
    os.environ["MEMRA_LIBRARY"] = os.path.join(ROOT, "build", "libmemra.so")


def main() -> int:
    default = os.environ.get("MEMRA_DEFAULT_MODEL") or os.path.join(ROOT, "test", "data", "default.gguf")
    path = sys.argv[1] if len(sys.argv) > 1 else default
    prompt = sys.argv[2] if len(sys.argv) > 2 else "The quick brown fox"
    n_gen = 8
    with memra.Model(path) as model:
        ids = model.tokenize(prompt, parse_special=True)
        print("memra %s, %s model %s: prompt %r -> %d tokens %s" % (
            memra.version(), model.arch, os.path.basename(path), prompt, len(ids), ids))
        out = list(model.generate_tokens(ids, max_tokens=n_gen, temperature=0))
        text = "".join(model.generate(ids, max_tokens=n_gen, temperature=0))
        print("generated %d tokens: %s" % (len(out), out))
        print("text: %r" % text)
        if not out:
            print("no token generated", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

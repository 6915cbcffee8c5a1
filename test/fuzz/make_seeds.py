#!/usr/bin/env python3
"""Makes small, valid fuzz seeds from the fixture GGUFs.

usage: make_seeds.py FIXTURES_DIR OUT_DIR

The fixtures are megabytes, almost all tensor data and token arrays. Each
seed keeps a fixture's keys (arrays cut to 8 elements, strings to 200 bytes)
and its first 8 tensor infos with their names, types and number of dims but
the smallest shape the type allows, and zero data. The structure the reader
parses is all there; the bulk is not. Uses gguf_json_check.py's reader/writer.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import gguf_json_check as gj  # noqa: E402


def shrink(data):
    ref = gj.read_gguf(data)
    kv = []
    for key, t, v in ref["kv"]:
        if t == gj.ARR:
            v = (v[0], v[1][:8])
        elif t == gj.STR:
            v = v[:200]
        kv.append((key, t, v))
    tensors = []
    for t in ref["tensors"][:8]:
        _, blck, bb = gj.GGML_TYPES[t["type"]]
        ne = [blck] + [1] * (len(t["shape"]) - 1)
        tensors.append((t["name"], t["type"], ne, bytes(bb)))
    return gj.write_gguf(kv, tensors, version=ref["version"], alignment=ref["alignment"])


def main(argv):
    if len(argv) != 3:
        print(__doc__)
        return 2
    root, out = argv[1], argv[2]
    os.makedirs(out, exist_ok=True)
    n = total = 0
    for path in gj.fixture_files(root):
        with open(path, "rb") as f:
            seed = shrink(f.read())
        gj.read_gguf(seed)  # still valid
        name = os.path.basename(path)[:-len(".gguf")] + ".seed.gguf"
        with open(os.path.join(out, name), "wb") as f:
            f.write(seed)
        n += 1
        total += len(seed)
    syn = os.path.join(out, "synthetic.seed.gguf")
    gj.synthetic(syn)
    total += os.path.getsize(syn)
    # the first shard of a one-shard split, as gguf-split writes it: the fuzzer
    # mutates split.count / split.tensors.count from here
    split = gj.write_gguf([("split.no", gj.U16, 0), ("split.count", gj.U16, 1),
                           ("split.tensors.count", gj.I32, 2)],
                          [("a", 0, [4], bytes(16)), ("b", 8, [32, 2], bytes(68))])
    with open(os.path.join(out, "split.seed.gguf"), "wb") as f:
        f.write(split)
    total += len(split)
    print("%d seeds, %d bytes, in %s" % (n + 2, total, out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

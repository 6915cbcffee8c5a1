#!/usr/bin/env python3
"""memra-synth checks.

1. --dry-run of every model at Q8_0 reproduces the parameter counts and
   tensor bytes published for the released checkpoints (PUBLISHED below,
   checked against llama.cpp's llama-quantize and published GGUF totals).
2. Shrunk models (few layers, small vocabulary) of every family and every
   --type load and give finite logits, the same in decode and in prefill
   mode (within 1e-4).
3. Each shrunk file, read back by the independent reader of
   gguf_json_check.py (no memra code): general.file_type and every tensor's
   type are those of the --type (QTYPES below, llama-quantize's choices),
   and --dry-run with the same arguments reports the file's parameter count
   and tensor bytes.

usage: synth_check.py MEMRA_SYNTH MEMRA_LOGITS TMPDIR
"""
import json
import math
import mmap
import os
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_json_check import GGML_TYPES, read_gguf  # noqa: E402

# name: (params, Q8_0 bytes), trunk only, of the released checkpoints
PUBLISHED = {
    "qwen3.5-0.8b": (752393024, 800881920),
    "qwen3.5-2b": (1881825088, 2001050880),
    "qwen3.5-4b": (4205751296, 4471435264),
    "qwen3.5-9b": (8953803264, 9516533760),
    "qwen3.6-27b": (26895998464, 28584769536),
    "qwen3.6-35b-a3b": (34660610688, 36892150272),
    "gemma-4-e2b": (4647450147, 4951677068),
    "gemma-4-e4b": (7518069290, 8015415464),
    "gemma-4-26b-a4b": (25233142046, 26844036216),
    "gemma-4-31b": (30697345596, 32619841776),
}

# --type: (weight matrices, output.weight, token_embd.weight when tied,
# general.file_type), as llama-quantize writes LLAMA_FTYPE_MOSTLY_*
QTYPES = {
    "q8_0": ("Q8_0", "Q8_0", "Q8_0", 7),
    "q4_k": ("Q4_K", "Q6_K", "Q6_K", 15),
    "q5_k": ("Q5_K", "Q6_K", "Q6_K", 17),
    "q6_k": ("Q6_K", "Q6_K", "Q6_K", 18),
    "q4_0": ("Q4_0", "Q6_K", "Q6_K", 2),
}

# matrices that stay F32 (llama.cpp keeps the conv and the routers in F32)
F32_MATRICES = ("ssm_conv1d.weight", "ffn_gate_inp.weight", "ffn_gate_inp_shexp.weight")

SHRUNK = [("qwen3.5-0.8b", 4), ("qwen3.6-35b-a3b", 4), ("gemma-4-e2b", 10), ("gemma-4-26b-a4b", 6)]

TYPE_ID = {v[0]: k for k, v in GGML_TYPES.items()}


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("FAILED: %s\n%s%s" % (" ".join(cmd), r.stdout, r.stderr))
    return r.stdout


def read_f32(path):
    data = open(path, "rb").read()
    return struct.unpack("<%df" % (len(data) // 4), data)


def expected_type(qtype, name, shape, has_output):
    weight, head, tied, _ = QTYPES[qtype]
    if len(shape) == 1 or name.endswith(F32_MATRICES):
        return "F32"
    if name == "per_layer_model_proj.weight":
        return "BF16"
    t = head if name == "output.weight" else tied if name == "token_embd.weight" and not has_output else weight
    # rows that do not split into the type's blocks fall back to Q8_0
    return t if shape[0] % GGML_TYPES[TYPE_ID[t]][1] == 0 else "Q8_0"


def check_file(path, qtype, dry):
    """Problems with the file written for QTYPE (a list of strings; empty = good)."""
    with open(path, "rb") as f:
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)  # the header and a few blocks are read
    g = read_gguf(data, with_layout=True)
    bad = []
    ftype = [v for k, _, v in g["kv"] if k == "general.file_type"]
    if ftype != [QTYPES[qtype][3]]:
        bad.append("general.file_type %s, expected %d" % (ftype, QTYPES[qtype][3]))
    names = {t["name"] for t in g["tensors"]}
    params = nbytes = 0
    for t in g["tensors"]:
        tname = GGML_TYPES[t["type"]][0]
        want = expected_type(qtype, t["name"], t["shape"], "output.weight" in names)
        if tname != want:
            bad.append("%s is %s, expected %s" % (t["name"], tname, want))
        n = 1
        for d in t["shape"]:
            n *= d
        params += n
        nbytes += t["nbytes"]
    if (dry["params"], dry["bytes"], dry["tensors"], dry["file_type"]) != \
            (params, nbytes, len(g["tensors"]), QTYPES[qtype][3]):
        bad.append("--dry-run %s, the file has %d params, %d bytes, %d tensors" %
                   (dry, params, nbytes, len(g["tensors"])))
    return bad


def main():
    synth, logits, tmp = sys.argv[1:4]
    failed = 0
    for name, (params, nbytes) in PUBLISHED.items():
        got = json.loads(run([synth, "--model", name, "--type", "q8_0", "--dry-run"]))
        ok = got["params"] == params and got["bytes"] == nbytes
        print("%-18s params %d bytes %d %s" % (name, got["params"], got["bytes"], "ok" if ok else
              "MISMATCH (published %d / %d)" % (params, nbytes)))
        failed += not ok
    toks = "1 7 42 300 5 99"
    for name, layers in SHRUNK:
        for qtype in QTYPES:
            path = os.path.join(tmp, "synth-%s-%s-%d.gguf" % (name, qtype, os.getpid()))
            args = ["--model", name, "--type", qtype, "--layers", str(layers), "--vocab", "1024", "--experts", "8"]
            try:
                run([synth] + args + ["--out", path])
                dry = json.loads(run([synth] + args + ["--dry-run"]))
                bad = check_file(path, qtype, dry)
                rows = {}
                for mode in ("prefill", "decode"):
                    out = path + "." + mode
                    run([logits, "-m", path, "--tokens", toks, "--mode", mode, "--threads", "2", "--out", out])
                    rows[mode] = read_f32(out)
                    os.remove(out)
            finally:
                if os.path.exists(path):
                    os.remove(path)
            pre, dec = rows["prefill"], rows["decode"]
            finite = all(math.isfinite(x) for x in pre) and all(math.isfinite(x) for x in dec)
            spread = max(pre) - min(pre) if finite else 0.0
            delta = max(abs(a - b) for a, b in zip(pre, dec)) if finite else float("inf")
            ok = finite and spread > 0 and delta <= 1e-4 and not bad
            print("%-18s %-5s %d layers: finite %s, logit range %.3g, decode vs prefill %.3g, %d bytes %s" %
                  (name, qtype, layers, finite, spread, delta, dry["bytes"], "ok" if ok else "FAIL"))
            for b in bad:
                print("    " + b)
            failed += not ok
    total = len(PUBLISHED) + len(QTYPES) * len(SHRUNK)
    print("%d passed, %d failed" % (total - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

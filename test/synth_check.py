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
   --dry-run with the same arguments reports the file's parameter count and
   tensor bytes, and the first blocks of every quantized tensor dequantize
   (docs/model-spec.md section 2) to finite values of a weight's magnitude.

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
    "qwen3.5-122b-a10b": (122111526912, 129860935680),
    "qwen3.5-397b-a17b": (396346350336, 421496351744),
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

# (model, layers, experts: 16 where the model routes to 10 of them)
SHRUNK = [("qwen3.5-0.8b", 4, 8), ("qwen3.6-35b-a3b", 4, 8), ("qwen3.5-122b-a10b", 2, 8),
          ("qwen3.5-397b-a17b", 1, 16), ("gemma-4-e2b", 10, 8), ("gemma-4-26b-a4b", 6, 8)]

TYPE_ID = {v[0]: k for k, v in GGML_TYPES.items()}


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("FAILED: %s\n%s%s" % (" ".join(cmd), r.stdout, r.stderr))
    return r.stdout


def read_f32(path):
    data = open(path, "rb").read()
    return struct.unpack("<%df" % (len(data) // 4), data)


def f16(b, off):
    return struct.unpack_from("<e", b, off)[0]


def gsm(s, j):
    """ggml's get_scale_min_k4 (model-spec 2)."""
    if j < 4:
        return s[j] & 63, s[j + 4] & 63
    return (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4)


def deq_q8_0(b):
    d = f16(b, 0)
    return [d * q for q in struct.unpack_from("<32b", b, 2)]


def deq_q4_0(b):
    d = f16(b, 0)
    qs = b[2:18]
    return [d * ((q & 0xF) - 8) for q in qs] + [d * ((q >> 4) - 8) for q in qs]


def deq_q45_k(b, five):
    d, dmin, sc = f16(b, 0), f16(b, 2), b[4:16]
    qh, qs = (b[16:48], b[48:176]) if five else (None, b[16:144])
    y = []
    for c in range(4):
        (s1, m1), (s2, m2) = gsm(sc, 2 * c), gsm(sc, 2 * c + 1)
        q = qs[32 * c:32 * c + 32]
        h1 = [16 if five and qh[l] & (1 << 2 * c) else 0 for l in range(32)]
        h2 = [16 if five and qh[l] & (2 << 2 * c) else 0 for l in range(32)]
        y += [d * s1 * ((q[l] & 0xF) + h1[l]) - dmin * m1 for l in range(32)]
        y += [d * s2 * ((q[l] >> 4) + h2[l]) - dmin * m2 for l in range(32)]
    return y


def deq_q6_k(b):
    d = f16(b, 208)
    sc = struct.unpack_from("<16b", b, 192)
    y = []
    for n in range(2):
        ql, qh, s = b[64 * n:64 * n + 64], b[128 + 32 * n:160 + 32 * n], sc[8 * n:8 * n + 8]
        half = [0.0] * 128
        for l in range(32):
            i = l // 16
            half[l] = d * s[i] * (((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32)
            half[l + 32] = d * s[i + 2] * (((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32)
            half[l + 64] = d * s[i + 4] * (((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32)
            half[l + 96] = d * s[i + 6] * (((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32)
        y += half
    return y


DEQ = {"Q8_0": deq_q8_0, "Q4_0": deq_q4_0, "Q4_K": lambda b: deq_q45_k(b, False),
       "Q5_K": lambda b: deq_q45_k(b, True), "Q6_K": deq_q6_k}


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
    seen = {}
    for t in g["tensors"]:
        tname, _, bb = GGML_TYPES[t["type"]]
        want = expected_type(qtype, t["name"], t["shape"], "output.weight" in names)
        if tname != want:
            bad.append("%s is %s, expected %s" % (t["name"], tname, want))
        n = 1
        for d in t["shape"]:
            n *= d
        params += n
        nbytes += t["nbytes"]
        if tname in DEQ:
            # the first blocks of each tensor: finite, a weight's magnitude
            start = g["data_start"] + t["offset"]
            y = []
            for k in range(min(16, t["nbytes"] // bb)):
                y += DEQ[tname](data[start + k * bb:start + (k + 1) * bb])
            s = seen.setdefault(tname, [0, 0.0, 0.0, True])
            s[0] += len(y)
            s[1] += sum(y)
            s[2] += sum(v * v for v in y)
            s[3] = s[3] and all(math.isfinite(v) for v in y)
    for tname, (n, s1, s2, finite) in sorted(seen.items()):
        mean, rms = s1 / n, math.sqrt(s2 / n)
        print("    %-5s %7d values: mean %+.4f rms %.4f" % (tname, n, mean, rms))
        # the Q8_0 path's weights have rms 0.02 and mean 0
        if not finite or not 0.01 <= rms <= 0.04 or abs(mean) > 0.005:
            bad.append("%s values: finite %s, mean %.4g, rms %.4g" % (tname, finite, mean, rms))
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
    for name, layers, experts in SHRUNK:
        for qtype in QTYPES:
            path = os.path.join(tmp, "synth-%s-%s-%d.gguf" % (name, qtype, os.getpid()))
            args = ["--model", name, "--type", qtype, "--layers", str(layers), "--vocab", "1024", "--experts", str(experts)]
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

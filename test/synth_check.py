#!/usr/bin/env python3
"""memra-synth checks.

1. --dry-run of every model at Q8_0 reproduces the parameter counts and
   tensor bytes published for the released checkpoints (PUBLISHED below,
   checked against llama.cpp's llama-quantize and published GGUF totals).
2. Shrunk models (few layers, small vocabulary) of every family and both
   quant variants load and give finite logits, the same in decode and in
   prefill mode (within 1e-4).

usage: synth_check.py MEMRA_SYNTH MEMRA_LOGITS TMPDIR
"""
import math
import os
import struct
import subprocess
import sys

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

SHRUNK = [("qwen3.5-0.8b", 4), ("qwen3.6-35b-a3b", 4), ("gemma-4-e2b", 10), ("gemma-4-26b-a4b", 6)]


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("FAILED: %s\n%s%s" % (" ".join(cmd), r.stdout, r.stderr))
    return r.stdout


def read_f32(path):
    data = open(path, "rb").read()
    return struct.unpack("<%df" % (len(data) // 4), data)


def main():
    synth, logits, tmp = sys.argv[1:4]
    failed = 0
    import json
    for name, (params, nbytes) in PUBLISHED.items():
        got = json.loads(run([synth, "--model", name, "--type", "q8_0", "--dry-run"]))
        ok = got["params"] == params and got["bytes"] == nbytes
        print("%-18s params %d bytes %d %s" % (name, got["params"], got["bytes"], "ok" if ok else
              "MISMATCH (published %d / %d)" % (params, nbytes)))
        failed += not ok
    toks = "1 7 42 300 5 99"
    for name, layers in SHRUNK:
        for qtype in ("q8_0", "q4_k"):
            path = os.path.join(tmp, "synth-%s-%s-%d.gguf" % (name, qtype, os.getpid()))
            try:
                run([synth, "--model", name, "--type", qtype, "--layers", str(layers), "--vocab", "1024",
                     "--experts", "8", "--out", path])
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
            ok = finite and spread > 0 and delta <= 1e-4
            print("%-18s %-5s %d layers: finite %s, logit range %.3g, decode vs prefill %.3g %s" %
                  (name, qtype, layers, finite, spread, delta, "ok" if ok else "FAIL"))
            failed += not ok
    print("%d passed, %d failed" % (len(PUBLISHED) + 2 * len(SHRUNK) - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

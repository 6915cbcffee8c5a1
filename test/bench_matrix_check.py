#!/usr/bin/env python3
"""Checks of the benchmark scripts that run on the GPU machine, on the CPU:

1. scripts/bench-matrix.sh over a one-layer memra-synth model, with a
   build folder whose memra-bench runs on the CPU engine (a wrapper turns
   --device cuda:0 into cpu) and a stand-in llama-bench that prints fixed
   JSON lines as llama.cpp's `-o jsonl` does: every (test, depth) row of
   memra-bench's output is in bench-matrix.json with the peer's figure
   and their ratio, and the table is printed.
2. scripts/logits-compare.py: identical dumps pass, a shifted dump fails,
   and --baseline widens the bound to 1.5x the baseline's error.

usage: bench_matrix_check.py MEMRA_BENCH MEMRA_SYNTH TMPDIR
"""
import array
import json
import os
import stat
import subprocess
import sys

bench, synth, tmp = (os.path.abspath(a) for a in sys.argv[1:4])
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
work = os.path.join(tmp, "bench-matrix-check")
os.makedirs(os.path.join(work, "b", "examples"), exist_ok=True)
os.makedirs(os.path.join(work, "peer"), exist_ok=True)


def script(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)


script(os.path.join(work, "b", "examples", "memra-bench"),
       '#!/bin/bash\nexec "%s" "${@/cuda:0/cpu}" --threads 2\n' % bench)
script(os.path.join(work, "b", "examples", "memra-synth"), '#!/bin/bash\nexec "%s" "$@" --vocab 512\n' % synth)
PEER = [(16, 0, 0, 100.0), (0, 4, 0, 50.0), (16, 0, 8, 90.0), (0, 4, 8, 40.0)]
script(os.path.join(work, "peer", "llama-bench"), "#!/bin/bash\n" + "".join(
    "echo '%s'\n" % json.dumps({"n_prompt": p, "n_gen": g, "n_depth": d, "avg_ts": ts}) for p, g, d, ts in PEER))

env = dict(os.environ, B=os.path.join(work, "b"), PEER=os.path.join(work, "peer"), MODELS="qwen3.5-0.8b:q8_0:1",
           PP="16", N="4", DEPTHS="0,8", LONG="", REPS="1", OUT=os.path.join(work, "out"),
           DIR=os.path.join(work, "models"), REV="test")
r = subprocess.run(["bash", os.path.join(root, "scripts", "bench-matrix.sh")], env=env, capture_output=True,
                   text=True, timeout=600)
print(r.stdout[-2000:])
assert r.returncode == 0, r.stderr
assert "==== benchmark matrix (memra test; tok/s) ====" in r.stdout
rows = json.load(open(os.path.join(work, "out", "bench-matrix.json")))["rows"]
got = {(x["test"], x["depth"]): x for x in rows}
assert set(got) == {("pp16", 0), ("tg4", 0), ("pp16", 8), ("tg4", 8)}, got
for p, g, d, ts in PEER:
    x = got[("pp%d" % p if g == 0 else "tg%d" % g, d)]
    assert x["memra_tok_s"] > 0 and x["llama_tok_s"] == ts, x
    assert abs(x["ratio"] - x["memra_tok_s"] / ts) < 1e-9, x
    assert ("roofline_frac" in x) == (g > 0), x
assert not os.listdir(os.path.join(work, "models")), "the model file was not deleted"

# logits-compare.py
cmp = os.path.join(root, "scripts", "logits-compare.py")
ref = array.array("f", [float(i % 7) for i in range(4 * 16)])
near = array.array("f", [v + 0.001 for v in ref])
far = array.array("f", [v + 0.5 for v in ref])
for name, a in (("ref", ref), ("near", near), ("far", far)):
    with open(os.path.join(work, name + ".f32"), "wb") as f:
        a.tofile(f)


def run(*args):
    return subprocess.run([sys.executable, cmp] + [os.path.join(work, a) if a.endswith(".f32") else a for a in args],
                          capture_output=True, text=True).returncode


assert run("ref.f32", "ref.f32", "--vocab", "16") == 0
assert run("ref.f32", "near.f32", "--vocab", "16") == 0
assert run("ref.f32", "far.f32", "--vocab", "16") == 1
assert run("ref.f32", "far.f32", "--vocab", "16", "--baseline", "far.f32") == 0
assert run("ref.f32", "far.f32", "--vocab", "16", "--baseline", "near.f32") == 1
print("bench_matrix_check: ok")

#!/usr/bin/env python3
"""Checks of the benchmark scripts that run on the GPU machine, on the CPU:

1. scripts/bench-matrix.sh over a one-layer memra-synth model, with a
   build folder whose memra-bench runs on the CPU engine (a wrapper turns
   --device cuda:0 into cpu) and a stand-in llama-bench that prints fixed
   JSON lines as llama.cpp's `-o jsonl` does: every (test, depth) row of
   memra-bench's output is in bench-matrix.json with the peer's figure
   and their ratio, and the table is printed. With BATCH, memra-bench
   --batch runs and a stand-in llama-batched-bench prints what llama.cpp's
   tools/batched-bench does (log lines on stderr, the markdown table or,
   with --output-format jsonl, one JSON object per B; a B whose sequences
   do not fit -c is skipped, as there): every B is in the "batched" rows
   with memra's aggregate decode rate, the peer's S_TG and their ratio,
   and the batched table is printed. With AB (an entry of two switches,
   joined by +, both set in its runs), ab.txt has the switch's decode line, with AB_PP its prefill line and, with BATCH, its batched
   lines (every B). With FIT,
   llfit-TAG.txt has the peer's 32768-token cache line (a stand-in
   verbose log) and memra's bytes a token, printed after the tables.
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


# (an AB entry of two switches must set both, each to its own value)
script(os.path.join(work, "b", "examples", "memra-bench"),
       '#!/bin/bash\n[ -z "$MEMRA_AB_CHECK$MEMRA_AB_PAIR" ] || [ "$MEMRA_AB_CHECK/$MEMRA_AB_PAIR" = 1/2 ] || exit 1\n'
       'exec "%s" "${@/cuda:0/cpu}" --threads 2\n' % bench)
script(os.path.join(work, "b", "examples", "memra-synth"), '#!/bin/bash\nexec "%s" "$@" --vocab 512\n' % synth)
PEER = [(16, 0, 0, 100.0), (0, 4, 0, 50.0), (16, 0, 8, 90.0), (0, 4, 8, 40.0)]
script(os.path.join(work, "peer", "llama-bench"), "#!/bin/bash\n" + "".join(
    "echo '%s'\n" % json.dumps({"n_prompt": p, "n_gen": g, "n_depth": d, "avg_ts": ts}) for p, g, d, ts in PEER))

# llama-batched-bench: its argument handling for what the script passes, its
# context rule (B * (pp + tg) tokens, else the B is skipped) and its output
BATCHED_PEER = r"""#!/usr/bin/env python3
import json, sys
a = sys.argv[1:]
opt = {a[i]: a[i + 1] for i in range(0, len(a) - 1, 2) if a[i].startswith("-")}
need = ("-m", "-c", "-b", "-ub", "-npp", "-ntg", "-npl")
missing = [k for k in need if k not in opt]
if missing:
    sys.exit("error: missing %s" % missing)
jsonl = opt.get("--output-format", "md") == "jsonl"
n_kv_max = int(opt["-c"])
print("llama_model_loader: loaded meta data from %s" % opt["-m"], file=sys.stderr)
if "-v" in a:  # the cache lines of a verbose run (llama.cpp's log format, with the timestamp)
    print("0.03.306.887 I llama_kv_cache:      CUDA0 KV buffer size =   768.00 MiB", file=sys.stderr)
    print("0.03.307.136 I llama_kv_cache: size =  768.00 MiB (%6d cells,   3 layers,  1/1 seqs), "
          "K (f16):  384.00 MiB, V (f16):  384.00 MiB" % n_kv_max, file=sys.stderr)
if not jsonl:
    print("|%6s | %6s | %4s | %6s | %8s | %8s | %8s | %8s | %8s | %8s |" %
          ("PP", "TG", "B", "N_KV", "T_PP s", "S_PP t/s", "T_TG s", "S_TG t/s", "T s", "S t/s"))
    print("|%s|" % "|".join("-" * (w + 2) for w in (6, 6, 4, 6, 8, 8, 8, 8, 8, 8)))
for pp in map(int, opt["-npp"].split(",")):
    for tg in map(int, opt["-ntg"].split(",")):
        for pl in map(int, opt["-npl"].split(",")):
            n_kv = pl * (pp + tg)
            if n_kv > n_kv_max:
                continue
            t_pp, t_tg = 0.01 * pl, 0.02 * tg
            s_pp, s_tg = pl * pp / t_pp, 1000.0 + pl
            if jsonl:
                print(json.dumps({"n_kv_max": n_kv_max, "n_batch": int(opt["-b"]), "n_ubatch": int(opt["-ub"]),
                                  "flash_attn": -1, "is_pp_shared": 0, "n_gpu_layers": 99, "n_threads": 8,
                                  "n_threads_batch": 8, "pp": pp, "tg": tg, "pl": pl, "n_kv": n_kv, "t_pp": t_pp,
                                  "speed_pp": s_pp, "t_tg": t_tg, "speed_tg": s_tg, "t": t_pp + t_tg,
                                  "speed": n_kv / (t_pp + t_tg)}))
            else:
                print("|%6d | %6d | %4d | %6d | %8.3f | %8.2f | %8.3f | %8.2f | %8.3f | %8.2f |" %
                      (pp, tg, pl, n_kv, t_pp, s_pp, t_tg, s_tg, t_pp + t_tg, n_kv / (t_pp + t_tg)))
print("llama_perf_context_print:        load time =      10.00 ms", file=sys.stderr)
"""
script(os.path.join(work, "peer", "llama-batched-bench"), BATCHED_PEER)
BATCH = [1, 2, 4]

env = dict(os.environ, B=os.path.join(work, "b"), PEER=os.path.join(work, "peer"), MODELS="qwen3.5-0.8b:q8_0:1",
           PP="16", N="4", DEPTHS="0,8", LONG="", REPS="1", OUT=os.path.join(work, "out"),
           DIR=os.path.join(work, "models"), REV="test", BATCH=",".join(map(str, BATCH)), BATCH_P="8",
           BATCH_N="4", AB="MEMRA_AB_CHECK=1+MEMRA_AB_PAIR=2", AB_PP="16@8", FIT="1")
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

# the batched table: every B, memra's figure from its own JSON, the peer's S_TG
assert "==== batched decode (memra test; aggregate decode tok/s, 8-token prompts, 4 generated) ====" in r.stdout
batched = json.load(open(os.path.join(work, "out", "bench-matrix.json")))["batched"]
assert [x["batch"] for x in batched] == BATCH, batched
mine = {}
for ln in open(os.path.join(work, "out", "memra-batch-qwen3.5-0.8b-q8_0-L1.jsonl")):
    o = json.loads(ln)
    mine[o["batch"]] = o["tg"]["tok_s"]
for x in batched:
    b = x["batch"]
    assert x["model"] == "qwen3.5-0.8b-q8_0-L1", x
    assert x["memra_tok_s"] == mine[b] and x["memra_tok_s"] > 0, x
    assert x["llama_tok_s"] == 1000.0 + b, x
    assert abs(x["ratio"] - x["memra_tok_s"] / x["llama_tok_s"]) < 1e-9, x
    line = [ln.split() for ln in r.stdout.splitlines() if ln.startswith("qwen3.5-0.8b-q8_0-L1 ")
            and len(ln.split()) == 5 and ln.split()[1] == str(b)]
    assert line and line[0][3] == "%.1f" % (1000.0 + b) and line[0][4] == "%.2f" % x["ratio"], (b, r.stdout)

# AB: the switch against the default, decode and then batched (a line per run, every B)
ab = open(os.path.join(work, "out", "ab.txt")).read().splitlines()
assert len(ab) == 5 and ab[0].startswith("qwen3.5-0.8b-q8_0-L1 tg4: default ") and " MEMRA_AB_CHECK=1+MEMRA_AB_PAIR=2 " in ab[0], ab
# AB_PP: the prefill of 16 tokens at depth 8, a figure for each run
pp = ab[1].split(":", 1)
assert pp[0] == "qwen3.5-0.8b-q8_0-L1 pp16@8", ab[1]
runs = [x.split() for x in pp[1].split(",")]
assert [x[0] for x in runs] == ["default", "MEMRA_AB_CHECK=1+MEMRA_AB_PAIR=2", "default"] and all(float(x[1]) > 0 for x in runs), ab[1]
for ln, name in zip(ab[2:], ("default", "MEMRA_AB_CHECK=1+MEMRA_AB_PAIR=2", "default")):
    head, _, pairs = ln.partition(name + ":")
    assert head == "qwen3.5-0.8b-q8_0-L1 batch ", ln
    got_b = [int(x.split(":")[0]) for x in pairs.split()]
    assert got_b == BATCH and all(float(x.split(":")[1]) > 0 for x in pairs.split()), ln

# FIT: the peer's cache line of a 32768-token sequence and memra's bytes a token, printed last
fit = open(os.path.join(work, "out", "llfit-qwen3.5-0.8b-q8_0-L1.txt")).read()
assert "llama_kv_cache: size =  768.00 MiB ( 32768 cells," in fit and "KV buffer" not in fit, fit
assert '"kv_bytes_per_token":' in fit and fit in r.stdout, (fit, r.stdout[-1000:])

# the stand-in's markdown output is the one documented (no --output-format)
md = subprocess.run([os.path.join(work, "peer", "llama-batched-bench"), "-m", "x", "-c", "48", "-b", "2048", "-ub",
                     "512", "-npp", "8", "-ntg", "4", "-npl", "1,2,4,8"], capture_output=True, text=True)
assert md.returncode == 0 and md.stdout.count("\n") == 5 and "S_TG t/s" in md.stdout, md.stdout  # B = 8 skipped

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

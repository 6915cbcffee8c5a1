#!/usr/bin/env bash
# The benchmark matrix (GPU machine): for each model, memra-synth writes a
# random-weight GGUF of the released shape, memra-bench measures prefill
# and decode at each depth, and with PEER=<dir> llama.cpp's llama-bench
# runs on the same file right after it (the engines alternate model by
# model); the file is deleted before the next model (the disk is 64 GiB).
# Prints one table last (tok/s, decode's % of the roofline memra-bench
# measures, and the llama.cpp ratio) and writes $OUT/bench-matrix.json.
# With BATCH (a list of sequence counts) it also measures batched decode:
# `memra-bench --batch $BATCH` and, with PEER, llama.cpp's
# llama-batched-bench on the same file (BATCH_P-token prompts, BATCH_N
# generated tokens per sequence), and prints a second table (aggregate
# decode tok/s per B, memra's and llama.cpp's S_TG, their ratio), also
# under "batched" in the JSON.
#
#   scripts/bench-matrix.sh                       # the default matrix
#   MODELS="qwen3.5-9b:q8_0 gemma-4-31b:q8_0:20" PEER=/tmp/llama.cpp-c34b922-sm90a scripts/bench-matrix.sh
#
# Env: MODELS (entries NAME:TYPE[:LAYERS], names from `memra-synth --list`,
# types from its --help: q8_0, q4_k, q5_k, q6_k, q4_0; or the groups
# "table" (the default: the issues' seven rows), "extra" (the other
# released sizes, the 9B in Q5_K, Q6_K and Q4_0, Q4_K and Q4_0 MoE files,
# the E4B, the 31B (20 layers), the 4B and the 27B in Q4_K (rows that end
# in a short K-quant segment: 2560 and 5120 wide);
# the Qwen3.5-122B-A10B Q4_K at 24 of its 48 layers, 35 GB: the whole file
# does not fit the machine's 64 GiB disk) and "all"),
# B (memra build folder, default /tmp/build-gpu, where scripts/gpu-check.sh builds), PEER (llama.cpp folder with
# llama-bench), PP (prompt lengths, default 512,2048), N (generated tokens,
# default 128), DEPTHS (default 0,512), LONG (a long depth, or a list such
# as 16384,32768, measured with one repetition, pp512 and tg there; default
# 16384, empty to skip),
# LONG_MODELS (the entries that get it, default every one), REPS
# (default 3), DIR (where models are written, default /tmp/bench-matrix),
# KEEP=1 (keep the model files), OUT (logs and JSON, default
# /tmp/bench-matrix-out), REV (the commit to print; default $B/REV (scripts/prebuilt.sh
# writes it) or else git's HEAD, which a
# copied working tree's git metadata may not match: pass it from the checkout),
# BATCH (e.g. 1,2,4,8,16,32; empty (the default) skips the batched table),
# BATCH_P and BATCH_N (default 128 and 128; memra-bench takes the median of
# REPS runs per B, llama-batched-bench runs each B once), AB (switches to
# time against the default on the same file: e.g. "MEMRA_MOE_PACK=0
# MEMRA_MMV_TAIL=0", each alone, or "A=1+B=1" two in one run; memra-bench
# tg$N at depth 0, one repetition each, the default first and last; lines
# in $OUT/ab.txt) for the entries in AB_MODELS
# (default every one); with BATCH the same switches also time the batched
# mode (memra-bench --batch $BATCH, one repetition each: a line per switch
# of B:tok/s pairs in $OUT/ab.txt), and with AB_PP=P@D (e.g. 512@16384) a
# prefill of P tokens at depth D (a line "TAG ppP@D: default ..., SWITCH ...").
#
#   BATCH=1,2,4,8,16,32 MODELS="qwen3.5-9b:q8_0" PEER=... scripts/bench-matrix.sh
#
# PEER may also name the llama.cpp .tar.xz of ../shared/peers (carried to the
# device machine): it is unpacked under /tmp once. FIT=1 (with PEER) also
# reads the KV memory a 32768-token sequence takes in each engine's default
# cache: llama-batched-bench -c 32768 -npl 1 -v's cache lines (f16 K and V;
# recurrent state; sliding-window layers at their window plus a ubatch)
# into $OUT/llfit-TAG.txt, and memra-bench's kv_bytes_per_token, state
# bytes and `fit` (sequences of 4096 and 32768 tokens in the free memory
# after the weights) of its depth-0 run; the lines print after the tables.
set -uo pipefail
cd "$(dirname "$0")/.."
B=${B:-/tmp/build-gpu}
OUT=${OUT:-/tmp/bench-matrix-out}
DIR=${DIR:-/tmp/bench-matrix}
PP=${PP:-512,2048}
N=${N:-128}
DEPTHS=${DEPTHS:-0,512}
LONG=${LONG-16384}
REPS=${REPS:-3}
BATCH=${BATCH:-}
BATCH_P=${BATCH_P:-128}
BATCH_N=${BATCH_N:-128}
# the issues' table, and the released shapes and quants outside it
TABLE="qwen3.5-9b:q8_0 qwen3.5-9b:q4_k qwen3.6-27b:q8_0 qwen3.6-35b-a3b:q8_0 gemma-4-e4b:q8_0 gemma-4-26b-a4b:q8_0 gemma-4-31b:q8_0:20"
EXTRA="qwen3.5-0.8b:q8_0 qwen3.5-2b:q8_0 qwen3.5-4b:q8_0 gemma-4-e2b:q8_0 qwen3.5-9b:q5_k qwen3.5-9b:q6_k qwen3.5-9b:q4_0 qwen3.6-35b-a3b:q4_k qwen3.6-35b-a3b:q4_0 gemma-4-26b-a4b:q4_k gemma-4-e4b:q4_k gemma-4-31b:q4_k:20 qwen3.5-4b:q4_k qwen3.6-27b:q4_k qwen3.5-122b-a10b:q4_k:24"
ms=""
for m in ${MODELS:-table}; do
  case $m in table) ms+=" $TABLE" ;; extra) ms+=" $EXTRA" ;; all) ms+=" $TABLE $EXTRA" ;; *) ms+=" $m" ;; esac
done
MODELS=${ms# }
mkdir -p "$OUT" "$DIR"
rm -f "$OUT/ab.txt" "$OUT"/llfit-*.txt # this run's lines only (the OUT of an earlier run may be reused)
if [[ "${PEER:-}" == *.tar.xz ]]; then
  pe=/tmp/peer-$(basename "$PEER" .tar.xz)
  if [ ! -d "$pe" ]; then
    mkdir -p "$pe.part" && tar xf "$PEER" -C "$pe.part" && mv "$pe.part" "$pe" || { echo "bench-matrix: cannot unpack $PEER"; exit 2; }
  fi
  PEER=$(dirname "$(find "$pe" -name llama-bench -type f | head -1)")
fi
[ -x "$B/examples/memra-bench" ] || { echo "bench-matrix: no $B/examples/memra-bench (build first)"; exit 2; }
if [ -n "${PEER:-}" ] && [ ! -x "$PEER/llama-bench" ]; then
  echo "bench-matrix: no llama-bench in $PEER"
  exit 2
fi
if [ -n "${PEER:-}" ] && [ -n "$BATCH" ] && [ ! -x "$PEER/llama-batched-bench" ]; then
  echo "bench-matrix: no llama-batched-bench in $PEER"
  exit 2
fi
if [ -n "$BATCH" ] && ! [[ "$BATCH" =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]]; then
  echo "bench-matrix: BATCH=$BATCH: expected a comma-separated list of sequence counts"
  exit 2
fi
# llama-batched-bench skips a B whose sequences do not fit its context
# (B * (prompt + generated) tokens, no shared prompt): size it for the largest B
batch_ctx=0
for b in ${BATCH//,/ }; do
  (( b * (BATCH_P + BATCH_N) > batch_ctx )) && batch_ctx=$(( b * (BATCH_P + BATCH_N) ))
done
# REV names the build in the table (a copied working tree's .git may be older than its files);
# without it, the REV file scripts/prebuilt.sh writes beside the binaries, else git's HEAD
rev=${REV:-$(cat "$B/REV" 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)}
echo "bench-matrix: memra $rev, $(date -u +%Y-%m-%dT%H:%MZ), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"

# One A/B line into ab.txt: LABEL, then memra-bench's figure for its test
# TEST (run with the remaining arguments, one repetition) under the
# default, each AB switch and the default again.
ab_line() {
  local label=$1 test=$2 line e v
  shift 2
  line="$label:"
  for e in MEMRA_AB_DEFAULT=1 $AB MEMRA_AB_DEFAULT=1; do
    v=$(env ${e//+/ } $B/examples/memra-bench -m "$f" --device cuda:0 "$@" -r 1 2>/dev/null |
      awk -v t="$test" '$1 == t {print $2}')
    line="$line ${e/MEMRA_AB_DEFAULT=1/default} ${v:-failed},"
  done
  echo "${line%,}" | tee -a "$OUT/ab.txt"
}

summarize() {
BATCH_P=$BATCH_P BATCH_N=$BATCH_N python3 - "$OUT" "$rev" "$1" $MODELS <<'PY'
import json, os, sys
out, rev, mode, specs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]

def lines(path):
    rows = []
    if os.path.exists(path):
        for ln in open(path):
            ln = ln.strip()
            if ln.startswith("{"):
                try:
                    rows.append(json.loads(ln))
                except ValueError:
                    pass
    return rows

matrix = []
for spec in specs:
    parts = spec.split(":")
    tag = "%s-%s" % (parts[0], parts[1]) + ("-L" + parts[2] if len(parts) > 2 and parts[2] else "")
    tests = {}
    for r in lines(os.path.join(out, "memra-%s.jsonl" % tag)):
        for p in r.get("pp_all", []):
            tests.setdefault(("pp%d" % p["n_prompt"], p["depth"]), {})["memra"] = p["tok_s"]
        tg = r["tg"]
        if tg["n_gen"] > 0:
            t = tests.setdefault(("tg%d" % tg["n_gen"], tg["depth"]), {})
            t["memra"] = tg["tok_s"]
            t["roof"] = r.get("roofline_tok_s", 0)
    for r in lines(os.path.join(out, "llama-%s.jsonl" % tag)):
        npp, ng, d = r.get("n_prompt", 0), r.get("n_gen", 0), r.get("n_depth", 0)
        name = "pp%d" % npp if ng == 0 else "tg%d" % ng
        tests.setdefault((name, d), {})["llama"] = r.get("avg_ts", 0)
    for (name, d), v in sorted(tests.items(), key=lambda kv: (kv[0][1], kv[0][0][:2] != "pp", kv[0][0])):
        row = {"model": tag, "test": name, "depth": d, "memra_tok_s": v.get("memra"), "llama_tok_s": v.get("llama")}
        if v.get("roof") and v.get("memra"):
            row["roofline_frac"] = v["memra"] / v["roof"]
        if v.get("memra") and v.get("llama"):
            row["ratio"] = v["memra"] / v["llama"]
        matrix.append(row)
# batched decode: memra-bench --batch (one object per B, "tg" the aggregate
# decode rate) and llama-batched-bench --output-format jsonl (one object per
# (pp, tg, pl); speed_tg is S_TG, the aggregate decode rate)
batched = []
for spec in specs:
    parts = spec.split(":")
    tag = "%s-%s" % (parts[0], parts[1]) + ("-L" + parts[2] if len(parts) > 2 and parts[2] else "")
    per_b = {}
    for r in lines(os.path.join(out, "memra-batch-%s.jsonl" % tag)):
        if "batch" in r and r.get("tg", {}).get("n_gen", 0) > 0:
            per_b.setdefault(r["batch"], {})["memra"] = r["tg"]["tok_s"]
    # llama.cpp logs through its LOG(): read both streams
    for name in ("llama-batch-%s.jsonl" % tag, "llama-batch-%s.err" % tag):
        for r in lines(os.path.join(out, name)):
            if "speed_tg" in r and "pl" in r:
                per_b.setdefault(r["pl"], {})["llama"] = r["speed_tg"]
    for b in sorted(per_b):
        v = per_b[b]
        row = {"model": tag, "batch": b, "memra_tok_s": v.get("memra"), "llama_tok_s": v.get("llama")}
        if v.get("memra") and v.get("llama"):
            row["ratio"] = v["memra"] / v["llama"]
        batched.append(row)
doc = {"rev": rev, "rows": matrix}
if batched:
    doc["batched"] = batched
json.dump(doc, open(os.path.join(out, "bench-matrix.json"), "w"), indent=1)
if mode != "print":
    sys.exit(0)
print("\n==== benchmark matrix (memra %s; tok/s) ====" % rev)
print("%-28s %-7s %6s %10s %7s %10s %7s" % ("model", "test", "depth", "memra", "% roof", "llama.cpp", "ratio"))
for r in matrix:
    f = lambda x, fmt: fmt % x if x is not None else "-"
    print("%-28s %-7s %6d %10s %7s %10s %7s" % (r["model"], r["test"], r["depth"], f(r["memra_tok_s"], "%.1f"),
          f(100 * r["roofline_frac"] if "roofline_frac" in r else None, "%.1f"), f(r["llama_tok_s"], "%.1f"),
          f(r.get("ratio"), "%.2f")))
if batched:
    print("\n==== batched decode (memra %s; aggregate decode tok/s, %s-token prompts, %s generated) ====" %
          (rev, os.environ.get("BATCH_P", "128"), os.environ.get("BATCH_N", "128")))
    print("%-28s %5s %10s %10s %7s" % ("model", "B", "memra", "llama.cpp", "ratio"))
    for r in batched:
        f = lambda x, fmt: fmt % x if x is not None else "-"
        print("%-28s %5d %10s %10s %7s" % (r["model"], r["batch"], f(r["memra_tok_s"], "%.1f"),
              f(r["llama_tok_s"], "%.1f"), f(r.get("ratio"), "%.2f")))
PY
}

for spec in $MODELS; do
  IFS=: read -r name type layers <<<"$spec"
  tag=$name-$type${layers:+-L$layers}
  f=$DIR/$tag.gguf
  t0=$(date +%s)
  if [ ! -f "$f" ]; then
    $B/examples/memra-synth --model "$name" --type "$type" ${layers:+--layers "$layers"} --out "$f" \
      >"$OUT/synth-$tag.log" 2>&1 || { echo "== $tag: synth failed: $(tail -1 "$OUT/synth-$tag.log")"; rm -f "$f"; continue; }
  fi
  t1=$(date +%s)
  $B/examples/memra-bench -m "$f" --device cuda:0 -p "$PP" -n "$N" -d "$DEPTHS" -r "$REPS" --json \
    >"$OUT/memra-$tag.jsonl" 2>"$OUT/memra-$tag.err" || echo "== $tag: memra-bench failed: $(tail -1 "$OUT/memra-$tag.err")"
  long=$LONG
  if [ -n "${LONG_MODELS:-}" ] && [[ " $LONG_MODELS " != *" $spec "* ]]; then long=; fi
  if [ -n "$long" ]; then
    $B/examples/memra-bench -m "$f" --device cuda:0 -p 512 -n "$N" -d "$LONG" -r 1 --json \
      >>"$OUT/memra-$tag.jsonl" 2>>"$OUT/memra-$tag.err" || echo "== $tag: memra-bench at depth $LONG failed"
  fi
  if [ -n "${AB:-}" ] && { [ -z "${AB_MODELS:-}" ] || [[ " $AB_MODELS " == *" $spec "* ]]; }; then
    ab_line "$tag tg$N" "tg$N" -p 0 -n "$N"
    if [ -n "${AB_PP:-}" ]; then
      ap=${AB_PP%@*} ad=0
      [[ "$AB_PP" == *@* ]] && ad=${AB_PP#*@}
      ab_line "$tag pp$ap@$ad" "pp$ap" -p "$ap" -n 0 -d "$ad"
    fi
    if [ -n "$BATCH" ]; then
      for e in MEMRA_AB_DEFAULT=1 $AB MEMRA_AB_DEFAULT=1; do
        v=$(env ${e//+/ } $B/examples/memra-bench -m "$f" --device cuda:0 --batch "$BATCH" -p "$BATCH_P" -n "$BATCH_N" \
          -r 1 2>/dev/null | awk '$1 == "B" && $3 ~ /^tg/ {printf " %s:%s", $2, $4}')
        echo "$tag batch ${e/MEMRA_AB_DEFAULT=1/default}:${v:- failed}" | tee -a "$OUT/ab.txt"
      done
    fi
  fi
  t2=$(date +%s)
  if [ -n "${PEER:-}" ]; then
    "$PEER/llama-bench" -m "$f" -p "$PP" -n "$N" -d "$DEPTHS" -r "$REPS" -o jsonl \
      >"$OUT/llama-$tag.jsonl" 2>"$OUT/llama-$tag.err" || echo "== $tag: llama-bench failed: $(tail -1 "$OUT/llama-$tag.err")"
    if [ -n "$long" ]; then
      "$PEER/llama-bench" -m "$f" -p 512 -n "$N" -d "$LONG" -r 1 -o jsonl \
        >>"$OUT/llama-$tag.jsonl" 2>>"$OUT/llama-$tag.err" || echo "== $tag: llama-bench at depth $LONG failed"
    fi
  fi
  t3=$(date +%s)
  if [ -n "$BATCH" ]; then
    $B/examples/memra-bench -m "$f" --device cuda:0 --batch "$BATCH" -p "$BATCH_P" -n "$BATCH_N" -r "$REPS" --json \
      >"$OUT/memra-batch-$tag.jsonl" 2>"$OUT/memra-batch-$tag.err" ||
      echo "== $tag: memra-bench --batch failed: $(tail -1 "$OUT/memra-batch-$tag.err")"
    if [ -n "${PEER:-}" ]; then
      "$PEER/llama-batched-bench" -m "$f" -c "$batch_ctx" -b 2048 -ub 512 -npp "$BATCH_P" -ntg "$BATCH_N" \
        -npl "$BATCH" --output-format jsonl >"$OUT/llama-batch-$tag.jsonl" 2>"$OUT/llama-batch-$tag.err" ||
        echo "== $tag: llama-batched-bench failed: $(tail -1 "$OUT/llama-batch-$tag.err")"
    fi
  fi
  if [ "${FIT:-0}" = 1 ] && [ -n "${PEER:-}" ]; then
    timeout 120 "$PEER/llama-batched-bench" -m "$f" -c 32768 -b 2048 -ub 512 -npp 128 -ntg 4 -npl 1 -v \
      >"$OUT/llfit-$tag.log" 2>&1
    { echo "$tag llama.cpp:"
      grep -E "llama_kv_cache: size =|llama_memory_recurrent: size =|creating .*KV cache|free" "$OUT/llfit-$tag.log" |
        sed 's/^[0-9.]* [A-Z] /  /'
      echo "$tag memra: $(grep -m1 -o '"kv_bytes_per_token":[0-9]*' "$OUT/memra-$tag.jsonl") \
$(grep -m1 -o '"fit":{[^}]*}' "$OUT/memra-$tag.jsonl")"; } >"$OUT/llfit-$tag.txt"
  fi
  echo "== $tag: synth $((t1 - t0)) s, memra $((t2 - t1)) s, llama.cpp $((t3 - t2)) s${BATCH:+, batched $(( $(date +%s) - t3 )) s}"
  [ "${KEEP:-0}" = 1 ] || rm -f "$f"
  summarize quiet # bench-matrix.json holds every finished model, should a later one not finish
done
summarize print
rc=$?
cat "$OUT"/llfit-*.txt 2>/dev/null
exit $rc

#!/usr/bin/env bash
# The one script run on the GPU device machine (docs/CUDA.md): builds memra
# with the CUDA backend, runs the kernel check (CUDA ops vs the CPU
# reference), the model fixture test on the GPU engine in fast (default)
# and exact (MEMRA_FAST=0) mode, then memra-bench on a memra-synth
# Qwen3.5-9B Q8_0 (pp512, tg128 at depth 0 and 512, roofline from the
# copy bandwidth measured in the same run) and one profiled run
# (MEMRA_CUDA_PROFILE=1), and prints a short summary last.
#
# The device image lacks cmocka/utf8proc/pcre2 dev packages and cannot
# download: they travel as .debs in .deps/ (fetched here with
#   cd .deps && apt-get download libcmocka-dev libcmocka0 libutf8proc-dev
#   libutf8proc2 libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0
#   libpcre2-posix3 pkgconf pkgconf-bin libpkgconf3)
# and are unpacked into /tmp/deps, never into /. Fixtures travel in
# .fixtures/models (a copy of ../shared/fixtures/models). Logs go to $OUT.
#
# Env: KC_ARGS (extra memra-kernel-check arguments, e.g. "--bench"),
# FAST_PREFILL_TOL (prefill bound of the fast-mode model run, default 5e-3),
# SKIP_MODELS=1, SKIP_KC=1, SKIP_BATCH_TESTS=1, SKIP_MOE=1, SKIP_BENCH=1, SKIP_SWITCHES=1 (not the
# bit-for-bit comparisons of the side stream, the fused route and shared heads
# against their other settings, nor the fixtures under the other attention
# settings: their kernel-check cases still run), SKIP_VS=1 (no kernel-check
# group rerun under another setting, to compare its lines or to check that
# setting: the whole check still runs once), SKIP_SYNTH_BITS=1, ROWMAPS (the
# Q8_0 row-map switches compared, default all), SYNTH=path (reuse a model),
# BUILD (the build folder, default /tmp/build-gpu), BATCH (batched bench's B list, default 1,8,32; empty: none),
# BENCH_REPS (default 3), BENCH_DEPTHS (default "0 512"), PREBUILT=dir (binaries
# built elsewhere, laid out as a build folder: scripts/prebuilt.sh; no build).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-check-out}
mkdir -p "$OUT"
summary=()
note() { summary+=("$*"); echo "== $*"; }
# The kernel-check group TEST under the settings BASE (VAR=VALUE,
# space-separated; empty: the defaults), run once for the checks that
# compare a setting's lines with them: $OUT/kc-TEST-TAG.txt
rm -f "$OUT"/kc-*-base-*.txt
kc_tag() { echo "${1:-default}" | tr -c 'A-Za-z0-9\n' _; }
kc_base() {
  local t=$1 base=${2:-} f
  f="$OUT/kc-$t-base-$(kc_tag "$base")"
  [ -f "$f.txt" ] && return
  env $base timeout 200 $B/probes/memra-kernel-check --test=$t >"$f.log" 2>&1
  grep -E "^$t" "$f.log" >"$f.txt"
}
# The group TEST under the settings SW on top of BASE (default: none): a
# setting that keeps the bits prints BASE's lines. EXCEPT (an extended
# regex of case names, optional): cases the setting moves on purpose,
# left out of the comparison and counted as passing or not on their own.
kc_vs() {
  local sw=$1 t=$2 base=${3:-} ex=${4:-} f a r
  [ "${SKIP_VS:-0}" = 1 ] && return
  kc_base "$t" "$base"
  f="$OUT/kc-$t-base-$(kc_tag "$base")"
  a="$OUT/kc-$t-$(kc_tag "${base:+$base }$sw")"
  env $base $sw timeout 200 $B/probes/memra-kernel-check --test=$t >"$a.log" 2>&1
  grep -E "^$t" "$a.log" >"$a.txt"
  if [ -n "$ex" ]; then
    grep -vE "^$ex[ .]" "$f.txt" >/tmp/kc-b.txt
    grep -vE "^$ex[ .]" "$a.txt" >/tmp/kc-a.txt
  else
    cp "$f.txt" /tmp/kc-b.txt && cp "$a.txt" /tmp/kc-a.txt
  fi
  cmp -s /tmp/kc-b.txt /tmp/kc-a.txt && r="the same lines ($(wc -l </tmp/kc-a.txt) cases)" ||
    r="DIFFER: $(diff /tmp/kc-b.txt /tmp/kc-a.txt | grep -c '^>') lines"
  [ -n "$ex" ] && r="$r, but for $ex: $(grep -E "^$ex[ .]" "$a.txt" | grep -vc ' ok$') of $(grep -cE "^$ex[ .]" "$a.txt") lines not ok"
  note "kernel-check $t${base:+ ($base)}, $sw against ${base:-the default}: $r; $(tail -1 "$a.log")"
}
kc_attn_vs() { kc_vs "$1" attention; }
# N random token ids below V from seed S (the same list every run): S V N
rand_toks() { python3 -c "import random; random.seed($1); print(' '.join(str(random.randrange($2)) for _ in range($3)))"; }
# a small memra-synth file (vocab 4096): MODEL TYPE LAYERS OUT [more memra-synth options]
synth_small() {
  local m=$1 t=$2 l=$3 o=$4
  shift 4
  $B/examples/memra-synth --model "$m" --type "$t" --layers "$l" --vocab 4096 "$@" --out "$o" >/dev/null 2>&1
}

# ---- dependencies --------------------------------------------------------
. scripts/gpu-env.sh || exit 2
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/gpu.txt"

# ---- build ------------------------------------------------------------------
t0=$(date +%s)
# the build lives under /tmp: a warm device machine keeps it between
# calls, while each call replaces the working tree
BUILD=${BUILD:-/tmp/build-gpu}
B=${PREBUILT:-$BUILD}
if [ -n "${PREBUILT:-}" ]; then
  note "build: prebuilt $B ($(cat "$B/REV" 2>/dev/null))"
else
  if [ ! -f "$BUILD/build.ninja" ]; then
    # the sm_90a code only: the embedded PTX is for other GPUs (a fifth of nvcc's time)
    meson setup "$BUILD" -Dcuda=enabled -Dserver=disabled -Dembed_ptx=false >"$OUT/build.log" 2>&1 ||
      { tail -40 "$OUT/build.log"; exit 2; }
  fi
  if ! ninja -C "$BUILD" >>"$OUT/build.log" 2>&1; then
    grep -E "error|FAILED" "$OUT/build.log" | head -40
    exit 2
  fi
  note "build: ok ($(( $(date +%s) - t0 )) s)"
fi

# ---- kernel check -------------------------------------------------------------
kc_rc=0
if [ "${SKIP_KC:-0}" != 1 ]; then
  t0=$(date +%s)
  timeout 300 $B/probes/memra-kernel-check ${KC_ARGS:-} >"$OUT/kernel-check.log" 2>&1
  kc_rc=$?
  grep -vE " ok( |$)" "$OUT/kernel-check.log" | tail -30
  note "kernel-check: rc $kc_rc, $(tail -1 "$OUT/kernel-check.log") ($(( $(date +%s) - t0 )) s)"
fi

# ---- model fixtures on the GPU engine ----------------------------------------------
if [ "${SKIP_MODELS:-0}" != 1 ]; then
  for mode in fast exact; do
    t0=$(date +%s)
    if [ $mode = fast ]; then
      env MEMRA_TEST_DEVICE=cuda:0 MEMRA_FIXTURES="$PWD/.fixtures" MEMRA_FAST=1 \
        MEMRA_TEST_PREFILL_TOL="${FAST_PREFILL_TOL:-5e-3}" $B/test/test_models >"$OUT/models-$mode.log" 2>&1
    else
      env MEMRA_TEST_DEVICE=cuda:0 MEMRA_FIXTURES="$PWD/.fixtures" MEMRA_FAST=0 \
        $B/test/test_models >"$OUT/models-$mode.log" 2>&1
    fi
    rc=$?
    grep -E "^ACCURACY|FAILED|PASSED|SKIPPED|\[  (FAILED|ERROR) \]|fail|differs" "$OUT/models-$mode.log" | head -40
    note "models $mode: rc $rc, $(grep -cE '^\[       OK \]' "$OUT/models-$mode.log") ok, $(grep -cE '^\[  FAILED  \]' "$OUT/models-$mode.log") failed lines ($(( $(date +%s) - t0 )) s)"
  done
fi

# ---- batched steps, forks, deferred steps on the GPU engine, both modes ----------------
# (exact tier: each batched row bit for bit against the sequence run alone;
# test_batch_fast: the batched fast rows within their bound, composition-invariant)
if [ "${SKIP_BATCH_TESTS:-0}" != 1 ]; then
  for mode in 1 0; do
    for t in test_batch test_batch_fast test_batch_deferred test_cache_fork test_kv_pool test_graph; do
      env MEMRA_TEST_DEVICE=cuda:0 MEMRA_FIXTURES="$PWD/.fixtures" MEMRA_FAST=$mode timeout 300 $B/test/$t \
        >"$OUT/$t-$mode.log" 2>&1
      rc=$?
      note "$t fast=$mode: rc $rc, $(grep -cE '^\[       OK \]' "$OUT/$t-$mode.log") ok, $(grep -cE '^\[  FAILED  \]' "$OUT/$t-$mode.log") failed"
    done
  done
fi

# ---- the side branch off (MEMRA_SIDE_STREAM=0: gemma4's router in order on one stream) ----
# the fixtures in exact mode and the batched rows against the sequences run
# alone with it off (the runs above have it on, the default; the MoE check
# below compares the 26B-A4B's logits with and without it bit for bit)
if [ "${SKIP_MODELS:-0}" != 1 ] && [ "${SKIP_BATCH_TESTS:-0}" != 1 ] && [ "${SKIP_SWITCHES:-0}" != 1 ]; then
  env MEMRA_TEST_DEVICE=cuda:0 MEMRA_FIXTURES="$PWD/.fixtures" MEMRA_FAST=0 MEMRA_SIDE_STREAM=0 \
    $B/test/test_models >"$OUT/models-noside.log" 2>&1
  note "models exact, side stream off: rc $?, $(grep -cE '^\[       OK \]' "$OUT/models-noside.log") ok, $(grep -cE '^\[  FAILED  \]' "$OUT/models-noside.log") failed"
  for mode in 1 0; do
    env MEMRA_TEST_DEVICE=cuda:0 MEMRA_FIXTURES="$PWD/.fixtures" MEMRA_FAST=$mode MEMRA_SIDE_STREAM=0 timeout 300 \
      $B/test/test_batch >"$OUT/test_batch-noside-$mode.log" 2>&1
    note "test_batch fast=$mode, side stream off: rc $?, $(grep -cE '^\[       OK \]' "$OUT/test_batch-noside-$mode.log") ok, $(grep -cE '^\[  FAILED  \]' "$OUT/test_batch-noside-$mode.log") failed"
  done
fi

# ---- the route in the router's launch (MEMRA_ROUTE_FUSE=1, off by default) ----
# its kernel-check cases and the fixtures in exact mode with it on (the MoE
# check below compares both MoE models' decode logits with and without it)
if [ "${SKIP_MODELS:-0}" != 1 ] && [ "${SKIP_SWITCHES:-0}" != 1 ]; then
  MEMRA_ROUTE_FUSE=1 timeout 120 $B/probes/memra-kernel-check --test=router >"$OUT/kc-router-fused.log" 2>&1
  note "kernel-check router, MEMRA_ROUTE_FUSE=1: rc $?, $(tail -1 "$OUT/kc-router-fused.log")"
  env MEMRA_TEST_DEVICE=cuda:0 MEMRA_FIXTURES="$PWD/.fixtures" MEMRA_FAST=0 MEMRA_ROUTE_FUSE=1 \
    $B/test/test_models >"$OUT/models-routefuse.log" 2>&1
  note "models exact, MEMRA_ROUTE_FUSE=1: rc $?, $(grep -cE '^\[       OK \]' "$OUT/models-routefuse.log") ok, $(grep -cE '^\[  FAILED  \]' "$OUT/models-routefuse.log") failed"
fi

# ---- one head a block (MEMRA_FA_HEADS=1) against a GQA group's heads a block ----
# the attention cases print the same errors both ways (the same bits: the
# heads' sums do not depend on how many share a block), and so does a whole
# forward past 1024 keys (the fixtures never reach the shared-heads kernel)
if [ "${SKIP_KC:-0}" != 1 ] && [ "${SKIP_MODELS:-0}" != 1 ] && [ "${SKIP_SWITCHES:-0}" != 1 ]; then
  kc_attn_vs MEMRA_FA_HEADS=1 # against 4, the default
  # a 4-layer Qwen3.6-27B shape (one attention layer, 24/4 heads): decode and
  # exact prefill logits bit for bit with one and with shared heads a block
  f=/tmp/heads-check.gguf
  toks=$(rand_toks 2 4096 1300)
  if synth_small qwen3.6-27b q8_0 4 "$f"; then
    for mode in decode prefill; do
      for h in 1 4; do
        MEMRA_FAST=0 MEMRA_FA_HEADS=$h $B/examples/memra-logits -m "$f" --tokens "$toks" --mode $mode --device cuda:0 \
          --out /tmp/heads$h.f32 >/dev/null 2>&1 || rm -f /tmp/heads$h.f32
      done
      [ -s /tmp/heads1.f32 ] && cmp -s /tmp/heads1.f32 /tmp/heads4.f32 && r="bit for bit" || r="DIFFER (or failed)"
      note "shared heads against one head a block, 1300 tokens, $mode logits (exact): $r"
      rm -f /tmp/heads1.f32 /tmp/heads4.f32
    done
  else
    note "shared heads check: memra-synth failed"
  fi
  rm -f "$f"
fi

# ---- fast prefill attention's other paths: q's f16 remainder kept ----
# (MEMRA_FA_TC_QLO=1) and the paired kernel's keys unsplit
# (MEMRA_FA_TC_SPLIT=0): the attention cases against the CPU (the fast
# cases' bound) and the fixtures in fast mode with each
for sw in MEMRA_FA_TC_QLO=1 MEMRA_FA_TC_SPLIT=0; do
  tag=${sw//=/_}
  if [ "${SKIP_KC:-0}" != 1 ] && [ "${SKIP_VS:-0}" != 1 ]; then
    env $sw timeout 150 $B/probes/memra-kernel-check --test=attention >"$OUT/kc-attn-$tag.log" 2>&1
    note "kernel-check attention, $sw: rc $?, $(tail -1 "$OUT/kc-attn-$tag.log")"
  fi
  if [ "${SKIP_MODELS:-0}" != 1 ] && [ "${SKIP_SWITCHES:-0}" != 1 ]; then
    env MEMRA_TEST_DEVICE=cuda:0 MEMRA_FIXTURES="$PWD/.fixtures" MEMRA_FAST=1 $sw \
      MEMRA_TEST_PREFILL_TOL="${FAST_PREFILL_TOL:-5e-3}" $B/test/test_models >"$OUT/models-fast-$tag.log" 2>&1
    note "models fast, $sw: rc $?, $(grep -cE '^\[       OK \]' "$OUT/models-fast-$tag.log") ok, $(grep -cE '^\[  FAILED  \]' "$OUT/models-fast-$tag.log") failed"
  fi
done

# ---- the paired kernel's K and V tiles through registers (MEMRA_FA_TC_PIPE=0) ----
# the default copies an f16 cache's tiles by cp.async: the same arithmetic
# in the same order, so the attention cases must print the same errors
# both ways (bit for bit), and the fixtures stay within their fast bound
if [ "${SKIP_KC:-0}" != 1 ]; then
  kc_attn_vs MEMRA_FA_TC_PIPE=0
  # one query tile a block against two (the default): each row's
  # arithmetic is the one-tile block's
  kc_attn_vs MEMRA_FA_TC_M32=0
  # every key's mask test against the default's wholly seen tiles without
  # it: the same products
  kc_attn_vs MEMRA_FA_TC_FULL=0
fi
if [ "${SKIP_MODELS:-0}" != 1 ] && [ "${SKIP_SWITCHES:-0}" != 1 ]; then
  env MEMRA_TEST_DEVICE=cuda:0 MEMRA_FIXTURES="$PWD/.fixtures" MEMRA_FAST=1 MEMRA_FA_TC_PIPE=0 \
    MEMRA_TEST_PREFILL_TOL="${FAST_PREFILL_TOL:-5e-3}" $B/test/test_models >"$OUT/models-fast-pipe0.log" 2>&1
  note "models fast, MEMRA_FA_TC_PIPE=0: rc $?, $(grep -cE '^\[       OK \]' "$OUT/models-fast-pipe0.log") ok, $(grep -cE '^\[  FAILED  \]' "$OUT/models-fast-pipe0.log") failed"
fi

# ---- K-quant (and Q4_0) weights into the tensor-core GEMMs as words a tile ahead ----
# (the default; MEMRA_GQ_KQ_WORDS=0 the byte loads): the same decode
# arithmetic both ways, so the MoE prefill cases and the K-quant dense
# prefill matmuls on mmq print the same lines both ways
if [ "${SKIP_KC:-0}" != 1 ]; then
  for t in moe.fast matmul.q4_k.prefill_fast matmul.q6_k.prefill_fast matmul.q4_0.prefill_fast; do
    kc_vs MEMRA_GQ_KQ_WORDS=0 "$t" MEMRA_FAST_GEMM=mmq
  done
fi

# ---- packed K-quant MoE decode items ----------------------------------------
# (the default; MEMRA_MOE_KQ_PACK=0 the one-item walk): rows of at most 4
# super-blocks several items a ring slot,
# each item's lanes doing the one-item walk's arithmetic, so the fused MoE
# cases print the same lines both ways (and each still equals the
# unfused sequence bit for bit)
if [ "${SKIP_KC:-0}" != 1 ]; then
  kc_vs MEMRA_MOE_KQ_PACK=0 moe.fused
fi

# ---- packed short segments of the K-quant matvec (MEMRA_MMV_KQ_PACK) ----
# one x row's rows that end in 1-4 short super-blocks take several row
# pairs' short segments in one pass, each lane's term added where
# mmv_kq_kernel adds it; by default only launches of many row pairs a warp
# (the heads), so the kernel check's cases take it with
# MEMRA_MMV_KQ_PACK_MIN=0 against MEMRA_MMV_KQ_PACK=0 (their pack_* cases
# several row pairs a warp) and print the same lines as without it
if [ "${SKIP_KC:-0}" != 1 ]; then
  for t in matmul.kq matmul_ex.kq; do
    kc_vs "MEMRA_MMV_KQ_PACK=1 MEMRA_MMV_KQ_PACK_MIN=0" "$t" MEMRA_MMV_KQ_PACK=0
  done
fi

# ---- packed Q8_0 MoE items a ring slot at a time (the default) ----
# against mmv_moe_kernel's packed passes (MEMRA_MOE_SLOT=0): the same
# arithmetic with one barrier and G lanes' copies a pass, so the fused MoE
# cases print the same lines both ways (each fused launch still the
# unfused sequence bit for bit), and the fixtures in exact mode (their MoE
# rows are packed on both launches) pass with it off
if [ "${SKIP_KC:-0}" != 1 ]; then
  kc_vs MEMRA_MOE_SLOT=0 moe.fused
fi
# the down launch's rows form (adjacent rows of a slot a copy) always and
# never, against the default's choice by grid size: the same lines
if [ "${SKIP_KC:-0}" != 1 ]; then
  kc_vs MEMRA_MOE_DOWN_ROWS=2 moe.fused
  kc_vs MEMRA_MOE_DOWN_ROWS=0 moe.fused
fi
if [ "${SKIP_MODELS:-0}" != 1 ] && [ "${SKIP_SWITCHES:-0}" != 1 ]; then
  env MEMRA_TEST_DEVICE=cuda:0 MEMRA_FIXTURES="$PWD/.fixtures" MEMRA_FAST=0 MEMRA_MOE_SLOT=0 \
    $B/test/test_models >"$OUT/models-moeslot.log" 2>&1
  note "models exact, MEMRA_MOE_SLOT=0: rc $?, $(grep -cE '^\[       OK \]' "$OUT/models-moeslot.log") ok, $(grep -cE '^\[  FAILED  \]' "$OUT/models-moeslot.log") failed"
fi

# ---- the route's redux picks and kept exps (the default) ----------
# against the plain route (MEMRA_ROUTE_REDUX=0): the same values, sums and
# picks, so the route and router cases print the same lines both ways
if [ "${SKIP_KC:-0}" != 1 ]; then
  for t in route router; do
    kc_vs MEMRA_ROUTE_REDUX=0 "$t"
  done
fi

# ---- the batched Q8_0 kernel on rows off 16 bytes (MEMRA_MMV_Q8B_OFF=1) ----
# (off by default until this has passed on the device): widths of part
# 8-block groups and rows 4-12 bytes off 16 (the 26B-A4B's 2112-wide
# ffn_down) on the batched kernel instead of the generic one, both with
# each row's one-row bits, so the matmul cases print the same lines both
# ways; and the batched rows against the sequences run alone with it on
if [ "${SKIP_KC:-0}" != 1 ]; then
  for t in matmul.rowinv matmul_ex.rowinv matmul.q8_0; do
    kc_vs MEMRA_MMV_Q8B_OFF=1 "$t"
  done
fi

# ---- a step's small matvecs on the generic kernel (MEMRA_MMV_Q8D_COLS=0) ----
# against the default, one x row a block column of mmv_q8d_kernel: each
# row the one-row launch's bits either way, so matmul_ex (its .step cases)
# prints the same lines both ways
if [ "${SKIP_KC:-0}" != 1 ]; then
  kc_vs MEMRA_MMV_Q8D_COLS=0 matmul_ex
fi

# ---- gsw_kernel staging float x itself (MEMRA_GSW_XF, the default) ----
# against the prep launch (MEMRA_GSW_XF=0): the same f16 rounding of each
# element, so the batched fast steps' matmul cases print the same lines
# both ways
if [ "${SKIP_KC:-0}" != 1 ]; then
  kc_vs MEMRA_GSW_XF=0 matmul_ex
  # Q8_0 rows off 16 bytes / widths not of 256 on gsw_kernel's ODD form (the
  # default) against the one-row matvecs (MEMRA_GSW_ODD=0): those cases'
  # values are the fast tier's one way and the exact matvecs' the other
  kc_vs MEMRA_GSW_ODD=0 matmul_ex "" 'matmul_ex\.gs\.q8_0\.(g26_down_r[0-9]+|w1344_geglu_r5|w192_proj4_r13)'
  # steps of 17-32 rows: the split-K partials a slice at a time (the
  # default) against the loop the smaller instances keep, the same sums
  kc_vs MEMRA_GSW_FIN=0 matmul_ex
  # Q4_K / Q5_K / Q6_K batched rows on gs_kernel (MEMRA_BATCH_GSWK=0;
  # Q6_K rows off 16 on the matvecs) against gsw_kernel's K-quant form (the
  # default, cuda/gemm_swk.cu): those cases' values move (gs_kernel
  # rounds each weight to f16), every other line stays
  kc_vs MEMRA_BATCH_GSWK=0 matmul_ex "" 'matmul_ex\.gs\.q[456]_k\.[a-z0-9_]+'
  # batched Gated DeltaNet steps from 16 items on the two-blocks-an-SM
  # instance (the default) against the one-block instance: the same
  # operations
  kc_vs MEMRA_GDN_BATCH_MINB2=0 gdn
  # batched steps with a head's rows in one block where that needs fewer
  # waves (the default) against never (=0) and whenever it fits (=2):
  # delta_row sums as the two-block plan's lanes, the same bits
  kc_vs MEMRA_GDN_BATCH_WHOLE=0 gdn
  kc_vs MEMRA_GDN_BATCH_WHOLE=2 gdn
  # the route's picks by rank (the default) against warp 0's rounds: the
  # same ids and weights
  kc_vs MEMRA_ROUTE_RANK=0 route
  kc_vs MEMRA_ROUTE_RANK=0 moe
fi

# ---- norm_ex chains with their rows in shared memory (cuda/norm_chain.cu) ----
# (chains of two or more steps by default; MEMRA_NORM_SMEM=0 none, =2 every
# launch): every element the sequence's arithmetic, so the norm_ex and
# norm_chain cases print the same lines every way (each fused case still
# equal to the sequence bit for bit), and the fixtures (gemma4's among
# them) pass with the other forms in both modes
if [ "${SKIP_KC:-0}" != 1 ]; then
  for t in norm_ex norm_chain; do
    kc_vs MEMRA_NORM_SMEM=0 "$t"
    kc_vs MEMRA_NORM_SMEM=2 "$t"
  done
fi
# ---- Q4_0 on the K-quant matvec's lanes (the kernel check's *.kq.q4_0 cases) ----
# on 6-layer memra-synth Q4_0 files: exact decode == exact prefill in
# chunks of 13 bit for bit (every exact path takes the same lanes), and the
# exact prefill against the CPU reference within the generic kernel's
# error (MEMRA_MMV_KFAST=0; logits-compare.py's baseline bound)
if [ "${SKIP_SYNTH_BITS:-0}" != 1 ]; then
  toks=$(rand_toks 7 4096 40)
  for m in qwen3.5-9b gemma-4-e4b qwen3.6-35b-a3b; do
    f=/tmp/q40-check.gguf
    if ! synth_small $m q4_0 6 "$f" --experts 32; then
      note "Q4_0 lanes: memra-synth $m failed"
      continue
    fi
    lg() { # MEMRA_MMV_KFAST's value, then memra-logits' arguments
      local q=$1
      shift
      env MEMRA_FAST=0 MEMRA_MMV_KFAST=$q $B/examples/memra-logits -m "$f" --tokens "$toks" "$@" >/dev/null 2>&1
    }
    lg 1 --mode decode --device cuda:0 --out /tmp/q40d.f32 || rm -f /tmp/q40d.f32
    lg 1 --mode prefill --chunk 13 --device cuda:0 --out /tmp/q40p.f32 || rm -f /tmp/q40p.f32
    lg 0 --mode prefill --chunk 13 --device cuda:0 --out /tmp/q40g.f32
    lg 1 --mode prefill --device cpu --out /tmp/q40c.f32
    [ -s /tmp/q40d.f32 ] && cmp -s /tmp/q40d.f32 /tmp/q40p.f32 && r="bit for bit" || r="DIFFER (or failed)"
    note "$m Q4_0 (6 layers): exact decode against exact prefill (chunks of 13): $r; against the CPU: $(scripts/logits-compare.py /tmp/q40c.f32 /tmp/q40p.f32 --vocab 4096 --baseline /tmp/q40g.f32 2>&1 | tail -1)"
    rm -f "$f" /tmp/q40?.f32
  done
fi

# ---- the step's K and V stores in the qk_norm_rope launch (the default) ----
# (MEMRA_QK_STORE=0: the launch, then kv_store): kv_store's conversions a
# head's span at a time in the part blocks (V rows no part writes: blocks
# of their own), so the cache bytes equal the sequence's
if [ "${SKIP_KC:-0}" != 1 ]; then
  kc_vs MEMRA_QK_STORE=0 qk_norm_rope
fi
if [ "${SKIP_MODELS:-0}" != 1 ] && [ "${SKIP_SWITCHES:-0}" != 1 ]; then
  for mode in 0 1; do
    env MEMRA_TEST_DEVICE=cuda:0 MEMRA_FIXTURES="$PWD/.fixtures" MEMRA_FAST=$mode MEMRA_NORM_SMEM=2 MEMRA_QK_STORE=0 \
      MEMRA_TEST_PREFILL_TOL="${FAST_PREFILL_TOL:-5e-3}" $B/test/test_models >"$OUT/models-normsmem-$mode.log" 2>&1
    note "models fast=$mode, NORM_SMEM=2 and QK_STORE=0: rc $?, $(grep -cE '^\[       OK \]' "$OUT/models-normsmem-$mode.log") ok, $(grep -cE '^\[  FAILED  \]' "$OUT/models-normsmem-$mode.log") failed"
  done
fi

# The other forms of the same two through whole forwards on memra-synth
# files (no fixtures needed, so a prebuilt library runs it too): decode and
# prefill logits (decode in both tiers, fast prefill) bit for bit with both
# switched, and each alone in fast decode; every arch that takes one (qwen3.5's
# attention layers take the K/V stores). SKIP_SYNTH_BITS=1 skips it.
if [ "${SKIP_SYNTH_BITS:-0}" != 1 ]; then
  toks=$(rand_toks 5 4096 40)
  both="MEMRA_NORM_SMEM=2 MEMRA_QK_STORE=0"
  for m in gemma-4-e4b gemma-4-26b-a4b gemma-4-31b qwen3.5-9b; do
    f=/tmp/sw-bits.gguf
    if ! synth_small $m q8_0 6 "$f" --experts 32; then
      note "decode forms on synth files: memra-synth $m failed"
      continue
    fi
    bad=()
    n=0
    for run in "0 decode" "1 decode" "1 prefill"; do
      read -r fast mode <<<"$run"
      sws=("$both")
      [ $fast = 1 ] && [ $mode = decode ] && sws+=($both MEMRA_NORM_SMEM=0)
      MEMRA_FAST=$fast $B/examples/memra-logits -m "$f" --tokens "$toks" --mode $mode --device cuda:0 \
        --out /tmp/sw0.f32 >/dev/null 2>&1 || rm -f /tmp/sw0.f32
      for sw in "${sws[@]}"; do
        env MEMRA_FAST=$fast $sw $B/examples/memra-logits -m "$f" --tokens "$toks" --mode $mode \
          --device cuda:0 --out /tmp/sw1.f32 >/dev/null 2>&1 || rm -f /tmp/sw1.f32
        n=$((n + 1))
        [ -s /tmp/sw0.f32 ] && cmp -s /tmp/sw0.f32 /tmp/sw1.f32 || bad+=("fast=$fast $mode [$sw]")
        rm -f /tmp/sw1.f32
      done
    done
    if [ ${#bad[@]} = 0 ]; then
      note "NORM_SMEM=0/2, QK_STORE=0 on $m (6 layers, memra-synth): $n runs' logits bit for bit as the default"
    else
      note "NORM_SMEM=0/2, QK_STORE=0 on $m (6 layers): DIFFER (or failed) in ${#bad[@]} of $n: ${bad[*]}"
    fi
    rm -f "$f" /tmp/sw0.f32
  done
fi

if [ "${SKIP_BATCH_TESTS:-0}" != 1 ]; then
  for mode in 1 0; do
    env MEMRA_TEST_DEVICE=cuda:0 MEMRA_FIXTURES="$PWD/.fixtures" MEMRA_FAST=$mode MEMRA_MMV_Q8B_OFF=1 timeout 300 \
      $B/test/test_batch >"$OUT/test_batch-q8boff-$mode.log" 2>&1
    note "test_batch fast=$mode, MEMRA_MMV_Q8B_OFF=1: rc $?, $(grep -cE '^\[       OK \]' "$OUT/test_batch-q8boff-$mode.log") ok, $(grep -cE '^\[  FAILED  \]' "$OUT/test_batch-q8boff-$mode.log") failed"
  done
fi

# ---- fast prefill's row-local kernels against their older forms ----------
# a warp per norm row (MEMRA_NORM_WARP), elementwise rows as one long row
# in 16-byte loads (MEMRA_EW_FLAT), Q8_0 tiles to f16 by streaming warps
# (MEMRA_DEQ_Q8): the same arithmetic per element, so each kernel-check
# group prints the same lines with the switch off and on
if [ "${SKIP_KC:-0}" != 1 ] && [ "${SKIP_SWITCHES:-0}" != 1 ]; then
  for sw in MEMRA_NORM_WARP:norm MEMRA_EW_FLAT:elementwise MEMRA_DEQ_Q8:matmul; do
    kc_vs "${sw%%:*}=0" "${sw#*:}" # each on by default
  done
fi

# ---- the Q8_0 fast path's row maps and items against the plain ones --------
# wide blocks (MEMRA_MMV_Q8D_WIDE: one-block-an-SM launches, x of 16384
# floats and more, on 16 warps) and the spread map (MEMRA_MMV_SPREAD:
# launches whose rows need fewer blocks than fit, on every block that
# fits) change only which warp computes a row's pair dots: the kernel
# check's matmul lines and whole forwards' decode logits must be the same
# bits with each off and on (entries
# SWITCH:MARKER:MODELS, MARKER the MEMRA_MMV_DEBUG line of a launch it
# takes; ROWMAPS picks entries by switch name, default all)
if [ "${SKIP_KC:-0}" != 1 ] && [ "${SKIP_MODELS:-0}" != 1 ]; then
  toks=$(rand_toks 3 4096 40)
  for sw in "MEMRA_MMV_Q8D_WIDE:q8d wide:gemma-4-31b qwen3.6-27b" \
    "MEMRA_MMV_SPREAD:mode 3:gemma-4-e4b qwen3.6-35b-a3b"; do
    [ -n "${ROWMAPS:-}" ] && [[ " $ROWMAPS " != *" ${sw%%:*} "* ]] && continue
    IFS=: read -r var marker models <<<"$sw"
    kc_vs "$var=0" matmul # on by default
    for m in $models; do
      f=/tmp/rowmap-check.gguf
      if synth_small $m q8_0 6 "$f"; then
        for w in 0 1; do
          env MEMRA_FAST=0 $var=$w MEMRA_MMV_DEBUG=$w $B/examples/memra-logits -m "$f" --tokens "$toks" \
            --mode decode --device cuda:0 --out /tmp/rm$w.f32 >/dev/null 2>"$OUT/rowmap-$var-$m-$w.err" || rm -f /tmp/rm$w.f32
        done
        nw=$(grep -c "$marker" "$OUT/rowmap-$var-$m-1.err")
        [ -s /tmp/rm0.f32 ] && cmp -s /tmp/rm0.f32 /tmp/rm1.f32 && r="bit for bit" || r="DIFFER (or failed)"
        note "$var=1 against 0, $m (6 layers), 40 decode steps' logits: $r ($nw launches take it)"
        rm -f /tmp/rm0.f32 /tmp/rm1.f32 "$f"
      else
        note "$var check: memra-synth $m failed"
      fi
    done
  done
fi

# ---- MoE prefill at released shapes (two layers): fast GPU vs CPU reference ----
# The fixtures' experts are float32, which the fast tier runs in float32;
# this runs the grouped tensor-core GEMMs (Q8_0 experts) through whole
# forwards. The same fast forward with the experts on the float32 matvecs
# (MEMRA_MOE_GEMM=0) is the baseline: the dense f16 GEMMs' own error (a
# gemma4 synth model's attention, scale 1 over 256-wide heads, amplifies
# it). Bound: logits' rms error within max(1e-2, 1.5 x the baseline's) of
# the reference's rms, top-1 agreement on 90 % of 200 positions.
if [ "${SKIP_MOE:-0}" != 1 ]; then
  toks=$(rand_toks 1 256 200)
  for m in qwen3.6-35b-a3b qwen3.5-122b-a10b gemma-4-26b-a4b; do
    f=/tmp/moe-check-$m.gguf
    synth_small $m q8_0 2 "$f" --experts 32 &&
      $B/examples/memra-logits -m "$f" --tokens "$toks" --mode prefill --device cpu --out /tmp/moe-ref.f32 >/dev/null &&
      MEMRA_FAST=1 $B/examples/memra-logits -m "$f" --tokens "$toks" --mode prefill --device cuda:0 \
        --out /tmp/moe-fast.f32 >/dev/null &&
      MEMRA_FAST=1 MEMRA_MOE_GEMM=0 $B/examples/memra-logits -m "$f" --tokens "$toks" --mode prefill \
        --device cuda:0 --out /tmp/moe-base.f32 >/dev/null
    note "moe fast prefill vs cpu, $m (2 layers, 32 experts): $(scripts/logits-compare.py /tmp/moe-ref.f32 \
      /tmp/moe-fast.f32 --vocab 4096 --baseline /tmp/moe-base.f32 2>&1)"
    # the router's route in its launch changes no arithmetic either, nor do
    # the older forms of the MoE decode path's defaults: the plain route
    # (not its redux picks), mmv_moe_kernel's packed passes (not a slot at
    # a time)
    MEMRA_ROUTE_FUSE=0 $B/examples/memra-logits -m "$f" --tokens "$toks" --mode decode --device cuda:0 \
      --out /tmp/rf0.f32 >/dev/null 2>&1
    for sw in MEMRA_ROUTE_FUSE=1 MEMRA_ROUTE_REDUX=0 MEMRA_MOE_SLOT=0; do
      env $sw $B/examples/memra-logits -m "$f" --tokens "$toks" --mode decode --device cuda:0 \
        --out /tmp/rf1.f32 >/dev/null 2>&1
      cmp -s /tmp/rf0.f32 /tmp/rf1.f32 && r="bit for bit as without" || r="DIFFER (or failed)"
      note "$sw, $m decode logits: $r"
      rm -f /tmp/rf1.f32
    done
    rm -f /tmp/rf0.f32
    # the side branch changes no arithmetic: the logits bit for bit as without it
    if [ $m = gemma-4-26b-a4b ]; then
      for mode in decode prefill; do
        for side in 0 1; do
          MEMRA_SIDE_STREAM=$side $B/examples/memra-logits -m "$f" --tokens "$toks" --mode $mode --device cuda:0 \
            --out /tmp/side$side.f32 >/dev/null 2>&1
        done
        cmp -s /tmp/side0.f32 /tmp/side1.f32 && r="bit for bit as without" || r="DIFFER (or failed)"
        note "side stream, $m $mode logits: $r"
      done
      rm -f /tmp/side0.f32 /tmp/side1.f32
    fi
    rm -f "$f" /tmp/moe-ref.f32 /tmp/moe-fast.f32 /tmp/moe-base.f32
  done
fi

# ---- benchmark: memra-synth Qwen3.5-9B Q8_0 ----------------------------------
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  model=${SYNTH:-/tmp/q35-9b-q8_0.gguf}
  if [ ! -f "$model" ]; then
    t0=$(date +%s)
    $B/examples/memra-synth --model qwen3.5-9b --type q8_0 --out "$model" >"$OUT/synth.log" 2>&1 ||
      { tail -5 "$OUT/synth.log"; exit 2; }
    note "synth qwen3.5-9b q8_0 ($(( $(date +%s) - t0 )) s)"
  fi
  for d in ${BENCH_DEPTHS:-0 512}; do
    $B/examples/memra-bench -m "$model" --device cuda:0 -p 512 -n 128 -d "$d" -r "${BENCH_REPS:-3}" --json \
      >"$OUT/bench-d$d.json" 2>"$OUT/bench-d$d.err"
    rc=$?
    line=$(python3 - "$OUT/bench-d$d.json" 2>/dev/null <<'PY'
import json, sys
b = json.load(open(sys.argv[1]))
print("pp%d %.0f tok/s, tg%d at depth %d %.1f tok/s = %.1f%% of the %.0f tok/s roofline (copy %.2f TB/s, %.2f GB/token)" % (
    b["pp"]["n_prompt"], b["pp"]["tok_s"], b["tg"]["n_gen"], b["tg"]["depth"], b["tg"]["tok_s"],
    100 * b["roofline_frac"], b["roofline_tok_s"], b["copy_bw_bytes_s"] / 1e12, b["decode_bytes_per_token"] / 1e9))
PY
)
    note "bench: rc $rc, ${line:-$(tail -2 "$OUT/bench-d$d.err")}"
  done
  # batched decode (memra_forward_batch): aggregate tok/s per B
  if [ -n "${BATCH-1,8,32}" ]; then
    $B/examples/memra-bench -m "$model" --device cuda:0 -p 128 -n 64 -r 1 --batch "${BATCH-1,8,32}" \
      >"$OUT/bench-batch.txt" 2>&1
    note "bench batched (p128, tg64 aggregate): $(grep -E ' tg64 ' "$OUT/bench-batch.txt" | awk '{printf "B=%s %s  ", $2, $4}')"
  fi
  # one profile of decode alone, one of prefill alone
  for run in "tg:-p 0 -n 128" "pp:-p 512 -n 0"; do
    MEMRA_CUDA_PROFILE=1 $B/examples/memra-bench -m "$model" --device cuda:0 ${run#*:} -r 1 \
      >"$OUT/profile-${run%%:*}.txt" 2>&1
    note "profile ${run%%:*}: $(grep -m1 '^memra cuda profile' "$OUT/profile-${run%%:*}.txt" | cut -d: -f2-)"
    grep -A16 '^ *total_ms' "$OUT/profile-${run%%:*}.txt"
  done
fi

# the fixtures' accuracy lines, then the summary last (a caller that keeps
# only the output's tail keeps the summary)
for mode in fast exact; do
  [ -f "$OUT/models-$mode.log" ] && grep -h "^ACCURACY" "$OUT/models-$mode.log" | sed "s/^ACCURACY/$mode/"
done
echo
echo "==== summary ===="
for s in "${summary[@]}"; do echo "$s"; done
exit $kc_rc

#!/usr/bin/env bash
# exact_test.sh: --exact runs on every supported layout and mesh against the --exact run on one
# rank without micro-batches: loss.csv, the model, EMA and optimizer files and the sample grid
# must be the same bytes. Injected bugs must make them differ (the check can fail), `bugs --exact`
# must flag every one at step 1, and an exact one-rank run must agree with the default mode within
# compare's tolerance.
# usage: exact_test.sh TRAIN [quick]   (quick: one case of each layout and mesh, no bugs; for the
# float64 build, whose sums take the slower path)
set -u
TRAIN=$(realpath "$1") QUICK=${2:-}
WORK=$(mktemp -d /tmp/dit-exact.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
MPIRUN="mpirun -q --oversubscribe $( [ "$(id -u)" = 0 ] && echo --allow-run-as-root )"
# --clip-norm below every step's gradient norm (0.9 to 1.0 here): the norm scales every update
STEP="--steps 3 --batch 6 --clip-norm 0.5"
ARGS="--exact $STEP --samples-per-class 1 --sample-steps 3"
FILES="loss.csv model.safetensors ema.safetensors optimizer.safetensors samples.png"
pass=0 fail=0

train() { # name ranks flags...
  local name=$1 np=$2; shift 2
  $MPIRUN -np "$np" "$TRAIN" $ARGS --out "$WORK/$name" "$@" > "$WORK/$name.log" 2>&1 ||
    { echo "FAIL $name: the run failed:"; tail -n 3 "$WORK/$name.log"; return 1; }
}

# expected (same: every file identical to the reference's; differs: an injected bug must make
# one differ), name of the reference, name, ranks, flags...
expect() {
  local want=$1 ref=$2 name=$3 np=$4 first=""; shift 4
  train "$name" "$np" "$@" || { fail=$((fail + 1)); return; }
  for f in $FILES; do
    cmp -s "$WORK/$ref/$f" "$WORK/$name/$f" || { first=$f; break; }
  done
  if [ "$want" = same ] && [ -z "$first" ]; then echo "ok   $name ($np ranks $*): identical to one rank"
  elif [ "$want" = differs ] && [ -n "$first" ]; then echo "ok   $name ($np ranks $*): $first differs"
  else
    echo "FAIL $name ($np ranks $*): ${first:-no file} differs from one rank's (expected: $want)"
    fail=$((fail + 1)); return
  fi
  pass=$((pass + 1))
}
same() { expect same "$@"; }
differs() { expect differs "$@"; }

train one 1 || exit 1
# two threads against the reference's one (mpirun binds a lone rank to one core, and a rank runs
# a thread per core of its own): the blocks' calls, the attention's jobs and the gradient norm's
# squares that run on the threads give the same bits
same one threads-2 1 --threads 2
# clips: 4 frames of 12x12 in patches of 2 x 4 x 4, 18 tokens (3 ranks cut frames apart; 4 heads
# uneven over 3 ranks), the moving shapes
CLIP="--data moving-shapes --frames 4 --patch-t 2 --input-size 12"
train clip-one 1 $CLIP || exit 1
same clip-one clip-all-to-all-3 3 $CLIP --sp-attention all-to-all
if [ -n "$QUICK" ]; then
  same one gather-3 3
  same one ring-3 3 --sp-attention ring
  same one hybrid-2x2 4 --sp-attention hybrid --ulysses-degree 2
  same one dp2-sp2-accum2 4 --sp 2 --grad-accum 2
  same one zero2-dp2-sp2-accum3 4 --zero 2 --sp 2 --grad-accum 3
  same one zero3-ring-3 3 --zero 3 --sp-attention ring --recompute
  train bf16-one 1 --precision bf16 || exit 1
  same bf16-one bf16-hybrid-2x2-zero3 4 --precision bf16 --sp-attention hybrid --ulysses-degree 2 --zero 3
  train heads5-one 1 --hidden 80 --heads 5 || exit 1
  same heads5-one heads5-all-to-all-3 3 --hidden 80 --heads 5 --sp-attention all-to-all
  echo "exact: $pass passed, $fail failed"
  [ "$fail" = 0 ]; exit
fi
# each layout at 3 or 4 ranks (2 ranks: the correct code's row of `bugs --exact --ranks 2` below,
# and tests/gpu/device_cli.sh's --exact on the emulated device, each layout on 2 ranks; ring on 4:
# zero-4)
same one gather-3 3
same one gather-4 4
same one all-to-all-4 4 --sp-attention all-to-all
same one ring-3 3 --sp-attention ring
same one hybrid-2x2 4 --sp-attention hybrid --ulysses-degree 2
same one dp2-sp2 4 --sp 2
same one accum3-3 3 --grad-accum 3
# --zero 1 (the Adam moments split over the ranks, gradients reduce-scattered as exact sums), --zero
# 2 (the summed gradients too, a block's reduce-scattered as its backward ends), --zero 3 (the
# parameters and the EMA too, a block's gathered as it opens) over the layouts, a data x sequence
# mesh, micro-batches and --recompute; and runs resumed under another level and rank count (the
# state split anew, as the start line says): the same bits
same one zero-4 4 --zero 1 --sp-attention ring
same clip-one clip-hybrid-zero-4 4 $CLIP --sp-attention hybrid --ulysses-degree 2 --zero 1 --grad-accum 2
same one zero2-3 3 --zero 2
same one zero2-hybrid-dp2-accum3 4 --zero 2 --sp 2 --sp-attention hybrid --ulysses-degree 2 --grad-accum 3 --recompute
same one zero3-a2a-4 4 --zero 3 --sp-attention all-to-all
same one zero3-ring-dp2-accum3 4 --zero 3 --sp 2 --sp-attention ring --grad-accum 3 --recompute
# resumed: name, ranks and level saved, then ranks and level resumed
resumed() {
  local name=$1 first=""
  if train "$name" "$2" --zero "$3" --steps 2 &&
     $MPIRUN -np "$4" "$TRAIN" $ARGS --resume "$WORK/$name" --zero "$5" > "$WORK/$name.log" 2>&1; then
    for f in $FILES; do cmp -s "$WORK/one/$f" "$WORK/$name/$f" || { first=$f; break; }; done
    local said; said=$(grep -c "zero $5 (the run saved under --zero $3; its state" "$WORK/$name.log")
    if [ -z "$first" ] && [ "$said" = 1 ]; then echo "ok   $name ($2 ranks --zero $3, then $4 ranks --zero $5): identical to one rank"; pass=$((pass + 1))
    else echo "FAIL $name: ${first:-the start line} differs from what was expected"; fail=$((fail + 1)); fi
  else echo "FAIL $name: the resumed run failed: $(tail -n 1 "$WORK/$name.log")"; fail=$((fail + 1)); fi
}
resumed zero-resumed-2-1 4 2 3 1
resumed zero-resumed-3-0 4 3 1 0
resumed zero-resumed-1-3 2 1 4 3
train heads5-one 1 --hidden 80 --heads 5 || exit 1
same heads5-one heads5-all-to-all-3 3 --hidden 80 --heads 5 --sp-attention all-to-all
# captions (--cond text): the caption's keys and values whole on every rank, their gradients summed
# exactly over the group; all-to-all with 4 heads over 3 ranks (uneven), hybrid with --recompute,
# data groups in micro-batches with --zero 1; unsummed text encoder gradients differ
TEXT="--cond text --text-dropout 0.2 --cfg-scale 2"
train text-one 1 $TEXT || exit 1
same text-one text-all-to-all-3 3 $TEXT --sp-attention all-to-all
same text-one text-hybrid-2x2-recompute 4 $TEXT --sp-attention hybrid --ulysses-degree 2 --recompute
same text-one text-dp2-sp2-accum2-zero 4 $TEXT --sp 2 --grad-accum 2 --zero 1
differs text-one text-bug-grad-unsummed 2 $TEXT --inject-bug text-grad-unsummed
# joint attention (MMDiT): the caption's keys and queries canonical blocks of their own in front
# of the image's; gather: its K/V gradients summed over the group, its queries' shares added once;
# all-to-all: its heads' queries and keys on one rank, their gradients summed over the heads; ring:
# its keys at the home step, its K/V gradients summed over the ring, its queries' shares added once;
# hybrid: those composed. 3 ranks (uneven; all-to-all: 4 heads over 3), data groups in
# micro-batches with --recompute and --zero 1, and QK-norm; unsummed text gradients differ. 6 steps: the
# caption queries' output gradient is zero until adaLN-Zero's gates of two blocks have opened
JOINT="--cond text --text-attn joint --text-dropout 0.2 --hidden 64 --heads 4 --steps 6"
train joint-one 1 $JOINT || exit 1
same joint-one joint-gather-3 3 $JOINT
same joint-one joint-dp2-sp2-accum2-recompute-zero 4 $JOINT --sp 2 --grad-accum 2 --recompute --zero 1
same joint-one joint-all-to-all-3 3 $JOINT --sp-attention all-to-all
same joint-one joint-all-to-all-dp2-sp2-accum2 4 $JOINT --sp-attention all-to-all --sp 2 --grad-accum 2 --recompute
same joint-one joint-ring-3 3 $JOINT --sp-attention ring
same joint-one joint-hybrid-2x2-recompute-zero 4 $JOINT --sp-attention hybrid --ulysses-degree 2 --recompute --zero 1
# with QK-norm: the caption's scale gradients a share of its rows on each rank
train joint-qk-one 1 $JOINT --qk-norm head || exit 1
same joint-qk-one joint-qk-ring-3 3 $JOINT --qk-norm head --sp-attention ring
differs joint-one joint-bug-grad-unsummed 2 $JOINT --inject-bug text-grad-unsummed
# rotary positions and the full-width QK-norm (before the heads are exchanged) on 4 heads, uneven
# over all-to-all's 3 ranks; and with micro-batches, --recompute and --zero 1 on a dp 2 x sp 2 mesh
VIDEO="--hidden 80 --heads 4 --pos rope --qk-norm full"
train video-one 1 $VIDEO || exit 1
same video-one video-all-to-all-3 3 $VIDEO --sp-attention all-to-all
same video-one video-dp2-sp2-accum2 4 $VIDEO --sp 2 --sp-attention hybrid --ulysses-degree 2 --grad-accum 2 --recompute --zero 1
# --precision bf16: every linear's operands and the attention's Q, K and V rounded to bf16, each
# value alone (layers/precision.c), so the ranks round what one rank rounds: the same bits in
# every layout, on a data x sequence mesh in micro-batches with --zero 3 and --recompute, and with
# joint attention; and not fp32's bits (the rounding ran)
BF16="--precision bf16"
train bf16-one 1 $BF16 || exit 1
same bf16-one bf16-gather-3 3 $BF16
same bf16-one bf16-all-to-all-4 4 $BF16 --sp-attention all-to-all
same bf16-one bf16-ring-3 3 $BF16 --sp-attention ring
same bf16-one bf16-hybrid-2x2-zero2 4 $BF16 --sp-attention hybrid --ulysses-degree 2 --zero 2
same bf16-one bf16-dp2-sp2-accum3-zero3-recompute 4 $BF16 --sp 2 --grad-accum 3 --zero 3 --recompute
differs one bf16-not-fp32 1 $BF16
train joint-bf16-one 1 $JOINT $BF16 || exit 1
same joint-bf16-one joint-bf16-ring-3 3 $JOINT $BF16 --sp-attention ring
# an injected bug makes the files differ where `bugs --exact --ranks 2` below does not look: on 3
# ranks, in micro-batches on one rank, in the logged loss alone, under --zero 3 (every bug at 2
# ranks: flagged at step 1 by the catalogue)
differs one bug-local-mean-loss 3 --inject-bug local-mean-loss
differs one bug-accum-unweighted 1 --grad-accum 4 --inject-bug accum-unweighted
differs one bug-loss-times-sp 2 --inject-bug loss-times-sp
differs one bug-zero-outer-grads-unsummed 2 --zero 3 --inject-bug zero-outer-grads-unsummed
# the catalogue under --exact: the correct code identical, every bug flagged at step 1 (its table's
# "--exact: flagged at step" column, found by its header and read back from bugs.md)
"$TRAIN" bugs --exact --ranks 2 --steps 2 --out "$WORK/bugs" > "$WORK/bugs.log" 2>&1; rc=$?
steps=$(awk -F' [|] ' 'NR == 1 { for (i = 1; i <= NF; i++) if (index($i, "--exact: flagged at step") == 1) c = i; next }
  c && /^[|] [a-z(]/ { print ($1 == "| (correct code)" ? "correct" : substr($1, 3)) ": " $c }' "$WORK/bugs/bugs.md" 2>/dev/null)
wrong=$(echo "$steps" | grep -v -e '^correct: not flagged$' -e '^[a-z-]*: 1$' -e '^ulysses-replicated-kv: not run$') # in-context: no exact mode
bugs=$(echo "$steps" | grep -v "^correct" | grep -vc "not run")
if [ $rc = 0 ] && [ -n "$steps" ] && [ -z "$wrong" ] && grep -q '^| (correct code) .* identical |$' "$WORK/bugs/bugs.md"; then
  echo "ok   bugs --exact --ranks 2: the correct code identical, all $bugs bugs flagged at step 1"; pass=$((pass + 1))
else
  echo "FAIL bugs --exact --ranks 2 (exit $rc): rows not as expected:"; echo "${wrong:-(none; see $WORK/bugs/bugs.md)}"
  tail -n 3 "$WORK/bugs.log"; fail=$((fail + 1))
fi
# locate: one step dumped on N ranks (with a bug) against one rank names the bug's site
CKPT="$WORK/one/model.safetensors" BATCH="$WORK/batch.safetensors"
"$TRAIN" probe --ckpt "$CKPT" --make-batch 6 --out "$BATCH" > /dev/null 2>&1 || { echo "FAIL probe --make-batch"; exit 1; }
dump() { # file ranks flags...
  local file=$1 np=$2; shift 2
  $MPIRUN -np "$np" "$TRAIN" probe --exact --ckpt "$CKPT" --batch "$BATCH" \
    --out "$WORK/probe-$file" --dump-tape "$WORK/$file" "$@" > "$WORK/$file.log" 2>&1
}
located() { # expected verdict (grep -E), ranks, flags...
  local want=$1 np=$2; shift 2
  rm -f "$WORK/dump-n" "$WORK/probe-dump-n"
  dump dump-n "$np" "$@" || { echo "FAIL probe $*: $(tail -n 1 "$WORK/dump-n.log")"; fail=$((fail + 1)); return; }
  local verdict
  verdict=$("$TRAIN" locate "$WORK/dump-n" "$WORK/dump-1" 2>&1)
  if echo "$verdict" | grep -Eq "$want"; then echo "ok   locate ($np ranks $*): $verdict" | cut -c1-160; pass=$((pass + 1))
  else echo "FAIL locate ($np ranks $*): expected /$want/, got: $verdict"; fail=$((fail + 1)); fi
}
dump dump-1 1 || { echo "FAIL the one-rank dump: $(tail -n 1 "$WORK/dump-1.log")"; exit 1; }
located "^no divergence: every tensor of the step is identical" 3
located "^no divergence: every tensor of the step is identical" 4 --sp-attention hybrid --ulysses-degree 2
located "^first divergence: blocks\.0\.attn\.out \(forward.*tokens" 2 --inject-bug no-pad-mask
located "^first divergence: blocks\.0\.attn\.out \(forward.*tokens 18-24 .*rank 1 of 2 in A" 2 --inject-bug wrong-restore
located "^first divergence: grad\.blocks\.3\.attn\.[kv] \(backward" 2 --inject-bug no-dkv-reduce-scatter
located "^first divergence: loss \(forward" 2 --inject-bug local-mean-loss
located "^first divergence: blocks\.0\.attn\.out \(forward" 2 --sp-attention ring --inject-bug ring-wrong-merge
located "^first divergence: grad\.blocks\.3\.attn\.[kv] \(backward" 3 --sp-attention ring --inject-bug ring-dkv-not-returned
located "^first divergence: grad\.x_embedder\.proj\.weight \(parameter gradient" 2 --inject-bug no-grad-allreduce
located "^first divergence: x_embedder \(forward" 2 --inject-bug shard-pos-embed
# the video options' bugs at the op they break, on the model trained with rotary positions and
# the full-width QK-norm: the rotation, the norm (one op with the rotation: its output q_rope), the
# key gradient that reaches the k-norm (through the rotation after it)
CKPT="$WORK/video-one/model.safetensors"
dump dump-1 1 || { echo "FAIL the video model's one-rank dump: $(tail -n 1 "$WORK/dump-1.log")"; exit 1; }
located "^first divergence: blocks\.0\.attn\.q_rope \(forward" 2 --inject-bug rope-local-positions
located "^first divergence: grad\.blocks\.3\.attn\.k_(rope|norm) \(backward" 2 --sp-attention all-to-all --inject-bug knorm-grad-early
located "^first divergence: blocks\.0\.attn\.q_rope \(forward" 2 --sp-attention all-to-all --inject-bug qk-norm-head-shard
# the logged loss is not a tensor of the step: a tape, like every gradient check, misses it
located "^no divergence: every tensor of the step is identical" 2 --inject-bug loss-times-sp
# the captioned model: over 2 data groups each group's images with their own captions (the tape
# the same as one rank's); the caption's K/V exchanged with the queries, its copies differing in
# the cross-attention's rounding alone
CKPT="$WORK/text-one/model.safetensors" BATCH="$WORK/text-batch.safetensors"
"$TRAIN" probe --ckpt "$CKPT" --make-batch 6 --out "$BATCH" > /dev/null 2>&1 || { echo "FAIL probe --make-batch of captions"; exit 1; }
dump dump-1 1 || { echo "FAIL the captioned model's one-rank dump: $(tail -n 1 "$WORK/dump-1.log")"; exit 1; }
located "^no divergence: every tensor of the step is identical" 4 --sp 2
located "^first divergence: blocks\.0\.cross\.out \(forward" 2 --sp-attention all-to-all --inject-bug cross-kv-all-to-all
# exact mode computes the same function as the default mode, in another order
$MPIRUN -np 1 "$TRAIN" $STEP --samples-per-class 0 --out "$WORK/default" > /dev/null 2>&1 &&
  if "$TRAIN" compare "$WORK/one" "$WORK/default" > "$WORK/compare.log" 2>&1; then
    echo "ok   exact and default mode agree within compare's tolerance"; pass=$((pass + 1))
  else
    echo "FAIL exact and default mode disagree:"; tail -n 3 "$WORK/compare.log"; fail=$((fail + 1))
  fi
echo "exact: $pass passed, $fail failed"
[ "$fail" = 0 ]

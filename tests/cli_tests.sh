#!/usr/bin/env bash
# cli_tests.sh: the train program as users run it, under mpirun: N ranks against one rank
# (loss curves, and each injected bug caught), bit-identical resume, ranks that disagree, and
# bad flags. usage: tests/cli_tests.sh TRAIN_BINARY
set -u
TRAIN=$(realpath "$1")
WORK=$(mktemp -d /tmp/dit-cli.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
MPIRUN="mpirun --oversubscribe $( [ "$(id -u)" = 0 ] && echo --allow-run-as-root )"
pass=0 fail=0
ok()  { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }
# a small padded run: 81 tokens (18x18, patch 2) over 4 ranks -> 84
SMALL="--model DiT-tiny/2 --input-size 18 --batch 8 --steps 30 --sample-steps 1 --samples-per-class 1"

# 1. loss curves: N ranks reproduce 1 rank in every layout and mesh; every injected bug is caught
# by the same comparison
# expect_agree NP DIR FLAGS...: verify --ranks NP of $SMALL with FLAGS, into DIR, agrees with 1 rank
# (its loss curve, and every tensor of one step)
expect_agree() {
  local np=$1 dir=$2; shift 2
  out=$("$TRAIN" verify --ranks $np $SMALL "$@" --out "$dir" 2>&1)
  # and every tensor of one step (verify's tape check, every time)
  if [ $? = 0 ] && echo "$out" | grep -q '^tape: all [0-9]* tensors .* -> the step AGREES$'; then ok "$(echo "$out" | grep -o "$np ranks: [^(]*" | head -1 | sed 's/ $//')${*:+ ($*)} vs 1 rank, 30 steps: $(echo "$out" | grep -o 'largest relative loss difference [^ ]*')"
  else bad "$np ranks${*:+ with $*} disagree with 1 rank"; echo "$out" | tail -5; fi
}
# expect_caught NP BUG FLAGS...: NP ranks of $SMALL with FLAGS and the bug diverge from the 1-rank
# run of the first verify below (the same for every bug: reused)
caught=0
expect_caught() {
  local np=$1 bug=$2; shift 2
  caught=$((caught + 1))
  $MPIRUN -np $np "$TRAIN" $SMALL "$@" --inject-bug $bug --out "$WORK/bug$caught" >/dev/null 2>&1
  res=$("$TRAIN" compare "$WORK/bug$caught" "$WORK/verify/ranks-1" --plot "$WORK/bug$caught.png" 2>&1)
  if [ $? = 1 ]; then ok "bug $bug ($np ranks${*:+ $*}) caught: $(echo "$res" | grep -o 'first step over tolerance: [0-9]*')"
  else bad "bug $bug ($np ranks${*:+ $*}) NOT caught"; echo "$res"; fi
}
expect_agree 4 "$WORK/verify"
for bug in local-kv no-dkv-reduce-scatter no-grad-allreduce no-pad-mask wrong-restore; do
  expect_caught 4 $bug
done

# the all-to-all variant reproduces one rank too, with heads the ranks do not divide: 5 over 4
# ranks (2, 1, 1, 1), and the hybrid layout, 3 over groups of 2 (2, 1) (heads that divide:
# exact_test.sh's all-to-all-4 and hybrid-2x2, bit for bit)
expect_agree 4 "$WORK/uneven" --heads 5 --hidden 40 --sp-attention all-to-all
expect_agree 4 "$WORK/uneven" --heads 3 --hidden 48 --sp-attention hybrid --ulysses-degree 2

# the ring layout reproduces one rank too, and each of its bugs is caught
expect_agree 4 "$WORK/ring" --sp-attention ring
for bug in ring-wrong-merge ring-dkv-not-returned; do
  expect_caught 4 $bug --sp-attention ring
done

# --precision bf16 within verify's bf16 bounds: the all-to-all, whose output is rounded before its
# return (at one rank too: else the tape check sees the rounding), and with --grad-wire bf16 (the
# attention's gradients sent rounded) the ring
expect_agree 2 "$WORK/bf16" --precision bf16 --sp-attention all-to-all
expect_agree 2 "$WORK/bf16" --precision bf16 --grad-wire bf16 --sp-attention ring
# compare of those runs takes verify's bf16 bound by default (their config.json), float32's else;
# of two probe results, the bounds of the precision either was probed in (their metadata)
res=$("$TRAIN" compare "$WORK/bf16/ranks-2" "$WORK/bf16/ranks-1" 2>&1)
res32=$("$TRAIN" compare "$WORK/ring/ranks-4" "$WORK/ring/ranks-1" 2>&1)
CKB=$WORK/bf16/ranks-1/model.safetensors
"$TRAIN" probe --ckpt "$CKB" --make-batch 4 --out "$WORK/bf16-batch.safetensors" > /dev/null 2>&1
for p in fp32 bf16; do
  "$TRAIN" probe --ckpt "$CKB" --batch "$WORK/bf16-batch.safetensors" --out "$WORK/probe-$p.safetensors" --precision $p > /dev/null 2>&1
done
pres=$("$TRAIN" compare "$WORK/probe-bf16.safetensors" "$WORK/probe-fp32.safetensors" 2>&1)
pres32=$("$TRAIN" compare "$WORK/probe-fp32.safetensors" "$WORK/probe-fp32.safetensors" 2>&1)
if echo "$res" | grep -q "(tolerance 2.0e-02)" && echo "$res32" | grep -q "(tolerance 1.0e-05)" &&
   echo "$pres" | grep -q "(tolerance 1.0e-03, gradients 1.0e-02)" &&
   echo "$pres32" | grep -q "AGREE (tolerance 1.0e-05, gradients 1.0e-04)"; then
  ok "compare's default bounds by the precision: runs 2e-2 (bf16) and 1e-5; probe results 1e-3 / 1e-2 (either bf16) and 1e-5 / 1e-4"
else bad "compare's default bounds: $res / $res32 / $(echo "$pres" | tail -1) / $(echo "$pres32" | tail -1)"; fi

# data x sequence meshes reproduce one rank too (3 x 1: 6 images, which 3 data groups split; 2 x 2
# with gather: exact_test.sh's dp2-sp2), and the data-parallel bugs are caught
expect_agree 4 "$WORK/mesh" --sp 2 --sp-attention ring
expect_agree 3 "$WORK/mesh" --sp 1 --batch 6
expect_caught 4 no-dp-allreduce --sp 2
expect_caught 4 same-data-all-dp --sp 2
expect_caught 4 ring-wrong-merge --sp-attention hybrid --ulysses-degree 2

# gradient accumulation: 2 ranks with 3 micro-batches (3 + 3 + 2 images) reproduce one rank (which
# accumulates the same way), and the plain 1-rank run too (K does not change the step); weighting
# the micro-batches 1/K, or averaging each rank's loss over its own tokens, is caught
expect_agree 2 "$WORK/accum" --grad-accum 3
res=$("$TRAIN" compare "$WORK/accum/ranks-1" "$WORK/verify/ranks-1" --plot "$WORK/accum-k.png" 2>&1)
if [ $? = 0 ]; then ok "--grad-accum 3 vs one batch, 1 rank: $(echo "$res" | grep -o 'largest relative loss difference [^ ]*')"
else bad "--grad-accum 3 differs from one batch"; echo "$res"; fi
expect_caught 2 accum-unweighted --grad-accum 3
expect_caught 2 local-mean-loss

# the bug catalogue: every injectable bug caught on 4 ranks (but cross-kv-all-to-all, which is right
# in exact arithmetic and must agree within tolerance), the correct code agrees (exit 0),
# one row per bug (an unknown bug's error lists them all) plus the correct code's (with --regimes,
# also each bug where it hides and the correct code in each layout); the regimes' cells recomputed
# from their errors. 2 steps (the fewest): the probe from the reference's weights after them
# catches every bug in one. The two that hide (pad-mask-off-by-one with T divisible by the ranks,
# lse-overflow on small attention logits) are missed there
out=$("$TRAIN" bugs --regimes --ranks 4 --steps 2 --out "$WORK/bugs" 2>&1); rc=$?
known=$("$TRAIN" --inject-bug nonsense 2>&1 | sed -nE 's/.*\(known: ([^)]*)\).*/\1/p' | tr ',' '\n' | grep -vcE '^pack-|-pack-') # packs' bugs: test_parallel's and below
rows=$(grep '^| [a-z(]' "$WORK/bugs/bugs.md" 2>/dev/null | grep -vc 'where it hides\|correct code:') # the header's too
hidden=$(grep -cE '^\| (pad-mask-off-by-one|lse-overflow) \(where it hides\) \|.*\| not flagged \|' "$WORK/bugs/bugs.md" 2>/dev/null)
if [ $rc = 0 ] && [ "$rows" = $((known + 2)) ] && [ "$hidden" = 2 ] && [ -s "$WORK/bugs/bugs.png" ]; then ok "train bugs --ranks 4: $known bugs, every one caught (cross-kv-all-to-all, right in exact arithmetic: within tolerance), the correct code agrees"
else bad "train bugs --ranks 4 (exit $rc, $rows rows for $known bugs, $hidden hidden rows missed)"; echo "$out" | tail -20; fi
if res=$("$(dirname "$0")/regimes_check.sh" "$WORK/bugs/regimes.csv" 2>&1) && [ -s "$WORK/bugs/regimes.png" ]; then ok "bugs --regimes: $res"
else bad "bugs --regimes: the table breaks its rules"; echo "$res"; fi

# 2. resume: 10 steps + 10 resumed steps == 20 uninterrupted steps, bit for bit (1 and 2 ranks)
RES="--model DiT-tiny/2 --input-size 8 --batch 4 --sample-steps 1 --samples-per-class 1 --ema 0.9"
for np in 1 2; do
  $MPIRUN -np $np "$TRAIN" $RES --steps 20 --out "$WORK/full$np" >/dev/null 2>&1
  $MPIRUN -np $np "$TRAIN" $RES --steps 10 --out "$WORK/part$np" >/dev/null 2>&1
  $MPIRUN -np $np "$TRAIN" $RES --steps 20 --resume "$WORK/part$np" >/dev/null 2>&1
  if cmp -s "$WORK/full$np/loss.csv" "$WORK/part$np/loss.csv" &&
     cmp -s "$WORK/full$np/model.safetensors" "$WORK/part$np/model.safetensors" &&
     cmp -s "$WORK/full$np/ema.safetensors" "$WORK/part$np/ema.safetensors"; then
    ok "resume on $np rank(s): loss.csv, model and EMA bit-identical to an uninterrupted run"
  else bad "resume on $np rank(s) differs from an uninterrupted run"; diff "$WORK/full$np/loss.csv" "$WORK/part$np/loss.csv" | head -4; fi
done

# --save-dtype bf16 (model and EMA files in BF16, the float masters in the optimizer file): the same
# training, bit for bit (loss.csv: the float-saving run's), and a resume of 2 ranks under --zero 3
# (the masters read a rank's pieces at a time) writes the same files as the uninterrupted run;
# resuming from the BF16 model file instead of the masters would not
$MPIRUN -np 2 "$TRAIN" $RES --steps 20 --zero 3 --save-dtype bf16 --out "$WORK/bf16-full" >/dev/null 2>&1
$MPIRUN -np 2 "$TRAIN" $RES --steps 10 --zero 3 --save-dtype bf16 --out "$WORK/bf16-part" >/dev/null 2>&1
$MPIRUN -np 2 "$TRAIN" --steps 20 --resume "$WORK/bf16-part" >/dev/null 2>&1
half=$(( $(stat -c %s "$WORK/bf16-full/model.safetensors") * 100 / $(stat -c %s "$WORK/full2/model.safetensors") ))
same=yes
for f in loss.csv model.safetensors ema.safetensors optimizer.safetensors; do cmp -s "$WORK/bf16-full/$f" "$WORK/bf16-part/$f" || same="no ($f)"; done
if cmp -s "$WORK/bf16-full/loss.csv" "$WORK/full2/loss.csv" && [ $half -lt 60 ] && [ "$same" = yes ] &&
   grep -q '"save_dtype": "bf16"' "$WORK/bf16-part/config.json"; then
  ok "--save-dtype bf16 on 2 ranks, --zero 3: the model file ${half} % of float32's, the loss float32's, resume bit-identical to the uninterrupted run"
else bad "--save-dtype bf16 (model file ${half} % of float32's, resumed files the same: $same): a loss or a resumed file differs"; fi

# a run folder whose files come from different steps (an interrupted save) is refused
$MPIRUN -np 1 "$TRAIN" $RES --steps 5 --out "$WORK/mixed" >/dev/null 2>&1
cp "$WORK/full1/optimizer.safetensors" "$WORK/mixed/"
msg=$("$TRAIN" $RES --steps 30 --resume "$WORK/mixed" 2>&1); rc=$?
if [ $rc = 2 ] && echo "$msg" | grep -q "holds the model of step 5 but the optimizer state of step 20"; then
  ok "resume from a folder mixing steps 5 and 20: refused with exit 2"
else bad "resume from a mixed folder (exit $rc): $msg"; fi

# sampling that fails after training says so in a sentence and keeps the checkpoint it saved
$MPIRUN -np 1 "$TRAIN" $RES --steps 5 --out "$WORK/nosample" >/dev/null 2>&1
rm "$WORK/nosample/samples.png" && mkdir "$WORK/nosample/samples.png"
msg=$("$TRAIN" $RES --steps 6 --resume "$WORK/nosample" 2>&1); rc=$?
if [ $rc = 1 ] && echo "$msg" | grep -q "samples.png failed: .*Is a directory; the checkpoint of step 6 is saved in" &&
   ! echo "$msg" | grep -q '\.c:[0-9]' && grep -q '^6,' "$WORK/nosample/loss.csv"; then
  ok "samples.png that cannot be written: exit 1, the checkpoint of step 6 kept, a sentence"
else bad "samples.png that cannot be written (exit $rc): $msg"; fi

# a loss that becomes NaN stops with a sentence naming the step, exit 1; loss.csv keeps the finite
# steps and the last checkpoint stays
msg=$("$TRAIN" $RES --steps 60 --lr 10 --clip-norm 0 --save-every 1 --out "$WORK/nan" 2>&1); rc=$?
nan_step=$(echo "$msg" | sed -nE 's/.*the loss became NaN at step ([0-9]+): training diverged; lower --lr.*/\1/p')
if [ $rc = 1 ] && [ -n "$nan_step" ] && ! echo "$msg" | grep -q '\.c:[0-9]' &&
   [ "$(tail -n 1 "$WORK/nan/loss.csv" | cut -d, -f1)" = $((nan_step - 1)) ] &&
   echo "$msg" | grep -q "the checkpoint of step $((nan_step - 1)) in $WORK/nan is kept"; then
  ok "NaN loss at step $nan_step: exit 1, a sentence, loss.csv and the checkpoint of step $((nan_step - 1)) kept"
else bad "NaN loss (exit $rc): $msg"; fi

# --resume with --steps at or below the steps done is a usage error that writes nothing; a save
# with --ema 0 removes an earlier run's EMA, which would no longer match the model
msg=$("$TRAIN" $RES --steps 10 --resume "$WORK/part1" 2>&1); rc=$?
if [ $rc = 2 ] && echo "$msg" | grep -q "is already at step 20; pass --steps above 20 to train further"; then
  ok "--resume with --steps 10 of a run at step 20: exit 2, a sentence"
else bad "--resume with --steps at or below the steps done (exit $rc): $msg"; fi
cp -r "$WORK/full1" "$WORK/ema-off"
"$TRAIN" $RES --steps 22 --ema 0 --resume "$WORK/ema-off" >/dev/null 2>&1
if [ ! -e "$WORK/ema-off/ema.safetensors" ] && [ -e "$WORK/ema-off/model.safetensors" ]; then
  ok "a save with --ema 0 removes the earlier EMA weights"
else bad "a save with --ema 0 left ema.safetensors beside a newer model"; fi

# --resume DIR alone continues the run with its own settings (config.json): model, data, batch and
# optimizer, bit for bit like a resume that repeats every flag
$MPIRUN -np 2 "$TRAIN" $RES --steps 10 --out "$WORK/alone" >/dev/null 2>&1
$MPIRUN -np 2 "$TRAIN" --resume "$WORK/alone" --steps 20 >/dev/null 2>&1
if cmp -s "$WORK/alone/loss.csv" "$WORK/full2/loss.csv" && cmp -s "$WORK/alone/model.safetensors" "$WORK/full2/model.safetensors"; then
  ok "--resume DIR with no model flags: bit-identical to the uninterrupted run"
else bad "--resume DIR with no model flags differs from the uninterrupted run"; fi
# ... and with its --grad-accum from config.json, bit for bit
"$TRAIN" $RES --grad-accum 3 --steps 20 --out "$WORK/accum-full" >/dev/null 2>&1
"$TRAIN" $RES --grad-accum 3 --steps 10 --out "$WORK/accum-part" >/dev/null 2>&1
"$TRAIN" --resume "$WORK/accum-part" --steps 20 >/dev/null 2>&1
if cmp -s "$WORK/accum-part/loss.csv" "$WORK/accum-full/loss.csv" && cmp -s "$WORK/accum-part/model.safetensors" "$WORK/accum-full/model.safetensors" &&
   grep -q '"grad_accum": 3' "$WORK/accum-part/config.json"; then
  ok "--resume DIR of a --grad-accum 3 run: grad_accum restored, bit-identical to the uninterrupted run"
else bad "--resume DIR of a --grad-accum 3 run differs from the uninterrupted run"; fi

# 3. ranks that disagree on the config stop with a message on every rank, without hanging
msg=$(timeout 60 $MPIRUN -np 1 "$TRAIN" $SMALL --seed 1 --out "$WORK/x" : -np 1 "$TRAIN" $SMALL --seed 2 --out "$WORK/x" 2>&1)
rc=$?
if [ $rc = 2 ] && echo "$msg" | grep -q "ranks disagree on the training configuration.*: rank 1 has seed=2 where rank 0 has seed=1" &&
   ! echo "$msg" | grep -q 'comm\.c:'; then
  ok "ranks with different seeds: exit 2, $(echo "$msg" | grep -m1 -o 'ranks disagree[^;]*')"
else bad "ranks with different seeds (exit $rc)"; echo "$msg" | tail -3; fi
# probe and sample check the settings they take the same way, before reading any file
for cmd in "probe --ckpt x --batch y --out z.safetensors --grad-accum" "sample --ckpt x --out z.png --seed"; do
  msg=$(timeout 60 $MPIRUN -np 1 "$TRAIN" $cmd 2 : -np 1 "$TRAIN" $cmd 3 2>&1); rc=$?
  key=$(echo "${cmd##* }" | sed 's/^--//; s/-/_/g')
  if [ $rc = 2 ] && echo "$msg" | grep -q "ranks disagree on the ${cmd%% *} arguments: rank 1 has $key=3 where rank 0 has $key=2"; then
    ok "${cmd%% *} ranks with different ${cmd##* }: exit 2, $(echo "$msg" | grep -m1 -o 'ranks disagree[^;]*')"
  else bad "${cmd%% *} ranks with different ${cmd##* } (exit $rc)"; echo "$msg" | tail -3; fi
done

# 4. bad input: a sentence naming the problem, exit code 2, no run folder half-written
expect_usage() { # expected-text, flags...
  local want=$1; shift
  msg=$($TRAIN "$@" --out "$WORK/never" 2>&1); rc=$?
  if [ $rc = 2 ] && echo "$msg" | grep -q -- "$want" && [ ! -e "$WORK/never" ]; then ok "bad input ($*): exit 2, '$want'"
  else bad "bad input ($*): exit $rc: $msg"; fi
}
expect_usage "expects a whole number" --steps abc
# --check-collectives' bound, which main takes for every command
for cmd in "" probe sample "verify --ranks 2" "bugs" "compare a b" "locate a b" "plan --ranks 2"; do
  expect_usage "--collective-timeout expects a number, got 'soon'" $cmd --collective-timeout soon
done
expect_usage "--collective-timeout must be between 0.001 and" --collective-timeout 0
expect_usage "must be between 1 and" --batch 0
expect_usage "--heads 5 does not divide the width 64 (--hidden)" --heads 5
expect_usage "input_size 15 must be a positive multiple of patch_size 4" --input-size 15
expect_usage "unknown preset" --model DiT-Q/2
expect_usage "frames 5 must be a multiple of patch_t 2 (the frames of a patch); pass --frames 6 or --patch-t 1" --frames 5 --patch-t 2 --data moving-shapes
expect_usage "the shapes data are images, and the model takes clips of 4 frames; use --data moving-shapes" --frames 4
expect_usage "the moving-shapes data are clips; pass --frames 2 or more" --data moving-shapes
expect_usage "hidden_size 40 must be a multiple of 16 for the 3-D sin-cos position embedding" --frames 4 --data moving-shapes --hidden 40 --heads 4
expect_usage "runs its own --exact column" bugs --regimes --exact

expect_usage "--zero must be between 0 and 3, got 4" --zero 4
expect_usage "--save-dtype: unknown dtype 'fp16' (known: fp32, bf16)" --save-dtype fp16
expect_usage "probe: unknown argument '--save-dtype'" probe --save-dtype bf16
expect_usage "--grad-wire: unknown gradient wire 'fp16' (known: fp32, bf16)" --grad-wire fp16
for cmd in "" "verify --ranks 2" "plan --ranks 2 --link-bandwidth 1000 --link-latency 10"; do
  expect_usage "--grad-wire bf16 sends the gradients of bf16 values in 2 bytes and needs --precision bf16" $cmd --grad-wire bf16
done
for cmd in "" "verify --ranks 2"; do # plan refuses --exact itself
  expect_usage "so --exact cannot give one rank's bits with it" $cmd --precision bf16 --grad-wire bf16 --exact
done
expect_usage "sample: unknown argument '--grad-wire'" sample --grad-wire bf16
expect_usage "bugs: unknown argument '--grad-wire'" bugs --grad-wire bf16
expect_usage "probe: unknown argument '--lr'" probe --lr 1
expect_usage "sample: unknown argument '--recompute'" sample --recompute
# --device cuda where there is no GPU (the GPU path itself: tests/gpu/device_cli.sh)
if ! nvidia-smi -L > /dev/null 2>&1; then
  expect_usage "--device cuda: .*no GPU is visible here\|--device cuda: this build has no CUDA" --device cuda
  expect_usage "--device cuda: .*run on a machine with an NVIDIA GPU" probe --ckpt x --batch y --device cuda
fi
expect_usage "applies to --device cuda only" --tf32
expect_usage "on this machine, which has" --model DiT-XL/2 --input-size 4096 --batch 65536 # refused before allocating
expect_usage "expects a non-negative whole number, got ' -1'" --seed " -1"
expect_usage "expects a whole number, got ' 3'" --steps " 3"
expect_usage "--resume is empty" --resume ""
expect_usage "--cfg-scale 5 needs the null class" --cfg-scale 5 --class-dropout 0
expect_usage "--grad-accum must be between 1 and" --grad-accum 0
expect_usage "--grad-accum 9 is more than the 8 images of the batch, so a micro-batch would be empty; pass --grad-accum at most 8" $SMALL --grad-accum 9
expect_usage "gives an MLP width of 64 x 0.01 < 1" --mlp-ratio 0.01
# in-context conditioning runs with the gather and all-to-all layouts, without --exact and
# --recompute (training, and the probe of an in-context checkpoint), and the
# ulysses-replicated-kv bug needs its tokens
ic="in-context conditioning (--in-context, or a checkpoint trained with it) runs with --sp-attention gather or all-to-all and without --exact, --recompute, --max-tokens and --sample-sizes"
expect_usage "$ic" --in-context --sp-attention ring
expect_usage "$ic" --in-context --exact
expect_usage "$ic" --in-context --recompute
expect_usage "$ic" --in-context --sample-sizes 8x8
expect_usage "$ic" verify --ranks 2 --in-context --sample-sizes 8x8
expect_usage "$ic" verify --ranks 2 --in-context --exact
expect_usage "the ulysses-replicated-kv bug exchanges the in-context conditioning tokens' K/V; add --in-context" --sp-attention all-to-all --inject-bug ulysses-replicated-kv
$TRAIN $RES --steps 1 --in-context --out "$WORK/incontext" >/dev/null 2>&1
$TRAIN probe --ckpt "$WORK/incontext/model.safetensors" --make-batch 2 --out "$WORK/incontext/batch.safetensors" >/dev/null 2>&1
expect_usage "$ic" probe --ckpt "$WORK/incontext/model.safetensors" --batch "$WORK/incontext/batch.safetensors" --sp-attention ring
$TRAIN $RES --steps 1 --class-dropout 0 --out "$WORK/nodrop" >/dev/null 2>&1
msg=$($TRAIN sample --ckpt "$WORK/nodrop/model.safetensors" --cfg-scale 4 --out "$WORK/nodrop.png" 2>&1); rc=$?
if [ $rc = 2 ] && echo "$msg" | grep -q "trained without label dropout" && [ ! -e "$WORK/nodrop.png" ]; then
  ok "sample --cfg-scale 4 of a model without a null class: exit 2"
else bad "sample --cfg-scale without a null class (exit $rc): $msg"; fi
msg=$($TRAIN --model DiT-Q/2 --steps 0 --help 2>&1); rc=$?
if [ $rc = 0 ] && echo "$msg" | grep -q "^usage:"; then ok "--help after a bad flag: the help, exit 0"
else bad "--help after a bad flag (exit $rc): $msg"; fi
expect_usage "unknown bug" --inject-bug nonsense
expect_usage "does not exist" --data "$WORK/no-such-folder"
mkdir -p "$WORK/broken/cats" && echo "not an image" > "$WORK/broken/cats/a.png"
expect_usage "a.png" --data "$WORK/broken"
# resuming from what is not a complete run folder, or with other model flags
expect_usage "no-such-run does not exist; give the --out folder of an earlier training run" $RES --resume "$WORK/no-such-run"
expect_usage "is not a run folder (it has no config.json)" $RES --resume "$WORK"
expect_usage "was trained with other settings than --class-dropout 0.2 (the run has 0.1); leave those flags out" $RES --steps 30 --resume "$WORK/part1" --class-dropout 0.2
# a setting of the wrong kind in the run's config.json is named with the file and its key
mkdir -p "$WORK/badcfg"
for v in '"abc"' '-5' '[4]'; do
  sed "s/\"batch\": [0-9]*/\"batch\": $v/" "$WORK/part1/config.json" > "$WORK/badcfg/config.json"
  expect_usage "--resume: $WORK/badcfg/config.json has batch = .*, which is not valid for --batch" --resume "$WORK/badcfg"
done
sed 's/"sp_attention": "[a-z-]*"/"sp_attention": "spiral"/' "$WORK/part1/config.json" > "$WORK/badcfg/config.json"
expect_usage "--resume: $WORK/badcfg/config.json has sp_attention = 'spiral', which is not valid for --sp-attention (--sp-attention: unknown layout 'spiral'" --resume "$WORK/badcfg"
cp -r "$WORK/part1" "$WORK/noema" && rm "$WORK/noema/ema.safetensors"
expect_usage "noema has no ema.safetensors: was the run started with --ema 0?" $RES --steps 30 --resume "$WORK/noema"
cp "$WORK/part1/loss.csv" "$WORK/noema/ema.safetensors" # present but corrupt: no talk of --ema 0
expect_usage "the EMA weights: $WORK/noema/ema.safetensors: not a safetensors file" $RES --steps 30 --resume "$WORK/noema"
echo "$msg" | grep -q -- "--ema 0" && bad "a corrupt ema.safetensors is blamed on --ema 0: $msg"
printf 'step,loss\r\n1,xx\r\n' > "$WORK/noema/loss.csv" # the row quoted without its line ending
rm "$WORK/noema/ema.safetensors"
expect_usage "loss.csv: line 2 is not 'step,loss,...': 1,xx$" $RES --steps 30 --ema 0 --resume "$WORK/noema"
msg=$($TRAIN sample --ckpt "$WORK/part1/loss.csv" --out "$WORK/never.png" 2>&1); rc=$?
if [ $rc = 2 ] && echo "$msg" | grep -q "not a safetensors file" && [ ! -e "$WORK/never.png" ]; then ok "sample --ckpt of a text file: exit 2, not a safetensors file"
else bad "sample --ckpt of a text file: exit $rc: $msg"; fi
for c in 0 1 2 3 4 5 6 7 8 9 10; do mkdir -p "$WORK/many/class$c" && cp "$WORK/full1/samples.png" "$WORK/many/class$c/"; done
expect_usage "the data have 11 classes but the model has 10; pass --num-classes 11" $RES --data "$WORK/many"
if $TRAIN $RES --steps 2 --data "$WORK/many" --num-classes 11 --out "$WORK/many-run" >/dev/null 2>&1; then ok "11 class folders with --num-classes 11: trained"
else bad "11 class folders with --num-classes 11 failed"; fi
TRAIN_REAL=$TRAIN; TRAIN="$MPIRUN -np 4 $TRAIN_REAL"
expect_usage "context_parallel_size=4 but sequence length 81 is not divisible by it; pad to 84 or enable auto-pad (drop --no-auto-pad)" $SMALL --no-auto-pad
expect_usage "--sp-attention all-to-all splits the 2 heads over 4 ranks, fewer heads than ranks; use --sp-attention gather or ring, or hybrid with a --ulysses-degree that divides 4 and is at most 2" $SMALL --sp-attention all-to-all
expect_usage "the wrong-restore bug lives in the gather layout; inject it with --sp-attention gather" $SMALL --heads 4 --sp-attention all-to-all --inject-bug wrong-restore
expect_usage "unknown layout 'spiral' (known: gather, all-to-all, ring, hybrid, auto)" $SMALL --sp-attention spiral
expect_usage "--sp 3 must divide the 4 ranks" $SMALL --sp 3
expect_usage "the batch of 6 images does not split over the 4 data groups" $SMALL --sp 1 --batch 6
expect_usage "--ulysses-degree 4 splits the 2 heads over 4 ranks, fewer heads than ranks; pick a --ulysses-degree that divides 4 and is at most 2" $SMALL --sp-attention hybrid --ulysses-degree 4
expect_usage "--ulysses-degree 3 must divide the 4 sequence-parallel ranks; pick a divisor of 4" $SMALL --sp-attention hybrid --ulysses-degree 3
expect_usage "--sp-attention hybrid needs --ulysses-degree U" $SMALL --sp-attention hybrid
expect_usage "--ulysses-degree applies to --sp-attention hybrid only" $SMALL --ulysses-degree 2
expect_usage "the no-dp-allreduce bug sums the gradients within the sequence group only; it needs data parallelism: pass --sp N" $SMALL --inject-bug no-dp-allreduce
expect_usage "the accum-unweighted bug weighs every micro-batch's mean 1/K; it needs micro-batches: pass --grad-accum K with K >= 2" $SMALL --inject-bug accum-unweighted
expect_usage "--grad-accum 3 is more than the 2 images of each data group (the batch of 8 over 4 groups)" $SMALL --sp 1 --grad-accum 3
TRAIN=$TRAIN_REAL
# a run folder that already holds a run is not overwritten: the new run is refused, the old intact
cp "$WORK/full1/model.safetensors" "$WORK/model-before"
msg=$($TRAIN $RES --steps 3 --out "$WORK/full1" 2>&1); rc=$?
if [ $rc = 2 ] && echo "$msg" | grep -q "already holds a run (model.safetensors); continue it with --resume" &&
   cmp -s "$WORK/full1/model.safetensors" "$WORK/model-before"; then ok "--out holding a run: exit 2, the run left intact"
else bad "--out holding a run (exit $rc): $msg"; fi
msg=$($TRAIN $RES --steps 3 --out "$WORK/model-before" 2>&1); rc=$?
if [ $rc = 2 ] && echo "$msg" | grep -q "is a file, not a folder" && cmp -s "$WORK/full1/model.safetensors" "$WORK/model-before"; then
  ok "--out naming a file: exit 2, the file left intact"
else bad "--out naming a file (exit $rc): $msg"; fi
# verify replaces its own earlier runs, and checks the training flags before starting any
out=$("$TRAIN" verify --ranks 2 $RES --steps 3 --out "$WORK/verify2" 2>&1 && "$TRAIN" verify --ranks 2 $RES --steps 3 --out "$WORK/verify2" 2>&1)
if [ $? = 0 ] && echo "$out" | grep -q "replacing the earlier results"; then ok "verify run twice into one folder: replaces its earlier runs"
else bad "verify run twice into one folder"; echo "$out" | tail -3; fi
# the network path: verify over Open MPI's TCP transport (ob1, whose transports the btl list
# chooses; UCX would ignore it) agrees with one rank; the same list without tcp cannot reach the
# other rank, which shows that the list is what carried the run
out=$(OMPI_MCA_pml=ob1 OMPI_MCA_btl=tcp,self "$TRAIN" verify --ranks 2 $RES --steps 5 --out "$WORK/tcp" 2>&1)
if [ $? = 0 ] && ! OMPI_MCA_pml=ob1 OMPI_MCA_btl=self timeout 60 "$TRAIN" verify --ranks 2 $RES --steps 2 --out "$WORK/tcp-none" >/dev/null 2>&1; then
  ok "verify --ranks 2 over TCP (--mca btl tcp,self) vs 1 rank: $(echo "$out" | grep -o 'largest relative loss difference [^ ]*')"
else bad "verify --ranks 2 over TCP"; echo "$out" | tail -3; fi
# --recompute: the same files, bit for bit (2 ranks, ring, 3 steps); the probe's gradients too,
# and its dumped tape (the block run again in backward is watched once) agrees tensor by tensor
for r in "" --recompute; do
  $MPIRUN -np 2 "$TRAIN" $RES --steps 3 --sp-attention ring --samples-per-class 0 $r --out "$WORK/recompute$r" >/dev/null 2>&1
  [ -z "$r" ] && $MPIRUN -np 2 "$TRAIN" probe --ckpt "$WORK/recompute/model.safetensors" --make-batch 3 --out "$WORK/recompute/batch" >/dev/null 2>&1
  $MPIRUN -np 2 "$TRAIN" probe --ckpt "$WORK/recompute/model.safetensors" --batch "$WORK/recompute/batch" --sp-attention ring $r \
    --out "$WORK/recompute$r/probe" --dump-tape "$WORK/recompute$r/tape" >/dev/null 2>&1
done
if cmp -s "$WORK/recompute/model.safetensors" "$WORK/recompute--recompute/model.safetensors" &&
   cmp -s "$WORK/recompute/optimizer.safetensors" "$WORK/recompute--recompute/optimizer.safetensors" &&
   cmp -s "$WORK/recompute/probe" "$WORK/recompute--recompute/probe" &&
   "$TRAIN" locate "$WORK/recompute--recompute/tape" "$WORK/recompute/tape" >/dev/null 2>&1; then
  ok "--recompute: model, optimizer state and probe gradients identical to without it; its dumped tape agrees"
else bad "--recompute differs from a run without it"; fi
# --zero 3 on 4 ranks: the memory line reports a quarter of the Adam moments (the bits, the
# tolerance and resuming onto other levels and rank counts: tests/exact_test.sh, test_parallel's
# zero tests)
out=$($MPIRUN -np 4 "$TRAIN" $RES --steps 2 --zero 3 --samples-per-class 0 --out "$WORK/zero" 2>&1)
if [ $? = 0 ] && echo "$out" | grep -q "Adam moments [0-9.]* MiB (1/4 of them: --zero 3)"; then
  ok "--zero 3 on 4 ranks: $(echo "$out" | grep -o 'Adam moments [^,]*')"
else bad "--zero 3 on 4 ranks"; echo "$out" | tail -3; fi
# --zero 3 keeps no whole model anywhere, resumed or sampled too: a run of DiT-S/2 (its state
# outweighs its 16 tokens' activations) resumed under --zero 3 peaks as its fresh start did (the
# process's count, the largest rank's), and sample --zero 3 below a whole copy of the weights
peak() { echo "$1" | sed -n 's/^process: peak resident memory \([0-9.]*\) MiB.*/\1/p'; }
LEAN="--model DiT-S/2 --input-size 8 --batch 4 --samples-per-class 0 --zero 3"
fresh=$($MPIRUN -np 4 "$TRAIN" $LEAN --steps 1 --out "$WORK/lean" 2>&1)
resumed=$($MPIRUN -np 4 "$TRAIN" $LEAN --steps 2 --resume "$WORK/lean" --out "$WORK/lean" 2>&1)
whole=$(( $(stat -c %s "$WORK/lean/model.safetensors") / 1048576 ))
sampled=$($MPIRUN -np 4 "$TRAIN" sample --ckpt "$WORK/lean" --zero 3 --samples-per-class 1 --sample-steps 1 \
          --out "$WORK/lean/s.png" 2>&1)
if [ -n "$(peak "$fresh")" ] && [ -n "$(peak "$resumed")" ] && [ -n "$(peak "$sampled")" ] &&
   awk -v a="$(peak "$fresh")" -v b="$(peak "$resumed")" -v s="$(peak "$sampled")" -v w="$whole" \
     'BEGIN { exit !(b <= 1.15 * a && s < w) }'; then
  ok "--zero 3 on 4 ranks, DiT-S/2: fresh start $(peak "$fresh") MiB, resumed $(peak "$resumed") MiB," \
     "sample $(peak "$sampled") MiB (a whole copy of the weights: $whole MiB)"
else bad "--zero 3 resumed or sampled holds more than its fresh start: fresh $(peak "$fresh") MiB," \
     "resumed $(peak "$resumed") MiB, sample $(peak "$sampled") MiB, weights $whole MiB"; echo "$resumed $sampled" | tail -3; fi
# a verify that cannot start keeps the earlier results: it checks what the runs check first
for args in "--data $WORK/no-such-folder" "--sp-attention all-to-all --heads 2 --ranks 4"; do
  msg=$("$TRAIN" verify --ranks 2 $RES --steps 3 --out "$WORK/verify2" $args 2>&1); rc=$?
  if [ $rc = 2 ] && [ -f "$WORK/verify2/ranks-2/model.safetensors" ] && [ -f "$WORK/verify2/loss.png" ]; then
    ok "verify $args: exit 2, earlier results kept"
  else bad "verify $args (exit $rc): $msg"; ls "$WORK/verify2" "$WORK/verify2/ranks-2"; fi
done
for args in "--reference-steps 9" "--inject-bug"; do
  msg=$("$TRAIN" verify --ranks 2 $RES --steps 5 --out "$WORK/verify3" $args 2>&1); rc=$?
  if [ $rc = 2 ] && [ ! -e "$WORK/verify3" ]; then ok "verify $args: exit 2 before any run, $(echo "$msg" | head -1)"
  else bad "verify $args (exit $rc): $msg"; fi
done
# compare and verify run without MPI: their usage errors are plain exit 2 too (no MPI banner)
mkdir -p "$WORK/unsorted" && printf 'step,loss\n1,2.0\n3,1.0\n2,1.5\n' > "$WORK/unsorted/loss.csv"
for args in "compare $WORK/full1" "compare $WORK/unsorted $WORK/full1" "verify --ranks 1" "compare $WORK/full1 $WORK/part1 --plot $WORK/p.jpg"; do
  msg=$($TRAIN $args 2>&1); rc=$?
  if [ $rc = 2 ] && ! echo "$msg" | grep -q MPI; then ok "bad input ($args): exit 2, $(echo "$msg" | head -1)"
  else bad "bad input ($args): exit $rc: $msg"; fi
done

# 5. probe and sample: a bad batch or output path is a usage error found before any work, and an
# output path that is an input is refused (the input is left as it was)
# st FILE SPEC...: a safetensors file; SPEC is NAME:DTYPE:DIMS (DIMS joined by commas) for a tensor
# of zeros, or NAME:I64:DIMS:V for one whose elements are all V
le64() { local i; for i in 0 1 2 3 4 5 6 7; do printf "\\x$(printf %02x $(( ($1 >> 8 * i) & 255 )))"; done; }
st() {
  local f=$1 hdr="" off=0 spec name dt dims v n i; shift
  for spec; do
    IFS=: read -r name dt dims v <<< "$spec"
    n=$(( ${dims//,/*} * ${dt:1} / 8 ))
    hdr+="${hdr:+,}\"$name\":{\"dtype\":\"$dt\",\"shape\":[$dims],\"data_offsets\":[$off,$((off + n))]}"
    off=$((off + n))
  done
  { le64 $((${#hdr} + 2)); printf '{%s}' "$hdr"
    for spec; do
      IFS=: read -r name dt dims v <<< "$spec"
      if [ -z "$v" ]; then head -c $(( ${dims//,/*} * ${dt:1} / 8 )) /dev/zero
      else for ((i = 0; i < ${dims//,/*}; i++)); do le64 "$v"; done; fi
    done; } > "$f"
}
CK=$WORK/full1/model.safetensors # DiT-tiny/2, 8x8 RGB images, label dropout: a null class
nc=$(grep -o '"num_classes": [0-9]*' "$WORK/full1/config.json" | grep -o '[0-9]*$')
X=x:F32:2,3,8,8 T=t:F32:2 Y=y:I64:2 G=target:F32:2,3,8,8
expect_batch() { # expected-text, tensor specs...
  local want=$1; shift
  st "$WORK/batch.safetensors" "$@"
  expect_usage "$want" probe --ckpt "$CK" --batch "$WORK/batch.safetensors"
}
expect_batch "'x' must be F32 or F64 \[B, 3, 8, 8\] with B >= 1 for this checkpoint, but the file has F32 \[2, 3, 16, 16\]" x:F32:2,3,16,16 $T $Y $G
expect_batch "'x' must be .* but the file has F32 \[2, 1, 8, 8\]" x:F32:2,1,8,8 $T $Y $G
expect_batch "'x' must be .* but the file has F32 \[2, 3, 64\]" x:F32:2,3,64 $T $Y $G
expect_batch "'x' must be .* with B >= 1 .* but the file has F32 \[0, 3, 8, 8\]" x:F32:0,3,8,8 t:F32:0 y:I64:0 target:F32:0,3,8,8
expect_batch "has no tensor 't'; a probe batch for this checkpoint needs 't' as F32 or F64 \[2\]" $X $Y $G
expect_batch "has no tensor 'target'; .* needs 'target' as F32 or F64 \[2, 3, 8, 8\]" $X $T $Y
expect_batch "'y' must be I64 or I32 \[2\] for this checkpoint, but the file has F32 \[2\]" $X $T y:F32:2 $G
expect_batch "'y' must be I64 or I32 \[2\] for this checkpoint, but the file has I64 \[3\]" $X $T y:I64:3 $G
expect_batch "'target' must be F32 or F64 \[2, 3, 8, 8\] for this checkpoint, but the file has F32 \[2, 6, 8, 8\]" $X $T $Y target:F32:2,6,8,8
expect_batch "label y\[0\] = -1 is not a class of this checkpoint; its labels are 0 to $((nc - 1)), or $nc for the null class" $X $T y:I64:2:-1 $G
expect_batch "label y\[0\] = $((nc + 1)) is not a class" $X $T y:I64:2:$((nc + 1)) $G
# a batch of packs (probe --help): rows of T <= 16 tokens as strips, each image inside its row
PI=pack:I64:1,4:1 PX=x:F32:2,3,2,16 PT=t:F32:1 PG=target:F32:2,3,2,16 PW="'pack' (row, first token, patch rows, patch columns of each image): pack image"
expect_batch "'x' is a strip of 40 pixels; a batch of packs needs rows of at most 16 tokens of 2 pixels" $PI x:F32:2,3,2,40 $PT $Y target:F32:2,3,2,40
expect_batch "$PW 0 (9x9 patches at token 9 of row 9) does not fit 2 rows of 8 tokens" pack:I64:1,4:9 $PX $PT $Y $PG
expect_batch "${PW}s 0 and 1 overlap in row 1" pack:I64:2,4:1 $PX t:F32:2 y:I64:2 $PG
expect_batch "$PW 0 (0x0 patches at token 0 of row 0) does not fit 2 rows of 8 tokens" pack:I64:1,4 $PX $PT y:I64:1 $PG
expect_batch "'t' must be F32 or F64 \[1\] for this checkpoint, but the file has F32 \[2\]" $PI $PX $T y:I64:1 $PG
st "$WORK/batch.safetensors" $PI $PX $PT y:I64:1 $PG
msg=$($TRAIN probe --ckpt "$CK" --batch "$WORK/batch.safetensors" --out "$WORK/probe.safetensors" 2>&1)
if [ $? = 0 ] && [ -s "$WORK/probe.safetensors" ]; then ok "probe batch of packs: accepted"
else bad "probe batch of packs refused: $msg"; fi
rm -f "$WORK/probe.safetensors"
# accepted: I32 labels, F64 times, the null class
for y in y:I32:2 y:I64:2:$nc; do for t in $T t:F64:2; do
  st "$WORK/batch.safetensors" $X $t $y $G
  msg=$($TRAIN probe --ckpt "$CK" --batch "$WORK/batch.safetensors" --out "$WORK/probe.safetensors" 2>&1)
  if [ $? = 0 ] && [ -s "$WORK/probe.safetensors" ]; then ok "probe batch with $y $t: accepted"
  else bad "probe batch with $y $t refused: $msg"; fi
  rm -f "$WORK/probe.safetensors"
done; done

# output paths: checked before the checkpoint is read (a missing one is not what is reported)
st "$WORK/batch.safetensors" $X $T $Y $G
mkdir -p "$WORK/folder"
expect_out() { # expected-text, out, flags...
  local want=$1 out=$2; shift 2
  msg=$($TRAIN "$@" --out "$out" 2>&1); rc=$?
  if [ $rc = 2 ] && echo "$msg" | grep -q -- "$want"; then ok "bad output ($1 --out '$out'): exit 2, '$want'"
  else bad "bad output ($* --out '$out'): exit $rc: $msg"; fi
}
for cmd in "probe --batch $WORK/batch.safetensors" sample; do
  expect_out "--out is empty" "" $cmd --ckpt "$WORK/no-such.safetensors"
  expect_out "is a folder" "$WORK/folder" $cmd --ckpt "$WORK/no-such.safetensors"
  expect_out "the folder $WORK/no-such-folder does not exist" "$WORK/no-such-folder/a.png" $cmd --ckpt "$WORK/no-such.safetensors"
done
expect_out "$WORK/batch.safetensors is not a folder" "$WORK/batch.safetensors/a.png" sample --ckpt "$WORK/no-such.safetensors"
expect_out "exists and is not a regular file" /dev/null sample --ckpt "$WORK/no-such.safetensors"
expect_out "the file written is in the .png format, so pass a path ending in .png" "$WORK/s.jpg" sample --ckpt "$WORK/no-such.safetensors"
cp "$CK" "$WORK/ck.safetensors"; cp "$WORK/batch.safetensors" "$WORK/batch-copy.safetensors"
ln -s ck.safetensors "$WORK/ck-link.png"
expect_out "is the same file as --ckpt" "$WORK/../$(basename "$WORK")/ck.safetensors" probe --ckpt "$WORK/ck.safetensors" --batch "$WORK/batch.safetensors"
expect_out "is the same file as --batch" "$WORK/batch.safetensors" probe --ckpt "$WORK/ck.safetensors" --batch "$WORK/./batch.safetensors"
expect_out "is the same file as --ckpt" "$WORK/ck-link.png" sample --ckpt "$WORK/ck.safetensors"
if cmp -s "$CK" "$WORK/ck.safetensors" && cmp -s "$WORK/batch.safetensors" "$WORK/batch-copy.safetensors"; then
  ok "the inputs named as --out are unchanged"; else bad "an input named as --out was overwritten"; fi
# a folder that cannot be written is found when writing (root may write anywhere else)
expect_out "cannot create /proc/probe.safetensors.tmp" /proc/probe.safetensors probe --ckpt "$CK" --batch "$WORK/batch.safetensors"
expect_out "cannot create /proc/samples.png.tmp" /proc/samples.png sample --ckpt "$CK" --sample-steps 1 --samples-per-class 1
TRAIN="$MPIRUN -np 2 $TRAIN_REAL"
expect_out "is a folder" "$WORK/folder" probe --ckpt "$CK" --batch "$WORK/batch.safetensors"
TRAIN=$TRAIN_REAL
msg=$($TRAIN sample --ckpt "$CK" --sample-steps 1 --samples-per-class 1 --out "$WORK/s.PNG" 2>&1)
if [ $? = 0 ] && [ -s "$WORK/s.PNG" ]; then ok "sample --out s.PNG: written"; else bad "sample --out s.PNG: $msg"; fi
# a checkpoint whose final layer overflows (its input shifted by 10 and weights of 3e38: finite, so
# it loads, but their products are not): sampling gives NaN, an error with exit 1 and no picture,
# on 1 and 2 ranks. set_tensor FILE NAME VALUE: every float32 of tensor NAME in FILE becomes VALUE
set_tensor() {
  local hlen span
  hlen=$(od -An -tu8 -N8 "$1" | tr -d ' ')
  span=$(head -c $((8 + hlen)) "$1" | grep -ao "\"$2\":{[^}]*}" | grep -o '"data_offsets":\[[0-9]*,[0-9]*\]' |
         grep -o '[0-9]*,[0-9]*')
  perl -e 'print pack("f<*", ($ARGV[0]) x $ARGV[1])' "$3" $(( (${span#*,} - ${span%,*}) / 4 )) |
    dd of="$1" bs=1 seek=$((8 + hlen + ${span%,*})) conv=notrunc status=none
}
cp "$CK" "$WORK/overflow.safetensors"
set_tensor "$WORK/overflow.safetensors" final_layer.adaLN_modulation.1.bias 10
set_tensor "$WORK/overflow.safetensors" final_layer.linear.weight 3e38
for np in 1 2; do
  msg=$($MPIRUN -np $np "$TRAIN" sample --ckpt "$WORK/overflow.safetensors" --sample-steps 1 --samples-per-class 1 \
        --out "$WORK/nan.png" 2>&1); rc=$?
  if [ $rc = 1 ] && echo "$msg" | grep -Eq "sampling gave (NaN|an infinite value) in image [0-9]+ of 10 \(class '[a-z ]*'\)" &&
     ! ls "$WORK" | grep -q nan.png; then ok "sample of an overflowing model on $np rank(s): exit 1, no picture, $(echo "$msg" | grep -o 'sampling gave [^:]*' | head -1)"
  else bad "sample of an overflowing model on $np rank(s) (exit $rc): $msg"; fi
done

# 6. what a newcomer hits (issue 13)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
png_height() { od -An -tu1 -j20 -N4 "$1" | awk '{ print $1 * 16777216 + $2 * 65536 + $3 * 256 + $4 }'; }
sums() { (cd "$1" && find . -type f | sort | xargs md5sum); }
# verify --out naming an ordinary run (model.safetensors or loss.csv at its top) is refused, and
# nothing in it is written or replaced (its loss.png least of all)
mkdir -p "$WORK/csvonly" && cp "$WORK/full1/loss.csv" "$WORK/full1/loss.png" "$WORK/csvonly/"
for d in full1 csvonly; do
  before=$(sums "$WORK/$d")
  msg=$($TRAIN verify --ranks 2 $RES --steps 3 --out "$WORK/$d" 2>&1); rc=$?
  if [ $rc = 2 ] && echo "$msg" | grep -q "holds a training run" && ! echo "$msg" | grep -q '\.c:[0-9]' &&
     [ "$(sums "$WORK/$d")" = "$before" ]; then ok "newcomer: verify --out $d (a run): exit 2, $(echo "$msg" | head -1)"
  else bad "newcomer: verify --out $d (a run) (exit $rc): $msg"; ls "$WORK/$d"; fi
done
# compare --plot an existing file that is not a compare.png: refused, the file intact; a
# compare.png it wrote is replaced
cp "$WORK/full1/samples.png" "$WORK/samples-before.png"
msg=$($TRAIN compare "$WORK/full1" "$WORK/full2" --plot "$WORK/full1/samples.png" 2>&1); rc=$?
if [ $rc = 2 ] && echo "$msg" | grep -q "already exists" && cmp -s "$WORK/full1/samples.png" "$WORK/samples-before.png"; then
  ok "newcomer: compare --plot RUN/samples.png: exit 2, the samples intact"
else bad "newcomer: compare --plot RUN/samples.png (exit $rc): $msg"; fi
$TRAIN compare "$WORK/full1" "$WORK/full2" >/dev/null 2>&1
msg=$($TRAIN compare "$WORK/full1" "$WORK/full2" --plot "$WORK/full1/compare.png" 2>&1); rc=$?
if [ $rc = 0 ] && echo "$msg" | grep -q "plot: $WORK/full1/compare.png"; then ok "newcomer: compare --plot of its own compare.png: replaced"
else bad "newcomer: compare --plot of its own compare.png (exit $rc): $msg"; fi
# make: train/train follows the build chosen last (make USE_CUDA=0, then make), not the newest
mkdir -p "$WORK/mk/train"
for b in b-cuda b-cpu; do
  mkdir -p "$WORK/mk/$b/f32/bin" "$WORK/mk/$b/f32/train"
  touch -d '1 hour ago' "$WORK/mk/$b/f32/train/main.o" "$WORK/mk/$b/f32/libdit.a"
  echo "$b" > "$WORK/mk/$b/f32/bin/train"
done
for b in b-cpu b-cuda; do make -s --no-print-directory -f "$ROOT/Makefile" -C "$WORK/mk" BUILD=$b train/train >/dev/null 2>&1; done
if [ "$(cat "$WORK/mk/train/train" 2>/dev/null)" = b-cuda ]; then ok "newcomer: make USE_CUDA=0, then make: train/train is the CUDA build again"
else bad "newcomer: after the CPU build, make left train/train as '$(cat "$WORK/mk/train/train" 2>/dev/null)'"; fi

# messages: flag words and a fix, one line
expect_usage "--heads 3 does not divide the width 64 (--hidden); pick heads that divide it, e.g. 1, 2, 4, 8 or 16" --heads 3
for m in dit-mini/4 DiT-Q/2; do
  msg=$($TRAIN --model $m --out "$WORK/never" 2>&1); rc=$?
  if [ $rc = 2 ] && [ "$(echo "$msg" | grep -c .)" = 2 ] && echo "$msg" | head -1 | grep -q "^error: --model: unknown preset '$m'; .*DiT-" &&
     { [ $m != dit-mini/4 ] || echo "$msg" | grep -q "case-sensitive, so pass --model DiT-mini/4"; }; then
    ok "newcomer: --model $m: one line, $(echo "$msg" | head -1)"
  else bad "newcomer: --model $m (exit $rc): $msg"; fi
done
# sample --ckpt RUN: its EMA weights (else the raw ones), saying which
msg=$($TRAIN sample --ckpt "$WORK/full1" --sample-steps 1 --samples-per-class 1 --out "$WORK/dir.png" 2>&1); rc=$?
if [ $rc = 0 ] && [ -s "$WORK/dir.png" ] && echo "$msg" | grep -q "sampling the EMA weights in $WORK/full1/ema.safetensors" &&
   ! echo "$msg" | grep -q "sampling: Euler"; then ok "newcomer: sample --ckpt RUN: the EMA weights, said so (and quiet)"
else bad "newcomer: sample --ckpt RUN (exit $rc): $msg"; fi
mkdir -p "$WORK/rawonly" && cp "$WORK/full1/model.safetensors" "$WORK/full1/config.json" "$WORK/rawonly/"
msg=$($TRAIN sample --ckpt "$WORK/rawonly" --sample-steps 1 --samples-per-class 1 --out "$WORK/raw.png" 2>&1); rc=$?
if [ $rc = 0 ] && echo "$msg" | grep -q "sampling the raw weights (the run kept no EMA) in $WORK/rawonly/model.safetensors"; then
  ok "newcomer: sample --ckpt RUN without EMA: the raw weights, said so"
else bad "newcomer: sample --ckpt RUN without EMA (exit $rc): $msg"; fi
expect_out "is a folder with neither ema.safetensors nor model.safetensors; pass a checkpoint file or the --out folder" "$WORK/x.png" sample --ckpt "$WORK/folder"
# sample knows the run's data (11 classes: 11 rows) and never suggests --num-classes
msg=$($TRAIN sample --ckpt "$WORK/many-run" --sample-steps 1 --samples-per-class 1 --out "$WORK/many.png" 2>&1); rc=$?
if [ $rc = 0 ] && echo "$msg" | grep -q "classes of $WORK/many (the run's config.json)" && [ "$(png_height "$WORK/many.png")" = $((4 + 11 * 36)) ]; then
  ok "newcomer: sample --ckpt RUN: the run's 11 classes from its config.json"
else bad "newcomer: sample --ckpt RUN of an 11-class run (exit $rc, height $(png_height "$WORK/many.png")): $msg"; fi
expect_out "has 11 classes but $CK was trained on 10; pass the --data it was trained on" "$WORK/x.png" sample --ckpt "$CK" --data "$WORK/many"
echo "$msg" | grep -q -- --num-classes && bad "newcomer: sample suggests --num-classes, which it does not take: $msg"
# compare of runs with different settings names them
$TRAIN $RES --steps 3 --seed 1 --lr 0.002 --out "$WORK/seed1" >/dev/null 2>&1
msg=$($TRAIN compare "$WORK/full1" "$WORK/seed1" --plot "$WORK/seeds.png" 2>&1); rc=$?
if [ $rc = 1 ] && echo "$msg" | grep -q "the runs differ in lr (0.001 vs 0.002), seed (0 vs 1) (their config.json), so their losses are expected to diverge"; then
  ok "newcomer: compare of runs with other seed and lr: $(echo "$msg" | grep -o 'differ in [^;]*diverge')"
else bad "newcomer: compare of runs with other settings (exit $rc): $msg"; fi
msg=$($TRAIN compare "$WORK/full2" "$WORK/full1" --plot "$WORK/ranks21.png" 2>&1)
echo "$msg" | grep -q "differ in" && bad "newcomer: compare of 2 ranks against 1 names settings: $msg"
# ... but not the device: a CPU run against the config.json of a CUDA run with TF32
mkdir -p "$WORK/cuda-config" && cp "$WORK/full1/loss.csv" "$WORK/cuda-config/"
sed 's/"device": "cpu"/"device": "cuda"/; s/"tf32": false/"tf32": true/' "$WORK/full1/config.json" > "$WORK/cuda-config/config.json"
msg=$($TRAIN compare "$WORK/full1" "$WORK/cuda-config" --plot "$WORK/cuda-config.png" 2>&1); rc=$?
if [ $rc = 0 ] && grep -q '"device": "cuda"' "$WORK/cuda-config/config.json" && grep -q '"tf32": true' "$WORK/cuda-config/config.json" &&
   ! echo "$msg" | grep -q "differ in"; then ok "newcomer: compare of a CPU run with a device: cuda, tf32 config.json names no setting"
else bad "newcomer: compare of a CPU run with a CUDA config.json (exit $rc): $msg"; fi
# the README points to no file the repository lacks
# (a file under DIR/, the output folder a command is given, is not one of the repository's)
missing=$(grep -o '[A-Za-z0-9_./-]*\.md' "$ROOT/README.md" | grep -v '^DIR/' | sort -u | while read -r f; do [ -e "$ROOT/$f" ] || echo "$f"; done)
if [ -z "$missing" ]; then ok "newcomer: every .md file the README names exists"; else bad "newcomer: the README names missing files: $missing"; fi

# missing for users: verify --samples-per-class 0, sampling progress, a bare train/train, a fresh
# default --out, and --help naming every file of a run
msg=$($TRAIN verify --ranks 2 $RES --steps 3 --samples-per-class 0 --out "$WORK/verify-nosamples" 2>&1); rc=$?
if [ $rc = 0 ] && [ -f "$WORK/verify-nosamples/ranks-2/model.safetensors" ] && [ ! -e "$WORK/verify-nosamples/ranks-2/samples.png" ] &&
   [ ! -e "$WORK/verify-nosamples/ranks-1/samples.png" ]; then ok "newcomer: verify --samples-per-class 0: both runs without samples"
else bad "newcomer: verify --samples-per-class 0 (exit $rc): $msg"; fi
msg=$(SAMPLE_QUIET_SECONDS=0 $TRAIN sample --ckpt "$WORK/full1" --sample-steps 3 --samples-per-class 1 --out "$WORK/slow.png" 2>&1); rc=$?
if [ $rc = 0 ] && echo "$msg" | grep -q "^sampling: Euler step 1/3 | .* | ETA " && echo "$msg" | grep -q "^sampling: Euler step 3/3 | .* | ETA 0s"; then
  ok "newcomer: long sampling (SAMPLE_QUIET_SECONDS=0): a line per step with its ETA"
else bad "newcomer: sampling progress (exit $rc): $msg"; fi
msg=$(SAMPLE_QUIET_SECONDS=0 $TRAIN $RES --steps 1 --out "$WORK/progress" 2>&1); rc=$?
if [ $rc = 0 ] && echo "$msg" | grep -q "^sampling: Euler step 1/1 .*| ETA 0s"; then ok "newcomer: sampling at the end of training shows progress too"
else bad "newcomer: sampling progress at the end of training (exit $rc): $msg"; fi
mkdir -p "$WORK/bare"
msg=$(cd "$WORK/bare" && timeout 60 $TRAIN 2>&1); rc=$?
if [ $rc = 0 ] && echo "$msg" | grep -q "^usage: " && echo "$msg" | grep -q "make demo" && [ -z "$(ls "$WORK/bare")" ]; then
  ok "newcomer: a bare train/train: the usage and the demo command, exit 0, nothing trained"
else bad "newcomer: a bare train/train (exit $rc): $(echo "$msg" | head -3)"; fi
mkdir -p "$WORK/fresh"
(cd "$WORK/fresh" && $TRAIN $RES --steps 1 && $TRAIN $RES --steps 1 && $MPIRUN -np 2 $TRAIN $RES --steps 1) >/dev/null 2>&1; rc=$?
made=$(cd "$WORK/fresh" && ls -d runs/*/model.safetensors 2>/dev/null | grep -cE '^runs/[0-9]{8}-[123]/model.safetensors$')
if [ $rc = 0 ] && [ "$made" = 3 ]; then ok "newcomer: no --out, three times (the last on 2 ranks): three fresh runs/<yyyymmdd>-<n>"
else bad "newcomer: no --out three times (exit $rc): $(cd "$WORK/fresh" && ls -R runs 2>&1 | head -5)"; fi
help=$($TRAIN --help | grep -A4 -- '--out DIR')
if echo "$help" | grep -q optimizer.safetensors && echo "$help" | grep -q ema.safetensors && echo "$help" | grep -q samples.png; then
  ok "newcomer: --help of --out names every file of a run"
else bad "newcomer: --help of --out: $help"; fi
missing=""
for sub in probe sample compare verify bugs locate; do # each named by --help and a bare train/train
  $TRAIN --help | grep -q "train/train $sub " || missing="$missing --help:$sub"
  (cd "$WORK/bare" && $TRAIN) | grep -q "$sub" || missing="$missing usage:$sub"
  $TRAIN $sub --help | grep -q "^usage: .*train/train $sub " || missing="$missing $sub--help"
done
if [ -z "$missing" ]; then ok "newcomer: --help and a bare train/train name every subcommand, each with its --help"
else bad "newcomer: subcommands not named:$missing"; fi
# a value that is no finite float in a probe batch: exit 2 naming the tensor and its first index
# (singleton, and on 2 ranks); set_bytes FILE OFFSET BYTES writes BYTES at OFFSET of the data
set_bytes() { printf "$3" | dd of="$1" bs=1 seek=$((8 + $(od -An -tu8 -N8 "$1") + $2)) conv=notrunc status=none; }
st "$WORK/nan.safetensors" $X $T $Y $G # data: x (1536 bytes), t, y, target (from 1560)
set_bytes "$WORK/nan.safetensors" $(( ((1 * 3 + 2) * 64 + 3 * 8 + 4) * 4 )) '\x00\x00\xc0\x7f' # x[1,2,3,4]
expect_usage "'x' holds NaN at x\[1, 2, 3, 4\], its first value that is no finite float" probe --ckpt "$CK" --batch "$WORK/nan.safetensors"
st "$WORK/nan.safetensors" $X $T $Y $G
set_bytes "$WORK/nan.safetensors" $((1560 + 65 * 4)) '\x00\x00\x80\xff' # target[0,1,0,1]
TRAIN="$MPIRUN -np 2 $TRAIN_REAL"
expect_usage "'target' holds -infinity at target\[0, 1, 0, 1\]" probe --ckpt "$CK" --batch "$WORK/nan.safetensors"
TRAIN=$TRAIN_REAL
st "$WORK/nan.safetensors" $X t:F64:2 $Y $G
set_bytes "$WORK/nan.safetensors" $((1536 + 8)) '\x9c\x75\x00\x88\x3c\xe4\x37\x7e' # t[1] = 1e300
expect_usage "'t' holds 1e+300 at t\[1\], its first value that is no finite float32" probe --ckpt "$CK" --batch "$WORK/nan.safetensors"
# the planner: its flags, the layouts it leaves to itself, and --sp-attention auto
expect_usage "plan needs the link of 2 ranks: --link-bandwidth MB/s and --link-latency US, or --measure under mpirun -np 2" plan --ranks 2 $SMALL
expect_usage "plan --measure measures the link between the job's ranks: start it with mpirun -np 2" plan --measure $SMALL
expect_usage "plan tries every layout of a fresh run; leave out --sp-attention" plan --ranks 2 --sp-attention ring
expect_usage "--sp-attention auto picks --ulysses-degree itself" $SMALL --sp-attention auto --ulysses-degree 2
expect_usage "plan predicts the default mode; --exact's sums" plan --ranks 1 --exact $SMALL
st "$WORK/auto.safetensors" $X $T $Y $G
expect_usage "--sp-attention auto picks the layout of a training run; give this command a layout" probe --ckpt "$CK" --batch "$WORK/auto.safetensors" --sp-attention auto
msg=$($TRAIN plan --ranks 4 --link-bandwidth 100 --link-latency 50 $SMALL 2>&1); rc=$?
if [ $rc = 0 ] && [ "$(echo "$msg" | grep -c '^ *[0-9]* *\(no\|yes\) *[0-3] ')" = 56 ] && echo "$msg" | grep -q "^best: mpirun -np 4 train/train $SMALL --sp [124] --sp-attention "; then
  ok "plan --ranks 4: 7 meshes ranked, each with and without --recompute at every --zero level, $(echo "$msg" | grep -o '^best: .*')"
else bad "plan --ranks 4 (exit $rc): $msg"; fi
# in-context: the 4 meshes it runs (2 heads: no all-to-all over 4), the others named as left out
expect_usage "in-context conditioning (--in-context, or a checkpoint trained with it) runs with --sp-attention gather or all-to-all" plan --ranks 1 --in-context --recompute $SMALL
msg=$($TRAIN plan --ranks 4 --link-bandwidth 100 --link-latency 50 $SMALL --in-context 2>&1); rc=$?
if [ $rc = 0 ] && [ "$(echo "$msg" | grep -c '^ *[0-9]* *no *[0-3] .*--sp-attention \(gather\|all-to-all\)$')" = 16 ] && echo "$msg" | grep -q "^in-context conditioning runs with gather or all-to-all and without --recompute: the ring, hybrid and --recompute are left out$"; then
  ok "plan --ranks 4 --in-context: 4 meshes ranked, at every --zero level, the ring, hybrid and --recompute left out"
else bad "plan --ranks 4 --in-context (exit $rc): $msg"; fi
msg=$($MPIRUN -np 2 $TRAIN $SMALL --steps 2 --sp-attention auto --out "$WORK/auto" 2>&1); rc=$?
picked=$(grep -o '"sp_attention": "[a-z-]*"' "$WORK/auto/config.json" 2>/dev/null)
if [ $rc = 0 ] && echo "$msg" | grep -q "^--sp-attention auto: --sp [12] --sp-attention [a-z-]*, the fastest of 4 meshes" && [ -n "$picked" ] && [ "$picked" != '"sp_attention": "auto"' ]; then
  ok "--sp-attention auto on 2 ranks: $(echo "$msg" | grep -o '^--sp-attention auto: [^,]*'), config.json has $picked"
else bad "--sp-attention auto on 2 ranks (exit $rc): $msg"; fi
# compare, verify and bugs under mpirun: exit 2, one sentence saying to run them without it,
# nothing written
for args in "compare $WORK/full1 $WORK/full2" "verify --ranks 2 $RES --steps 3 --out $WORK/nested" "bugs --ranks 2 --out $WORK/nested"; do
  msg=$($MPIRUN -np 2 $TRAIN $args 2>&1); rc=$?
  if [ $rc = 2 ] && [ "$(echo "$msg" | grep -c "^error: train/train ${args%% *} .*: run it without mpirun, as train/train $args$")" = 1 ] &&
     ! echo "$msg" | grep -q "recursive" && [ ! -e "$WORK/nested" ] && [ ! -e "$WORK/full1/compare.png.tmp" ]; then
    ok "newcomer: mpirun -np 2 train/train ${args%% *}: exit 2, $(echo "$msg" | grep -o "^error: train/train [a-z]* [^:]*")"
  else bad "newcomer: mpirun -np 2 train/train ${args%% *} (exit $rc): $msg"; fi
done
# compare of a probe result with a checkpoint: exit 2 saying what each file is
st "$WORK/batch.safetensors" $X $T $Y $G
$TRAIN probe --ckpt "$CK" --batch "$WORK/batch.safetensors" --out "$WORK/result.safetensors" >/dev/null 2>&1
msg=$($TRAIN compare "$WORK/result.safetensors" "$CK" 2>&1); rc=$?
if [ $rc = 2 ] && echo "$msg" | grep -q "result.safetensors is a probe result and $CK is a model checkpoint (a run's model.safetensors), but compare takes two run folders (their loss curves) or two probe results" &&
   ! echo "$msg" | grep -q "missing in"; then ok "newcomer: compare of a probe result with a checkpoint: exit 2, what each file is"
else bad "newcomer: compare of a probe result with a checkpoint (exit $rc): $msg"; fi
# the environment: a DIT_CPU_WIDTH that is no width (core/cpu.h), a DIT_RING_BLOCKING that is not
# 0 or 1 (parallel/transport/comm.h), or a DIT_CHECK_COLLECTIVES or DIT_COLLECTIVE_TIMEOUT out of range
# (parallel/transport/check_collectives.h) stops every subcommand, alone and under mpirun, with one sentence
# and exit 2; ranks whose widths differ all run the least, the same bits as a run with every rank
# capped to it
for env in "DIT_CPU_WIDTH=1024|is not a vector width: set 128, 256 or 512" "DIT_RING_BLOCKING=yes|is neither 0 nor 1: set 1" \
           "DIT_CHECK_COLLECTIVES=yes|is neither 0 nor 1: set 1" "DIT_COLLECTIVE_TIMEOUT=0|is not a number of seconds above 0"; do
  var=${env%%|*} want=${env#*|} wrong=0
  for args in "" probe sample "compare $WORK/full1 $WORK/full2" "verify --ranks 2" "bugs --ranks 2" "locate a b" \
              "mpirun" "mpirun compare $WORK/full1 $WORK/full2"; do
    launch=""
    case "$args" in mpirun*) launch="$MPIRUN -np 2 -x $var" args=${args#mpirun} args=${args# };; esac
    msg=$(env "$var" $launch $TRAIN $args --out "$WORK/never" 2>&1); rc=$?
    if [ $rc != 2 ] || [ "$(echo "$msg" | grep -c "^error: $var $want")" != 1 ] || [ -e "$WORK/never" ]; then
      wrong=$((wrong + 1)); bad "$var ${launch:+under mpirun }train/train $args (exit $rc): $msg"
    fi
  done
  [ $wrong = 0 ] && ok "$var: every subcommand, alone and under mpirun, exit 2 with one sentence"
done
TINY="--model DiT-tiny/2 --input-size 8 --batch 4 --steps 3 --samples-per-class 0"
DIT_CPU_WIDTH=128 $MPIRUN -np 2 $TRAIN $TINY --out "$WORK/w128" >/dev/null 2>&1
line=$($MPIRUN -np 1 env DIT_CPU_WIDTH=128 $TRAIN $TINY --out "$WORK/wmix" : -np 1 $TRAIN $TINY --out "$WORK/wmix" 2>&1 | grep '^CPU:')
if echo "$line" | grep -q "SSE2 (128-bit vectors, capped" && cmp -s "$WORK/w128/model.safetensors" "$WORK/wmix/model.safetensors" &&
   cmp -s "$WORK/w128/loss.csv" "$WORK/wmix/loss.csv"; then ok "one rank at 128-bit vectors, one at its widest: both run 128-bit, the bits of two capped ranks"
else bad "ranks of different widths: $line"; fi

# 7. mixed resolutions: a folder of images of six sizes and aspects packed into rows of 40 tokens
# (--max-tokens): 3 and 4 ranks agree with one rank and draw their (square) samples, both pack
# bugs diverge, and packs refuse what they do not run with
mkdir -p "$WORK/mixed"
python3 "$(dirname "$0")/mixed_images.py" "$WORK/mixed"
PACKS="--model DiT-tiny/2 --input-size 16 --data $WORK/mixed --max-tokens 40 --batch 2 --steps 10 --sample-steps 1 --samples-per-class 1"
png_height() { od -An -tu1 -j20 -N4 "$1" | awk '{print $1 * 16777216 + $2 * 65536 + $3 * 256 + $4}'; }
for mesh in 3 4; do # 4 ranks: samples at 8x8 and 4x12 pixels, one class: a row 8 pixels high, 4x
  sizes=$([ $mesh = 4 ] && echo "--sample-sizes 8x8,4x12")
  out=$("$TRAIN" verify --ranks $mesh $PACKS $sizes --out "$WORK/packs" 2>&1)
  if [ $? = 0 ] && [ "$(png_height "$WORK/packs/ranks-$mesh/samples.png")" = $([ $mesh = 4 ] && echo 40 || echo 72) ]; then
    ok "packs of mixed sizes, $mesh ranks vs 1 rank: $(echo "$out" | grep -o 'largest relative loss difference [^ ]*'), samples.png ${sizes:-(square)}"
  else bad "packs of mixed sizes, $mesh ranks disagree with 1 rank, or samples.png is not $sizes"; echo "$out" | tail -5; fi
done
msg=$("$TRAIN" sample --ckpt "$WORK/packs/ranks-1" --sample-sizes 8x8,4x --out "$WORK/never.png" 2>&1)
if [ $? = 2 ] && echo "$msg" | grep -q "^error: --sample-sizes '8x8,4x': expects 1 to 16 sizes" && [ ! -e "$WORK/never.png" ]; then
  ok "sample --sample-sizes 8x8,4x: exit 2, one sentence"
else bad "sample --sample-sizes 8x8,4x: $msg"; fi
# data groups and micro-batches under --exact: dp 2 x sp 2 in 2 micro-batches of a row each has
# the bits of one rank, and that one rank (exact, in micro-batches) agrees with one rank in one
# batch (default mode); the ring under --exact has one rank's bits too
out=$("$TRAIN" verify --ranks 4 --sp 2 --grad-accum 2 --exact $PACKS --batch 4 --out "$WORK/packs-dp" 2>&1) &&
  "$TRAIN" $PACKS --batch 4 --samples-per-class 0 --out "$WORK/packs-one" >/dev/null 2>&1 &&
  one=$("$TRAIN" compare "$WORK/packs-dp/ranks-1" "$WORK/packs-one" 2>&1)
if [ $? = 0 ]; then
  ok "packs in data groups and micro-batches (dp 2 x sp 2, --grad-accum 2, --exact) vs 1 rank: $(echo "$out" | grep -o 'identical: .*'); in one batch: $(echo "$one" | grep -o 'largest relative loss difference [^ ]*')"
else bad "packs in data groups and micro-batches disagree with 1 rank"; echo "$out $one" | tail -5; fi
out=$("$TRAIN" verify --ranks 3 --sp-attention ring --exact $PACKS --samples-per-class 0 --out "$WORK/packs-dp" 2>&1)
if [ $? = 0 ]; then ok "packs, ring, 3 ranks, --exact: $(echo "$out" | grep -o 'identical: .*')"
else bad "packs, ring, 3 ranks, --exact: not one rank's bits"; echo "$out" | tail -5; fi
# each pack bug diverges, and locate (probe dumps of a batch of packs) names where: the positions
# at the patch embedding, the mask at the first attention
# (rotary positions: at the first rotation)
for bug in "pack-mask-crosses-images blocks.0.attn.out" "pack-positions-from-shard x_embedder" \
           "rope-pack-positions blocks.0.attn.q_rope"; do
  rope=$(case $bug in rope-*) echo --pos rope;; esac)
  out=$("$TRAIN" verify --ranks 3 $PACKS $rope --inject-bug ${bug% *} --out "$WORK/packs" 2>&1)
  if [ $? = 1 ] && echo "$out" | grep -q "^locate (.*): first divergence: ${bug#* } (forward"; then
    ok "bug ${bug% *} (3 ranks, packs) caught: $(echo "$out" | grep -o 'first step over tolerance: [0-9]*'); $(echo "$out" | grep -o 'first divergence: [^,]*')"
  else bad "bug ${bug% *} (3 ranks, packs) NOT caught or not located at ${bug#* }"; echo "$out" | tail -5; fi
done
# probe over a batch of packs (probe --make-batch --max-tokens): 3 ranks (ring) and dp 2 x sp 2 in
# 2 micro-batches agree with one rank
ckpt="$WORK/packs/ranks-1/model.safetensors"
"$TRAIN" probe --ckpt "$ckpt" --make-batch 4 --data "$WORK/mixed" --max-tokens 40 --out "$WORK/packs-batch.safetensors" >/dev/null &&
  "$TRAIN" probe --ckpt "$ckpt" --batch "$WORK/packs-batch.safetensors" --out "$WORK/packs-p1.safetensors" >/dev/null
for mesh in "3 --sp-attention ring" "4 --sp 2 --grad-accum 2"; do
  $MPIRUN -np ${mesh%% *} "$TRAIN" probe ${mesh#* } --ckpt "$ckpt" --batch "$WORK/packs-batch.safetensors" --out "$WORK/packs-pn.safetensors" >/dev/null 2>&1
  out=$("$TRAIN" compare "$WORK/packs-pn.safetensors" "$WORK/packs-p1.safetensors" 2>&1)
  if [ $? = 0 ]; then ok "probe of a batch of packs, -np $mesh vs 1 rank: $(echo "$out" | grep '^out ' | grep -o 'error .*')"
  else bad "probe of a batch of packs, -np $mesh disagrees with 1 rank"; echo "$out" | tail -4; fi
done
expect_usage "--max-tokens packs the images of a folder; it does not run with the shapes data" --max-tokens 20
expect_usage "--max-tokens 65 is above the 64 tokens of --input-size 16" $PACKS --max-tokens 65
expect_usage "probe --data and --max-tokens choose the images of --make-batch" probe --ckpt "$ckpt" --batch "$WORK/packs-batch.safetensors" --max-tokens 40
expect_usage "--sample-sizes 5x4: each side must be a multiple of the patch 2; pass e.g. 6x4" $PACKS --sample-sizes 5x4
expect_usage "--sample-sizes 32x16 has 32 tokens, more than the 16 of --input-size 16 (patch 4)" --input-size 16 --sample-sizes 32x16
expect_usage "the pack-mask-crosses-images bug lets the images of a pack attend to each other; it needs packs of images of different sizes" --inject-bug pack-mask-crosses-images

# a learn_sigma checkpoint's own probe batch (its target: the velocity's channels, as training's)
# probes on 2 ranks; the probe once wanted every output channel of it
$TRAIN --model DiT-tiny/2 --input-size 8 --learn-sigma --batch 4 --steps 2 --samples-per-class 0 \
  --out "$WORK/sigma" >/dev/null 2>&1
$TRAIN probe --make-batch 2 --ckpt "$WORK/sigma/model.safetensors" --out "$WORK/sigma/b.safetensors" >/dev/null 2>&1
msg=$($MPIRUN -np 2 "$TRAIN" probe --ckpt "$WORK/sigma/model.safetensors" --batch "$WORK/sigma/b.safetensors" \
  --out "$WORK/sigma/r.safetensors" 2>&1); rc=$?
if [ $rc = 0 ] && [ -f "$WORK/sigma/r.safetensors" ]; then ok "probe of a --learn-sigma checkpoint on its own --make-batch: $(echo "$msg" | tail -1)"
else bad "probe of a --learn-sigma checkpoint on its own --make-batch (exit $rc): $msg"; fi

# text conditioning (docs/text.md): what it does not run with, captions that do not fit, a tiny
# run with its prompts' grid, and prompts that name a word outside the vocabulary
expect_usage "unknown conditioning 'words'" --cond words
expect_usage "the joint-text-replicated bug exchanges joint attention's caption with the image tokens; add --cond text --text-attn joint" --sp-attention all-to-all --inject-bug joint-text-replicated
expect_usage "the ring-text-every-step bug attends to joint attention's caption at every ring step; add --cond text --text-attn joint" --sp-attention ring --inject-bug ring-text-every-step
expect_usage "--text-dropout drops captions, which --cond class does not have" --text-dropout 0.1
# --sample-sizes with captions: refused at the start by every command (it once trained, then
# stopped at its first samples)
expect_usage "with --cond text the samples are square (--input-size): leave out --sample-sizes" --cond text --sample-sizes 8x8
expect_usage "with --cond text the samples are square (--input-size): leave out --sample-sizes" verify --ranks 2 --cond text --sample-sizes 8x8
expect_usage "with --cond text the samples are square (--input-size): leave out --sample-sizes" plan --ranks 1 --cond text --sample-sizes 8x8
expect_usage "the shapes' captions have up to 9 words; pass --text-len 9 or more" --cond text --text-len 8
expect_usage "has no caption: --cond text reads each image's caption from the .txt file beside it" \
  --model DiT-tiny/2 --input-size 16 --data "$WORK/mixed" --cond text
# packs of images with captions (--max-tokens, cross-attention: each image attends to its own
# caption only; test_parallel holds a pack against each image alone): 3 ranks agree with one, and
# dp 2 x sp 2 in micro-batches under --exact has one rank's bits; joint attention too (each image's
# caption in its own joint attention): 3 ranks agree with one, and the ring on 3 ranks and the
# hybrid layout with --recompute under --exact have one rank's bits
mkdir -p "$WORK/mixed-text" && cp "$WORK"/mixed/img*.png "$WORK/mixed-text/"
i=0
for c in "a small red circle at the top left" "a large blue square" "two green dots" "a cross" \
         "a small yellow ring in the centre" ""; do echo "$c" > "$WORK/mixed-text/img$i.txt"; i=$((i + 1)); done
TPACKS="--model DiT-tiny/2 --input-size 16 --data $WORK/mixed-text --cond text --max-tokens 40 --batch 2 --steps 6 --sample-steps 1 --samples-per-class 1"
out=$("$TRAIN" verify --ranks 3 $TPACKS --out "$WORK/tpacks" 2>&1)
if [ $? = 0 ] && [ -f "$WORK/tpacks/ranks-3/samples.png" ]; then
  ok "packs with captions, 3 ranks vs 1 rank: $(echo "$out" | grep -o 'largest relative loss difference [^ ]*'), samples.png drawn"
else bad "packs with captions, 3 ranks disagree with 1 rank"; echo "$out" | tail -5; fi
out=$("$TRAIN" verify --ranks 4 --sp 2 --grad-accum 2 --exact $TPACKS --batch 4 --samples-per-class 0 --out "$WORK/tpacks-dp" 2>&1)
if [ $? = 0 ]; then ok "packs with captions, dp 2 x sp 2, --grad-accum 2, --exact: $(echo "$out" | grep -o 'identical: .*')"
else bad "packs with captions under --exact: not one rank's bits"; echo "$out" | tail -5; fi
out=$("$TRAIN" verify --ranks 3 $TPACKS --text-attn joint --out "$WORK/tpacks-joint" 2>&1)
if [ $? = 0 ]; then ok "packs with captions, joint attention, 3 ranks vs 1 rank: $(echo "$out" | grep -o 'largest relative loss difference [^ ]*')"
else bad "packs with captions, joint attention, 3 ranks disagree with 1 rank"; echo "$out" | tail -5; fi
for mesh in "3 --sp-attention ring" "4 --sp-attention hybrid --ulysses-degree 2 --recompute"; do
  out=$("$TRAIN" verify --ranks $mesh --exact $TPACKS --text-attn joint --samples-per-class 0 --out "$WORK/tpacks-joint-exact" 2>&1)
  if [ $? = 0 ]; then ok "packs with captions, joint attention, --ranks $mesh, --exact: $(echo "$out" | grep -o 'identical: .*')"
  else bad "packs with captions, joint attention, --ranks $mesh, --exact: not one rank's bits"; echo "$out" | tail -5; fi
done
expect_usage "the text-grad-unsummed bug leaves the text encoder's gradients unsummed; add --cond text" --inject-bug text-grad-unsummed
expect_usage "the zero-outer-grads-unsummed bug skips the reduce-scatter of the units outside the blocks; add --zero 2 or --zero 3" --inject-bug zero-outer-grads-unsummed --zero 1
expect_usage "the zero-grad-averaged bug divides the gradients --zero sums; add --zero 1, 2 or 3" probe --inject-bug zero-grad-averaged --ckpt a --batch b
expect_usage "the cross-kv-all-to-all bug exchanges the caption's cross-attention K/V; add --cond text" --sp-attention all-to-all --inject-bug cross-kv-all-to-all
$TRAIN --model DiT-tiny/2 --input-size 8 --cond text --text-dropout 0.2 --batch 4 --steps 2 --sample-steps 1 \
  --samples-per-class 1 --out "$WORK/text" >/dev/null 2>&1
if [ -f "$WORK/text/samples.png" ]; then ok "a --cond text run draws its samples.png (the data's first captions)"
else bad "a --cond text run wrote no samples.png"; fi
msg=$($TRAIN sample --ckpt "$WORK/text" --sample-sizes 8x8 --out "$WORK/never.png" 2>&1); rc=$?
if [ $rc = 2 ] && echo "$msg" | grep -q "with --cond text the samples are square" && [ ! -e "$WORK/never.png" ]; then
  ok "sample --sample-sizes of a caption model: exit 2, one sentence"
else bad "sample --sample-sizes of a caption model (exit $rc): $msg"; fi
msg=$($TRAIN sample --ckpt "$WORK/text" --prompt "a red circle" --prompt "two blue dots at the top" \
  --sample-steps 1 --cfg-scale 2 --out "$WORK/text/prompts.png" 2>&1); rc=$?
if [ $rc = 0 ] && [ -f "$WORK/text/prompts.png" ]; then ok "sample --prompt twice, guided by the empty caption"
else bad "sample --prompt (exit $rc): $msg"; fi
msg=$($TRAIN sample --ckpt "$WORK/text" --prompt "a red unicorn" --out "$WORK/text/never.png" 2>&1); rc=$?
if [ $rc = 2 ] && echo "$msg" | grep -q "the word 'unicorn' is not in the captions' vocabulary" && [ ! -e "$WORK/text/never.png" ]
then ok "sample --prompt with a word outside the vocabulary: exit 2, the word named"
else bad "sample --prompt 'a red unicorn' (exit $rc): $msg"; fi
msg=$($TRAIN sample --ckpt "$WORK/sigma" --prompt "a red circle" --out "$WORK/sigma/never.png" 2>&1); rc=$?
if [ $rc = 2 ] && echo "$msg" | grep -q "is class-conditioned"; then ok "sample --prompt of a class-conditioned checkpoint: exit 2"
else bad "sample --prompt of a class checkpoint (exit $rc): $msg"; fi

echo "cli tests: $pass passed, $fail failed"
[ $fail = 0 ]

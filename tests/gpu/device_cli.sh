#!/usr/bin/env bash
# device_cli.sh: the train program on the device (--device cuda) against itself on the CPU. Run
# with the emulated build (tests/gpu/emulate.sh) by make test, and with the real one on a GPU
# machine by device_check.sh. A checkpoint and a probe batch are made on the CPU; then:
# - probe --device cuda at 1, 2 and 3 ranks (25 tokens, which 2 and 3 do not divide), in the
#   all-to-all, ring and hybrid layouts, with data groups and with micro-batches, each against the
#   CPU probe of one rank by `train compare` (float32: output 1e-5, gradients 1e-4; float64:
#   1e-10); --precision bf16 at 1 to 3 ranks against the CPU's bf16 probe, and with --grad-wire
#   bf16 at 2 and 3 ranks (gather, all-to-all, ring) against the CPU's with the same ranks;
# - a bug of each kind of device data, caught by the same comparison;
# - verify --device cuda --ranks 2 (2 ranks against 1, both on the device), the same seed giving
#   the same loss curve twice, --zero 3 with --recompute on 2 ranks against 1, sample --device
#   cuda, verify of a clip model (rope, qk-norm) and of both caption models, a probe of packs of
#   captioned images under joint attention (the ring on 2 ranks; ring-text-every-step caught), and
#   the usage errors of the flags;
# - --exact on the device: 2 ranks in the gather, all-to-all and ring layouts, 2 data groups, 2
#   micro-batches, bf16 (ring) and joint attention (ring) on 2 ranks, the same bits as the device's one
#   rank; an injected bug differs; the device's one rank agrees with the CPU's within compare's
#   tolerance (other kernels: other bits).
# With --probes-only (make test's float64 run) it stops after the probes that must agree (the
# injected bugs are the same code in both precisions: float32's run catches them); --exact-only
# runs the --exact checks alone, up to the first that fails (make test's planted kernel bug).
# usage (from the repository root): tests/gpu/device_cli.sh TRAIN [WORK] [--probes-only|--exact-only]
set -u
TRAIN=$1; ONLY=${3:-}
if [ -n "${2:-}" ]; then WORK=$2/device_cli; else TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT; WORK=$TMP/device_cli; fi
rm -rf "$WORK"; mkdir -p "$WORK"
MPIRUN="mpirun --oversubscribe -q $([ "$(id -u)" = 0 ] && echo --allow-run-as-root)"
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAILED: $*"; fail=$((fail + 1)); }

# --exact on the device. Two canonical blocks and one layer keep the emulated device's launches few.
EXACT="--model DiT-tiny/2 --input-size 10 --depth 1 --batch 2 --steps 2 --samples-per-class 0 --exact --virtual-shards 2"
exact_run() { # name ranks flags...
  local name=$1 np=$2; shift 2
  $MPIRUN -np "$np" "$TRAIN" $EXACT --out "$WORK/exact-$name" "$@" > "$WORK/exact-$name.log" 2>&1 ||
    { bad "--exact $* on $np ranks failed: $(tail -n 1 "$WORK/exact-$name.log")"; return 1; }
}
exact_expect() { # same|differs, name, ranks, flags...: against the device's one rank (REF, default one), file by file
  local want=$1 name=$2 np=$3 first=""; shift 3
  [ "$ONLY" = --exact-only ] && [ $fail -gt 0 ] && return # --exact-only: up to the first failure
  exact_run "$name" "$np" --device cuda "$@" || return
  for f in loss.csv model.safetensors ema.safetensors optimizer.safetensors; do
    cmp -s "$WORK/exact-${REF:-one}/$f" "$WORK/exact-$name/$f" || { first=$f; break; }
  done
  if [ "$want" = same ] && [ -z "$first" ]; then ok "--exact --device cuda $* on $np ranks: the same bits as one rank"
  elif [ "$want" = differs ] && [ -n "$first" ]; then ok "--exact --device cuda $* on $np ranks: $first differs"
  else bad "--exact --device cuda $* on $np ranks: ${first:-no file} differs from one rank's (expected: $want)"; fi
}
exact_checks() {
  exact_run one 1 --device cuda || return
  exact_expect same gather-2 2
  exact_expect same all-to-all-2 2 --sp-attention all-to-all
  exact_expect same ring-2 2 --sp-attention ring
  exact_expect same dp2 2 --sp 1
  exact_expect same accum2 1 --grad-accum 2
  exact_expect differs bug-no-grad-allreduce 2 --inject-bug no-grad-allreduce
  # joint attention over 6 steps (its caption queries' gradient is zero until the gates open), the ring
  exact_run bf16-one 1 --device cuda --precision bf16 &&
    REF=bf16-one exact_expect same bf16-ring-2 2 --precision bf16 --sp-attention ring
  local joint="--cond text --text-attn joint --steps 6"
  exact_run joint-one 1 --device cuda $joint &&
    REF=joint-one exact_expect same joint-2 2 $joint --sp-attention ring
  exact_run cpu 1 || return
  local msg; msg=$("$TRAIN" compare "$WORK/exact-one" "$WORK/exact-cpu" 2>&1)
  if [ $? = 0 ]; then ok "--exact: the device's one rank agrees with the CPU's ($(echo "$msg" | grep 'largest relative'))"
  else bad "--exact: the device's one rank and the CPU's disagree: $msg"; fi
}
if [ "$ONLY" = --exact-only ]; then exact_checks; echo "device_cli: $pass passed, $fail failed (--exact only)"; [ $fail = 0 ]; exit; fi
CK=$WORK/run/model.safetensors B=$WORK/batch.safetensors CPU=$WORK/cpu.safetensors
if ! $MPIRUN -np 1 "$TRAIN" --model DiT-tiny/2 --input-size 10 --steps 3 --batch 4 \
     --samples-per-class 0 --out "$WORK/run" > "$WORK/run.log" 2>&1 ||
   ! $MPIRUN -np 1 "$TRAIN" probe --ckpt "$CK" --make-batch 6 --out "$B" > /dev/null ||
   ! $MPIRUN -np 1 "$TRAIN" probe --ckpt "$CK" --batch "$B" --out "$CPU" > /dev/null; then
  echo "FAILED: the CPU checkpoint, batch and probe (see $WORK/run.log)"; exit 1
fi

# probe NP WANT FLAGS...: the device probe of CK over B on NP ranks compared with the CPU's (REF,
# default CPU; TOL: compare's tolerances); WANT is AGREE or DIFFER (an injected bug)
probe() {
  local np=$1 want=$2 out; shift 2; out=$WORK/probe-$np-$(echo "$*" | tr -c 'a-z0-9-' _).safetensors
  local msg; msg=$($MPIRUN -np "$np" "$TRAIN" probe --ckpt "$CK" --batch "$B" --out "$out" --device cuda "$@" 2>&1)
  if [ $? != 0 ]; then bad "probe --device cuda $* on $np ranks failed: $msg"; return; fi
  local cmp; cmp=$("$TRAIN" compare "$out" "${REF_PROBE:-$CPU}" ${TOL:-} 2>&1)
  local worst; worst=$(echo "$cmp" | grep -E "^(out|grad)" | sed 's/  */ /g' | sort -t' ' -k4 -g | tail -1)
  if echo "$cmp" | grep -q "the results $want"; then ok "probe --device cuda $* on $np ranks: $want with the CPU (worst: $worst)"
  else bad "probe --device cuda $* on $np ranks should $want: $cmp"; fi
}
probe 1 AGREE
probe 2 AGREE
probe 3 AGREE
probe 2 AGREE --sp-attention all-to-all
probe 2 AGREE --sp-attention ring
probe 3 AGREE --sp-attention ring
probe 4 AGREE --sp-attention hybrid --ulysses-degree 2
probe 3 AGREE --sp 1
probe 2 AGREE --grad-accum 4
if [ "$ONLY" = --probes-only ]; then echo "device_cli: $pass passed, $fail failed (probes only)"; [ $fail = 0 ]; exit; fi
# --precision bf16: the operands rounded on the device (its kernels), Q, K and V packed into 2
# bytes on the device for the gather and the ring; against the CPU's bf16 probe. A value next to
# a bf16 tie in one order of summation rounds the other way in another, so compare's bounds are
# 10 times float32's (the emulated device: 1.8e-6 apart), still well below what bf16's rounding
# moves (the device's bf16 probe against the CPU's float32 one: 3.6e-3, which must DIFFER)
BF16=$WORK/cpu-bf16.safetensors
$MPIRUN -np 1 "$TRAIN" probe --ckpt "$CK" --batch "$B" --out "$BF16" --precision bf16 > /dev/null
REF_PROBE=$BF16 TOL="--tol 1e-4 --grad-tol 1e-3" probe 1 AGREE --precision bf16
REF_PROBE=$BF16 TOL="--tol 1e-4 --grad-tol 1e-3" probe 2 AGREE --precision bf16
REF_PROBE=$BF16 TOL="--tol 1e-4 --grad-tol 1e-3" probe 3 AGREE --precision bf16 --sp-attention ring
TOL="--tol 1e-5 --grad-tol 1e-4" probe 1 DIFFER --precision bf16 # float32's bounds: the rounding shows
# --grad-wire bf16: the attention's gradients packed into 2 bytes on the device (the gather's dK, dV
# partials, the ring's sums, the all-to-all's exchanges); against the CPU's probe with the same
# ranks and wire (a partial sum's rounding depends on the rank count)
wire_probe() { # NP FLAGS...
  local np=$1; shift
  local ref; ref=$WORK/cpu-wire-$np-$(echo "$*" | tr -c 'a-z0-9-' _).safetensors
  $MPIRUN -np "$np" "$TRAIN" probe --ckpt "$CK" --batch "$B" --out "$ref" --precision bf16 --grad-wire bf16 "$@" > /dev/null
  REF_PROBE=$ref TOL="--tol 1e-4 --grad-tol 1e-3" probe "$np" AGREE --precision bf16 --grad-wire bf16 "$@"
}
wire_probe 2
wire_probe 2 --sp-attention all-to-all
wire_probe 3 --sp-attention ring
# a bug of each kind of device data it corrupts (the catalogue's every bug is caught on the CPU by
# tests/cli_tests.sh and tests/exact_test.sh; the bugs' code is the same for both devices): K/V
# gathered, dK/dV returned, a ring block merged and returned, the data groups' gradient sum, the
# micro-batches' weights
probe 2 DIFFER --inject-bug local-kv
probe 2 DIFFER --inject-bug no-dkv-reduce-scatter
probe 3 DIFFER --sp-attention ring --inject-bug ring-wrong-merge
probe 3 DIFFER --sp-attention ring --inject-bug ring-dkv-not-returned
probe 2 DIFFER --sp 1 --inject-bug no-dp-allreduce
probe 2 DIFFER --grad-accum 4 --inject-bug accum-unweighted

# training: 2 ranks against 1 on the device, and the same run twice
# (no samples: sampling on the device is checked once, below)
FLAGS="--model DiT-tiny/2 --input-size 10 --batch 4 --samples-per-class 0 --device cuda"
msg=$("$TRAIN" verify --ranks 2 --steps 6 $FLAGS --out "$WORK/verify" 2>&1)
if [ $? = 0 ] && echo "$msg" | grep -q "the runs AGREE"; then ok "verify --device cuda --ranks 2: $(echo "$msg" | grep 'largest relative')"
else bad "verify --device cuda --ranks 2: $msg"; fi
$MPIRUN -np 1 "$TRAIN" --steps 6 $FLAGS --out "$WORK/again" > /dev/null 2>&1
if cmp -s "$WORK/again/loss.csv" <(head -7 "$WORK/verify/ranks-1/loss.csv"); then ok "the same seed gives the same loss curve on the device, run to run"
else bad "the same seed gave another loss curve: $(diff "$WORK/again/loss.csv" <(head -7 "$WORK/verify/ranks-1/loss.csv") | head -4)"; fi
# --zero 3 (device slices, the blocks gathered as they open) and --recompute on 2 ranks against
# that 1-rank run
$MPIRUN -np 2 "$TRAIN" --steps 6 $FLAGS --zero 3 --recompute --out "$WORK/lean" > "$WORK/lean.log" 2>&1
res=$("$TRAIN" compare "$WORK/lean" "$WORK/again" --plot "$WORK/lean.png" 2>&1)
if [ $? = 0 ]; then ok "--zero 3 --recompute on the device, 2 ranks vs 1: $(echo "$res" | grep -o 'largest relative loss difference [^ ]*')"
else bad "--zero 3 --recompute on the device, 2 ranks: $(tail -n 2 "$WORK/lean.log") $res"; fi
# the video and text models on the device: 2 ranks against 1, each in a layout that shards them
newer() { # what, flags...
  local what=$1; shift
  msg=$("$TRAIN" verify --ranks 2 --steps 3 $FLAGS "$@" --out "$WORK/verify-$(echo "$what" | tr -c 'a-z0-9' -)" 2>&1)
  if [ $? = 0 ] && echo "$msg" | grep -q "the runs AGREE"; then ok "verify --device cuda --ranks 2, $what: $(echo "$msg" | grep 'largest relative')"
  else bad "verify --device cuda --ranks 2, $what: $(echo "$msg" | tail -n 3)"; fi
}
newer "clips with rope and a full-width qk-norm, all-to-all" --data moving-shapes --frames 2 --pos rope --qk-norm full --sp-attention all-to-all
newer "captions, cross-attention, ring" --cond text --text-attn cross --sp-attention ring
newer "captions, joint attention, gather" --cond text --text-attn joint
# packs of images at their own sizes, each with its caption in its own joint attention: a probe
# of a CPU checkpoint of 10 steps (the gates open) over a batch of packs, the ring on 2 ranks on
# the device against the CPU's one rank, output and every gradient; ring-text-every-step differs
mkdir -p "$WORK/mixed-text" && python3 "$(dirname "$0")/../mixed_images.py" "$WORK/mixed-text" > /dev/null
i=0
for f in "$WORK"/mixed-text/*.png; do
  caption=("a small red circle at the top left" "a large blue square" "two green dots" "a cross")
  echo "${caption[i % 4]}" > "${f%.png}.txt"; i=$((i + 1))
done
PACKS="--model DiT-tiny/2 --data $WORK/mixed-text --input-size 16 --max-tokens 40 --cond text --text-attn joint"
if $MPIRUN -np 1 "$TRAIN" $PACKS --steps 10 --batch 2 --samples-per-class 0 --out "$WORK/packs" > "$WORK/packs.log" 2>&1 &&
   "$TRAIN" probe --ckpt "$WORK/packs/model.safetensors" --make-batch 2 --data "$WORK/mixed-text" --max-tokens 40 \
     --out "$WORK/packs-batch.safetensors" >> "$WORK/packs.log" 2>&1 &&
   "$TRAIN" probe --ckpt "$WORK/packs/model.safetensors" --batch "$WORK/packs-batch.safetensors" \
     --out "$WORK/packs-cpu.safetensors" >> "$WORK/packs.log" 2>&1; then
  CK=$WORK/packs/model.safetensors B=$WORK/packs-batch.safetensors CPU=$WORK/packs-cpu.safetensors
  probe 2 AGREE --sp-attention ring
  probe 2 DIFFER --sp-attention ring --inject-bug ring-text-every-step
else bad "the CPU checkpoint, batch and probe of packs of captioned images: $(tail -n 2 "$WORK/packs.log")"; fi
msg=$($MPIRUN -np 2 "$TRAIN" sample --ckpt "$WORK/verify/ranks-2" --samples-per-class 1 --sample-steps 2 --out "$WORK/s.png" --device cuda 2>&1)
if [ $? = 0 ] && [ -s "$WORK/s.png" ]; then ok "sample --device cuda on 2 ranks wrote a grid"; else bad "sample --device cuda: $msg"; fi

exact_checks

# usage errors: exit 2 and one sentence, before any work
usage() { # expected text, args...
  local want=$1 msg rc; shift
  msg=$($MPIRUN -np 1 "$TRAIN" "$@" 2>&1); rc=$?
  if [ $rc = 2 ] && echo "$msg" | grep -q -- "$want"; then ok "$*: exit 2, $(echo "$msg" | head -1)"
  else bad "$* (exit $rc): $msg"; fi
}
usage "applies to --device cuda only" --tf32 --steps 1 --out "$WORK/x2"
usage "unknown device 'gpu'" --device gpu --steps 1 --out "$WORK/x3"
echo "device_cli: $pass passed, $fail failed"
[ $fail = 0 ]

#!/usr/bin/env bash
# bench_precision.sh: --precision bf16 against fp32, each pair run back to back on this machine, so
# that every figure is a ratio measured in one run (issue targets in brackets):
#  1. the peak activation memory per rank (the arena's peak counter) of DiT-mini/2 at 16384 tokens
#     (input 256, patch 2), batch 1, one step, on 1 and 4 ranks [bf16 at most 0.6x];
#  2. the bytes a rank sends per step, the attention's and the whole step's, in each layout on 4
#     ranks, DiT-mini/2 at 4096 tokens, bf16 with the float gradient wire and with --grad-wire
#     bf16 [the attention's at most 0.55x];
#  3. the CPU step, 1 rank x 1 thread, DiT-mini/2 at 4096 tokens, runs A B B A A B, the best of
#     each side [at most 1.15x], and perf's share of the roundings in the bf16 step;
#  4. the planner's memory per rank for DiT-XL/2 at 16384 tokens on 4 ranks with --zero 3
#     --recompute, and the longest sequence of DiT-XL/2 it fits there [grows in bf16];
#  5. the toy (the default model, 1 rank) trained STEPS steps in each precision: the mean loss of
#     the last 10 % of steps [within 3 %], and each run's samples, kept as
#     docs/results/precision-samples-{fp32,bf16}.png to look at side by side.
# usage: tests/bench/bench_precision.sh TRAIN [STEPS]   (STEPS: the toy's, default 2000)
set -u
TRAIN=$(realpath "$1") STEPS=${2:-2000}
WORK=$(mktemp -d /tmp/dit-bench-precision.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
MPIRUN="mpirun -q --oversubscribe $( [ "$(id -u)" = 0 ] && echo --allow-run-as-root )"
MINI="--model DiT-mini/2 --batch 1 --samples-per-class 0 --save-every 0"

# run NAME NP FLAGS...: a run into $WORK/NAME; its done: line on stdout
run() {
  local name=$1 np=$2; shift 2
  rm -rf "${WORK:?}/$name"
  $MPIRUN -np "$np" "$TRAIN" "$@" --out "$WORK/$name" > "$WORK/$name.log" 2>&1 ||
    { echo "bench_precision: $* failed: $(tail -n 1 "$WORK/$name.log")" >&2; exit 1; }
  grep '^done:' "$WORK/$name.log"
}
field() { sed -nE "s/.*$1.*/\\1/p"; } # field REGEX-with-one-group < line
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf (a > 0 ? "%.2fx" : "-"), b / a }'; }

echo "1. peak activation memory per rank, DiT-mini/2, 16384 tokens, batch 1, one step (the arena's peak)"
printf "| %-5s | %10s | %10s | %10s |\n" ranks "fp32 MiB" "bf16 MiB" "bf16/fp32"
printf "| %-5s | %10s | %10s | %10s |\n" --- --- --- ---
for np in 1 4; do
  a=$(run mem $np $MINI --input-size 256 --steps 1 --precision fp32 | field 'peak activation memory ([0-9.]+) MiB')
  b=$(run mem $np $MINI --input-size 256 --steps 1 --precision bf16 | field 'peak activation memory ([0-9.]+) MiB')
  printf "| %-5s | %10s | %10s | %10s |\n" $np "$a" "$b" "$(ratio "$a" "$b")"
done

echo
echo "2. MiB a rank sends per step, 4 ranks, DiT-mini/2, 4096 tokens, batch 1 (the attention's; the whole step's);"
echo "   bf16: --precision bf16, its gradients on the float wire; +wire: with --grad-wire bf16"
printf "| %-26s | %9s | %9s | %9s | %10s | %10s | %9s | %9s | %10s |\n" layout "attn fp32" "attn bf16" "bf16/fp32" "attn +wire" \
  "+wire/fp32" "step fp32" "step bf16" "step +wire"
printf "| %-26s | %9s | %9s | %9s | %10s | %10s | %9s | %9s | %10s |\n" --- --- --- --- --- --- --- --- ---
for layout in gather all-to-all ring "hybrid --ulysses-degree 2"; do
  # shellcheck disable=SC2086
  la=$(run lay 4 $MINI --input-size 128 --steps 1 --sp-attention $layout --precision fp32)
  # shellcheck disable=SC2086
  lb=$(run lay 4 $MINI --input-size 128 --steps 1 --sp-attention $layout --precision bf16)
  # shellcheck disable=SC2086
  lw=$(run lay 4 $MINI --input-size 128 --steps 1 --sp-attention $layout --precision bf16 --grad-wire bf16)
  aa=$(field '\(attention ([0-9.]+),' <<< "$la") ab=$(field '\(attention ([0-9.]+),' <<< "$lb")
  aw=$(field '\(attention ([0-9.]+),' <<< "$lw")
  printf "| %-26s | %9s | %9s | %9s | %10s | %10s | %9s | %9s | %10s |\n" "$layout" "$aa" "$ab" "$(ratio "$aa" "$ab")" \
    "$aw" "$(ratio "$aa" "$aw")" "$(field 'sent ([0-9.]+) MiB' <<< "$la")" "$(field 'sent ([0-9.]+) MiB' <<< "$lb")" \
    "$(field 'sent ([0-9.]+) MiB' <<< "$lw")"
done

echo
# one thread: two threads' scheduling on a shared machine moved one side's runs by 60 % in a run
echo "3. the CPU step, 1 rank x 1 thread, DiT-mini/2, 4096 tokens, batch 1, 8 steps a run, runs A B B A A B (A fp32, B bf16)"
step() { run step 1 $MINI --input-size 128 --steps 8 --threads 1 --precision "$1" | field 'steps in ([0-9.]+)s'; }
best() { printf '%s\n' "$@" | sort -g | head -1; }
step fp32 > /dev/null # warm
a1=$(step fp32) b1=$(step bf16) b2=$(step bf16) a2=$(step fp32) a3=$(step fp32) b3=$(step bf16)
a=$(best "$a1" "$a2" "$a3") b=$(best "$b1" "$b2" "$b3")
printf "| %-6s | %16s | %22s |\n" side "best s / 8 steps" "each run" "---" "---" "---" \
  fp32 "$a" "$a1 $a2 $a3" bf16 "$b" "$b1 $b2 $b3"
echo "bf16 / fp32: $(ratio "$a" "$b") the step time"
if command -v perf > /dev/null && perf record -q -o "$WORK/perf.data" -- "$TRAIN" $MINI --input-size 128 --steps 3 \
     --precision bf16 --out "$WORK/perf" > /dev/null 2>&1; then
  # what bf16 adds to the step: the roundings, the packs, the rounding's gradient (add_forward)
  perf report -i "$WORK/perf.data" --no-children --sort symbol -g none 2>/dev/null |
    awk '/%/ && /round_bf16|pack_bf16|unpack_bf16/ { s += $1 } END { printf "perf: the bf16 roundings and packs take %.1f %% of the bf16 step\n", s }'
fi

echo
echo "4. the planner, DiT-XL/2, 4 ranks, --zero 3 --recompute, batch 1: the least predicted memory per rank of its meshes"
printf "| %-7s | %14s | %14s | %10s |\n" tokens "fp32 MiB" "bf16 MiB" "bf16/fp32"
printf "| %-7s | %14s | %14s | %10s |\n" --- --- --- ---
plan_mib() { # input-size precision: the least memory per rank (MiB) of the meshes with --zero 3 --recompute, "fits" after it where one fits
  "$TRAIN" plan --ranks 4 --link-bandwidth 1000 --link-latency 50 --model DiT-XL/2 --input-size "$1" --batch 1 \
    --precision "$2" > "$WORK/plan.log" 2>&1
  awk '$2 == "yes" && $3 == 3 { print $4, ($0 ~ /does not fit/ ? "" : "fits") }' "$WORK/plan.log" | sort -g | head -1
}
for S in 128 184 256 384; do
  a=$(plan_mib $S fp32) b=$(plan_mib $S bf16)
  [ -n "$a" ] && [ -n "$b" ] || { echo "bench_precision: plan printed no --zero 3 --recompute row at input $S (see $WORK/plan.log)" >&2; exit 1; }
  printf "| %-7s | %14s | %14s | %10s |\n" $(( (S / 2) * (S / 2) )) "$a" "$b" "$(ratio "${a% *}" "${b% *}")"
done

echo
echo "5. the toy: the default model, 1 rank, $STEPS steps in each precision (mean loss of the last 10 %)"
mean_tail() { awk -F, -v n="$STEPS" 'NR > 1 && $1 > 0.9 * n { s += $2; k++ } END { printf "%.5f", s / k }' "$1"; }
for p in fp32 bf16; do
  rm -rf "$WORK/toy-$p"
  $MPIRUN -np 1 "$TRAIN" --steps "$STEPS" --precision $p --out "$WORK/toy-$p" > "$WORK/toy-$p.log" 2>&1 ||
    { echo "bench_precision: the toy in $p failed: $(tail -n 1 "$WORK/toy-$p.log")" >&2; exit 1; }
  cp "$WORK/toy-$p/samples.png" "docs/results/precision-samples-$p.png"
done
la=$(mean_tail "$WORK/toy-fp32/loss.csv") lb=$(mean_tail "$WORK/toy-bf16/loss.csv")
printf "| %-6s | %12s |\n" side "mean loss" --- --- fp32 "$la" bf16 "$lb"
awk -v a="$la" -v b="$lb" 'BEGIN { d = (b - a) / a * 100; printf "bf16 against fp32: %+.2f %% (target: within 3 %%)\n", d; exit (d > 3 || d < -3) }' ||
  { echo "bench_precision: the bf16 toy's loss is more than 3 % from fp32's" >&2; exit 1; }
echo "samples: docs/results/precision-samples-fp32.png, docs/results/precision-samples-bf16.png"

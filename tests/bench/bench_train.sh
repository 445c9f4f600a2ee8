#!/usr/bin/env bash
# bench_train.sh: training throughput of the default model (DiT-mini/4 on 20x20 shapes: 25 tokens,
# batch 32) with 1, 2 and 4 ranks and both attention variants (the same global batch), measured back to back in one run;
# reports steps/s, tokens/s, the speed ratio to one rank, and the arena's peak activation memory
# per rank. usage: bench_train.sh TRAIN [STEPS]
set -eu
TRAIN=$(realpath "$1"); STEPS=${2:-40}
WORK=$(mktemp -d /tmp/dit-bench.XXXXXX); trap 'rm -rf "$WORK"' EXIT
MPIRUN="mpirun --oversubscribe $( [ "$(id -u)" = 0 ] && echo --allow-run-as-root )"
printf "%-16s %10s %12s %9s %16s\n" "ranks, attention" "steps/s" "tokens/s" "vs 1" "peak MiB/rank"
base=""
for run in "1 gather" "2 gather" "2 all-to-all" "4 gather" "4 all-to-all"; do
  set -- $run; np=$1; sp=$2
  line=$($MPIRUN -np $np "$TRAIN" --steps "$STEPS" --sp-attention $sp --sample-steps 1 --samples-per-class 1 --out "$WORK/r$np$sp" | grep '^done:')
  sps=$(echo "$line" | sed -E 's/.*\(([0-9.]+) steps\/s\).*/\1/')
  peak=$(echo "$line" | sed -E 's/.*memory ([0-9.]+) MiB.*/\1/')
  tok=$(awk -v s="$sps" 'BEGIN { printf "%.0f", s * 32 * 25 }')
  [ -z "$base" ] && base=$sps
  printf "%-16s %10s %12s %9s %16s\n" "$np, $sp" "$sps" "$tok" "$(awk -v a="$sps" -v b="$base" 'BEGIN { printf "x%.2f", a / b }')" "$peak"
done

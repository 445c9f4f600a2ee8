#!/usr/bin/env bash
# bench_train.sh: training throughput of the default model (DiT-mini/4 on 20x20 shapes: 25 tokens,
# batch 32) with 1, 2 and 4 ranks (the same global batch), measured back to back in one run;
# reports steps/s, tokens/s, the speed ratio to one rank, and the arena's peak activation memory
# per rank. usage: bench_train.sh TRAIN [STEPS]
set -eu
TRAIN=$(realpath "$1"); STEPS=${2:-40}
WORK=$(mktemp -d /tmp/dit-bench.XXXXXX); trap 'rm -rf "$WORK"' EXIT
MPIRUN="mpirun --oversubscribe $( [ "$(id -u)" = 0 ] && echo --allow-run-as-root )"
printf "%-6s %10s %12s %9s %16s\n" ranks "steps/s" "tokens/s" "vs 1" "peak MiB/rank"
base=""
for np in 1 2 4; do
  line=$($MPIRUN -np $np "$TRAIN" --steps "$STEPS" --sample-steps 1 --samples-per-class 1 --out "$WORK/r$np" | grep '^done:')
  sps=$(echo "$line" | sed -E 's/.*\(([0-9.]+) steps\/s\).*/\1/')
  peak=$(echo "$line" | sed -E 's/.*memory ([0-9.]+) MiB.*/\1/')
  tok=$(awk -v s="$sps" 'BEGIN { printf "%.0f", s * 32 * 25 }')
  [ -z "$base" ] && base=$sps
  printf "%-6s %10s %12s %9s %16s\n" "$np" "$sps" "$tok" "$(awk -v a="$sps" -v b="$base" 'BEGIN { printf "x%.2f", a / b }')" "$peak"
done

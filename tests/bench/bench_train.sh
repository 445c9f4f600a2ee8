#!/usr/bin/env bash
# bench_train.sh: training throughput of the default model (DiT-mini/4 on 20x20 shapes: 25 tokens,
# batch 32) with 1, 2 and 4 ranks and both attention variants (the same global batch), measured back to back in one run;
# reports steps/s, tokens/s, the speed ratio to one rank, and the arena's peak activation memory
# per rank; then, with BENCH_GEMM (bench_gemm.c), the rate of the model's GEMM shapes on one
# thread with their operands in cache and as a step meets them. usage: bench_train.sh TRAIN [STEPS
# [BENCH_GEMM]]
set -eu
TRAIN=$(realpath "$1"); STEPS=${2:-40}; GEMM=${3:-}
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
[ -n "$GEMM" ] || exit 0
# A step's linear layers each take their own operands (4 blocks x 4 layers), which then come from
# further than the cache: a rank's GEMMs run at the second column's rate, not the first's
echo
echo "the model's linear layers as GEMMs on one thread (a rank's rows: 416 = 32 images x 13 tokens on 2 ranks, 800 on 1), GFLOP/s"
printf "%-16s %14s %22s\n" "M x N x K" "one set" "16 sets in turn"
rate() { out=$("$GEMM" 1 "$@") || { echo "bench_train.sh: $GEMM failed: $out" >&2; return 1; }
       echo "$out" | sed -nE 's/^gemm.*: ([0-9.]+) GFLOP.*/\1/p'; }
for shape in "416 192 64" "416 256 64" "416 64 256" "800 192 64"; do
  set -- $shape
  hot=$(rate $1 $2 $3 1); cold=$(rate $1 $2 $3 16)
  printf "%-16s %14s %22s\n" "$1x$2x$3" "$hot" "$cold"
done

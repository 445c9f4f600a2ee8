#!/usr/bin/env bash
# bench_overlap.sh: the ring's transfers overlapped with its attention against the same ring
# blocking, on the shaped network of bench_plan.sh (ranks in a network namespace of their own,
# over its loopback, Open MPI's TCP transport, tc's token bucket setting the rate with a burst
# above the 64 KiB MTU). The link rate is the one at which a step's ring transfers take as long
# as its attention: the attention's flop/s measured by `train plan --measure` (unshaped), its
# work (per block, each rank's n = T/P queries against all T keys: 14 T/P T D flops forward and
# backward) and the ring's bytes (per block and rank, K and V forward, K, V, dK, dV backward:
# 6 T D (P-1)/P values); every rank sends at once over the one shaped loopback, so it is set to P
# times a rank's rate. DIT_RING_BLOCKING=1 makes every ring step whole before the attention
# runs (parallel/transport/comm.h; the same values travel, the same bits). Runs alternate blocking,
# overlapped, overlapped, blocking; each time is a run's "done:" seconds (to the millisecond) per
# step. Target: the overlapped step at most 0.75x the blocking one. Needs root (unshare -n, tc);
# says "skipped" otherwise. Open MPI's TCP transport moves a message above its eager limit (64 KiB)
# only inside MPI calls: the CPU attention calls MPI_Testall between its tiles while a step is in
# flight (parallel/transport/comm.h). BENCH_OVERLAP_MCA adds Open MPI options ("--mca btl_tcp_progress_thread 1").
# usage: bench_overlap.sh TRAIN [STEPS]
set -eu
TRAIN=$(realpath "$1"); STEPS=${2:-4}
MPIRUN_EXTRA=${BENCH_OVERLAP_MCA:-}
. "$(dirname "$0")/shaped_net.sh"
NP=2 DEPTH=4 D=64 T=2304 # DiT-mini/2 at 96x96: 2304 tokens, batch 1, over 2 ranks
MODEL="--model DiT-mini/2 --input-size 96 --batch 1 --sp $NP" CFG="$MODEL --sp-attention ring"

plan=$($MPIRUN -np $NP "$TRAIN" plan --measure $MODEL 2>&1) || { echo "$plan"; exit 1; }
gflops=$(echo "$plan" | grep -o 'attention [0-9.e+-]* GFLOP/s' | awk '{ print $2 }')
[ -n "$gflops" ] || { echo "no attention rate in: $plan"; exit 1; }
read -r attn bytes mbit <<< "$(awk -v g="$gflops" -v L=$DEPTH -v D=$D -v T=$T -v P=$NP 'BEGIN {
  attn = L * 14 * T / P * T * D / (g * 1e9); bytes = L * 6 * T * D * (P - 1) / P * 4
  printf "%.4f %.0f %.0f", attn, bytes, P * 8 * bytes / attn / 1e6 }')"
echo "ring over $NP ranks, DiT-mini/2, $T tokens: attention $gflops GFLOP/s (plan --measure) -> $attn s a step;" \
     "$bytes bytes of ring transfers a step and rank -> loopback ${mbit}mbit"
shape "${mbit}mbit"

step() { # seconds per step of one run, blocking (1) or overlapped (0)
  $MPIRUN -np $NP -x DIT_RING_BLOCKING="$1" "$TRAIN" $CFG --steps "$STEPS" --samples-per-class 0 \
    --log-every 1000 --out "$WORK/run" < /dev/null 2>&1 | grep '^done:' |
    sed -E 's/^done: ([0-9]+) steps in ([0-9.]+)s.*/\1 \2/' | awk '{ printf "%.4f", $2 / $1 }'
  rm -rf "$WORK/run"
}
blocking=0 overlapped=0
for mode in 1 0 0 1; do
  t=$(step $mode); [ -n "$t" ] || { echo "a run failed"; exit 1; }
  echo "  $( [ $mode = 1 ] && echo blocking || echo overlapped ): $t s a step"
  if [ $mode = 1 ]; then blocking=$(awk -v a=$blocking -v t=$t 'BEGIN { print a + t }')
  else overlapped=$(awk -v a=$overlapped -v t=$t 'BEGIN { print a + t }'); fi
done
awk -v b=$blocking -v o=$overlapped 'BEGIN { r = o / b
  printf "overlap: the overlapped ring step is %.2fx the blocking one (target at most 0.75x): %s\n", r,
         r <= 0.75 ? "met" : "not met" }'

#!/usr/bin/env bash
# bench_plan.sh: the planner (train/train plan) against measured step times on a network that can
# be shaped. Ranks run in a network namespace of their own, over its loopback, with Open MPI's TCP
# transport; tc's token bucket (tbf) sets the loopback's rate, with a burst above its 64 KiB MTU
# (a smaller one drops every large packet and the job hangs). For each case (config, ranks, link
# rate) it measures the link and the compute rates (plan --measure, under the same mpirun), then
# trains every mesh the planner lists for a few steps and compares each step time with its
# prediction. Targets: the planner's pick within 10% of the fastest mesh measured, each
# prediction within 25%. Needs root (unshare -n, tc); says "skipped" otherwise.
# usage: bench_plan.sh TRAIN [STEPS]; BENCH_PLAN_GRID="CONFIG_NAMES|RANKS|RATES" picks a smaller grid
# (e.g. "a|2|20mbit 1gbit")
set -eu
TRAIN=$(realpath "$1"); STEPS=${2:-5}
. "$(dirname "$0")/shaped_net.sh"
# configs: a = 256 tokens of DiT-mini/4, batch 8 (data groups or sequence groups); b = 1024
# tokens of DiT-mini/2, batch 1 (one sequence group: the layout alone)
declare -A CONFIG=([a]="--model DiT-mini/4 --input-size 64 --batch 8" [b]="--model DiT-mini/2 --input-size 64 --batch 1")
IFS='|' read -r NAMES RANKS RATES <<< "${BENCH_PLAN_GRID:-a b|2 4|20mbit 200mbit 2gbit}"

printf "%-6s %5s %8s  %-64s %10s %10s %7s\n" config ranks link mesh "predicted" "measured" "ratio"
cases=0 picks=0 within=0 predictions=0
for name in $NAMES; do for np in $RANKS; do for rate in $RATES; do
  shape "$rate"
  cfg="${CONFIG[$name]}"
  plan=$($MPIRUN -np $np "$TRAIN" plan --measure $cfg 2>&1) || { echo "$plan"; exit 1; }
  rows=$(echo "$plan" | awk '$1 ~ /^[0-9]+$/ && NF >= 10 && !/does not fit/')
  best=""; best_t=""; pick_t=""
  while read -r rank recompute zero _ _ _ _ _ predicted mesh; do # plan's columns
    if [ "$recompute" = yes ]; then mesh+=" --recompute"; fi
    if [ "$zero" != 0 ]; then mesh+=" --zero $zero"; fi
    line=$($MPIRUN -np $np "$TRAIN" $cfg $mesh --steps "$STEPS" --samples-per-class 0 --log-every 1000 < /dev/null \
           --out "$WORK/run" 2>&1 | grep '^done:') || { echo "$mesh failed"; exit 1; }
    rm -rf "$WORK/run"
    measured=$(echo "$line" | sed -E 's/^done: ([0-9]+) steps in ([0-9.]+)s.*/\1 \2/' | awk '{ printf "%.4f", $2 / $1 }')
    ratio=$(awk -v p="$predicted" -v m="$measured" 'BEGIN { printf "%.2f", p / m }')
    printf "%-6s %5s %8s  %-64s %10s %10s %7s\n" "$name" "$np" "$rate" "$mesh" "$predicted" "$measured" "$ratio"
    predictions=$((predictions + 1))
    within=$((within + $(awk -v r="$ratio" 'BEGIN { print (r >= 0.75 && r <= 1.25) }')))
    [ "$rank" = 1 ] && pick_t=$measured
    if [ -z "$best_t" ] || awk -v a="$measured" -v b="$best_t" 'BEGIN { exit !(a < b) }'; then best_t=$measured; best=$mesh; fi
  done <<< "$rows"
  ok=$(awk -v p="$pick_t" -v b="$best_t" 'BEGIN { print (p <= 1.1 * b) }')
  cases=$((cases + 1)); picks=$((picks + ok))
  echo "   case $name, $np ranks, $rate: planner's pick $pick_t s, fastest $best_t s ($best): $( [ $ok = 1 ] && echo within 10% || echo NOT within 10%)"
done; done; done
echo "planner: pick within 10% of the fastest measured in $picks of $cases cases; $within of $predictions predictions within 25%"

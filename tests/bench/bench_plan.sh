#!/usr/bin/env bash
# bench_plan.sh: the planner (train/train plan) against measured step times on a network that can
# be shaped. Ranks run in a network namespace of their own, over its loopback, with Open MPI's TCP
# transport; tc's token bucket (tbf) sets the loopback's rate, with a burst above its 64 KiB MTU
# (a smaller one drops every large packet and the job hangs). For each case (config, ranks, link
# rate) it measures the link and the compute rates (plan --measure, under the same mpirun), then
# trains each mesh the planner lists once, with the --recompute / --zero the planner ranks best
# for it (a mesh's first row), for a few steps, and compares the median of the steps after the
# first (each progress line's tok/s) with the prediction. Targets: the planner's pick within 10% of
# the fastest mesh measured, each prediction within 25%. Needs root (unshare -n, tc); says
# "skipped" otherwise.
# usage: bench_plan.sh TRAIN [STEPS]; BENCH_PLAN_GRID="CONFIG_NAMES|RANKS|RATES" picks a smaller grid
# (e.g. "a|2|20mbit 1gbit")
set -eu
TRAIN=$(realpath "$1"); STEPS=${2:-5}
case $STEPS in [2-9] | [1-9][0-9]*) ;; *) echo "bench_plan.sh: STEPS must be 2 or more (the first step warms up and is not timed), got '$STEPS'" >&2; exit 2 ;; esac
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
  tokens=$(echo "$plan" | sed -nE 's/^plan: [^,]*, ([0-9]+) tokens per image, batch ([0-9]+),.*/\1 \2/p' |
           awk '{ print $1 * $2 }') # a step's
  # the rows are ranked, so a mesh's first is its best --recompute / --zero
  rows=$(echo "$plan" | awk '$1 ~ /^[0-9]+$/ && NF >= 10 && !/does not fit/ {
           mesh = ""; for (i = 10; i <= NF; i++) mesh = mesh " " $i; if (!seen[mesh]++) print }')
  best=""; best_t=""; pick_t=""
  while read -r rank recompute zero _ _ _ _ _ predicted mesh; do # plan's columns
    if [ "$recompute" = yes ]; then mesh+=" --recompute"; fi
    if [ "$zero" != 0 ]; then mesh+=" --zero $zero"; fi
    log=$($MPIRUN -np $np "$TRAIN" $cfg $mesh --steps "$STEPS" --samples-per-class 0 --log-every 1 < /dev/null \
          --out "$WORK/run" 2>&1) || { echo "$log" | tail -5; echo "$mesh failed"; exit 1; }
    rm -rf "$WORK/run"
    measured=$(echo "$log" | sed -nE 's/^step +[0-9]+\/[0-9]+ .*\| ([0-9.]+) tok\/s .*/\1/p' | tail -n +2 | sort -n |
               awk -v t="$tokens" '{ a[NR] = $1 } END { printf "%.4f", t / a[int((NR + 1) / 2)] }')
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
  echo "   $(echo "$plan" | sed -nE 's/^plan: .*(rates per rank.*)/\1/p')" # what the predictions rest on
done; done; done
echo "planner: pick within 10% of the fastest measured in $picks of $cases cases; $within of $predictions predictions within 25%"

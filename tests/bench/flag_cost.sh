#!/usr/bin/env bash
# flag_cost.sh: what a flag costs a training step, timed in one run: the runs without it (A) and
# with it (B) alternate A B B A, so that the machine's load falls on both alike, as
# tests/bench/ab_step.sh does for two builds. Prints each side's best seconds per step (of the
# `done:` line), the MiB a rank sends a step, and B over A. Meant to run alone on the machine.
# make bench times --zero 3 against --zero 1, and --check-collectives against none.
# usage: tests/bench/flag_cost.sh TRAIN RANKS STEPS "A FLAGS" "B FLAGS" [FLAGS...]
#   FLAGS go to both (default --model DiT-B/2 --input-size 64 --batch 4)
set -u
[ $# -ge 5 ] || { sed -n '2,8p' "$0"; exit 2; }
TRAIN=$(realpath "$1") RANKS=$2 STEPS=$3 A=$4 B=$5
shift 5
FLAGS=${*:---model DiT-B/2 --input-size 64 --batch 4}
WORK=$(mktemp -d /tmp/dit-flag-cost.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
unset DIT_CHECK_COLLECTIVES DIT_COLLECTIVE_TIMEOUT # each side as its flags say
MPIRUN="mpirun -q --oversubscribe $( [ "$(id -u)" = 0 ] && echo --allow-run-as-root )"

# "seconds-per-step MiB-sent-per-step" of one run with the flags $1, from its done: line ("N steps
# in S s ... sent M MiB per step and rank")
run() {
  rm -rf "$WORK/run"
  # shellcheck disable=SC2086
  $MPIRUN -np "$RANKS" "$TRAIN" $FLAGS $1 --steps "$STEPS" --samples-per-class 0 --save-every 0 \
    --out "$WORK/run" > "$WORK/log" 2>&1 ||
    { echo "flag_cost: $FLAGS $1 failed: $(tail -n 1 "$WORK/log")" >&2; exit 1; }
  sed -n 's/^done: \([0-9]*\) steps in \([0-9.]*\)s.* sent \([0-9.]*\) MiB per step.*/\2 \1 \3/p' "$WORK/log" |
    awk '{ printf "%.4f %s", $1 / $2, $3 }'
}
best() { printf '%s\n' "$@" | sort -g | head -1; }

run "$A" > /dev/null # warm: the first run after a build is slower
a1=$(run "$A") b1=$(run "$B") b2=$(run "$B") a2=$(run "$A")
a=$(best "${a1% *}" "${a2% *}") b=$(best "${b1% *}" "${b2% *}")
echo "$RANKS ranks, $FLAGS, $STEPS steps a run, runs A B B A (A: ${A:-no flag}, B: $B); best seconds per step of each"
printf "| %-22s | %10s | %15s |\n" flags "s/step" "MiB sent/step"
printf "| %-22s | %10s | %15s |\n" --- --- ---
printf "| %-22s | %10s | %15s |\n" "${A:-(none)}" "$a" "${a1#* }" "$B" "$b" "${b1#* }"
awk -v a="$a" -v b="$b" -v sa="${a1#* }" -v sb="${b1#* }" -v A="${A:-no flag}" -v B="$B" 'BEGIN {
  printf "%s / %s: %.3fx the step time, %.2fx the bytes\n", B, A, b / a, (sa > 0 ? sb / sa : 0) }'

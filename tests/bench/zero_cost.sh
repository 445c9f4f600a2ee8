#!/usr/bin/env bash
# zero_cost.sh: what --zero 3 costs against --zero 1 (parameters gathered a block at a time, twice a
# step, against parameters kept whole), timed in one run: the two runs alternate A B B A (A: --zero
# 1, B: --zero 3) so that the machine's load falls on both alike, as tests/bench/ab_step.sh does for
# two builds. Prints each level's best seconds per step (of the `done:` line), the MiB a rank sends
# a step, and B over A. Meant to run alone on the machine.
# usage: tests/bench/zero_cost.sh TRAIN [RANKS [STEPS [FLAGS...]]]
#   default: 4 ranks, 10 steps a run, FLAGS --model DiT-B/2 --input-size 64 --batch 4
set -u
TRAIN=$(realpath "$1") RANKS=${2:-4} STEPS=${3:-10}
shift $(($# < 3 ? $# : 3))
FLAGS=${*:---model DiT-B/2 --input-size 64 --batch 4}
WORK=$(mktemp -d /tmp/dit-zero-cost.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
MPIRUN="mpirun -q --oversubscribe $( [ "$(id -u)" = 0 ] && echo --allow-run-as-root )"

# "seconds-per-step MiB-sent-per-step" of one run at --zero LEVEL, from its done: line ("N steps in
# S s ... sent M MiB per step and rank")
run() {
  rm -rf "$WORK/run"
  # shellcheck disable=SC2086
  $MPIRUN -np "$RANKS" "$TRAIN" $FLAGS --zero "$1" --steps "$STEPS" --samples-per-class 0 --save-every 0 \
    --out "$WORK/run" > "$WORK/log" 2>&1 ||
    { echo "zero_cost: --zero $1 $FLAGS failed: $(tail -n 1 "$WORK/log")" >&2; exit 1; }
  sed -n 's/^done: \([0-9]*\) steps in \([0-9.]*\)s.* sent \([0-9.]*\) MiB per step.*/\2 \1 \3/p' "$WORK/log" |
    awk '{ printf "%.4f %s", $1 / $2, $3 }'
}
best() { printf '%s\n' "$@" | sort -g | head -1; }

run 1 > /dev/null # warm: the first run after a build is slower
a1=$(run 1) b1=$(run 3) b2=$(run 3) a2=$(run 1)
a=$(best "${a1% *}" "${a2% *}") b=$(best "${b1% *}" "${b2% *}")
echo "$RANKS ranks, $FLAGS, $STEPS steps a run, runs A B B A (A: --zero 1, B: --zero 3); best seconds per step of each"
printf "| %-8s | %10s | %15s |\n" level "s/step" "MiB sent/step"
printf "| %-8s | %10s | %15s |\n" --- --- ---
printf "| %-8s | %10s | %15s |\n" "--zero 1" "$a" "${a1#* }" "--zero 3" "$b" "${b1#* }"
awk -v a="$a" -v b="$b" -v sa="${a1#* }" -v sb="${b1#* }" 'BEGIN {
  printf "--zero 3 / --zero 1: %.2fx the step time, %.2fx the bytes\n", b / a, (sa > 0 ? sb / sa : 0) }'

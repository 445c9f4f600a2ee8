#!/usr/bin/env bash
# ab_step.sh: two builds of the train program (A: before a change, B: after) timed in one run, the
# runs alternating A B B A for each configuration, so that the machine's load falls on both alike.
# Each configuration is the default model on 2 ranks, without and with --exact, in the gather,
# all-to-all and ring layouts. Prints each build's best seconds per step (of the `done:` line) and
# B over A. usage: tests/bench/ab_step.sh TRAIN_A TRAIN_B [STEPS]   (default 40 steps a run)
# For example, to time a change: build the commit before it in a worktree, then
#   tests/bench/ab_step.sh ../before/train/train train/train
set -u
A=$(realpath "$1") B=$(realpath "$2") STEPS=${3:-40}
WORK=$(mktemp -d /tmp/dit-ab.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
MPIRUN="mpirun -q --oversubscribe $( [ "$(id -u)" = 0 ] && echo --allow-run-as-root )"

# seconds per step of one run of BINARY with FLAGS, from its done: line ("N steps in S s")
per_step() {
  local bin=$1; shift
  rm -rf "$WORK/run"
  # shellcheck disable=SC2086
  $MPIRUN -np 2 "$bin" --steps "$STEPS" --samples-per-class 0 --save-every 0 "$@" --out "$WORK/run" > "$WORK/log" 2>&1 ||
    { echo "ab_step: $bin $* failed: $(tail -n 1 "$WORK/log")" >&2; exit 1; }
  sed -n 's/^done: \([0-9]*\) steps in \([0-9.]*\)s.*/\2 \1/p' "$WORK/log" | awk '{ printf "%.4f", $1 / $2 }'
}
best() { printf '%s\n' "$@" | sort -g | head -1; }

per_step "$A" > /dev/null; per_step "$B" > /dev/null # warm: the first runs after a build are slower
echo "A: $A"
echo "B: $B"
echo "2 ranks, default model, $STEPS steps a run, runs A B B A; best seconds per step of each"
printf "| %-11s | %-7s | %10s | %10s | %7s |\n" layout mode "A s/step" "B s/step" "B / A"
printf "| %-11s | %-7s | %10s | %10s | %7s |\n" --- --- --- --- ---
for layout in gather all-to-all ring; do
  for mode in default exact; do
    flags="--sp-attention $layout $([ $mode = exact ] && echo --exact)"
    # shellcheck disable=SC2086
    a1=$(per_step "$A" $flags) b1=$(per_step "$B" $flags) b2=$(per_step "$B" $flags) a2=$(per_step "$A" $flags)
    a=$(best "$a1" "$a2") b=$(best "$b1" "$b2")
    awk -v l="$layout" -v m="$mode" -v a="$a" -v b="$b" 'BEGIN { printf "| %-11s | %-7s | %10s | %10s | %6.2fx |\n", l, m, a, b, b / a }'
  done
done
